"""attnflow.meanfield measures and distances: the O(n) / O(n log n) forms against their O(n^2)
definitions on small random clouds, and W1 on the circle against closed forms."""

import math

import jax
import numpy as np
import pytest
from scipy import special, stats

from attnflow.errors import InputError
from attnflow.meanfield import (
    circle_cluster_count,
    circle_clusters,
    circle_histogram,
    circle_w1,
    circle_w1_densities,
    circle_w1_to_density,
    fourier_coefficients,
    harmonic_energies,
    interaction_energy_fourier,
    interaction_energy_tiled,
    kernel_modes,
    sliced_w1,
    sphere_cluster_count,
    sphere_histogram,
    sphere_mmd,
    sphere_moments,
)
from attnflow.observables import clusters_above, interaction_energy

pytestmark = pytest.mark.usefixtures("x64")  # compared with float64 references at float64 tolerances

#: float64 sums of at most a few hundred O(1) terms: rounding below 1e-13 relative; 1e-11 leaves room
SUM_RTOL = 1e-11


def unit(rng, n, d):
    x = rng.normal(size=(n, d))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def tokens_of(theta):
    return np.stack([np.cos(theta), np.sin(theta)], axis=1)


def zonal(l, d, t):
    """Z_l(t) = dim(H_l) G_l(t), G_l(1) = 1: the O(n^2) definition of the degree-l energy."""
    dim = math.comb(l + d - 1, d - 1) - (math.comb(l + d - 3, d - 1) if l >= 2 else 0)
    if d == 2:
        return dim * special.eval_chebyt(l, t)
    lam = (d - 2) / 2
    return dim * special.eval_gegenbauer(l, lam, t) / special.eval_gegenbauer(l, lam, 1.0)


def test_kernel_modes_are_the_scaled_bessel_functions(rng):
    for beta in rng.uniform(0.1, 40.0, size=3):
        ours = np.asarray(kernel_modes(beta, 40))
        # the trapezoid rule on 512 nodes of an analytic periodic function: exact to rounding of
        # terms <= 1, i.e. ~1e-16 absolute; 1e-14 leaves room for scipy's own rounding
        np.testing.assert_allclose(ours, special.ive(np.arange(41), beta), rtol=0, atol=1e-14)


def test_fourier_coefficients_match_the_direct_sum_in_any_blocking(rng):
    theta = rng.uniform(0, 2 * np.pi, size=37)
    w = rng.uniform(0.1, 1.0, size=37)
    direct = (w / w.sum()) @ np.exp(-1j * np.outer(theta, np.arange(9)))
    # 8 blocks of 5 particles, the last one padded with zero weights
    np.testing.assert_allclose(fourier_coefficients(theta, 8, w, block=5), direct, rtol=0, atol=SUM_RTOL)
    # tokens of any norm give the same angles (and one block)
    np.testing.assert_allclose(fourier_coefficients(3.0 * tokens_of(theta), 8, w), direct, rtol=0, atol=SUM_RTOL)


@pytest.mark.parametrize("d", [2, 5])  # the Chebyshev and a Gegenbauer zonal harmonic
def test_harmonic_energies_match_the_zonal_double_sum(rng, d):
    x = unit(rng, 40, d) + np.eye(d)[0]  # a biased cloud: every degree carries energy
    w = rng.uniform(0.2, 1.0, size=40)
    x = x / np.linalg.norm(x, axis=1, keepdims=True)
    gram, ww = x @ x.T, np.outer(w, w) / w.sum() ** 2
    expected = [np.sum(ww * zonal(l, d, gram)) for l in range(4)]
    ours = np.asarray(harmonic_energies(x, 3, w, block=16))
    # energies are O(1): float64 rounding of the moment sums, 1e-11 absolute
    np.testing.assert_allclose(ours, expected, rtol=0, atol=SUM_RTOL)
    assert min(expected[1:]) > 1e-3  # the comparison is not between zeros
    m, M = sphere_moments(x, w)
    np.testing.assert_allclose(m, (w / w.sum()) @ x, rtol=0, atol=SUM_RTOL)
    np.testing.assert_allclose(M, (x * (w / w.sum())[:, None]).T @ x, rtol=0, atol=SUM_RTOL)
    if d == 2:  # on the circle E_l = 2 |mu_l|^2
        c = np.asarray(fourier_coefficients(x, 3, w))
        np.testing.assert_allclose(ours[1:], 2 * np.abs(c[1:]) ** 2, rtol=0, atol=SUM_RTOL)


def test_harmonic_energies_on_s2_reach_any_degree_and_match_the_zonal_double_sum(rng):
    """On S^2 the energies of degree > 3 come from the harmonics (O(n L^2), 4096-token blocks): against
    sum_ij w_i w_j (2l + 1) P_l(<x_i, x_j>) to float64 rounding, with 5000 tokens (two blocks) so the blocking
    is exercised; the moment formula and the harmonics agree on degrees 0..3."""
    n = 5000
    x = unit(rng, n, 3) + 0.4 * np.eye(3)[2]  # a biased cloud: every degree carries energy
    x = x / np.linalg.norm(x, axis=1, keepdims=True)
    w = rng.uniform(0.2, 1.0, size=n)
    gram, ww = np.clip(x @ x.T, -1, 1), np.outer(w, w) / w.sum() ** 2
    expected = [np.sum(ww * (2 * l + 1) * special.eval_legendre(l, gram)) for l in range(13)]
    ours = np.asarray(harmonic_energies(x, 12, w))  # weights normalised, as for the moments
    np.testing.assert_allclose(ours, expected, rtol=0, atol=SUM_RTOL)
    assert min(expected[1:]) > 1e-4  # the comparison is not between zeros
    np.testing.assert_allclose(ours[:4], np.asarray(harmonic_energies(x, 3, w)), rtol=0, atol=SUM_RTOL)
    with pytest.raises(InputError, match="at most 3 for tokens in d = 4"):
        harmonic_energies(unit(rng, 10, 4), 4)


def test_histograms_match_numpy(rng):
    theta = rng.uniform(-7, 7, size=200)
    G = 12
    h = 2 * np.pi / G
    # numpy's histogram of the angles moved by half a bin: bin g = [theta_g - h/2, theta_g + h/2)
    expected, _ = np.histogram(np.mod(theta + h / 2, 2 * np.pi), bins=G, range=(0, 2 * np.pi))
    np.testing.assert_allclose(circle_histogram(theta, G), expected / 200, rtol=0, atol=1e-15)
    x = unit(rng, 300, 3)
    phi = np.mod(np.arctan2(x[:, 1], x[:, 0]), 2 * np.pi)
    counts, _, _ = np.histogram2d(x[:, 2], phi, bins=(6, 8), range=((-1, 1), (0, 2 * np.pi)))
    np.testing.assert_allclose(sphere_histogram(x, 6, 8), counts / 300, rtol=0, atol=1e-15)


def test_energies_match_the_dense_definition_and_their_beta_gradient_a_difference(rng):
    x = unit(rng, 150, 3)
    for beta in (0.5, 7.0):  # 150 = 4 tiles of 32 pairs of rows, the last one padded
        np.testing.assert_allclose(interaction_energy_tiled(x, beta, chunk_size=32), interaction_energy(x, beta),
                                   rtol=SUM_RTOL)
    theta = rng.uniform(0, 2 * np.pi, size=120)
    for beta in (0.3, 9.0):
        np.testing.assert_allclose(interaction_energy_fourier(theta, beta), interaction_energy(tokens_of(theta), beta),
                                   rtol=SUM_RTOL)
    # d/d beta (reverse mode through the Bessel quadrature and the modes) against a central difference;
    # the difference's error is E''' h^2 / 6 ~ 1e-9 relative at h = 1e-4 (E and its derivatives are
    # O(e^beta) alike) plus rounding 1e-16 / h ~ 1e-12: 1e-7 relative bounds both
    energy = lambda b: interaction_energy_fourier(theta, b)
    beta, step = 2.5, 1e-4
    grad = float(jax.grad(energy)(beta))
    diff = (float(energy(beta + step)) - float(energy(beta - step))) / (2 * step)
    assert abs(grad - diff) <= 1e-7 * abs(diff), (grad, diff)


def test_fourier_energy_refuses_too_few_modes():
    with pytest.raises(InputError, match="num_modes"):
        interaction_energy_fourier(np.zeros(3), 200.0, num_modes=16)


#: the O(n^2) reference count, compiled once (its threshold is traced)
graph_count = jax.jit(clusters_above)


def test_circle_clusters_recover_constructed_positions_masses_and_gaps(rng):
    """Clusters of known centres (one straddling the cut at 0 = 2 pi), sizes and half-widths: positions to the
    clusters' own circular means (exactly what is computed, to rounding), masses exactly, gaps summing to 2 pi,
    the count equal to circle_cluster_count's."""
    centres = np.array([6.25, 1.0, 2.2, 4.0])  # the first straddles 0
    sizes = np.array([300, 100, 250, 350])
    theta = np.concatenate([c + rng.uniform(-0.05, 0.05, s) for c, s in zip(centres, sizes)])
    out = circle_clusters(theta[rng.permutation(theta.size)], 0.3)
    assert out["count"] == 4 == int(circle_cluster_count(theta, 0.3))
    order = np.argsort(np.mod(centres, 2 * np.pi))
    means = [np.angle(np.mean(np.exp(1j * theta[np.sum(sizes[:i]):np.sum(sizes[:i + 1])]))) % (2 * np.pi)
             for i in range(4)]
    np.testing.assert_allclose(out["positions"], np.asarray(means)[order], rtol=0, atol=1e-12)
    np.testing.assert_array_equal(out["masses"], (sizes / sizes.sum())[order])
    assert abs(out["gaps"].sum() - 2 * np.pi) < 1e-12 and out["smallest_gap"] == pytest.approx(2 * np.pi - 6.25 + 1.0, abs=0.02)
    assert 0.04 < out["spread"] <= 0.06  # half-width 0.05 about the centre; the mean sits within ~0.003 of it
    spread_out = circle_clusters(np.linspace(0, 2 * np.pi, 1000, endpoint=False), 0.3)
    assert spread_out["count"] == 0 and math.isnan(spread_out["smallest_gap"])


def test_circle_cluster_count_is_the_graph_count():
    for seed in range(3):
        rng = np.random.default_rng(seed)
        centres = rng.uniform(0, 2 * np.pi, size=5)
        theta = np.concatenate([c + 0.05 * rng.normal(size=12) for c in centres] + [rng.uniform(0, 2 * np.pi, 6)])
        x = tokens_of(theta)
        counts = []
        for gap in (0.02, 0.1, 0.4, 1.0):
            ours = int(circle_cluster_count(theta, gap))
            assert ours == int(graph_count(x, np.cos(gap))), (seed, gap)
            counts.append(ours)
        assert len(set(counts)) > 1  # the thresholds give different answers, so the comparison bites


def test_sphere_cluster_count_matches_the_graph_for_separated_clusters():
    rng = np.random.default_rng(7)
    n = 120  # one cloud size for every case: one compiled program per function
    for num in (3, 5):
        while True:  # cluster centres at least 1.2 rad apart (more than two polar-row cells)
            centres = unit(rng, num, 3)
            if (centres @ centres.T - 2 * np.eye(num)).max() < np.cos(1.2):
                break
        x = centres[np.arange(n) % num] + 0.01 * rng.normal(size=(n, 3))
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        assert int(sphere_cluster_count(x, 0.02)) == int(graph_count(x, np.cos(0.2))) == num
    # a stray particle (1/120 < min_mass) is no cluster for the histogram count; the graph counts it
    x[0] = -centres[0]
    assert int(sphere_cluster_count(x, 0.02)) == num and int(graph_count(x, np.cos(0.2))) == num + 1


N_W1 = 24  # one cloud size for the W1 tests: one compiled program per function


def test_w1_closed_forms(rng):
    # a point mass (24 coinciding particles) against the uniform density: pi / 2 (the piecewise-constant
    # cells are exact for a constant); rounding of sums of 24 + 7 terms, < 1e-13
    here = np.full(N_W1, rng.uniform(0, 2 * np.pi))
    assert abs(float(circle_w1_to_density(here, np.ones(7))) - np.pi / 2) < 1e-13
    # two point masses at angular distance delta (also the short way round across 0)
    for a, delta in ((1.0, 0.7), (6.0, 1.1)):
        assert abs(float(circle_w1(np.full(N_W1, a), np.full(N_W1, a + delta))) - delta) < 1e-13
    # a point mass at the centre theta_3 of cell 3 against all mass spread over that cell: h / 4
    cell = np.zeros(7)
    cell[3] = 1.0
    h = 2 * np.pi / 7
    assert abs(float(circle_w1_to_density(np.full(N_W1, 3 * h), cell)) - h / 4) < 1e-13
    # n equally spaced particles against the uniform density: pi / (2 n)
    theta = (np.arange(N_W1) + 0.5) * 2 * np.pi / N_W1 + rng.uniform(0, 1)
    assert abs(float(circle_w1_to_density(theta, np.ones(7))) - np.pi / (2 * N_W1)) < 1e-13
    # a density 1 + a cos(theta) on G points against its shift by s on H points: (4 a / pi) sin(s / 2);
    # the piecewise-constant cells match a smooth density to O(h^2), so the error falls ~4 times when
    # both grids are refined twice (measured -2.2e-4 at (48, 64), -5.3e-5 at (96, 128))
    a, s = 0.7, 0.9
    exact = 4 * a / np.pi * np.sin(s / 2)
    errors = []
    for G, H in ((48, 64), (96, 128)):
        on = lambda size, shift: 1 + a * np.cos(2 * np.pi * np.arange(size) / size - shift)
        errors.append(abs(float(circle_w1_densities(on(G, 0.0), on(H, s))) - exact))
    assert errors[1] < 1e-4 and 3.5 < errors[0] / errors[1] < 4.5, errors


def test_circle_w1_is_the_best_cyclic_matching(rng):
    """Between two clouds of n equal masses the optimal plan on the circle matches the sorted points
    after a cyclic shift: min over shifts of the mean geodesic distance, an O(n^2) definition."""
    for _ in range(2):
        a, b = np.sort(rng.uniform(0, 2 * np.pi, N_W1)), np.sort(rng.uniform(0, 2 * np.pi, N_W1))
        best = min(np.mean(np.minimum(np.abs(a - np.roll(b, k)), 2 * np.pi - np.abs(a - np.roll(b, k))))
                   for k in range(N_W1))
        assert abs(float(circle_w1(a, b)) - best) < 1e-12  # rounding of sums of 48 terms
    # weights: a cloud against itself is at distance 0, against itself with permuted masses it is not
    w = rng.uniform(0.2, 1.0, N_W1)
    assert abs(float(circle_w1(a, a, w, w))) < 1e-14
    assert float(circle_w1(a, a, w, w[::-1])) > 1e-3


def test_mmd_and_sliced_w1_match_their_definitions(rng):
    x, y = unit(rng, 40, 4), unit(rng, 30, 4) + 0.5
    y /= np.linalg.norm(y, axis=1, keepdims=True)
    kappa = 3.0
    k = lambda a, b: np.exp(kappa * (a @ b.T - 1))
    mmd2 = k(x, x).mean() + k(y, y).mean() - 2 * k(x, y).mean()
    assert mmd2 > 1e-3  # the clouds differ
    np.testing.assert_allclose(float(sphere_mmd(x, y, kappa, chunk_size=16)), np.sqrt(mmd2), rtol=1e-10)
    u = rng.normal(size=(5, 4))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    expected = np.mean([stats.wasserstein_distance(x @ d, y @ d) for d in u])
    np.testing.assert_allclose(float(sliced_w1(x, y, u)), expected, rtol=1e-12)


def test_bad_input_gets_one_sentence():
    with pytest.raises(InputError, match="points"):
        fourier_coefficients(np.zeros((4, 3)), 2)
    with pytest.raises(InputError, match="weights"):
        circle_histogram(np.zeros(4), 3, weights=-np.ones(4))
    with pytest.raises(InputError, match="max_gap"):
        circle_cluster_count(np.zeros(4), 4.0)
    with pytest.raises(InputError, match="S\\^2"):
        sphere_histogram(np.ones((4, 4)), 2, 2)
