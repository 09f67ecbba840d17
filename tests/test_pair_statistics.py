"""Pair statistics of a cloud (attnflow.observables: pairs_clustered, clusters_above,
interaction_energy, span_dimension, inner_product_range, connected_components) against hand-built
configurations and an independent float64 reference (NumPy / SciPy) on random clouds."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.sparse.csgraph import connected_components as scipy_components

from attnflow.observables import (
    close_pairs,
    cluster_labels,
    clusters_above,
    connected_components,
    count_components,
    inner_product_range,
    interaction_energy,
    pairs_clustered,
    similar_pairs,
    span_dimension,
)

pytestmark = pytest.mark.usefixtures("x64")


def _sphere(rng, n, d):
    x = rng.standard_normal((n, d))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _clustered_cloud(rng, sizes, d, spread=1e-3):
    """Tokens on S^{d-1} in len(sizes) tight groups around random, well-separated centres."""
    centres = _sphere(rng, len(sizes), d)
    x = np.concatenate([c + spread * rng.standard_normal((k, d)) for c, k in zip(centres, sizes)])
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_hand_built_groups_give_their_counts_fractions_and_energy():
    rng = np.random.default_rng(0)
    sizes = (5, 3, 1)
    x = _clustered_cloud(rng, sizes, d=3)
    gram = x @ x.T
    assert np.min([gram[i, j] for i in range(5) for j in range(5)]) > 0.999  # the groups are tight
    n = sum(sizes)
    assert int(clusters_above(x)) == 3
    # clustered ordered pairs: k(k-1) inside each group, none across (the centres are far apart)
    want = sum(k * (k - 1) for k in sizes) / (n * (n - 1))
    assert float(pairs_clustered(x)) == pytest.approx(want, abs=1e-12)
    beta = 1.7
    energy = np.exp(beta * gram).sum() / (2 * beta * n**2)
    assert float(interaction_energy(x, beta)) == pytest.approx(energy, rel=1e-12)
    off = gram[~np.eye(n, dtype=bool)]
    np.testing.assert_allclose(np.asarray(inner_product_range(x)), [off.min(), off.max()], rtol=0, atol=1e-14)


def test_components_are_exact_when_the_relation_is_not_transitive():
    # a chain on the circle, consecutive tokens 0.03 rad apart: neighbours are joined
    # (cos 0.03 = 0.99955 >= 0.999), tokens two apart are not (cos 0.06 = 0.9982 < 0.999)
    angles = 0.03 * np.arange(6)
    x = np.stack([np.cos(angles), np.sin(angles)], axis=1)
    adjacent = np.asarray(similar_pairs(x))
    assert adjacent[0, 1] and not adjacent[0, 2]
    assert int(clusters_above(x)) == 1  # one component although the graph is not transitive
    # the rank of the thresholded Gram matrix would say otherwise
    assert np.linalg.matrix_rank(adjacent.astype(float)) > 1


@pytest.mark.parametrize("seed", range(4))
def test_components_match_scipy_on_random_graphs(seed):
    rng = np.random.default_rng(seed)
    n = 40
    a = rng.random((n, n)) < 0.04
    a = a | a.T
    want_count, want = scipy_components(a, directed=False)
    labels = np.asarray(connected_components(jnp.asarray(a)))
    assert int(count_components(jnp.asarray(a))) == want_count
    # same partition, and each label is the smallest index of its component
    for c in range(want_count):
        members = np.flatnonzero(want == c)
        assert set(labels[members]) == {members.min()}


def test_distance_graph_in_rd_matches_cluster_labels_with_a_fixed_radius():
    rng = np.random.default_rng(5)
    x = np.concatenate([rng.normal(size=(4, 3)) * 0.01 + 3 * c for c in np.eye(3)])
    radius = 0.2
    adjacent = np.asarray(close_pairs(x, radius))
    count, _ = scipy_components(adjacent, directed=False)
    labels = np.asarray(cluster_labels(x, rel_tol=1.0, scale=radius))  # |y_i - y_j| <= 1.0 * radius
    assert count == 3 and len(set(labels.tolist())) == 3
    assert int(count_components(jnp.asarray(adjacent))) == 3


def test_span_dimension_counts_directions_at_a_fixed_relative_scale():
    rng = np.random.default_rng(2)
    basis = np.linalg.qr(rng.standard_normal((6, 6)))[0][:, :3]
    x = rng.standard_normal((20, 3)) @ basis.T  # 20 tokens spanning a 3-d subspace of R^6
    assert int(span_dimension(x)) == 3
    # a perturbation far below the tolerance (1e-6 of the trace) does not add a dimension ...
    assert int(span_dimension(x + 1e-9 * rng.standard_normal(x.shape))) == 3
    # ... one well above it does
    assert int(span_dimension(x + 1e-2 * rng.standard_normal(x.shape))) == 6
    assert int(span_dimension(np.zeros((4, 3)))) == 0


def test_energy_is_inf_not_a_wrong_number_when_it_overflows():
    x = np.array([[1.0, 0.0], [1.0, 0.0]], np.float32)
    assert np.isfinite(float(interaction_energy(x, 80.0)))  # e^80 / 320 fits in float32
    assert float(interaction_energy(x, 200.0)) == np.inf  # e^200 does not


def test_statistics_vmap_and_jit_over_a_batch():
    rng = np.random.default_rng(3)
    clouds = np.stack([_clustered_cloud(rng, (3, 3), 3), _sphere(rng, 6, 3)])
    got = jax.jit(jax.vmap(lambda c: (clusters_above(c), pairs_clustered(c), span_dimension(c))))(clouds)
    for b in range(2):
        assert int(got[0][b]) == int(clusters_above(clouds[b]))
        assert float(got[1][b]) == float(pairs_clustered(clouds[b]))
        assert int(got[2][b]) == int(span_dimension(clouds[b]))
    assert int(got[0][0]) == 2


def test_one_token_has_no_pairs():
    x = np.array([[1.0, 0.0]])
    assert float(pairs_clustered(x)) == 0.0 and int(clusters_above(x)) == 1
    assert np.all(np.isnan(np.asarray(inner_product_range(x))))
