"""The noisy mean field on the circle: the diffusion in the spectral scheme (integrating-factor RK4), the linear
theory of the uniform state with noise (growth rates, sigma_c, beta*), noisy particles against the PDE, and the
transition, continuous below beta* and with a bistable range above it (1/n normalisation)."""

import math

import jax.numpy as jnp
import numpy as np
import pytest
from scipy.optimize import brentq
from scipy.special import iv

from attnflow import InputError
from attnflow.meanfield import (circle_grid, critical_noise, noisy_growth_rates, noisy_transition,
                                perturbed_uniform_density, solve_continuity, tricritical_beta)
from attnflow.meanfield._linear import fit_growth_rates
from attnflow.meanfield._study import particles_vs_pde

pytestmark = pytest.mark.usefixtures("x64")


def test_integrating_factor_rk4_with_diffusion_has_order_four_and_conserves_mass():
    th = circle_grid(64, jnp.float64)
    rho0 = (1 + 0.3 * jnp.cos(th) + 0.2 * jnp.sin(3 * th)) / (2 * jnp.pi)
    ts = jnp.array([0.0, 0.5, 1.0])
    ends = [solve_continuity(rho0, 2.0, ts, steps_per_save=s, sigma=0.8) for s in (5, 10, 20)]
    d1 = float(jnp.max(jnp.abs(ends[0].density[-1] - ends[1].density[-1])))
    d2 = float(jnp.max(jnp.abs(ends[1].density[-1] - ends[2].density[-1])))
    # successive differences of an order-4 scheme fall by 2^4 = 16 per halving (12-20: the next order's share)
    assert 12 < d1 / d2 < 20, (d1, d2)
    for p in ends:
        assert float(jnp.max(jnp.abs(p.mass - p.mass[0]))) < 1e-13
    # the diffusion alone is exact: at beta -> 0+ the transport vanishes like beta (mean normalisation:
    # v = (1/beta) d(K * rho), K = e^{beta cos}, d K -> -beta sin), and mode 3 decays by e^{-9 sigma^2 t / 2}
    heat = solve_continuity((1 + 0.2 * jnp.cos(3 * th)) / (2 * jnp.pi), 1e-8, ts, steps_per_save=2, sigma=0.8,
                            normalisation="mean")
    amp = float(jnp.abs(jnp.fft.rfft(heat.density[-1])[3])) / 32 * 2 * jnp.pi
    assert abs(amp / 0.2 - math.exp(-9 * 0.32 * 1.0)) < 1e-6


@pytest.mark.parametrize("normalisation", ["softmax", "mean"])
def test_the_noisy_pde_grows_and_damps_its_modes_at_the_linear_rates(normalisation):
    beta, sigma, G = 2.0, 0.5, 64
    th = circle_grid(G, jnp.float64)
    eps = 1e-7
    rho0 = (1 + eps * sum(jnp.cos(k * th) for k in (1, 2, 3))) / (2 * jnp.pi)
    ts = jnp.linspace(0.0, 2.0, 21)
    path = solve_continuity(rho0, beta, ts, normalisation=normalisation, steps_per_save=10, sigma=sigma)
    amps = np.abs(np.asarray(jnp.fft.rfft(path.density, axis=1)))[:, 1:4]
    fit = fit_growth_rates(np.asarray(ts), amps, max_amplitude=1e-3)
    theory = np.asarray(noisy_growth_rates(beta, 2, sigma, 3, normalisation))[1:]
    # the amplitudes stay below 1e-6: nonlinear terms ~eps^2 are 1e-7 of the linear ones; the fits agree to 1e-6
    np.testing.assert_allclose(fit["rate"], theory, rtol=1e-5, atol=1e-6)
    assert theory[2] < 0 < theory[0]  # with this noise mode 3 decays and mode 1 grows


def test_the_closed_forms_of_the_threshold_and_of_beta_star():
    for beta in (0.5, 2.0, 6.0):
        s_soft, s_mean = float(critical_noise(beta, 2)), float(critical_noise(beta, 2, "mean"))
        assert s_soft ** 2 / 2 == pytest.approx(iv(1, beta) / (beta * iv(0, beta)), rel=1e-12)
        assert s_mean ** 2 / 2 == pytest.approx(iv(1, beta) / beta, rel=1e-10)
        assert float(noisy_growth_rates(beta, 2, s_soft, 1)[1]) == pytest.approx(0.0, abs=1e-12)
    for d in (2, 3, 4):
        root = brentq(lambda b: iv(d / 2 + 1, b) / iv(d / 2, b) - 1 / d, 0.1, 20.0, xtol=1e-14)
        assert tricritical_beta(d) == pytest.approx(root, rel=1e-10)
    assert round(tricritical_beta(2), 4) == 2.4469 and round(tricritical_beta(3), 4) == 1.8162
    # on S^{d-1} (1/n attention): sigma_c^2 / 2 = K_1 / beta = Gamma(d/2) 2^{d/2 - 1} beta^{-d/2} I_{d/2}(beta), so at
    # sigma^2/2 = 1/2 the threshold coupling is beta^{d/2} / (2^{d/2} Gamma(d/2) I_{d/2}(beta)) (Mun and Rosenzweig's K#)
    from scipy.special import gamma
    for d in (2, 3, 4, 5):
        for beta in (0.5, 2.0, 5.0):
            closed = gamma(d / 2) * 2 ** (d / 2 - 1) * beta ** (-d / 2) * iv(d / 2, beta)
            assert float(critical_noise(beta, d, "mean")) ** 2 / 2 == pytest.approx(closed, rel=1e-12)


def test_the_transition_is_continuous_below_beta_star_and_bistable_above_it():
    """1/n normalisation. Both sides: the uniform start orders below sigma_c and stays uniform above it, so the
    measured threshold brackets the closed form. Above beta* (beta = 4 > 2.4469) the clustered start also stays
    ordered at 1.02 sigma_c (a second stable state: hysteresis); below it (beta = 1.5) it melts there."""
    # RK4 steps inside the stability bound dt max|v| m_max <= 2.83 (dt <= 0.037 at beta = 4); at beta = 1.5 the
    # orders with dt = 0.05 are those with 0.025 to 1e-7
    for beta, bistable, dt in ((1.5, False, 0.05), (4.0, True, 0.025)):
        sc = float(critical_noise(beta, 2, "mean"))
        grid = sc * np.array([0.9, 1.02, 1.15])
        out = noisy_transition(beta, grid, num_points=32, t1=150.0, dt=dt)
        assert out["threshold"]["contains_sigma_c"], out
        assert out["threshold"]["lo"] == grid[0] and out["threshold"]["hi"] == grid[1]
        assert (out["bistable"].size > 0) == bistable, out
        assert out["from_clustered"][2] < 0.05  # far above sigma_c even a cluster melts
        # positivity is not enforced by a spectral scheme: on 32 points the ordered state at 0.9 sigma_c undershoots
        # by 0.0015 (1% of the mean density 1/2 pi) near its trough; the order parameter is not affected at that size
        assert np.all(out["min_density"] > -0.005)


def test_noisy_particles_approach_the_noisy_pde_as_n_grows():
    beta, sigma = 2.0, 0.7
    rho0 = perturbed_uniform_density(32, 1, 0.6)
    ts = jnp.array([0.0, 1.0])
    # n = 128 and 2048 only: a size at the middle of log n (512) adds nothing to the least-squares slope
    out = particles_vs_pde(beta, rho0, [128, 2048], ts, seeds=2, sigma=sigma, attention_impl="fourier",
                           steps_per_save=10)
    w1 = out["w1"][:, :, 1].mean(axis=0)
    assert out["fits"][1]["slope"] < -0.3, (out["fits"][1], w1)  # W1 ~ n^{-1/2} (propagation of chaos)
    # the diffusion is in the limit: the noiseless PDE is 3x farther (in W1) from the noisy one than the
    # 2048 noisy particles are (circle W1 of two densities: the L1 norm of the difference of their distribution
    # functions less its median)
    quiet = solve_continuity(rho0, beta, ts, steps_per_save=10).density[-1]
    gap = np.cumsum(np.asarray(out["pde"].density[-1] - quiet)) * (2 * math.pi / quiet.shape[0])
    w1_pdes = float(np.mean(np.abs(gap - np.median(gap))) * 2 * math.pi)
    assert w1_pdes > 3 * w1[-1], (w1_pdes, w1)


def test_noisy_mean_field_inputs_are_refused_in_one_sentence():
    rho0 = perturbed_uniform_density(16, 1, 0.1)
    with pytest.raises(InputError, match="sigma must be >= 0"):
        solve_continuity(rho0, 1.0, jnp.array([0.0, 1.0]), dt=0.1, sigma=-1.0)
    with pytest.raises(InputError, match="sigma must be a finite real number"):
        solve_continuity(rho0, 1.0, jnp.array([0.0, 1.0]), dt=0.1, sigma=float("inf"))
    with pytest.raises(InputError, match="sigmas must be increasing"):
        noisy_transition(1.0, [1.0, 0.5])
    with pytest.raises(InputError, match="sigmas must be a non-empty list"):
        noisy_transition(1.0, [-0.5, 1.0])


def test_noisy_particles_follow_the_mean_field_and_the_disordered_fluctuation_law():
    """n = 150 noisy particles (1/n attention, beta = 1.5 < beta*) at stationarity: below sigma_c their order
    parameter is the PDE's (up to the finite-n shift, a few 1/sqrt(n) at most); above it n E r^2 follows the
    linear-response law sigma^2 / (sigma^2 - sigma_c^2) within its interval (1.8 at 1.5 sigma_c, 1.33 at 2
    sigma_c, against 1 for independent particles and much more for an ordered cloud)."""
    from attnflow.meanfield import particle_transition

    ratios = [0.9, 1.5, 2.0]
    out = particle_transition(1.5, ratios, 150, systems=8, t1=60.0, burn=30.0, dt=0.025, seed=2)
    pde = noisy_transition(1.5, np.asarray(ratios) * out["sigma_c"], num_points=32, t1=100.0, dt=0.05)
    assert out["nonfinite"].sum() == 0
    assert abs(out["r"][0, 0] - pde["from_uniform"][0]) < 0.03, (out["r"][0], pde["from_uniform"][0])
    for i in (1, 2):
        mean, lo, hi = out["n_r2"][i]
        theory = out["n_r2_theory"][i]
        # the interval is over 8 systems' time averages; the law holds up to O(1/n) and the O(dt) bias
        assert lo - 0.1 * theory <= theory <= hi + 0.1 * theory, (out["n_r2"][i], theory)
        assert pde["from_uniform"][i] < 0.01  # the mean field is uniform there: r is a finite-n fluctuation
