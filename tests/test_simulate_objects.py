"""simulate(x0, weights_or_field, integrator): the object forms equal the flat keywords bit for bit, every
integrator runs, the Fourier path has one rule, and a batch over any leaf of a field is one compile."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attnflow as af
import attnflow._simulation as sim_mod
from attnflow.dynamics import normalise, sphere_flow
from attnflow.errors import InputError
from attnflow.integrate import EulerStepper, ODESolver, RKStepper, make_integrator, sphere_shift

I2 = jnp.eye(2)
Q = jnp.array([[1.0, 0.3], [-0.2, 0.9]])
V = jnp.array([[1.0, 0.2], [0.0, 0.5]])
X0 = jax.random.normal(jax.random.key(0), (10, 2))
CIRCLE = normalise(jax.random.normal(jax.random.key(1), (12, 2)))


def same(a, b):
    """Every array of two simulations equal, bit for bit (and the same method name)."""
    assert a.method == b.method and a.picture == b.picture
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.mark.parametrize("picture", ["raw", "rescaled"])
def test_an_integrator_object_equals_the_flat_keywords(picture):
    flat = af.simulate(X0, Q, I2, V, t1=2.0, method="euler", dt=0.25, save_every=2, picture=picture)
    stepper = EulerStepper(0.25, 8, save_every=2)
    same(flat, af.simulate(X0, af.AttentionWeights(Q, I2, V), stepper, picture=picture))
    same(flat, af.simulate(X0, Q, I2, V, integrator=stepper, picture=picture))
    flat = af.simulate(X0, Q, I2, V, t1=1.0, num_saves=3, picture=picture, return_attention=True)
    solver = make_integrator(t1=1.0, num_saves=3)
    same(flat, af.simulate(X0, Q, I2, V, integrator=solver, picture=picture, return_attention=True))


def test_a_ready_field_with_an_integrator_equals_dynamics_keyword():
    field = sphere_flow(I2, I2, I2, 2.0)
    flat = af.simulate(CIRCLE, dynamics=field, t1=1.0, method="euler", dt=0.1, shift="sphere")
    same(flat, af.simulate(CIRCLE, field, EulerStepper(0.1, 10, shift=sphere_shift)))
    ode = af.simulate(CIRCLE, field, ODESolver(0.0, 1.0, ts=jnp.linspace(0.0, 1.0, 3), solver="dopri5"))
    assert ode.method == "dopri5" and ode.states.shape == (3, 12, 2)


def test_rk_stepper_runs_in_both_pictures():
    """RK4 on the continuous fields: x(t) = e^{tV} z(t), the raw and rescaled runs agree to the scheme's error."""
    stepper = RKStepper("rk4", 0.05, 20)
    raw = af.simulate(X0, Q, I2, V, stepper)
    scaled = af.simulate(X0, Q, I2, V, stepper, picture="rescaled")
    assert raw.method == "rk:rk4" and raw.states.shape == (21, 10, 2)
    np.testing.assert_allclose(np.asarray(scaled.tokens), np.asarray(raw.tokens), rtol=1e-4, atol=1e-4)
    between = af.simulate(X0, Q, I2, V, RKStepper("rk4", ts=jnp.linspace(0.0, 1.0, 3), steps_per_save=10))
    assert between.states.shape == (3, 10, 2)
    np.testing.assert_allclose(np.asarray(between.states[-1]), np.asarray(raw.states[-1]), rtol=1e-4, atol=1e-4)


def test_options_are_checked_once_each():
    with pytest.raises(InputError, match="drop \\('t1',\\)"):
        af.simulate(X0, Q, I2, V, integrator=EulerStepper(0.1, 4), t1=1.0)
    with pytest.raises(InputError, match="no option 'num_save'"):
        af.simulate(X0, Q, I2, V, t1=1.0, num_save=3)
    with pytest.raises(InputError, match="integrator must be"):
        af.simulate(X0, Q, I2, V, integrator="euler")
    with pytest.raises(InputError, match="t1"):
        af.simulate(X0, Q, I2, V)
    with pytest.raises(InputError, match="given twice"):
        af.simulate(X0, af.AttentionWeights(Q, I2, V), EulerStepper(0.1, 4), integrator=EulerStepper(0.1, 4))
    with pytest.raises(InputError, match="dt"):  # the stepper's own constructor
        make_integrator("euler", t1=1.0)
    with pytest.raises(InputError, match=r"so V must be \(2, 2\)"):  # the tokens against V: one check
        af.simulate(X0, I2, I2, jnp.eye(3), t1=1.0)
    with pytest.raises(InputError, match="not invertible|singular"):  # a combined rule: I + dt V with the stepper
        af.simulate(X0, I2, I2, -4.0 * I2, EulerStepper(0.25, 4), picture="rescaled")


def test_fourier_max_score_has_one_rule_for_simulate_and_the_flows():
    """fourier_max_score only where the Fourier path can be taken: 'fourier', or 'auto' on unit tokens."""
    messages = []
    for call in (lambda: af.AttentionFlow(I2, I2, I2, attention_impl="auto", fourier_max_score=2.0),
                 lambda: af.simulate(CIRCLE, I2, I2, I2, t1=1.0, attention_impl="auto", fourier_max_score=2.0),
                 lambda: af.AttentionFlow(I2, I2, I2, attention_impl="dense", fourier_max_score=2.0)):
        with pytest.raises(InputError, match="fourier_max_score") as info:
            call()
        messages.append(str(info.value).split(", got")[0])
    assert messages[0] == messages[1] == messages[2]
    assert sphere_flow(I2, I2, I2, 1.0, attention_impl="auto", fourier_max_score=2.0).inner.fourier.bound == 2.0
    run = af.simulate(CIRCLE, I2, I2, I2, t1=1.0, method="euler", dt=0.5, shift="sphere", attention_impl="fourier",
                      fourier_max_score=3.0)
    assert run.states.shape == (3, 12, 2)


def test_a_batch_over_beta_of_any_field_is_one_compile_and_equals_separate_calls(monkeypatch):
    betas = jnp.array([0.25, 0.5, 1.0, 2.0, 4.0])
    field = sphere_flow(I2, I2, I2, 1.0, attention_impl="dense")
    stepper = EulerStepper(0.1, 20, shift=sphere_shift, save_every=5)
    monkeypatch.setattr(sim_mod, "_run", eqx.filter_jit(eqx.debug.assert_max_traces(sim_mod._solve_all,
                                                                                    max_traces=1)))
    batched = af.simulate(CIRCLE, field, stepper, batch="beta", beta=betas)
    monkeypatch.undo()
    separate = [af.simulate(CIRCLE, sphere_flow(I2, I2, I2, b, attention_impl="dense"), stepper) for b in betas]
    assert batched.states.shape == (5, 5, 12, 2)
    for k, one in enumerate(separate):
        np.testing.assert_allclose(np.asarray(batched.states[k]), np.asarray(one.states), rtol=1e-6, atol=1e-6)
    # the same batch as a field built under jax.vmap (every array leaf batched), and with a batch of starts
    starts = jnp.stack([CIRCLE] * 5)
    fields = jax.vmap(lambda b: sphere_flow(I2, I2, I2, b, attention_impl="dense"))(betas)
    ode = ODESolver(0.0, 1.0, ts=jnp.linspace(0.0, 1.0, 3))
    a = af.simulate(starts, fields, ode, batch=("x0", "field"))
    b = af.simulate(starts, field, ode, batch=("x0", "beta"), beta=betas)
    np.testing.assert_allclose(np.asarray(a.states), np.asarray(b.states), rtol=1e-6, atol=1e-6)
    assert a.num_steps.shape == (5,)


def test_a_batch_over_a_named_leaf_of_a_rescaled_field():
    """Leaves named 'V' carry the batch: the rescaled flow's e^{tV} per member (one system at a time on CPU)."""
    Vs = jnp.stack([V, 0.5 * I2, I2])
    fields = jax.vmap(lambda V: af.RescaledFlow(Q, I2, V))(Vs)
    field = eqx.tree_at(lambda f: f.weights.V, af.RescaledFlow(Q, I2, V), Vs)
    solver = make_integrator(t1=1.0, num_saves=3)
    out = af.simulate(X0, field, solver, batch="V")
    for k in range(3):
        one = af.simulate(X0, af.RescaledFlow(Q, I2, Vs[k]), solver)
        np.testing.assert_allclose(np.asarray(out.states[k]), np.asarray(one.states), rtol=1e-5, atol=1e-6)
    assert af.simulate(X0, fields, solver, batch="field").states.shape == (3, 3, 10, 2)


def test_field_batches_are_checked():
    field = sphere_flow(I2, I2, I2, 1.0)
    with pytest.raises(InputError, match="no array leaf of that name"):
        af.simulate(CIRCLE, field, t1=1.0, batch="gamma")
    with pytest.raises(InputError, match="leading batch axis"):
        af.simulate(CIRCLE, field, t1=1.0, batch="beta")
    with pytest.raises(InputError, match="one batch size"):
        af.simulate(jnp.stack([CIRCLE] * 2), field, t1=1.0, batch=("x0", "beta"), beta=jnp.ones(3))
    with pytest.raises(InputError, match="omit Q, K, V and beta"):
        af.simulate(CIRCLE, field, t1=1.0, beta=2.0)
