"""The continuity equation on the sphere S^2 (attnflow.meanfield.solve_sphere_continuity): the transforms, the
velocity against direct quadrature, mass, the linear growth rates of the uniform density (with and without noise),
the order in dt, spectral convergence in the degree L, rotation invariance, particles against the PDE, the
positivity monitor and the refusals.

Most solves share one compiled program: degree 6 or 10, 11 save times, 20 RK4 steps between two of them (beta, the
times and the start are traced)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnflow.errors import InputError
from attnflow.fields import build_field, field_entry
from attnflow.integrate import RKStepper, sphere_shift
from attnflow.kernels.sphere import sphere_harmonics
from attnflow.meanfield import (
    harmonic_energies,
    noisy_growth_rates,
    perturbed_uniform_sphere_density,
    sample_sphere_density,
    solve_sphere_continuity,
    sphere_degree_energies,
    sphere_density_at,
    sphere_density_coefficients,
    sphere_density_on_grid,
    sphere_empirical_coefficients,
    sphere_grid,
    sphere_growth_rates,
)
from attnflow.meanfield._sphere_continuity import SphereContinuity, _nodes, _tables

pytestmark = pytest.mark.usefixtures("x64")  # rates, orders and round trips are measured in float64

STEPS = 20
NUM_TIMES = 11
I3 = np.eye(3)
RNG = np.random.default_rng(20260611)
POINTS = RNG.normal(size=(200, 3))
POINTS /= np.linalg.norm(POINTS, axis=1, keepdims=True)


def uniform(L):
    return perturbed_uniform_sphere_density(L, 0, 0.0)


@functools.lru_cache(maxsize=None)
def bump(L, kappa=2.0):
    """An analytic, asymmetric probability density e^{kappa <x, p>} (1 + 0.3 x y) / Z, as its coefficients up to
    degree L (projected from a grid of degree 48: exact to rounding for L <= 40)."""
    grid = sphere_grid(48)
    x = np.asarray(grid.points)
    p = np.array([0.3, -0.4, 0.866])
    f = np.exp(kappa * x @ (p / np.linalg.norm(p))) * (1 + 0.3 * x[..., 0] * x[..., 1])
    a = sphere_density_coefficients(f, L)
    return a / (4 * np.pi * a[0])


def solve(start, beta, t1, **kw):
    return solve_sphere_continuity(start, beta, jnp.linspace(0.0, t1, NUM_TIMES), steps_per_save=STEPS, **kw)


# -- transforms -------------------------------------------------------------------------------------------------


def test_transforms_round_trip_to_rounding():
    L = 12
    a = jnp.asarray(RNG.normal(size=(L + 1) ** 2))
    values = sphere_density_on_grid(a)
    assert values.shape == tuple(np.asarray(sphere_grid(L).weights).shape)
    scale = float(jnp.abs(values).max())  # about 40: errors are measured in units of rounding of it
    # grid -> coefficients -> grid, and the FFT synthesis against the pointwise harmonics (another code path)
    assert float(jnp.abs(sphere_density_coefficients(values, L) - a).max()) < 1e-14 * scale
    points = np.asarray(sphere_grid(L).points).reshape(-1, 3)
    assert float(jnp.abs(sphere_density_at(a, points) - values.reshape(-1)).max()) < 1e-14 * scale
    # a density of degree L read on a finer grid, and its coefficients from there (measured 6e-15 * scale)
    fine = sphere_density_on_grid(a, 20)
    assert float(jnp.abs(sphere_density_coefficients(fine, L) - a).max()) < 2e-14 * scale
    # the particles' coefficients in the same layout: their energies are harmonic_energies'
    x = jnp.asarray(POINTS[:50])
    np.testing.assert_allclose(sphere_degree_energies(sphere_empirical_coefficients(x, 3)),
                               harmonic_energies(x, 3), rtol=1e-12, atol=1e-14)


def test_derivative_tables_are_the_harmonics_derivatives():
    """The gradient tables (a derivative identity applied to the values) against forward-mode autodiff of the
    Cartesian harmonics along e_theta and e_phi."""
    L, N = 10, 16
    P, dP, mP = _tables(L, N)
    z = _nodes(N)[0]
    s = np.sqrt(1 - z * z)
    zero = np.zeros_like(z)
    points = jnp.asarray(np.stack([s, zero, z], 1))
    harmonics = lambda p: sphere_harmonics(p, L)
    _, along_theta = jax.jvp(harmonics, (points,), (jnp.asarray(np.stack([z, zero, -s], 1)),))
    _, along_phi = jax.jvp(harmonics, (points,), (jnp.asarray(np.stack([zero, zero + 1, zero], 1)),))
    for l in range(L + 1):
        for m in range(l + 1):
            np.testing.assert_allclose(dP[m, l], along_theta[:, l * l + l + m], rtol=0, atol=1e-12)
            if m:
                np.testing.assert_allclose(mP[m, l], along_phi[:, l * l + l - m], rtol=0, atol=1e-12)


@pytest.mark.parametrize("normalisation", ["softmax", "mean"])
def test_velocity_is_the_direct_quadrature(normalisation):
    """v = Proj (int e^{beta<x,y>} y rho dy) / Z at the grid points, Z the softmax denominator or 1, by a plain
    quadrature on a grid of degree 40 (its error for the kernel at beta = 4 is below rounding)."""
    L, beta = 6, 4.0
    a = uniform(L) + 0.3 * (perturbed_uniform_sphere_density(L, 2, 1.0, m=1) - uniform(L))
    a = a + 0.2 * (perturbed_uniform_sphere_density(L, 3, 1.0, m=-2) - uniform(L))
    field = build_field("sphere_continuity", I3, I3, I3, beta=beta, degree=L, normalisation=normalisation)
    v_theta, v_phi = (np.asarray(c).reshape(-1) for c in field.velocity(a))
    fine = sphere_grid(40)
    y = np.asarray(fine.points).reshape(-1, 3)
    rho_w = np.asarray(sphere_density_at(a, y)) * np.asarray(fine.weights).reshape(-1)
    x = np.asarray(sphere_grid(L).points).reshape(-1, 3)
    kernel = np.exp(beta * x @ y.T) * rho_w
    mean = kernel @ y
    if normalisation == "softmax":
        mean = mean / kernel.sum(axis=1, keepdims=True)
    phi, z = np.arctan2(x[:, 1], x[:, 0]), x[:, 2]
    e_theta = np.stack([z * np.cos(phi), z * np.sin(phi), -np.sqrt(1 - z * z)], 1)
    e_phi = np.stack([-np.sin(phi), np.cos(phi), 0 * z], 1)
    scale = np.abs(mean).max()
    assert scale > 0.1
    # measured 3e-15 (softmax), 2e-14 (mean: e^beta / beta = 13.6 times larger velocities)
    np.testing.assert_allclose(v_theta, (mean * e_theta).sum(1), rtol=0, atol=1e-13 * scale)
    np.testing.assert_allclose(v_phi, (mean * e_phi).sum(1), rtol=0, atol=1e-13 * scale)


def test_the_registry_builds_the_field():
    a = bump(4)
    for normalisation in ("softmax", "mean"):
        field = build_field("sphere_continuity", I3, I3, I3, beta=2.0, degree=4, normalisation=normalisation,
                            diffusion=0.1)
        hand = SphereContinuity(2.0, 4, normalisation=normalisation, diffusion=0.1)
        assert type(field) is SphereContinuity and field.grid_shape == (7, 14)
        assert np.array_equal(field.vector_field(0.0, a, None), hand.vector_field(0.0, a, None))
    with pytest.raises(InputError, match="drop the mask"):
        build_field("sphere_continuity", I3, I3, I3, degree=4, mask="causal")
    with pytest.raises(InputError, match="3 x 3 identity"):
        build_field("sphere_continuity", I3, I3, 2 * I3, degree=4)
    assert not field_entry("sphere_continuity").steps_raw()  # the state (the coefficients) is read as it is


# -- conservation and linear growth ----------------------------------------------------------------------------


def test_mass_is_conserved_to_the_last_bit():
    L = 6
    a = bump(L)
    field = build_field("sphere_continuity", I3, I3, I3, beta=4.0, degree=L, diffusion=0.1)
    assert float(field(0.0, a)[0]) == 0.0  # the degree-0 tendency is exactly 0 (grad Y_00 = 0)
    assert float(jnp.abs(field(0.0, a)).max()) > 1e-3
    for beta, kw in ((4.0, {}), (4.0, {"sigma": 0.5}), (1.0, {"normalisation": "mean"})):
        path = solve(a, beta, 1.0, **kw)
        assert float(jnp.abs(path.mass - 1).max()) < 1e-14 and float(jnp.abs(path.mass - path.mass[0]).max()) == 0.0
        assert float(jnp.abs(path.coefficients[-1] - path.coefficients[0]).max()) > 1e-3  # it moved


#: the perturbed harmonic of each degree (cosine and sine ones, several orders)
ORDERS = {1: 0, 2: -1, 3: 2, 4: -3}


@pytest.mark.parametrize("normalisation", ["softmax", "mean"])
@pytest.mark.parametrize("sigma", [0.0, 0.5])
def test_linear_growth_is_sphere_growth_rates(normalisation, sigma):
    """A degree-l perturbation of size 1e-6 of the uniform density grows (or decays) at lambda_l =
    l(l+1)(c i_l / beta - sigma^2/2) (attnflow.meanfield.sphere_growth_rates / noisy_growth_rates). Each is
    followed over t <= 2 / max_l |lambda_l|: longer, the rounding errors in the fastest harmonic would grow past
    a slow one."""
    L = 6
    for beta in (1.0, 4.0):
        rates = np.asarray(noisy_growth_rates(beta, 3, sigma, 4, normalisation))
        if sigma == 0:
            np.testing.assert_array_equal(rates, sphere_growth_rates(beta, 3, 4, normalisation))
        ts = jnp.linspace(0.0, 2.0 / np.abs(rates[1:]).max(), NUM_TIMES)
        for l, m in ORDERS.items():
            path = solve_sphere_continuity(perturbed_uniform_sphere_density(L, l, 1e-6, m), beta, ts, sigma=sigma,
                                           normalisation=normalisation, steps_per_save=STEPS)
            amplitude = np.asarray(path.coefficients[:, l * l + l + m])
            measured = np.polyfit(np.asarray(ts), np.log(np.abs(amplitude)), 1)[0]
            # measured <= 3e-10 relative (mean, sigma = 0.5, beta = 4): RK4 at h |lambda| <= 0.01, the O(eps)
            # nonlinearity
            assert abs(measured / rates[l] - 1) < 1e-8, (beta, l, measured, rates[l])
            # the other harmonics stay at rounding or O(eps^2)
            others = np.delete(np.asarray(path.coefficients[-1]), [0, l * l + l + m])
            assert np.abs(others).max() < 1e-10


# -- convergence ------------------------------------------------------------------------------------------------


def test_rk4_is_fourth_order_in_dt():
    # the state at t = 2 after one save interval [0, 2] (h = 0.1), two (h = 0.05) and ten (h = 0.01, the
    # reference); the remaining intervals are short and unused, so one compiled program serves the three
    L = 10
    a = bump(L)
    tail = 2.0 + 0.01 * np.arange(1, 10)
    at_two = lambda k: solve_sphere_continuity(a, 4.0, jnp.asarray(np.concatenate([np.linspace(0, 2, k + 1),
                                                                                    tail[: 10 - k]])),
                                               steps_per_save=STEPS).coefficients[k]
    reference = at_two(10)
    e_coarse, e_fine = (float(jnp.abs(at_two(k) - reference).max()) for k in (1, 2))
    order = np.log2(e_coarse / e_fine)
    # measured 3.95 (7.5e-6 -> 4.8e-7 with 10 and 20 steps to t = 2 at degree 10)
    assert 3.6 < order < 4.4 and e_fine < 1e-5, (e_coarse, e_fine, order)


def test_spectral_convergence_in_the_degree():
    """The density at t = 1 (beta = 4, softmax) from an analytic start, against degree 20: the error falls
    geometrically in L (measured 7e-3, 1e-4, 1.2e-6 at L = 6, 10, 14), so the local order
    log(e_1/e_2)/log(L_2/L_1) of an algebraic rate would stay constant and here grows."""
    start = bump(30)
    reference = solve(start, 4.0, 1.0, degree=20)
    assert float(reference.discarded) < 1e-12  # the start's content above degree 20 is at rounding
    assert float(reference.mass[-1]) == pytest.approx(1.0, abs=1e-14)
    target = sphere_density_at(reference.coefficients[-1], POINTS)
    errors, lost = {}, {}
    for L in (6, 10, 14):
        path = solve(start, 4.0, 1.0, degree=L)
        errors[L] = float(jnp.abs(sphere_density_at(path.coefficients[-1], POINTS) - target).max())
        lost[L] = float(path.discarded)
    order_low = np.log(errors[6] / errors[10]) / np.log(10 / 6)
    order_high = np.log(errors[10] / errors[14]) / np.log(14 / 10)
    assert errors[14] < 1e-5 and order_high > order_low + 3, (errors, order_low, order_high)
    # what the projection of the start removed above L is reported (measured 1.9e-4, 5.4e-8, 3e-12)
    assert 1e-5 < lost[6] and lost[6] > lost[10] > lost[14] > 0, lost


def test_a_rotated_start_gives_the_rotated_solution():
    """rho_0 o R^T evolves into rho_t o R^T. For the mean normalisation the scheme is the exact Galerkin
    truncation (no aliasing), rotation-equivariant to rounding (measured 7e-15); softmax aliases its quotient
    (measured 1.1e-6 at degree 6, 9e-8 at degree 8)."""
    L = 6
    A = RNG.normal(size=(3, 3))
    R, _ = np.linalg.qr(A)
    R *= np.sign(np.linalg.det(R))
    a0 = uniform(L) + sum(c * (perturbed_uniform_sphere_density(L, l, 1.0, m) - uniform(L))
                          for c, l, m in ((0.15, 1, 0), (0.15, 2, 1), (0.1, 3, -2)))
    grid = sphere_grid(L)
    rotated = sphere_density_at(a0, np.asarray(grid.points).reshape(-1, 3) @ R).reshape(grid.weights.shape)
    a0_rotated = sphere_density_coefficients(rotated, L)
    for normalisation, beta, t1, tol in (("mean", 4.0, 0.4, 1e-12), ("softmax", 4.0, 1.5, 1e-5)):
        one = solve(a0, beta, t1, normalisation=normalisation).coefficients[-1]
        two = solve(a0_rotated, beta, t1, normalisation=normalisation).coefficients[-1]
        moved = float(jnp.abs(sphere_density_at(one - a0, POINTS)).max())
        error = float(jnp.abs(sphere_density_at(one, POINTS @ R) - sphere_density_at(two, POINTS)).max())
        assert error < tol and moved > 0.02, (normalisation, error, moved)


# -- particles -------------------------------------------------------------------------------------------------


def test_particles_follow_the_pde():
    """n = 2000 particles drawn from rho_0 (seed 0) and moved by the project's sphere flow (RK4, the direct
    attention sum) against the PDE at degree 10: the distance D = sqrt(E_1 + E_2) of the difference of their
    degree-1 and -2 harmonic coefficients. For i.i.d. draws E D^2 = sum_{l <= 2} (2l+1)/n at t = 0, D ~ 0.063;
    the instability amplifies the fluctuations with the modes (measured 0.062 -> 0.14 by t = 2, two seeds), while
    the PDE itself moves by 0.54 in D by t = 1.6: the tolerance 0.25 (4 fluctuation sizes) separates the two."""
    L, beta, n = 10, 4.0, 2000
    a0 = uniform(L) + sum(c * (perturbed_uniform_sphere_density(L, l, 1.0, m) - uniform(L))
                          for c, l, m in ((0.3, 2, 0), (0.3, 1, 1)))
    ts = jnp.linspace(0.0, 1.6, NUM_TIMES)  # later, the depleted regions undershoot at degree 10
    pde = solve_sphere_continuity(a0, beta, ts, steps_per_save=STEPS)
    assert not bool(pde.negative)
    field = build_field("sphere", I3, I3, I3, beta=beta, stepper="ode", attention_impl="dense")
    x0 = sample_sphere_density(jax.random.key(0), a0, n)
    ys = jax.jit(lambda x: RKStepper("rk4", ts=ts, steps_per_save=5, shift=sphere_shift).solve(field, x).ys)(x0)
    particles = jax.vmap(lambda y: sphere_empirical_coefficients(y, 2))(ys)
    distance = np.sqrt(np.asarray(sphere_degree_energies(particles - pde.coefficients[:, :9]))[:, 1:].sum(axis=1))
    moved = np.sqrt(np.asarray(sphere_degree_energies(pde.coefficients[:, :9] - pde.coefficients[0, :9]))[:, 1:].sum(1))
    assert distance[0] < 0.12 and np.all(distance < 0.25), distance
    assert moved[-1] > 0.45, moved
    # the degree energies agree too (energies are quadratic: their fluctuations are O(sqrt(E_l / n)) around a
    # bias (2l+1)/n)
    energies = np.asarray(jax.vmap(lambda y: harmonic_energies(y, 2))(ys))[:, 1:]
    np.testing.assert_allclose(energies, np.asarray(pde.energies())[:, 1:3], rtol=0.25, atol=0.03)


# -- positivity, integrators, refusals ------------------------------------------------------------------------------


def test_negative_density_is_reported_not_hidden():
    # a bump concentrating under beta = 12 at degree 6: the truncated solution undershoots
    path = solve(bump(6, kappa=4.0), 12.0, 3.0)
    assert bool(path.negative) and float(path.min_density[-1]) < 0
    saved = np.asarray(jnp.min(path.density.reshape(NUM_TIMES, -1), axis=1))
    assert np.all(np.asarray(path.min_density) <= saved + 1e-15)  # the monitor sees every step, not only saves
    assert not bool(solve(bump(6, kappa=1.0), 4.0, 1.0).negative)


def test_diffrax_path_agrees_with_rk4():
    L = 4
    a = bump(L)
    ts = jnp.linspace(0.0, 1.0, 3)
    rk4 = solve_sphere_continuity(a, 4.0, ts, steps_per_save=40)
    tsit5 = solve_sphere_continuity(a, 4.0, ts, solver="tsit5", rtol=1e-10, atol=1e-12)
    assert int(tsit5.result) == 0 and float(jnp.abs(tsit5.mass - 1).max()) < 1e-14
    assert float(jnp.abs(tsit5.coefficients - rk4.coefficients).max()) < 1e-8


def _one_sentence(err):
    text = str(err.value)
    return text.endswith(".") and not any(text[i] == "." and text[i + 1] == " " and text[i + 2].isupper()
                                          for i in range(len(text) - 2))


@pytest.mark.parametrize("call, words", [
    (lambda: solve_sphere_continuity(uniform(4), -1.0, jnp.array([0.0, 1.0]), steps_per_save=4), "beta"),
    (lambda: solve_sphere_continuity(uniform(4), float("nan"), jnp.array([0.0, 1.0]), steps_per_save=4), "beta"),
    (lambda: solve_sphere_continuity(uniform(4).at[3].set(np.inf), 1.0, jnp.array([0.0, 1.0]), steps_per_save=4),
     "non-finite"),
    (lambda: solve_sphere_continuity(uniform(4), 1.0, jnp.array([0.0, np.nan]), steps_per_save=4), "ts"),
    (lambda: solve_sphere_continuity(bump(8), 4.0, jnp.array([0.0, 20.0]), steps_per_save=2), "steps_per_save"),
    (lambda: solve_sphere_continuity(bump(8), 4.0, jnp.array([0.0, 5.0]), solver="tsit5", dt=2.0), "smaller dt"),
    (lambda: solve_sphere_continuity(uniform(4), 1.0, jnp.array([0.0, 1.0])), "steps_per_save"),
    (lambda: solve_sphere_continuity(uniform(4), 1.0, jnp.array([0.0, 1.0]), steps_per_save=4, sigma=-0.1),
     "sigma"),
    (lambda: solve_sphere_continuity(uniform(4), 1.0, jnp.array([0.0, 1.0]), steps_per_save=4,
                                     normalisation="sum"), "normalisation"),
    (lambda: solve_sphere_continuity(jnp.ones(24), 1.0, jnp.array([0.0, 1.0]), steps_per_save=4), "(L+1)^2"),
    (lambda: solve_sphere_continuity(jnp.ones((5, 9)), 1.0, jnp.array([0.0, 1.0]), steps_per_save=4), "degree"),
    (lambda: solve_sphere_continuity(jnp.ones((5, 9)), 1.0, jnp.array([0.0, 1.0]), steps_per_save=4, degree=6),
     "too coarse"),
    (lambda: solve_sphere_continuity(bump(12), 1.0, jnp.array([0.0, 1.0]), steps_per_save=4, degree=4,
                                     max_discarded=1e-6), "max_discarded"),
    (lambda: solve_sphere_continuity(uniform(4), 1.0, jnp.array([0.0, 1.0]), solver="rk5"), "solver"),
    (lambda: build_field("sphere_continuity", np.eye(2), np.eye(2), np.eye(2), degree=4), "3 x 3 identity"),
    (lambda: perturbed_uniform_sphere_density(4, 5, 0.1), "at most degree"),
    (lambda: sphere_density_on_grid(uniform(6), 4), "grid_degree"),
])
def test_bad_input_is_refused_in_one_sentence(call, words):
    with pytest.raises(InputError) as err:
        call()
    assert words in str(err.value) and _one_sentence(err), str(err.value)
