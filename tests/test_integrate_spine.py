"""The layer steppers' saved-layer sets (save_at), the by-product hook (save_aux) and the
fixed-step Runge-Kutta stepper (RKStepper): agreement, convergence orders, validation."""

import equinox as eqx
import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import pytest

from attnflow import AttentionFlow, RescaledFlow
from attnflow._x64 import float64_scope
from attnflow.errors import InputError, NonFiniteError
from attnflow.integrate import (RESULTS, RK_TABLEAUX, ButcherTableau, EulerStepper, RKStepper, SaveLayers,
                                raise_if_failed, sphere_shift)


def _weights(d, seed, scale=1.0):
    return [scale * w for w in jax.random.normal(jax.random.key(seed), (3, d, d)) / np.sqrt(d)]


def _tokens(n, d, seed, dtype=jnp.float64):
    return jax.random.normal(jax.random.key(seed), (n, d), dtype)


class AuxFlow(AttentionFlow):
    """The attention flow handing its own velocity (and its squared norm) to save_fn."""

    def vector_field_with_aux(self, t, y, args):
        dy = self.vector_field(t, y, args)
        return dy, {"velocity": dy, "speed2": jnp.sum(dy * dy)}


# ---- save_at ---------------------------------------------------------------------------------------

def test_save_every_is_shorthand_for_uniform_save_at():
    with float64_scope():
        f, x0 = AttentionFlow(*_weights(3, 0)), _tokens(7, 3, 1)
        a = EulerStepper(0.05, 20, save_every=5).solve(f, x0)
        for save_at in (SaveLayers.uniform(5, 20), [0, 5, 10, 15, 20]):
            stepper = EulerStepper(0.05, 20, save_at=save_at)
            assert stepper.save_every == 5
            b = stepper.solve(f, x0)
            assert jnp.array_equal(a.ys, b.ys) and jnp.array_equal(a.ts, b.ts)
        assert hash(SaveLayers.uniform(5, 20)) == hash(SaveLayers.given(range(0, 21, 5)))


@pytest.mark.parametrize("layers", [(0, 3, 7, 20), (2, 5), (1, 2, 4, 8, 16), (20,)])
@pytest.mark.parametrize("stepper_cls", ["euler", "rk4"])
def test_save_at_rows_are_those_of_every_layer(layers, stepper_cls):
    with float64_scope():
        f, x0 = AttentionFlow(*_weights(3, 2)), _tokens(6, 3, 3)
        make = (lambda **kw: EulerStepper(0.05, 20, **kw)) if stepper_cls == "euler" else \
            (lambda **kw: RKStepper("rk4", 0.05, 20, **kw))
        solve = lambda stepper: eqx.filter_jit(lambda x: stepper.solve(f, x))(x0)  # one program per solve
        full = solve(make())
        some = solve(make(save_at=SaveLayers.given(layers)))
        # the same layers in other scan blocks: equal to rounding (float64; 20 layers of O(1) steps)
        np.testing.assert_allclose(some.ys, full.ys[np.array(layers)], rtol=0, atol=1e-13)
        np.testing.assert_allclose(some.ts, full.ts[np.array(layers)], rtol=0, atol=1e-15)
        assert int(some.num_steps) == 20


def test_log_spaced_layers():
    assert SaveLayers.log_spaced(5, 100).layers == (0, 1, 5, 22, 100)
    assert SaveLayers.log_spaced(2, 7).layers == (0, 7)
    layers = SaveLayers.log_spaced(30, 40).layers  # rounding merges the first ones
    assert layers[0] == 0 and layers[-1] == 40 and list(layers) == sorted(set(layers))


@pytest.mark.parametrize("kwargs, words", [
    ({"save_at": [0, 5, 21]}, "in [0, num_layers = 20]"),
    ({"save_at": [-1, 5]}, "in [0, num_layers = 20]"),
    ({"save_at": [0, 7, 5]}, "strictly increasing"),
    ({"save_at": [0, 5, 5]}, "strictly increasing"),
    ({"save_at": []}, "at least one layer"),
    ({"save_at": [0, 2.5]}, "layer indices (ints)"),
    ({"save_at": "0,5"}, "sequence of layer indices"),
    ({"save_at": [0, 5], "save_every": 5}, "give one of them"),
    ({"save_every": 3}, "divisor of num_layers = 20"),
    ({"save_aux": 1}, "save_aux must be True or False"),
])
@pytest.mark.parametrize("make", [lambda **kw: EulerStepper(0.1, 20, **kw), lambda **kw: RKStepper("heun", 0.1, 20, **kw)])
def test_save_layers_refused_in_one_sentence(kwargs, words, make):
    with pytest.raises(InputError, match="^[^\n]*$") as err:
        make(**kwargs)
    assert words in str(err.value)


# ---- save_aux ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("tableau", [None, "rk4"])
@pytest.mark.parametrize("layers", [(0, 4, 8, 12), (3, 7, 12), (5,)])
def test_save_aux_hands_the_fields_by_product_at_the_saved_state(tableau, layers):
    with float64_scope():
        f, x0 = AuxFlow(*_weights(3, 4)), _tokens(6, 3, 5)
        kw = dict(save_at=layers)
        make = (lambda **k: EulerStepper(0.1, 12, **k)) if tableau is None else (lambda **k: RKStepper(tableau, 0.1, 12, **k))
        solve = lambda stepper, **k: eqx.filter_jit(lambda x: stepper.solve(f, x, **k))(x0)  # one program per solve
        states = solve(make(**kw))
        traj = solve(make(save_aux=True, **kw), save_fn=lambda t, y, aux: {"y": y, "t": t, **aux})
        assert jnp.array_equal(traj.ys["y"], states.ys)  # the states themselves are unchanged
        want = jax.vmap(lambda t, y: f.vector_field(t, y, None))(states.ts, states.ys)
        # the by-product of the evaluation at (t_k, y_k), the first stage of the layer leaving y_k
        np.testing.assert_allclose(traj.ys["velocity"], want, rtol=0, atol=1e-14)
        np.testing.assert_allclose(traj.ys["t"], states.ts, rtol=0, atol=1e-15)
        np.testing.assert_allclose(traj.ys["speed2"], jnp.sum(want ** 2, axis=(1, 2)), rtol=1e-13)


def test_save_aux_needs_a_field_with_a_by_product():
    with pytest.raises(InputError, match="vector_field_with_aux"):
        EulerStepper(0.1, 4, save_aux=True).solve(AttentionFlow(*_weights(2, 0)), _tokens(3, 2, 0, jnp.float32))


# ---- RKStepper -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("shift", [None, sphere_shift])
def test_rk_euler_tableau_is_the_euler_stepper(shift):
    with float64_scope():
        f, x0 = AttentionFlow(*_weights(3, 6)), _tokens(9, 3, 7)
        x0 = x0 / jnp.linalg.norm(x0, axis=1, keepdims=True)
        kw = {"shift": shift} if shift else {}
        for save in ({}, {"save_every": 4}, {"save_at": (1, 6, 15)}):
            solve = lambda stepper: eqx.filter_jit(lambda x: stepper.solve(f, x))(x0)  # one program per solve
            a = solve(EulerStepper(0.07, 24, **kw, **save))
            b = solve(RKStepper("euler", 0.07, 24, **kw, **save))
            assert jnp.array_equal(a.ys, b.ys) and jnp.array_equal(a.ts, b.ts)  # the weight 1 multiplies nothing


STEPS, T_END = (8, 16, 32, 64), 1.0  # the dt ladder of the order measurements, and their end time


def _reference(field, x0):
    """The end state at T_END by RK4 with 16 times the finest step count of STEPS (its error is < 1e-3 of the
    finest rung's here)."""
    m = 16 * STEPS[-1]
    return RKStepper("rk4", T_END / m, m, save_every=m).solve(field, x0).ys[-1]


def _observed_order(field, tableau, x0, ref):
    """Least-squares slope of log(error at T_END) against log(dt) over the ladder STEPS, against ``ref``, the
    field's :func:`_reference` from ``x0``."""
    errors = [float(jnp.max(jnp.abs(RKStepper(tableau, T_END / m, m, save_every=m).solve(field, x0).ys[-1] - ref)))
              for m in STEPS]
    assert all(np.isfinite(errors)) and min(errors) > 0
    return -np.polyfit(np.log(STEPS), np.log(errors), 1)[0]


@pytest.fixture(scope="module")
def order_problem():
    """Q = K = V (one random matrix), six tokens and each picture's reference end state: one problem for every
    order measurement below (the reference does not depend on the scheme measured, so it is computed once)."""
    with float64_scope():
        Q = K = V = _weights(3, 8)[0]
        x0 = _tokens(6, 3, 9)
        return Q, x0, {picture: _reference(picture(Q, K, V), x0) for picture in (AttentionFlow, RescaledFlow)}


@pytest.mark.parametrize("name, order", [("euler", 1), ("heun", 2), ("midpoint", 2), ("rk4", 4)])
@pytest.mark.parametrize("picture", [AttentionFlow, RescaledFlow])
def test_convergence_orders_on_the_attention_flow(name, order, picture, order_problem):
    """The SPEC trap: on the rescaled flow the drift depends on differences z_j - z_i only, so a
    scheme whose stages shift every token alike would show order 1; the order must still show."""
    Q, x0, refs = order_problem
    with float64_scope():
        assert abs(_observed_order(picture(Q, Q, Q), name, x0, refs[picture]) - order) < 0.2


def test_an_rk4_whose_stages_cancel_shows_order_one(order_problem):
    """The convergence measurement catches the trap: RK4's weights on stages all taken at y."""
    fake = ButcherTableau(np.zeros((4, 4)), RK_TABLEAUX["rk4"].b, np.zeros(4), order=4, name="fake")
    Q, x0, refs = order_problem
    with float64_scope():
        assert abs(_observed_order(RescaledFlow(Q, Q, Q), fake, x0, refs[RescaledFlow]) - 1) < 0.2


def test_rk_non_finite_state_reported_as_the_euler_stepper_does():
    f, x0 = AttentionFlow(*_weights(2, 1)[:2], 40.0 * jnp.eye(2)), _tokens(5, 2, 2, jnp.float32)
    euler = EulerStepper(0.1, 60, save_every=10).solve(f, x0)
    same = RKStepper("euler", 0.1, 60, save_every=10).solve(f, x0)
    rk4 = RKStepper("rk4", 0.1, 60, save_at=(0, 30)).solve(f, x0)
    assert int(euler.result) == int(same.result) == int(rk4.result) == RESULTS.nonfinite
    assert float(same.t_nonfinite) == float(euler.t_nonfinite)
    t_bad = float(rk4.t_nonfinite)  # the end of the first non-finite layer, on the grid
    assert 0 < t_bad <= 6.0 and abs(t_bad / 0.1 - round(t_bad / 0.1)) < 1e-4
    with pytest.raises(NonFiniteError, match="non-finite"):
        raise_if_failed(rk4)


@pytest.mark.parametrize("args, words", [
    (dict(a=[[0, 1], [1, 0]], b=[0.5, 0.5], c=[1, 1], order=2), "strictly lower-triangular"),
    (dict(a=[[0, 0], [1, 0]], b=[0.5, 0.6], c=[0, 1], order=2), "sum to 1"),
    (dict(a=[[0, 0], [1, 0]], b=[0.5, 0.5], c=[0, 0.5], order=2), "row sums of a"),
    (dict(a=[[0, 0], [1, 0]], b=[0.5, 0.5, 0.0], c=[0, 1], order=2), "shape (s, s)"),
    (dict(a=[[0, 0], [1, 0]], b=[0.5, 0.5], c=[0, 1], order=0), "positive int"),
])
def test_tableau_refused_in_one_sentence(args, words):
    with pytest.raises(InputError, match="^[^\n]*$") as err:
        ButcherTableau(**args)
    assert words in str(err.value)


def test_rk_stepper_refuses_unknown_tableau_and_is_a_jit_argument():
    with pytest.raises(InputError, match="one of"):
        RKStepper("rk5", 0.1, 4)
    f, x0 = AttentionFlow(*_weights(2, 3)), _tokens(4, 2, 4, jnp.float32)
    run = eqx.filter_jit(lambda stepper, x: stepper.solve(f, x).ys)
    stepper = RKStepper("heun", 0.1, 8, save_at=SaveLayers.log_spaced(3, 8))
    assert run(stepper, x0).shape == (3, 4, 2)
    # the jitted solve and the op-by-op one are separately compiled programs (XLA may fuse, and so round,
    # differently): equal to float32 rounding over 8 Heun layers of O(1) states
    np.testing.assert_allclose(run(stepper, x0), stepper.solve(f, x0).ys, rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("save_aux", [False, True])
def test_save_at_gradient_through_checkpointed_gaps(save_aux):
    """Gaps of >= 64 layers run in jax.checkpoint segments ("auto"): the same values and gradient
    as storing every layer (float64; only the order of the backward sweep's work differs)."""
    with float64_scope():
        f, x0 = AuxFlow(*_weights(2, 5)), _tokens(4, 2, 6)
        save_fn = (lambda t, y, aux: aux["speed2"] + jnp.sum(y)) if save_aux else (lambda t, y, args: jnp.sum(y * y))

        def loss(x, checkpoint):
            stepper = RKStepper("heun", 0.01, 200, save_at=(0, 3, 70, 200), save_aux=save_aux, checkpoint=checkpoint)
            return jnp.sum(stepper.solve(f, x, save_fn=save_fn).ys)

        value_and_grad = jax.jit(jax.value_and_grad(loss), static_argnums=1)  # one compile per checkpoint mode
        (v_auto, g_auto), (v_none, g_none) = value_and_grad(x0, "auto"), value_and_grad(x0, None)
        np.testing.assert_allclose(v_auto, v_none, rtol=1e-13)
        np.testing.assert_allclose(g_auto, g_none, rtol=1e-11, atol=1e-13)


def test_auto_checkpoint_engages_in_long_gaps_only():
    stepper = EulerStepper(0.01, 200, save_at=(0, 3, 70, 200))
    assert stepper.save_every is None and stepper.segment_length(3) is None and stepper.segment_length(130) == 10
    assert stepper.segment_length() == EulerStepper(0.01, 200, save_every=200).segment_length()


def _scan_unrolls(stepper, field, x0):
    """The ``unroll`` of every ``lax.scan`` in the stepper's program (nested ones included)."""
    found = []

    def walk(jaxpr):
        for eqn in jaxpr.eqns:
            if eqn.primitive.name == "scan":
                found.append(eqn.params["unroll"])
            for sub in jax.extend.core.jaxprs_in_params(eqn.params):
                walk(sub)

    walk(jax.make_jaxpr(lambda y: stepper.solve(field, y).ys)(x0).jaxpr)
    return found


def test_checkpointed_segments_unroll_only_where_the_field_holds_scores():
    """On XLA:CPU a checkpointed segment is unrolled where one layer holds an n x n score matrix (dense
    attention, n = 256 in float32: its reverse pass is faster unrolled) and not where the field forms no
    scores (the circle's Fourier path, the identity sphere's harmonic path: unrolled, the forward of 10^6
    tokens ran ~2x slower); score_count says which, for folded batches and sums of fields too."""
    from attnflow import FoldedBatch
    from attnflow.dynamics import IdentitySphereFlow, sphere_flow

    eye2 = jnp.eye(2)
    dense = sphere_flow(eye2, eye2, eye2, 4.0, attention_impl="dense")
    fourier = sphere_flow(eye2, eye2, eye2, 4.0, attention_impl="fourier")
    harmonic = IdentitySphereFlow(4.0, attention_impl="harmonic")
    x2 = jnp.ones((256, 2), jnp.float32) / np.sqrt(2)
    assert dense.score_count(x2) == 256**2 and fourier.score_count(x2) == 0
    assert harmonic.score_count(jnp.ones((4096, 3))) == 0 and IdentitySphereFlow(4.0).score_count(x2) == 256**2
    assert FoldedBatch(dense).score_count(jnp.ones((3, 256, 2))) == 3 * 256**2
    assert FoldedBatch(fourier).score_count(jnp.ones((3, 256, 2))) == 0
    assert (fourier + dense).score_count(x2) == 256**2 and (fourier + fourier).score_count(x2) == 0
    stepper = EulerStepper(0.01, 100, shift=sphere_shift, save_every=100)  # auto: 10 segments of 10 layers
    if jax.default_backend() == "cpu":
        assert max(_scan_unrolls(stepper, dense, x2)) == 10
    assert set(_scan_unrolls(stepper, fourier, x2)) == {1}
    assert set(_scan_unrolls(stepper, harmonic, jnp.ones((256, 3), jnp.float32) / np.sqrt(3))) == {1}


def test_a_large_uniform_set_is_never_expanded():
    """10^9 layers saved every layer: built from its runs (a tuple of 10^9 ints would take ~40 GB)."""
    layers = SaveLayers.uniform(1, 10**9)
    assert layers.num_saves == 10**9 + 1 and layers.last == 10**9 and layers.gaps == ((1, 10**9),)
    assert EulerStepper(0.001, 10**9).save_every == 1
    assert SaveLayers.given(range(0, 21, 5)) == SaveLayers.uniform(5, 20) == SaveLayers.given([0, 5, 10, 15, 20])
