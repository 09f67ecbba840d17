"""The noisy transition on S^2 through the mean-field PDE (1/n attention): the order parameter from harmonic
coefficients, the measured threshold against the closed-form sigma_c for d = 3 on both sides of beta*(3) = 1.8162,
and the bistable range above beta* only."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnflow import InputError
from attnflow.meanfield import (
    critical_noise,
    noisy_sphere_transition,
    sphere_density_coefficients,
    sphere_empirical_coefficients,
    sphere_grid,
    sphere_order_parameter,
)
from attnflow.meanfield._sphere_transition import _vmf_coefficients

pytestmark = pytest.mark.usefixtures("x64")


def test_the_order_parameter_of_a_von_mises_fisher_density_and_of_particles():
    kappa, degree = 3.0, 24
    z = sphere_grid(degree, jnp.float64).points[..., 2]
    density = kappa / (4 * math.pi * math.sinh(kappa)) * jnp.exp(kappa * z)
    a = sphere_density_coefficients(density, degree)
    closed = 1 / math.tanh(kappa) - 1 / kappa  # |E x| of the vMF law
    assert float(sphere_order_parameter(a)) == pytest.approx(closed, abs=1e-12)
    # the closed-form coefficients of the clustered start agree with the grid's quadrature
    np.testing.assert_allclose(_vmf_coefficients(kappa, degree), np.asarray(a), atol=1e-13)
    # particles: the empirical measure's degree-1 coefficients give |mean of x|, with leading axes kept
    x = jax.random.normal(jax.random.key(3), (50, 3), jnp.float64)
    x = x / jnp.linalg.norm(x, axis=1, keepdims=True)
    both = jnp.stack([sphere_empirical_coefficients(x, 2), sphere_empirical_coefficients(x[:20], 2)])
    r = sphere_order_parameter(both)
    assert r.shape == (2,)
    np.testing.assert_allclose(r, [jnp.linalg.norm(x.mean(0)), jnp.linalg.norm(x[:20].mean(0))], rtol=1e-12)


@pytest.mark.parametrize("beta, degree, t1, dt, bistable", [(1.2, 6, 80.0, 0.05, False), (4.0, 10, 30.0, 0.015, True)])
def test_the_threshold_brackets_sigma_c_and_bistability_needs_beta_above_beta_star(beta, degree, t1, dt, bistable):
    """Sizes: the measured threshold is read from three noises, 0.9, 1.02 and 1.15 sigma_c. Degree 1 grows at
    sigma_c^2 - sigma^2 (0.15 at beta = 1.2, 0.49 at 4 for 0.9 sigma_c), so the nearly uniform start (r = 0.012) is
    ordered well before t1 below sigma_c; above it degree 1 decays and r stays below ORDERED = 0.05 from the
    start. At beta = 4 the ordered state is sharp (r ~ 0.95): degree 10 keeps its undershoot to ~ 0.12 (degree 8
    lets it reach 0.27, degree 6 blows up), and the fast transport of the 1/n attention at beta = 4 settles by
    t = 30 with steps 0.015 (stable for the sharp state). At beta = 1.2 the states are broad: degree 6 suffices."""
    sc = float(critical_noise(beta, 3, "mean"))
    grid = sc * np.array([0.9, 1.02, 1.15])
    out = noisy_sphere_transition(beta, grid, degree=degree, t1=t1, dt=dt)
    assert out["nonfinite"].size == 0, out
    assert out["sigma_c"] == pytest.approx(sc, rel=1e-6) and out["beta_star"] == pytest.approx(1.8162, abs=1e-4)
    assert out["threshold"]["contains_sigma_c"], out
    assert out["threshold"]["lo"] == grid[0] and out["threshold"]["hi"] == grid[1]
    assert out["from_uniform"][0] > 0.5 and out["from_uniform"][1] < 0.01, out
    # above beta* a cluster stays stationary at 1.02 sigma_c while the uniform state is stable too (hysteresis);
    # below beta* it melts there
    assert (out["bistable"].size > 0) == bistable, out
    assert out["from_clustered"][2] < 0.05  # far above sigma_c even a cluster melts
    assert out["discarded"] < 4e-3  # the kappa = 4 start loses < 0.4% of its L2 norm above degree 6
    assert np.all(out["min_density"] > -0.15), out["min_density"]  # spectral undershoot, reported not enforced


def test_the_sphere_transition_refuses_bad_inputs_in_one_sentence():
    with pytest.raises(InputError, match="sigmas must be increasing"):
        noisy_sphere_transition(1.0, [1.0, 0.5])
    with pytest.raises(InputError, match="sigmas must be a non-empty list"):
        noisy_sphere_transition(1.0, [-0.5, 1.0])
    with pytest.raises(InputError, match="normalisation"):
        noisy_sphere_transition(1.0, [1.0], normalisation="sum")
    with pytest.raises(InputError, match=r"a smaller dt"):  # the clustered start's transport at beta = 4
        noisy_sphere_transition(4.0, [1.0], degree=6, t1=10.0, dt=0.5)
    with pytest.raises(InputError, match="kappa"):
        noisy_sphere_transition(1.0, [1.0], kappa=-1.0)
    with pytest.raises(InputError, match=r"\(L\+1\)\^2"):
        sphere_order_parameter(jnp.ones(5))
