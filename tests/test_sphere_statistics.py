"""attnflow.observables.sphere_gram_statistics (a k-d tree and an octree of cubes on the host, the energy from the
sphere path: no n x n matrix) against gram_statistics (the dense Gram matrix) in R^3, and the phase job's large
clouds in R^3 that read it.

Counts must be equal: every pair the octree does not settle by its boxes is tested as the dense graph tests it,
<u_i, u_j> >= threshold on the same float64 products; the clouds are random (fixed seeds) with clusters of every
size relative to the threshold's chord (larger, about equal, far smaller, coincident tokens), on a great circle,
with zero tokens, and antipodal clusters. The largest and smallest inner products are one product of two
renormalised directions: equal to the dense ones to a few units of float64 rounding (1e-15). The energy is the
sphere path's sum at the degree of max_beta (its tail below 1e-16 of the total, the kernel's tests): 1e-12 relative.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attnflow.observables._sphere_pairs as sphere_pairs
from attnflow.errors import InputError
from attnflow.observables import gram_statistics, sphere_gram_statistics


def _unit(x):
    norm = np.linalg.norm(x, axis=1, keepdims=True)
    return np.where(norm > 0, x / np.where(norm > 0, norm, 1), 0)


def _clouds():
    rng = np.random.default_rng(12)
    n = 1800
    yield "uniform", rng.normal(size=(n, 3))
    centres = _unit(rng.normal(size=(6, 3)))
    label = rng.integers(0, 6, n)
    for spread in (0.3, 0.06, 0.02, 1e-3, 1e-9):
        yield f"clusters {spread}", centres[label] + spread * rng.normal(size=(n, 3))
    angle = rng.uniform(0, 2 * np.pi, n)
    yield "great circle", np.stack([np.cos(angle), np.sin(angle), np.zeros(n)], axis=1)
    zeros = rng.normal(size=(n, 3))
    zeros[rng.choice(n, 7, replace=False)] = 0.0
    yield "zero tokens", zeros
    yield "coincident tokens", np.repeat(rng.normal(size=(45, 3)), 40, axis=0)
    # the farthest pair inside two clusters 120 degrees apart: the pruned search must split down to it
    apart = np.array([np.sin(2 * np.pi / 3), 0.0, np.cos(2 * np.pi / 3)])
    yield "clusters 120 degrees apart", np.where(label[:, None] % 2 == 0, [0.0, 0.0, 1.0], apart) + 0.05 * rng.normal(
        size=(n, 3))
    pole = np.array([0.0, 0.0, 1.0])
    yield "antipodal clusters", np.where(label[:, None] % 2 == 0, pole, -pole) + 0.01 * rng.normal(size=(n, 3))


CLOUDS = list(_clouds())


def _dense(x, beta, threshold):
    u = jnp.asarray(_unit(np.asarray(x, np.float64)))
    return gram_statistics(u @ u.T, beta, threshold)


@pytest.mark.parametrize("name,x", CLOUDS, ids=[c[0] for c in CLOUDS])
def test_the_statistics_equal_the_dense_gram_matrix(name, x):
    with jax.enable_x64(True):
        for threshold in (0.999, 0.99, 0.9):
            fast, dense = sphere_gram_statistics(jnp.asarray(x), 3.0, threshold), _dense(x, 3.0, threshold)
            for key in ("pairs_clustered", "clusters"):
                assert float(fast[key]) == float(dense[key]), (name, threshold, key)
            for key in ("ip_min", "ip_max", "ip_mean"):
                assert abs(float(fast[key]) - float(dense[key])) <= 1e-15, (name, threshold, key)
            assert float(fast["energy"]) == pytest.approx(float(dense["energy"]), rel=1e-12, abs=0)


def test_large_cubes_split_and_sliced_products_count_the_same(monkeypatch):
    # few pairs compared one by one (deeper octree levels) and tiny product batches (the finest level's slices)
    x = CLOUDS[2][1]  # clusters of about the threshold's chord
    with jax.enable_x64(True):
        dense = _dense(x, 1.0, 0.999)
        for by_pair, batch in ((1, 1 << 21), (1024, 7)):
            monkeypatch.setattr(sphere_pairs, "PAIR_BY_PAIR", by_pair)
            monkeypatch.setattr(sphere_pairs, "PAIR_BATCH", batch)
            fast = sphere_gram_statistics(jnp.asarray(x), 1.0, 0.999)
            assert float(fast["pairs_clustered"]) == float(dense["pairs_clustered"])
            assert float(fast["clusters"]) == float(dense["clusters"])


def test_traced_beta_under_jit_and_vmap_in_float32():
    x = jnp.asarray(np.stack([CLOUDS[3][1], CLOUDS[0][1]]), jnp.float32)
    betas = jnp.array([2.0, 6.0], jnp.float32)
    fast = jax.jit(jax.vmap(lambda y, b: sphere_gram_statistics(y, b, 0.99, max_beta=6.0)))(x, betas)
    for i in range(2):
        u = jnp.asarray(_unit(np.asarray(x[i], np.float64)), jnp.float32)
        dense = gram_statistics(u @ u.T, betas[i], 0.99)
        assert fast["clusters"].dtype == jnp.float32
        assert float(fast["clusters"][i]) == float(dense["clusters"])
        # the same count of pairs: its fraction may differ in the last float32 bit (a division done elsewhere)
        pairs = 1800 * 1799
        assert round(float(fast["pairs_clustered"][i]) * pairs) == round(float(dense["pairs_clustered"]) * pairs)
        # float32 inputs renormalised in float64 on the host: the products differ by float32 rounding
        for key in ("ip_min", "ip_max", "ip_mean"):
            assert abs(float(fast[key][i]) - float(dense[key])) <= 5e-7
        assert float(fast["energy"][i]) == pytest.approx(float(dense["energy"]), rel=1e-5)


def test_float64_survives_the_host_thread():
    # a float64 scope is the caller thread's; the host call must still see and return float64 numbers
    x = CLOUDS[4][1]
    with jax.enable_x64(True):
        u = jnp.asarray(_unit(x))
        got = jax.jit(lambda y: sphere_gram_statistics(y, 2.0, 0.999))(u)
        dense = gram_statistics(u @ u.T, 2.0, 0.999)
        assert got["ip_max"].dtype == jnp.float64
        assert abs(float(got["ip_max"]) - float(dense["ip_max"])) <= 1e-15
        assert abs(float(got["ip_min"]) - float(dense["ip_min"])) <= 1e-15


def test_non_finite_tokens_give_nan_not_a_count():
    x = np.array(CLOUDS[0][1][:50])
    x[3, 1] = np.nan
    with jax.enable_x64(True):
        # concrete tokens are checked up front (one sentence); inside a run they arrive traced
        with pytest.raises(InputError, match="non-finite"):
            sphere_gram_statistics(jnp.asarray(x), 2.0, 0.99)
        out = jax.jit(lambda y: sphere_gram_statistics(y, 2.0, 0.99))(jnp.asarray(x))
    for key in ("pairs_clustered", "clusters", "ip_min", "ip_max"):
        assert np.isnan(float(out[key])), key


@pytest.mark.parametrize("call,match", [
    (lambda x: sphere_gram_statistics(x[:, :2], 1.0), "tokens \\(n, 3\\)"),
    (lambda x: sphere_gram_statistics(x[:1], 1.0), "at least two"),
    (lambda x: sphere_gram_statistics(x, 1.0, 0.0), "threshold must be"),
    (lambda x: sphere_gram_statistics(x, 1.0, 1.0), "threshold must be"),
    (lambda x: sphere_gram_statistics(x, 3.0, 0.9, max_beta=2.0), "max_beta = 2 is below beta = 3"),
    (lambda x: jax.jit(lambda b: sphere_gram_statistics(x, b, 0.9))(1.0), "traced beta and no max_beta"),
])
def test_bad_input_is_one_sentence(call, match):
    with pytest.raises(InputError, match=match):
        call(jnp.asarray(CLOUDS[0][1][:20]))


def test_the_energy_is_differentiable_and_the_host_numbers_carry_zero():
    from attnflow.observables import interaction_energy

    with jax.enable_x64(True):
        x = jnp.asarray(CLOUDS[1][1][:200])
        grad = jax.grad(lambda y: sphere_gram_statistics(y, 2.0, 0.9)["energy"])(x)
        dense = jax.grad(lambda y: interaction_energy(y / jnp.linalg.norm(y, axis=1, keepdims=True), 2.0))(x)
        np.testing.assert_allclose(grad, dense, rtol=0, atol=1e-12 * float(jnp.abs(dense).max()))
        for key in ("pairs_clustered", "clusters", "ip_max"):
            assert float(jnp.abs(jax.grad(lambda y: sphere_gram_statistics(y, 2.0, 0.9)[key])(x)).max()) == 0.0
