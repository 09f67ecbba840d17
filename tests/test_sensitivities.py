"""Sensitivities of soft-geometry functionals of the flow w.r.t. Q, K, V, beta and x0:
central differences (float64), forward == reverse mode, Hessian-vector products, per-system
gradients, BacksolveAdjoint vs checkpointed reverse mode, and the discrete-rescaled stepper's
gradient == the raw stepper's through z[N] = R^{-N} x[N]."""

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attnflow as af
from attnflow import geometry as geo
from attnflow.integrate import solve_euler, solve_ode
from attnflow._linalg import euler_transfer_matrix, matrix_power

pytestmark = pytest.mark.usefixtures("x64")  # float64 central differences and tolerances

N, D, T1, DT, STEPS = 5, 2, 1.0, 0.125, 8


def _params(rng):
    return {
        "Q": jnp.asarray(0.7 * rng.normal(size=(D, D))),
        "K": jnp.asarray(0.7 * rng.normal(size=(D, D))),
        "V": jnp.asarray(rng.normal(size=(D, D)) / 2 + 0.5 * np.eye(D)),
        "beta": jnp.asarray(1.3),
        "x0": jnp.asarray(rng.normal(size=(N, D))),
    }


def _functional(y, phi_dual):
    """A soft-geometry functional of the final tokens (fixed scale 2.0)."""
    return (geo.soft_cluster_count(y, 2.0, 0.3)
            + jnp.mean(geo.hyperplane_distances(y, phi_dual, 2.0, 0.05))
            + 0.1 * jnp.sum(jnp.sin(y)))


TSIT5_TOL = 1e-10


def _make_loss(picture, integrator, phi_dual, adjoint=None, impl="auto"):
    cls = {"raw": af.AttentionFlow, "rescaled": af.RescaledFlow}[picture]

    def loss(p):
        flow = cls(p["Q"], p["K"], p["V"], p["beta"], attention_impl=impl)
        if integrator == "euler":
            y = solve_euler(flow, p["x0"], dt=DT, num_steps=STEPS, save_every=STEPS).ys[-1]
        else:
            y = solve_ode(flow, p["x0"], t0=0.0, t1=T1, rtol=TSIT5_TOL, atol=TSIT5_TOL, max_steps=2048,
                          adjoint=adjoint).ys[-1]
        return _functional(y, phi_dual)

    return loss


def _directional_fd(f, p, u, h=1e-5):
    plus = jax.tree_util.tree_map(lambda a, b: a + h * b, p, u)
    minus = jax.tree_util.tree_map(lambda a, b: a - h * b, p, u)
    return (float(f(plus)) - float(f(minus))) / (2 * h)


def _tree_dot(a, b):
    return float(sum(jnp.sum(x * y) for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b))))


def _unit_direction(rng, p, only=None):
    u = {k: jnp.asarray(rng.normal(size=np.shape(v))) * (only is None or k == only) for k, v in p.items()}
    return u


@pytest.fixture(scope="module")
def tsit5_case():
    """Rescaled picture, adaptive Tsit5: parameters, the loss and its checkpointed gradient
    (compiled once for the three tests that use it)."""
    rng = np.random.default_rng(2024)
    p = _params(rng)
    phi_dual = jnp.asarray(rng.normal(size=D))
    loss = jax.jit(_make_loss("rescaled", "tsit5", phi_dual))
    return p, phi_dual, loss, jax.jit(jax.grad(loss))(p)


# Relative error <= 1e-6 with the denominator floored at 1e-2 (a fixed scale: the functional is
# O(1)); float64 central differences with h = 1e-5 are accurate to ~1e-9 here (truncation
# h^2 f''' ~ 1e-10, rounding eps f / h ~ 1e-11, adaptive-step noise rtol / h ~ 1e-7 at most).
REL = 1e-6


def _check_against_central_differences(rng, p, loss, g):
    for name in p:  # every parameter separately: Q, K, V, beta, x0
        u = _unit_direction(rng, p, only=name)
        fd = _directional_fd(loss, p, u)
        an = _tree_dot(g, u)
        assert abs(an - fd) <= REL * max(abs(fd), 1e-2), (name, an, fd)


# raw + Tsit5 is in tests/test_gradients.py; rescaled + Euler is the discrete-rescaled test below
def test_gradient_matches_central_differences_raw_euler(rng):
    p = _params(rng)
    loss = jax.jit(_make_loss("raw", "euler", jnp.asarray(rng.normal(size=D))))
    _check_against_central_differences(rng, p, loss, jax.jit(jax.grad(loss))(p))


def test_gradient_matches_central_differences_rescaled_tsit5(rng, tsit5_case):
    p, _, loss, g = tsit5_case
    _check_against_central_differences(rng, p, loss, g)


def test_forward_mode_equals_reverse_mode(rng, tsit5_case):
    # (forward mode through the Euler stepper is exercised by the Hessian-vector product test)
    p, phi_dual, _, rev = tsit5_case
    integrator = "tsit5"
    # forward mode through diffrax needs ForwardMode(); the chunked path's custom_vjp has no
    # JVP rule, so the dense attention path is selected explicitly
    fwd_loss = _make_loss("rescaled", integrator, phi_dual, adjoint=diffrax.ForwardMode(), impl="dense")
    u = _unit_direction(rng, p)
    _, tangent = jax.jit(lambda p, u: jax.jvp(fwd_loss, (p,), (u,)))(p, u)
    assert abs(float(tangent) - _tree_dot(rev, u)) <= 1e-10 * max(1.0, abs(float(tangent)))


def test_hessian_vector_product_matches_differences_of_gradients(rng):
    p = _params(rng)
    phi_dual = jnp.asarray(rng.normal(size=D))
    loss = _make_loss("raw", "euler", phi_dual, impl="dense")
    u = _unit_direction(rng, p)
    hv = jax.jit(lambda p, u: geo.hvp(loss, p, u))(p, u)
    grad = jax.jit(jax.grad(loss))
    h = 1e-5
    gp = grad(jax.tree_util.tree_map(lambda a, b: a + h * b, p, u))
    gm = grad(jax.tree_util.tree_map(lambda a, b: a - h * b, p, u))
    fd = jax.tree_util.tree_map(lambda a, b: (a - b) / (2 * h), gp, gm)
    for k in p:
        scale = max(float(jnp.abs(fd[k]).max()), 1e-2)
        assert float(jnp.abs(hv[k] - fd[k]).max()) <= REL * scale, k


def test_per_system_gradients_in_one_call(rng):
    p = _params(rng)
    phi_dual = jnp.asarray(rng.normal(size=D))
    Vs = jnp.stack([p["V"], p["V"] + 0.2 * jnp.asarray(rng.normal(size=(D, D))), -p["V"]])

    def of_V(V):
        q = dict(p, V=V)
        return _make_loss("rescaled", "euler", phi_dual)(q)

    batched = jax.jit(lambda Vs: geo.per_system_grad(of_V, Vs))(Vs)
    single = jax.jit(jax.grad(of_V))
    for b in range(3):
        np.testing.assert_allclose(batched[b], single(Vs[b]), rtol=1e-12, atol=1e-13)


def test_backsolve_adjoint_close_to_checkpointed(tsit5_case):
    # through solve_ode (which saves plain states when save_fn is None, as BacksolveAdjoint needs);
    # the reference is the fixture's checkpointed gradient of the same solve
    p, phi_dual, _, ref = tsit5_case
    back = jax.jit(jax.grad(_make_loss("rescaled", "tsit5", phi_dual, adjoint=diffrax.BacksolveAdjoint())))(p)
    for k in p:
        # the backward solve has its own discretisation error, of the order of the tolerance
        # (measured 4.5e-10 relative at tol 1e-10 in benchmarks/bench_gradients.py); 100x margin
        err = float(jnp.abs(back[k] - ref[k]).max()) / max(float(jnp.abs(ref[k]).max()), 1e-2)
        assert err <= 100 * TSIT5_TOL, (k, err)


def test_discrete_rescaled_gradient_equals_raw_through_change_of_variables(rng):
    p = _params(rng)
    phi_dual = jnp.asarray(rng.normal(size=D))

    def raw(p):
        x = solve_euler(af.AttentionFlow(p["Q"], p["K"], p["V"], p["beta"]), p["x0"], dt=DT, num_steps=STEPS).ys[-1]
        return _functional(x, phi_dual)

    def rescaled(p):
        flow = af.DiscreteRescaledFlow(p["Q"], p["K"], p["V"], p["beta"])
        z = solve_euler(flow, p["x0"], dt=DT, num_steps=STEPS).ys[-1]
        R_N = matrix_power(euler_transfer_matrix(p["V"], DT), STEPS, 4)
        return _functional(z @ R_N.T, phi_dual)  # x[N] = R^N z[N]

    (v_raw, g_raw), (v_res, g_res) = (jax.jit(jax.value_and_grad(f))(p) for f in (raw, rescaled))
    assert abs(float(v_raw) - float(v_res)) < 1e-12
    for k in p:
        np.testing.assert_allclose(g_res[k], g_raw[k], rtol=1e-9, atol=1e-11, err_msg=k)
