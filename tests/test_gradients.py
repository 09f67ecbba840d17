"""Autodiff through both integrators agrees with central finite differences (float64)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attnflow as af
from attnflow.integrate import solve_euler, solve_ode

pytestmark = pytest.mark.usefixtures("x64")  # float64 central differences and tolerances


def _loss_factory(x0, Q, K, solver):
    def loss(V):
        if solver == "euler":
            traj = solve_euler(af.DiscreteRescaledFlow(Q, K, V), x0, dt=0.25, num_steps=8)
        else:
            traj = solve_ode(af.RescaledFlow(Q, K, V), x0, t0=0.0, t1=2.0, rtol=1e-10, atol=1e-12)
        z = traj.ys[-1]
        # a smooth functional of the final geometry: spread of the rescaled cloud
        return jnp.sum((z - z.mean(0)) ** 2) + jnp.sum(jnp.sin(z[0]))

    return loss


@pytest.mark.parametrize("solver", ["euler", "tsit5"])
def test_gradient_wrt_V_matches_finite_differences(rng, solver):
    n, d = 6, 2
    x0 = jnp.asarray(rng.normal(size=(n, d)))
    Q, K = jnp.asarray(rng.normal(size=(d, d))), jnp.asarray(rng.normal(size=(d, d)))
    V = jnp.asarray(rng.normal(size=(d, d)) / 2)
    loss = jax.jit(_loss_factory(x0, Q, K, solver))
    grad = np.asarray(jax.grad(loss)(V))
    h = 1e-6
    fd = np.zeros((d, d))
    for i in range(d):
        for j in range(d):
            E = np.zeros((d, d))
            E[i, j] = h
            fd[i, j] = (loss(V + E) - loss(V - E)) / (2 * h)
    np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-7)


def test_gradient_wrt_Q_K_and_x0_raw_flow(rng):
    n, d = 5, 2
    x0 = jnp.asarray(rng.normal(size=(n, d)))
    Q, K, V = (jnp.asarray(rng.normal(size=(d, d)) / 2) for _ in range(3))

    def loss(params):
        Q, K, x0 = params
        traj = solve_ode(af.AttentionFlow(Q, K, V), x0, t0=0.0, t1=1.0, rtol=1e-10, atol=1e-12)
        return jnp.sum(traj.ys[-1] ** 2)

    g = jax.grad(loss)((Q, K, x0))
    h = 1e-6
    for which, arr in enumerate((Q, K, x0)):
        idx = (0, 1)
        E = jnp.zeros_like(arr).at[idx].set(h)
        plus = [Q, K, x0]
        minus = [Q, K, x0]
        plus[which] = arr + E
        minus[which] = arr - E
        fd = (loss(tuple(plus)) - loss(tuple(minus))) / (2 * h)
        np.testing.assert_allclose(float(g[which][idx]), float(fd), rtol=1e-5)
