"""Failures found early: a solve ends at the first step it cannot make finite and reports that time
at every level; float64 asked for is float64 delivered (or a clear error); save times are checked."""

import contextlib
import io
import textwrap

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attnflow as af
from attnflow import InputError, NonFiniteError, SolverError
from attnflow.integrate import RESULTS, raise_if_failed, solve_euler, solve_ode

N, D, C, T1 = 16, 4, 50.0, 20.0
I4 = jnp.eye(D, dtype=jnp.float32)
X0 = jax.random.normal(jax.random.key(0), (N, D), jnp.float32)


def _blow_up_time(x: jax.Array, c: float) -> float:
    """Identical tokens with Q = K = I, V = cI move as x(t) = e^{ct} x: the scores |x|^2 e^{2ct}
    overflow float32 (and the field turns NaN) at t* = (log FLT_MAX - log |x|^2) / (2c)."""
    return float((np.log(np.finfo(np.float32).max) - np.log(np.sum(np.asarray(x, np.float64) ** 2))) / (2 * c))


def test_adaptive_solve_stops_at_the_blow_up_within_one_step():
    same = jnp.tile(X0[:1], (N, 1))
    traj = solve_ode(af.AttentionFlow(I4, I4, C * I4), same, t0=0.0, t1=T1)
    assert int(traj.result) == RESULTS.nonfinite
    assert int(traj.num_steps) < 500, "the adaptive controller crept towards the blow-up until max_steps"
    t_star = _blow_up_time(same[0], C)
    # the solve ends with the step in which the field turned non-finite: t* lies within it
    assert t_star - 1e-5 <= float(traj.t_nonfinite) <= t_star + 1e-4
    assert np.isfinite(np.asarray(traj.ys[0])).all() and not np.isfinite(np.asarray(traj.ys[-1])).all()


def test_every_level_reports_the_same_blow_up_time():
    traj = solve_ode(af.AttentionFlow(I4, I4, C * I4), X0, t0=0.0, t1=T1, rtol=1e-5, atol=1e-6)
    t_bad = float(traj.t_nonfinite)
    assert int(traj.num_steps) < 500 and 0.5 < t_bad < 1.0
    sim = af.simulate(X0, I4, I4, C * I4, t1=T1, throw=False)
    assert int(sim.result) == RESULTS.nonfinite and float(sim.t_nonfinite) == t_bad
    with pytest.raises(NonFiniteError, match=rf"non-finite \(overflow or NaN\) at t = {t_bad:.6g};"):
        af.simulate(X0, I4, I4, C * I4, t1=T1)
    with pytest.raises(NonFiniteError, match=rf"at t = {t_bad:.6g};"):
        raise_if_failed(traj)
    # inside jit, and in a batch where only one member blows up (the other runs to t1)
    run = jax.jit(jax.vmap(lambda V: solve_ode(af.AttentionFlow(I4, I4, V), X0, t0=0.0, t1=T1, rtol=1e-5, atol=1e-6)))
    batch = run(jnp.stack([0.1 * I4, C * I4]))
    assert batch.result.tolist() == [RESULTS.successful, RESULTS.nonfinite] and float(batch.t_nonfinite[1]) == t_bad
    assert np.isfinite(np.asarray(batch.ys[0])).all() and int(batch.num_steps[1]) == int(traj.num_steps)


def test_constant_steps_stop_at_the_euler_steppers_first_nonfinite_layer():
    dt = 0.01
    flow = af.AttentionFlow(I4, I4, C * I4)
    ode = solve_ode(flow, X0, t0=0.0, t1=T1, solver="euler_diffrax", adaptive=False, dt0=dt)
    layers = solve_euler(flow, X0, dt=dt, num_steps=int(T1 / dt))
    assert int(layers.result) == int(ode.result) == RESULTS.nonfinite
    np.testing.assert_allclose(float(ode.t_nonfinite), float(layers.t_nonfinite), atol=dt / 10)
    assert int(ode.num_steps) == round(float(layers.t_nonfinite) / dt) - 1  # the finite layers, not 2000


def test_max_steps_reports_the_time_reached_and_failed_is_honest():
    traj = solve_ode(af.AttentionFlow(I4, I4, 0.1 * I4), X0, t0=0.0, t1=T1, ts=jnp.linspace(0.0, T1, 21), max_steps=4)
    t_stop = float(traj.t_nonfinite)
    assert int(traj.result) == RESULTS.solver_stopped and 0.0 < t_stop < T1
    reached = np.asarray(traj.ts) <= t_stop
    assert np.isfinite(np.asarray(traj.ys)[reached]).all() and not np.isfinite(np.asarray(traj.ys)[~reached]).any()
    with pytest.raises(SolverError, match=rf"stopped before t1 at t = {t_stop:.6g}: its output is finite up to t = "):
        raise_if_failed(traj)


@pytest.mark.usefixtures("x64_here")  # compared with float64 numbers to 1e-13
def test_a_healthy_solve_and_its_gradient_are_unchanged():
    x0 = jnp.asarray(np.random.default_rng(3).normal(size=(6, 2)))
    V = jnp.asarray(np.random.default_rng(4).normal(size=(2, 2)) / 2)
    ts = jnp.linspace(0.0, 1.0, 3)
    flow = lambda V: af.AttentionFlow(jnp.eye(2), jnp.eye(2), V, attention_impl="dense")
    ours = lambda V: solve_ode(flow(V), x0, t0=0.0, t1=1.0, ts=ts, rtol=1e-8, atol=1e-10)
    # the plain diffrax solve (PID control, nothing stopping it) takes the same steps to the same states
    ref = diffrax.diffeqsolve(diffrax.ODETerm(lambda t, y, f: f.vector_field(t, y, None)), diffrax.Tsit5(), 0.0, 1.0,
                              None, x0, args=flow(V), saveat=diffrax.SaveAt(ts=ts),
                              stepsize_controller=diffrax.PIDController(rtol=1e-8, atol=1e-10))
    traj = ours(V)
    assert int(traj.result) == 0 and int(traj.num_steps) == int(ref.stats["num_accepted_steps"])
    np.testing.assert_allclose(np.asarray(traj.ys), np.asarray(ref.ys), rtol=1e-13, atol=1e-13)
    # the gradient the solver gave before it stopped at blow-ups
    g = jax.grad(lambda V: jnp.sum(jnp.sin(ours(V).ys[-1])))(V)
    np.testing.assert_allclose(np.asarray(g), [[0.9073503191426926, -3.378087405354353],
                                               [1.757072654424617, -5.7059873683553555]], rtol=1e-9)


@pytest.mark.parametrize("ts, why", [
    ([0.0, 0.5, 2.0], r"inside \[t0, t1\] = \[0.0, 1.0\], got times from 0.0 to 2.0"),
    ([0.0, 0.7, 0.5, 1.0], "decrease"), ([0.0, np.nan, 1.0], "NaN"),
])
def test_save_times_are_checked_before_solving(ts, why):
    with pytest.raises(InputError, match=rf"^ts must be .*{why}"):
        solve_ode(af.AttentionFlow(I4, I4, I4), X0, t0=0.0, t1=1.0, ts=jnp.asarray(ts, jnp.float32))


def _run_without_float64(code: str) -> str:
    """stdout of ``code`` run here, where JAX's float64 mode is off (the default; the test process keeps it)."""
    assert not jax.config.jax_enable_x64
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(textwrap.dedent(code), "<float64 off>", "exec"), {})
    return out.getvalue()


def test_float64_is_delivered_or_refused_in_one_sentence():
    out = _run_without_float64("""
        import jax, jax.numpy as jnp, numpy as np
        import attnflow as af
        from attnflow.integrate import EulerStepper, solve_euler, solve_ode
        x0 = jax.random.normal(jax.random.key(0), (6, 2)); I = jnp.eye(2)
        def loss(V, method):
            kw = {"dt": 0.1} if method == "euler" else {}
            states = af.simulate(x0, I, I, V, t1=1.0, dtype="float64", method=method, num_saves=3, **kw).states
            return states[-1].sum(), states
        for method in ("tsit5", "euler"):
            try:
                jax.jit(jax.grad(lambda V: loss(V, method), has_aux=True))(0.5 * I)
            except af.InputError as err:
                print("refused", method, "enable_x64" in str(err) and str(err).count(". ") == 0)
        with jax.enable_x64(True):  # what the message says to do
            g, states = jax.jit(jax.grad(lambda V: loss(V, "tsit5"), has_aux=True))(0.5 * I)
        print("scoped", states.dtype, bool(jnp.all(jnp.isfinite(g))))
        flow = af.AttentionFlow(I, I, I)
        x64 = np.asarray(x0, np.float64)
        calls = {
            "solve_ode": lambda: solve_ode(flow, x64, t0=0.0, t1=1.0),
            "solve_ode ts": lambda: solve_ode(flow, x0, t0=0.0, t1=1.0, ts=np.linspace(0.0, 1.0, 3)),
            "EulerStepper": lambda: EulerStepper(0.1, 10).solve(flow, x64),
            "solve_euler": lambda: solve_euler(flow, x64, dt=0.1, num_steps=10),
        }
        for name, call in calls.items():
            try:
                call()
            except af.InputError as err:
                print("refused", name, str(err).split(" ")[0])
        print("float32", solve_euler(flow, x0, dt=0.1, num_steps=10).ys.dtype)
        print("global", jax.config.jax_enable_x64)
    """)
    lines = out.splitlines()
    assert "refused tsit5 True" in lines and "refused euler True" in lines and "scoped float64 True" in lines, out
    for name, arg in (("solve_ode", "y0"), ("solve_ode ts", "ts"), ("EulerStepper", "y0"), ("solve_euler", "y0")):
        assert f"refused {name} {arg}" in lines, out
    assert "float32 float32" in lines and "global False" in lines, out
