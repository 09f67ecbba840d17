"""sphere_clusters: exact single-linkage clusters on S^{d-1} without an n x n graph, against the O(n^2) definition
(flood fill of <u_i, u_j> >= cos(delta)) and against cluster_geometry; large clouds; bad input."""

import itertools
import math

import numpy as np
import pytest

from attnflow import InputError
from attnflow.observables import cluster_geometry, sphere_clusters
from reference import ref_components


def _definition(u, delta):
    """Labels of the components of <u_i, u_j> >= cos(delta), numbered in the order of their first token."""
    return ref_components(u @ u.T >= math.cos(delta))


def _cloud(rng, n, d, k, width, scale=1.0):
    centres = rng.standard_normal((k, d))
    x = centres[rng.integers(0, k, n)] / np.linalg.norm(centres, axis=1)[:1] + width * rng.standard_normal((n, d))
    return scale * x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.mark.parametrize("d", [2, 3, 4])
@pytest.mark.parametrize("kind", ["clustered", "spread", "near_threshold"])
def test_sphere_clusters_equal_the_definition(d, kind):
    rng = np.random.default_rng({"clustered": 0, "spread": 1, "near_threshold": 2}[kind] + 10 * d)
    if kind == "clustered":
        x, delta = _cloud(rng, 400, d, 6, 0.02), 0.1
    elif kind == "spread":
        x, delta = _cloud(rng, 300, d, 1, 10.0), 0.35
    else:  # many pairs close to the threshold: chains that link or not by a hair
        x = _cloud(rng, 300, d, 3, 0.15)
        gaps = np.arccos(np.clip((x @ x.T)[np.triu_indices(300, 1)], -1, 1))
        delta = float(np.median(np.sort(gaps)[:600]))
    got = sphere_clusters(2.5 * x, delta)          # any length: the directions count
    want = _definition(x, delta)
    assert got["count"] == want.max() + 1
    assert (got["labels"] == want).all()
    ref = cluster_geometry(x, math.cos(delta))
    assert (ref["labels"] == want).all()
    np.testing.assert_allclose(got["positions"], ref["positions"], atol=1e-12)
    np.testing.assert_allclose(got["masses"], ref["masses"])
    assert got["spread"] == pytest.approx(ref["spread"], abs=1e-9)
    if got["count"] >= 2:
        assert got["smallest_gap"] == pytest.approx(ref["smallest_gap"], abs=1e-9)
    assert got["stray"] == pytest.approx(0.0)


def test_sphere_clusters_at_large_n_with_strays_and_min_mass():
    rng = np.random.default_rng(5)
    centres = rng.standard_normal((7, 3))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    while min(np.arccos(np.clip(a @ b, -1, 1)) for a, b in itertools.combinations(centres, 2)) < 0.3:
        centres = rng.standard_normal((7, 3))
        centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    n = 100_000
    x = centres[np.arange(n) % 7] + 1e-3 * rng.standard_normal((n, 3))
    far = rng.standard_normal((40, 3))   # stray tokens, each alone unless it falls near a cluster
    x = np.concatenate([x, far])
    got = sphere_clusters(x, 0.02)
    big = np.sort(got["masses"])[-7:]
    assert got["count"] >= 7 and np.all(big > 0.1)
    kept = sphere_clusters(x, 0.02, min_mass=0.01)
    assert kept["count"] == 7 and kept["stray"] == pytest.approx(1 - kept["masses"].sum())
    assert 0 < kept["stray"] <= 40 / (n + 40) + 1e-12 and (kept["labels"][:n] >= 0).all()
    np.testing.assert_allclose(np.sort(kept["positions"] @ centres.T, axis=1)[:, -1], 1.0, atol=1e-5)
    smallest = min(np.arccos(np.clip(a @ b, -1, 1)) for a, b in itertools.combinations(centres, 2))
    assert kept["smallest_gap"] == pytest.approx(smallest, abs=1e-4)


def test_sphere_clusters_refuses_bad_input():
    for bad, words in ((np.array([[1.0, np.nan]]), "finite"), (np.zeros((2, 3)), "nonzero"),
                       (np.zeros((0, 3)), "tokens"), (np.ones((3, 1)), "tokens")):
        with pytest.raises(InputError, match=words):
            sphere_clusters(bad, 0.1)
    for gap in (0.0, math.pi, -1.0):
        with pytest.raises(InputError, match="max_gap"):
            sphere_clusters(np.eye(3), gap)
    with pytest.raises(InputError, match="min_mass"):
        sphere_clusters(np.eye(3), 0.1, min_mass=2.0)
    one = sphere_clusters(np.array([[1.0, 0, 0], [1.0, 0.001, 0]]), 0.1)
    assert one["count"] == 1 and math.isnan(one["smallest_gap"])


@pytest.mark.parametrize("d", [2, 3, 5])
def test_pairs_just_beyond_the_gap_stay_apart_and_just_within_join(d):
    # 300 pairs far apart from each other; in each, the second token at 1.02 delta (apart) or 0.98 delta (joined)
    rng = np.random.default_rng(20 + d)
    delta = 0.01
    a = rng.standard_normal((300, d))
    a /= np.linalg.norm(a, axis=1, keepdims=True)
    t = rng.standard_normal((300, d))
    t -= np.sum(t * a, axis=1, keepdims=True) * a
    t /= np.linalg.norm(t, axis=1, keepdims=True)
    for factor, pairs_join in ((1.02, False), (0.98, True)):
        b = np.cos(factor * delta) * a + np.sin(factor * delta) * t
        x = np.concatenate([a, b])
        want = _definition(x, delta)
        got = sphere_clusters(x, delta)
        assert (got["labels"] == want).all()
        assert (got["labels"][:300] == got["labels"][300:]).all() == pairs_join
