"""attnflow.observables.circle_gram_statistics (O(n log n + n K), no n x n matrix) against gram_statistics (the dense
Gram matrix): random clouds, clustered clouds with tight clusters, clouds with near-antipodal pairs, n = 2.

Counts must be equal (the clouds here have no pair within rounding of the threshold's angle: checked); the inner
products and the energy agree to rounding: the inner products are the same products of the same numbers (the mean
from the sum of the directions: n u relative), the energy a Fourier series with K = fourier_modes(beta) terms, each
bounded by the diagonal's n^2 (a few K n^2 u against a total of at least n^2 / sqrt(2 pi beta)): 1e-12 relative in
float64, 1e-4 in float32.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnflow.errors import InputError
from attnflow.kernels.fourier import fourier_modes
from attnflow.observables import circle_gram_statistics, directions, gram_statistics

pytestmark = pytest.mark.usefixtures("x64")

KEYS = ("pairs_clustered", "clusters", "energy", "ip_min", "ip_mean", "ip_max")


def uniform(seed, n):
    return np.random.default_rng(seed).normal(size=(n, 2)) * np.random.default_rng(seed + 1).uniform(0.5, 2, (n, 1))


def clustered(seed, n, k, spread):
    rng = np.random.default_rng(seed)
    centres = rng.uniform(0, 2 * np.pi, k)
    th = centres[rng.integers(0, k, n)] + spread * rng.normal(size=n)
    return np.stack([np.cos(th), np.sin(th)], axis=1)


def margin(x, threshold) -> float:
    """The smallest distance of any pair's angle to the threshold's angle (the counts may differ below rounding)."""
    u = np.asarray(directions(jnp.asarray(x)))
    angles = np.arccos(np.clip(u @ u.T, -1, 1))
    return float(np.abs(angles - np.arccos(threshold))[~np.eye(len(u), dtype=bool)].min())


def compare(x, beta, threshold, dtype=jnp.float64, rtol=1e-12):
    x = jnp.asarray(x, dtype)
    u = directions(x)
    fast = circle_gram_statistics(x, beta, threshold, modes=fourier_modes(beta, dtype))
    dense = gram_statistics(u @ u.T, beta, threshold)
    assert margin(x, threshold) > 1e-9
    assert float(fast["clusters"]) == float(dense["clusters"])
    assert float(fast["pairs_clustered"]) == float(dense["pairs_clustered"])
    for key in ("energy", "ip_min", "ip_mean", "ip_max"):
        a, b = float(fast[key]), float(dense[key])
        assert np.isfinite(a) and abs(a - b) <= rtol * max(abs(b), 1.0), (key, a, b)
    assert all(fast[k].dtype == dtype for k in KEYS)
    return fast


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_uniform_clouds_equal_the_dense_statistics(seed):
    for n, beta, threshold in ((2, 1.0, 0.5), (7, 3.0, 0.9), (400, 2.0, 0.999), (1500, 20.0, 0.99)):
        compare(uniform(seed, n), beta, threshold)


@pytest.mark.parametrize("seed", [3, 4])
def test_clustered_clouds_equal_the_dense_statistics(seed):
    for k, spread in ((1, 1e-4), (3, 1e-3), (7, 5e-3)):
        out = compare(clustered(seed, 600, k, spread), 9.0, 0.999)
        assert 1 <= float(out["clusters"]) <= k


def test_antipodal_pairs_and_float32():
    th = np.concatenate([np.linspace(0, np.pi, 50, endpoint=False) + 0.003, np.linspace(np.pi, 2 * np.pi, 37)])
    x = np.stack([np.cos(th), np.sin(th)], axis=1)
    out = compare(x, 4.0, 0.95)
    assert float(out["ip_min"]) < -0.999
    compare(uniform(5, 500), 4.0, 0.99, jnp.float32, rtol=1e-4)


def test_jit_and_vmap_over_clouds_and_beta():
    xs = jnp.asarray(np.stack([uniform(s, 300) for s in range(3)]))
    betas = jnp.array([1.0, 5.0, 12.0])
    K = fourier_modes(12.0)
    batched = jax.jit(jax.vmap(lambda x, b: circle_gram_statistics(x, b, 0.99, modes=K)))(xs, betas)
    for i in range(3):
        one = circle_gram_statistics(xs[i], float(betas[i]), 0.99, modes=K)
        for key in KEYS:
            assert float(batched[key][i]) == pytest.approx(float(one[key]), rel=1e-13)


def test_bad_input_is_refused_in_one_sentence():
    for call, words in ((lambda: circle_gram_statistics(np.ones((5, 3)), 1.0, modes=4), r"\(n, 2\)"),
                        (lambda: circle_gram_statistics(np.ones((1, 2)), 1.0, modes=4), "at least two"),
                        (lambda: circle_gram_statistics(np.ones((4, 2)), 1.0, 1.5, modes=4), "threshold"),
                        (lambda: circle_gram_statistics(np.ones((4, 2)), 1.0, modes=-1), "modes")):
        with pytest.raises(InputError, match=words):
            call()
