"""The integrators: one shape (bind, solve), ODESolver equal to the plain diffrax solve it wraps."""

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attnflow as af
from attnflow.integrate import AbstractIntegrator, EulerStepper, ODESolver, Trajectory, solve_euler, solve_ode


def _problem(seed=0, n=6, d=3):
    k = jax.random.split(jax.random.key(seed), 4)
    Q, K = (0.5 * jax.random.normal(key, (d, d)) for key in k[:2])
    V = 0.3 * jax.random.normal(k[2], (d, d))
    return af.AttentionFlow(Q, K, V), jax.random.normal(k[3], (n, d))


def _same(a, b):
    return all(np.array_equal(np.asarray(x), np.asarray(y))
               for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)))


@pytest.mark.parametrize("kind", ["adaptive", "constant"])
def test_ode_solver_equals_the_plain_diffrax_solve(kind):
    """On a finite problem the blow-up guard never acts: the states are diffrax's, bit for bit."""
    field, y0 = _problem()
    ts = jnp.linspace(0.0, 1.5, 4)
    if kind == "adaptive":
        solver = ODESolver(0.0, 1.5, ts=ts, rtol=1e-5, atol=1e-6)
        controller, dt0, method = diffrax.PIDController(rtol=1e-5, atol=1e-6), None, diffrax.Tsit5()
    else:
        solver = ODESolver(0.0, 1.5, ts=ts, solver="dopri5", dt0=0.05, adaptive=False)
        controller, dt0, method = diffrax.ConstantStepSize(), jnp.asarray(0.05), diffrax.Dopri5()
    traj = solver.solve(field, y0)
    ref = diffrax.diffeqsolve(diffrax.ODETerm(field), method, t0=jnp.asarray(0.0), t1=jnp.asarray(1.5), dt0=dt0,
                              y0=y0, saveat=diffrax.SaveAt(ts=ts), stepsize_controller=controller, max_steps=16384)
    assert isinstance(traj, Trajectory) and int(traj.result) == 0 and np.isinf(float(traj.t_nonfinite))
    np.testing.assert_array_equal(np.asarray(traj.ys), np.asarray(ref.ys))
    assert int(traj.num_steps) == int(ref.stats["num_accepted_steps"])


def test_solve_ode_is_the_one_call_form():
    field, y0 = _problem(1)
    save = lambda t, y, args: {"mean": y.mean(0), "spread": jnp.linalg.norm(y - y.mean(0))}
    kw = dict(ts=jnp.linspace(0.0, 1.0, 3), solver="bosh3", rtol=1e-4, atol=1e-6, max_steps=512)
    assert _same(solve_ode(field, y0, t0=0.0, t1=1.0, save_fn=save, **kw),
                 ODESolver(0.0, 1.0, **kw).solve(field, y0, save_fn=save))
    assert _same(solve_euler(field, y0, dt=0.1, num_steps=10, save_every=5),
                 EulerStepper(0.1, 10, save_every=5).solve(field, y0))


@pytest.mark.parametrize("kwargs, pattern", [
    (dict(t0=1.0, t1=0.0), r"t1 must be >= t0"),
    (dict(t0=0.0, t1=float("nan")), r"t0 and t1 must be finite real scalars"),
    (dict(t0=0.0, t1=1.0, rtol=0.0), r"rtol must be > 0"),
    (dict(t0=0.0, t1=1.0, atol=-1.0), r"atol must be > 0"),
    (dict(t0=0.0, t1=1.0, dt0=0.0), r"dt0 must be > 0"),
    (dict(t0=0.0, t1=1.0, max_steps=0), r"max_steps must be a positive int \(or None\), got 0\."),
    (dict(t0=0.0, t1=1.0, ts=jnp.array([0.0, 2.0])), r"inside \[t0, t1\]"),
    (dict(t0=0.0, t1=1.0, adaptive=False), r"constant-step integration \(adaptive=False\) needs dt0 > 0"),
    (dict(t0=0.0, t1=1.0, solver="rk4"), r"solver must be a diffrax solver instance or one of"),
])
def test_ode_solver_validates_in_its_constructor(kwargs, pattern):
    t0, t1 = kwargs.pop("t0"), kwargs.pop("t1")
    with pytest.raises(af.InputError, match=pattern) as info:
        ODESolver(t0, t1, **kwargs)
    assert "\n" not in str(info.value) and str(info.value).endswith(".")


def test_solve_refuses_what_is_not_a_field_or_a_state():
    for integrator in (ODESolver(0.0, 1.0), EulerStepper(0.1, 10)):
        with pytest.raises(af.InputError, match=r"dynamics must be an attnflow dynamics \(AbstractDynamics\)"):
            integrator.solve(lambda t, y, args: y, jnp.ones((3, 2)))
        with pytest.raises(af.InputError, match=r"y0 must be an array"):
            integrator.solve(_problem()[0], None)


def test_jit_vmap_grad_through_solve():
    field, y0 = _problem(2)
    solver = ODESolver(0.0, 1.0, ts=jnp.linspace(0.0, 1.0, 3))
    eager = solver.solve(field, y0)
    jitted = eqx.filter_jit(lambda s, f, y: s.solve(f, y))(solver, field, y0)  # the integrator as an argument
    np.testing.assert_allclose(np.asarray(jitted.ys), np.asarray(eager.ys), rtol=1e-5, atol=1e-6)
    ys = jax.vmap(lambda y: solver.solve(field, y).ys)(jnp.stack([y0, 2 * y0]))
    np.testing.assert_allclose(np.asarray(ys[0]), np.asarray(eager.ys), rtol=1e-5, atol=1e-6)

    def loss(V, integrator):
        return jnp.sum(integrator.solve(af.AttentionFlow(field.Q, field.K, V), y0).ys[-1] ** 2)

    for integrator in (solver, EulerStepper(0.1, 10)):  # the loss and its gradient, each one jitted program
        g = eqx.filter_jit(jax.grad(loss))(field.V, integrator)
        e = np.zeros(field.V.shape, field.V.dtype)
        e[0, 1] = 1.0
        loss_at = eqx.filter_jit(loss)
        fd = (loss_at(field.V + 1e-2 * e, integrator) - loss_at(field.V - 1e-2 * e, integrator)) / 2e-2
        assert np.isfinite(np.asarray(g)).all()
        np.testing.assert_allclose(float(g[0, 1]), float(fd), rtol=2e-2, atol=1e-3)


def test_both_integrators_satisfy_the_contract():
    field, y0 = _problem(3)
    rescaled = af.DiscreteRescaledFlow(field.Q, field.K, field.V)
    with pytest.raises(TypeError):
        AbstractIntegrator()  # abstract: bind and solve are the contract
    for integrator in (EulerStepper(0.25, 4, save_every=2), ODESolver(0.0, 1.0, ts=jnp.linspace(0.0, 1.0, 3))):
        assert isinstance(integrator, AbstractIntegrator) and isinstance(integrator, eqx.Module)
        bound = integrator.bind(field)
        assert isinstance(bound, af.AbstractDynamics)
        traj = integrator.solve(bound, y0)
        assert isinstance(traj, Trajectory) and traj.ys.shape == (3,) + y0.shape and traj.ts.shape == (3,)
        assert traj.result.dtype.kind == "i" and int(traj.result) == 0
        tokens = jax.vmap(integrator.bind(field).tokens)(traj.ts, traj.ys)  # post-processing with the bound field
        np.testing.assert_array_equal(np.asarray(tokens), np.asarray(traj.ys))
    solver = ODESolver(0.0, 1.0)
    assert solver.bind(field) is field  # an ODE solve has no grid
    stepper = EulerStepper(0.25, 4)
    assert rescaled.dt is None and float(stepper.bind(rescaled).dt) == 0.25 and stepper.bind(rescaled).num_layers == 4
    # the exact discrete rescaling: z[k] = (I + dt V)^{-k} x[k]
    x = stepper.solve(field, y0).ys[-1]
    z = stepper.solve(rescaled, y0).ys[-1]
    R = jnp.eye(3) + 0.25 * field.V
    np.testing.assert_allclose(np.asarray(z @ jnp.linalg.matrix_power(R, 4).T), np.asarray(x), rtol=1e-4, atol=1e-5)
