"""The field registry (attnflow.fields): every name builds the field written out by hand, bit for bit."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnflow import AttentionWeights, InputError
from attnflow.dynamics import (AttentionFlow, DiscreteRescaledFlow, FeedForward, PreNorm, RescaledFlow,
                               TransformerBlock, Wrapped, perturbed_layers, section12_2_flow, sphere_flow)
from attnflow.dynamics import LayeredFlow, LayerInterpolation, TimeVaryingFlow
from attnflow.dynamics import HardmaxFlow, MixNorm, NormalisedGPT, PeriNorm
from attnflow.fields import FIELDS, build_field, field_entry, layer_matrix, make_dynamics, rescaled_from_raw
from attnflow.integrate import EulerStepper, plain_shift, sphere_shift

D, N, L, DT = 3, 6, 4, 0.1


def _mats(seed=0, heads=None):
    ks = jax.random.split(jax.random.key(seed), 3)
    shape = (D, D) if heads is None else (heads, D, D)
    return tuple(jax.random.normal(k, shape) / np.sqrt(D) for k in ks)


def _x(seed=1):
    return jax.random.normal(jax.random.key(seed), (N, D))


def _same(a, b, *, grid=False):
    """Equal vector fields (and, on the layer grid, equal Euler runs) on one random input."""
    x = _x()
    if grid:
        stepper = EulerStepper(DT, L)
        a, b = stepper.bind(a), stepper.bind(b)
    assert type(a) is type(b)
    assert np.array_equal(a.vector_field(jnp.asarray(0.2), x, None), b.vector_field(jnp.asarray(0.2), x, None))


Q, K, V = _mats()
W = jax.random.normal(jax.random.key(5), (D, D))
W1, W2 = jax.random.normal(jax.random.key(6), (12, D)), jax.random.normal(jax.random.key(7), (D, 12))
KEY = jax.random.key(9)

# name -> (build_field keyword arguments, the field written out by hand, needs the layer grid)
CASES = {
    "attention-raw": ("attention", {}, AttentionFlow(Q, K, V), False),
    "attention-rescaled-euler": ("attention", dict(picture="rescaled"), DiscreteRescaledFlow(Q, K, V, 1.0), True),
    "attention-rescaled-ode": ("attention", dict(picture="rescaled", stepper="ode", t0=0.5),
                               RescaledFlow(Q, K, V, t0=0.5), False),
    "causal": ("causal", dict(picture="rescaled"), DiscreteRescaledFlow(Q, K, V, 1.0, mask="causal"), True),
    "causal-raw": ("causal", {}, AttentionFlow(Q, K, V, mask="causal"), False),
    "feedforward-z": ("feedforward", dict(W=W, activation="tanh"), section12_2_flow(Q, K, V, W=W, activation="tanh"),
                      False),
    "feedforward-x": ("feedforward", dict(picture="raw", W=W, activation="gelu"),
                      Wrapped(AttentionFlow(Q, K, V), W, "gelu"), False),
    "layered": ("layered", dict(num_layers=L, epsilon=0.1, key=KEY),
                LayeredFlow(perturbed_layers(AttentionWeights(Q, K, V), L, 0.1, KEY)), True),
    "layered-ode": ("layered", dict(num_layers=L, epsilon=0.1, key=KEY, stepper="ode", layer_dt=DT),
                    TimeVaryingFlow(LayerInterpolation(perturbed_layers(AttentionWeights(Q, K, V), L, 0.1, KEY), DT,
                                                       0.0)), False),
    "sphere": ("sphere", {}, sphere_flow(Q, K, V, 1.0), False),
    "prenorm": ("prenorm", {}, PreNorm(AttentionFlow(Q, K, V)), False),
    "mean": ("mean", {}, AttentionFlow(Q, K, V, normalisation="mean"), False),
    "block": ("block", dict(W1=W1, W2=W2, activation="relu"),
              TransformerBlock(AttentionFlow(Q, K, V), FeedForward(W1, W2, activation="relu")), True),
    "hardmax": ("hardmax", dict(centred=True), HardmaxFlow(Q, K, V, centred=True), False),
    "periln": ("periln", {}, PeriNorm(AttentionFlow(Q, K, V)), False),
    "mixln": ("mixln", dict(switch=0.5), MixNorm(AttentionFlow(Q, K, V), 0.5), False),
    "ngpt": ("ngpt", dict(alpha=0.3), NormalisedGPT(AttentionFlow(Q, K, V), 0.3), False),
}


@pytest.mark.parametrize("case", list(CASES))
def test_registry_matches_hand_built(case):
    name, kw, hand, grid = CASES[case]
    _same(build_field(name, Q, K, V, **kw), hand, grid=grid)


def test_multihead_matches_hand_built():
    Qh, Kh, Vh = _mats(3, heads=2)
    hand = AttentionFlow(AttentionWeights(Qh, Kh, Vh, axes=("head",)))
    _same(build_field("multihead", Qh, Kh, Vh), hand)
    _same(build_field("multihead", AttentionWeights(Qh, Kh, Vh, axes=("head",))), hand)


def test_continuity_matches_hand_built():
    """The continuity equation's field (a density on a grid, Q = K = V = the 2 x 2 identity) against its class;
    other weights and a mask are refused."""
    from attnflow.meanfield._continuity import CircleContinuity

    I2 = jnp.eye(2)
    rho = (1 + 0.2 * jnp.cos(jnp.arange(16) * (2 * np.pi / 16))) / (2 * np.pi)
    for normalisation in ("softmax", "mean"):
        field = build_field("continuity", I2, I2, I2, beta=2.0, num_points=16, normalisation=normalisation)
        hand = CircleContinuity(2.0, 16, normalisation=normalisation)
        assert type(field) is type(hand)
        assert np.array_equal(field.vector_field(0.0, rho, None), hand.vector_field(0.0, rho, None))
    with pytest.raises(InputError, match="field 'continuity' is the mean-field limit"):
        build_field("continuity", Q, K, V, num_points=16)
    with pytest.raises(InputError, match="drop the mask"):
        build_field("continuity", I2, I2, I2, num_points=16, mask="causal")
    assert not field_entry("continuity").steps_raw()  # the state (the density) is read as it is


def test_every_name_is_tested():
    assert {CASES[c][0] for c in CASES} | {"multihead", "continuity", "sphere_continuity"} == set(FIELDS)


def test_entries_say_shift_and_reading():
    assert field_entry("sphere").shift is sphere_shift and not field_entry("sphere").steps_raw()
    assert field_entry("ngpt").shift is sphere_shift and not field_entry("ngpt").steps_raw()
    assert all(FIELDS[n].shift is plain_shift for n in FIELDS if n not in ("sphere", "ngpt"))
    assert not field_entry("attention").steps_raw("rescaled") and field_entry("attention").steps_raw("raw")
    assert not field_entry("feedforward").steps_raw() and field_entry("feedforward").steps_raw("raw")
    assert all(FIELDS[n].steps_raw() for n in ("multihead", "layered", "prenorm", "periln", "mixln", "mean", "block"))


def test_make_dynamics_is_the_attention_entry():
    w = perturbed_layers(AttentionWeights(Q, K, V), L, 0.1, KEY)
    assert type(make_dynamics(w, method="euler")) is LayeredFlow
    _same(make_dynamics(w, method="tsit5", layer_dt=DT), TimeVaryingFlow(LayerInterpolation(w, DT, 0.0)))
    _same(make_dynamics(Q, K, V, beta=2.0, picture="rescaled", method="euler"),
          DiscreteRescaledFlow(Q, K, V, 2.0), grid=True)


@pytest.mark.parametrize("call, message", [
    (lambda: build_field("nope", Q, K, V), "field must be one of"),
    (lambda: build_field("attention", Q, K, V, epsilon=0.1), "field 'attention' takes no option 'epsilon'"),
    (lambda: build_field("layered", Q, K, V, epsilon=0.1, key=KEY), "field 'layered' needs the option 'num_layers'"),
    (lambda: build_field("sphere", Q, K, V, picture="rescaled"), "field 'sphere' runs in the picture(s)"),
    (lambda: build_field("attention", Q, K, V, stepper="rk4"), "stepper must be one of"),
    (lambda: build_field("causal", Q, K, V, mask="causal"), "field 'causal' sets its own mask"),
    (lambda: make_dynamics(Q, K, V, picture="z"), "picture must be one of"),
])
def test_refusals_are_one_sentence(call, message):
    with pytest.raises(InputError) as e:
        call()
    text = str(e.value)
    assert message in text and text.endswith(".") and text.count(". ") == 0


def test_builds_under_vmap():
    Qs, Ks, Vs = (jnp.stack([a, a * 0.5]) for a in (Q, K, V))
    x = jnp.stack([_x(), _x(2)])
    stepper = EulerStepper(DT, L)

    def one(q, k, v, key, y):
        fields = [build_field("attention", q, k, v, picture="rescaled"),
                  build_field("layered", q, k, v, num_layers=L, epsilon=0.1, key=key)]
        return [stepper.bind(f).vector_field(jnp.asarray(0.0), y, None) for f in fields]

    keys = jax.random.split(KEY, 2)
    got = jax.vmap(one)(Qs, Ks, Vs, keys, x)
    for i in range(2):
        want = one(Qs[i], Ks[i], Vs[i], keys[i], x[i])
        for g, w_ in zip(got, want):
            np.testing.assert_allclose(g[i], w_, rtol=1e-5, atol=1e-6)


def test_rescaled_from_raw_is_the_inverse_power():
    R = layer_matrix(V, DT)
    x = _x()
    z = rescaled_from_raw(R, L, x)
    np.testing.assert_allclose(z, x @ np.linalg.inv(np.linalg.matrix_power(np.asarray(R), L)).T, rtol=1e-4,
                               atol=1e-5)
    assert np.array_equal(layer_matrix(jnp.stack([V, V]), DT), jnp.eye(D) + DT * (V + V))


def test_adding_a_dynamics_is_one_module_and_one_registry_entry(monkeypatch):
    """docs/architecture.md's worked example: a new field registered in one entry runs through
    build_field, the Euler stepper, an ODE solver and simulate, and equals the hand-built sum."""
    import jax.numpy as jnp
    import numpy as np

    import attnflow as af
    from attnflow import fields
    from attnflow.dynamics import AbstractDynamics

    class Damping(AbstractDynamics):
        gamma: float

        def vector_field(self, t, y, args):
            return -self.gamma * y

    monkeypatch.setattr(fields, "FIELDS", dict(fields.FIELDS))

    @fields.register_field("damped", pictures=("raw",))
    def _damped(w, how, *, gamma=0.5):
        return af.AttentionFlow(w, **how.attention) + Damping(gamma)

    rng = np.random.default_rng(7)
    x0, Q, K, V = (jnp.asarray(rng.normal(size=s), jnp.float32) for s in ((6, 3), (3, 3), (3, 3), (3, 3)))
    field = fields.build_field("damped", Q, K, V, gamma=0.1)
    hand = af.AttentionFlow(Q, K, V) + Damping(0.1)
    assert np.array_equal(field.vector_field(0.0, x0, None), hand.vector_field(0.0, x0, None))
    euler = af.simulate(x0, dynamics=field, t1=1.0, method="euler", dt=0.1, return_attention=True)
    ode = af.simulate(x0, dynamics=field, t1=1.0, num_saves=3)
    assert int(euler.result) == 0 and int(ode.result) == 0 and euler.attention.shape == (11, 6, 6)
    # the damping term is there: gamma moves the end state
    plain = af.simulate(x0, dynamics=fields.build_field("damped", Q, K, V, gamma=0.0), t1=1.0, num_saves=3)
    assert not np.allclose(ode.states[-1], plain.states[-1])
    with pytest.raises(af.InputError, match="gamma|option"):
        fields.build_field("damped", Q, K, V, gammma=0.1)
