"""The continuity equation on the circle (attnflow.meanfield): the velocity against direct
quadrature, spectral convergence in G, the order in dt, mass conservation, the positivity monitor,
the derivative in beta, and the linear growth rates of the uniform measure (PDE and particles)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnflow.dynamics import sphere_flow
from attnflow.errors import InputError
from attnflow.integrate import EulerStepper, sphere_shift
from attnflow.meanfield import (
    density_fourier_coefficients,
    fourier_coefficients,
    growth_rates,
    most_unstable_mode,
    perturbed_uniform_density,
    solve_continuity,
    sphere_growth_rates,
)
from attnflow.meanfield._continuity import CircleContinuity
from attnflow.meanfield._linear import fit_growth_rates, perturbed_uniform_angles
from attnflow.meanfield._pde import circle_velocity, interpolate_density

pytestmark = pytest.mark.usefixtures("x64")  # convergence and growth rates are measured in float64

BETA = 2.0
#: every solve below saves at 11 times with 20 RK4 steps between two of them, so that one compiled
#: program serves each grid (only dt = interval / 20 changes); on [0, 1] in 10 equal intervals
#: dt = 0.005: time error ~ 1e-12 (it falls 16x per halving of dt from 5e-6 at dt = 0.2), far below
#: the spatial errors compared with it
STEPS = 20
UNIT_TIMES = np.linspace(0.0, 1.0, 11)


def smooth_start(G):
    """An analytic, non-symmetric density: a von Mises bump times (1 + 0.3 sin 2 theta) (numpy)."""
    theta = 2 * np.pi * np.arange(G) / G
    rho = np.exp(np.cos(theta)) * (1 + 0.3 * np.sin(2 * theta))
    return rho / (rho.sum() * 2 * np.pi / G)


def solve(G, ts=UNIT_TIMES, beta=BETA, start=None):
    start = smooth_start(G) if start is None else start
    return solve_continuity(start, beta, jnp.asarray(ts), steps_per_save=STEPS)


@pytest.mark.parametrize("normalisation", ["softmax", "mean"])
def test_velocity_is_the_direct_quadrature(normalisation):
    G = 64
    theta = 2 * np.pi * np.arange(G) / G
    rho = smooth_start(G)
    kernel = np.exp(BETA * np.cos(theta[:, None] - theta[None, :]))
    numerator = (kernel * np.sin(theta[None, :] - theta[:, None])) @ rho * (2 * np.pi / G)
    Z = kernel @ rho * (2 * np.pi / G) if normalisation == "softmax" else 1.0
    # the trapezoid rule is spectrally exact here (aliased kernel modes I_{64-m} < 1e-30): rounding only
    np.testing.assert_allclose(circle_velocity(rho, BETA, normalisation), numerator / Z, rtol=0, atol=1e-14)


def test_spectral_convergence_in_G_and_mass_conservation():
    reference = solve(64).density[-1]
    errors = {}
    for G in (16, 32, 48):
        path = solve(G)
        errors[G] = float(jnp.max(jnp.abs(interpolate_density(path.density[-1], 64) - reference)))
        # the zero mode of the tendency is exactly 0: the mass moves by rounding only (~1e-16 per step)
        assert abs(float(path.mass[-1] - path.mass[0])) < 1e-13
        assert abs(float(path.mass[0]) - 1) < 1e-14
    # measured: 1.1e-2, 8.1e-5, 8.4e-8; an algebraic rate G^-p would keep the local order
    # log(e1/e2)/log(G2/G1) constant, a spectral one makes it grow: 7 then 17
    order_low = np.log(errors[16] / errors[32]) / np.log(2)
    order_high = np.log(errors[32] / errors[48]) / np.log(1.5)
    assert errors[48] < 1e-6 and order_high > order_low + 5, (errors, order_low, order_high)


def test_rk4_is_fourth_order_in_dt():
    # the state at t = 4 after one save interval [0, 4] (dt = 0.2), two (dt = 0.1) and ten (dt = 0.02, the
    # reference); the remaining save intervals are short and unused
    tail = 4.0 + 0.01 * np.arange(1, 10)
    at_four = lambda intervals: solve(32, np.concatenate([np.linspace(0, 4, intervals + 1), tail[: 10 - intervals]]))
    reference = at_four(10).density[10]
    e_coarse, e_fine = (float(jnp.max(jnp.abs(at_four(m).density[m] - reference))) for m in (1, 2))
    order = np.log2(e_coarse / e_fine)
    assert 3.5 < order < 4.5 and e_fine < 1e-3, (e_coarse, e_fine, order)  # measured 3.9, e_fine 1.6e-4


def test_negative_density_is_reported_not_hidden():
    # a bump of width ~0.5 rad concentrating under beta = 9 on 16 points: the spectral solution undershoots
    G = 16
    rho = np.exp(2 * np.cos(2 * np.pi * np.arange(G) / G))
    path = solve(G, 4 * UNIT_TIMES, beta=9.0, start=rho / (rho.sum() * 2 * np.pi / G))
    assert bool(path.negative) and float(path.min_density[-1]) < 0
    assert np.all(np.asarray(path.min_density) <= np.asarray(jnp.min(path.density, axis=1)))  # over all steps
    assert not bool(solve(G).negative)


def test_derivative_in_beta_matches_a_central_difference():
    def value(beta):
        return solve(16, beta=beta).density[-1, 3]

    _, slope = jax.jvp(value, (BETA,), (1.0,))
    step = 1e-4
    diff = (float(value(BETA + step)) - float(value(BETA - step))) / (2 * step)
    # central difference error ~ f''' h^2 / 6 ~ 1e-9 relative, rounding 1e-16 / h ~ 1e-12
    assert abs(float(slope) - diff) <= 1e-7 * abs(diff) and abs(diff) > 1e-3, (float(slope), diff)


CASES = [(2, 2.0), (3, 5.0)]  # (mode k, beta)


@pytest.mark.parametrize("normalisation", ["softmax", "mean"])
def test_pde_growth_rate_is_the_linear_prediction(normalisation):
    G = 32
    for k, beta in CASES:
        rate = float(growth_rates(beta, 8, normalisation)[k])
        ts = jnp.linspace(0.0, 3.0 / rate, 11)  # the amplitude grows e^3 = 20 times, from 5e-7
        path = solve_continuity(perturbed_uniform_density(G, k, 1e-6), beta, ts, normalisation=normalisation,
                                steps_per_save=STEPS)
        fit = fit_growth_rates(ts, density_fourier_coefficients(path.density, k)[:, k], max_amplitude=1e-3)
        # measured 4e-10 relative: RK4 at rate dt = 0.015 and the O(eps) nonlinearity; 1e-7 bounds both
        assert fit["points"][0] == 11 and abs(fit["rate"][0] / rate - 1) < 1e-7, (k, beta, fit["rate"], rate)


@pytest.mark.parametrize("normalisation", ["softmax", "mean"])
def test_particle_growth_rate_is_the_linear_prediction(normalisation):
    """64 equally spaced tokens, perturbed in mode k, stepped by the project's Euler stepper with the
    sphere flow: the linearised layer map multiplies mode k by 1 + dt lambda_k per layer."""
    n, layers = 64, 60
    eye = jnp.eye(2)
    run = jax.jit(lambda x0, dt, beta: EulerStepper(dt, layers, shift=sphere_shift).solve(
        sphere_flow(eye, eye, eye, beta, normalisation=normalisation), x0).ys)
    for k, beta in CASES:
        rate = float(growth_rates(beta, 8, normalisation)[k])
        dt = 0.05 / rate
        theta = perturbed_uniform_angles(n, k, 1e-6)
        ys = run(jnp.stack([jnp.cos(theta), jnp.sin(theta)], axis=1), dt, beta)
        amplitude = jax.vmap(lambda y: fourier_coefficients(y, k)[k])(ys)
        fit = fit_growth_rates(dt * np.arange(layers + 1), amplitude, max_amplitude=1e-3)
        euler = np.log1p(dt * rate) / dt
        # measured 1e-11 relative: the aliased terms I_{64 - k} and the O(eps) nonlinearity; 1e-8 bounds both
        assert abs(fit["rate"][0] / euler - 1) < 1e-8, (k, beta, fit["rate"], euler)
        assert abs(euler / rate - 1) > 1e-2  # the Euler factor matters: the comparison resolves it


def test_growth_rate_formulas():
    # k* ~ sqrt(2 beta) for large beta; both normalisations share the fastest mode
    for beta in (8.0, 32.0, 72.0):
        k_star = int(most_unstable_mode(beta, 16))
        assert abs(k_star - np.sqrt(2 * beta)) <= 1.0, (beta, k_star)  # 4, 8, 12 (measured)
        assert int(jnp.argmax(growth_rates(beta, 16, "mean")[1:]) + 1) == k_star
    # on S^{d-1} the Funk-Hecke rates reduce to the circle's for d = 2 and to spherical Bessel functions
    # i_l for d = 3: lambda_1 = 1 * 2 * i_1(b) / (b i_0(b)) with i_1 / i_0 = coth b - 1 / b
    beta = 3.0
    np.testing.assert_allclose(sphere_growth_rates(beta, 2, 8), growth_rates(beta, 8), rtol=1e-12, atol=1e-14)
    lam1 = float(sphere_growth_rates(beta, 3, 2)[1])
    np.testing.assert_allclose(lam1, 2 * (1 / np.tanh(beta) - 1 / beta) / beta, rtol=1e-12)


def test_bad_input_gets_one_sentence():
    with pytest.raises(InputError, match="normalisation"):
        CircleContinuity(1.0, 16, normalisation="sum")
    with pytest.raises(InputError, match="steps_per_save"):
        solve_continuity(jnp.ones(16), 1.0, jnp.array([0.0, 1.0]))
    with pytest.raises(InputError, match="solver"):
        solve_continuity(jnp.ones(16), 1.0, jnp.array([0.0, 1.0]), solver="rk5")
