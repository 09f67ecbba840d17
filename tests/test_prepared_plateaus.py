"""Metastable plateaus of starts already made of clusters: every state timed from t = 0, every plateau listed,
the cluster geometry at each plateau's start; cluster_geometry against its O(n^2) definition."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnflow import InputError
from attnflow.dynamics import sphere_flow
from attnflow.integrate import EulerStepper, sphere_shift
from attnflow.meanfield import circle_clusters
from attnflow.observables import (clusters_above, cluster_geometry, first_plateaus, metastable_states,
                                  plateau_geometry, plateau_table, plateaus)
from reference import ref_components


def _four_clusters(m=8, jitter=1e-3, seed=0):
    """4 tight clusters of m tokens on the circle, gaps 0.85, 1.5, 1.0 (and the rest of 2 pi)."""
    centres = np.array([0.0, 0.85, 2.35, 3.35])
    th = np.repeat(centres, m) + jitter * np.random.default_rng(seed).standard_normal(4 * m)
    return centres, np.stack([np.cos(th), np.sin(th)], 1)


def test_prepared_four_cluster_start_times_every_state():
    # the flow on the circle at beta = 20: the closest pair (gap 0.85) merges first, then the pair 1.0 apart
    centres, x0 = _four_clusters()
    with jax.enable_x64(True):
        eye = jnp.eye(2, dtype=jnp.float64)
        traj = EulerStepper(0.1, 20000, shift=sphere_shift, save_every=100).solve(
            sphere_flow(eye, eye, eye, 20.0), jnp.asarray(x0))
        states = np.asarray(traj.ys)
        counts = np.asarray(jax.vmap(clusters_above)(traj.ys))
    t = np.asarray(traj.ts)
    found = [(p.count, p.start, p.censored) for p in plateaus(t, counts, prepared=True)]
    assert [c for c, _, _ in found] == [4, 3, 2] and found[0][1] == 0.0 and found[-1][2]
    first_merge, second_merge = found[1][1], found[2][1]
    assert 20 <= first_merge <= 150 and 200 <= second_merge <= 1000   # measured: 50 and 390
    # the rule for random starts sees only the state after the count has halved (4 -> 2)
    assert [(p.count, p.start) for p in plateaus(t, counts)] == [(2, second_merge)]
    # geometry at each plateau's start: the clusters the counts saw, masses of 8 tokens, the closest gap
    table = plateau_table(t, counts, prepared=True)
    geo = plateau_geometry(states, table)
    assert [g["count"] for g in geo] == [4, 3, 2] == table["count"].tolist()
    assert geo[0]["masses"].tolist() == [0.25] * 4
    assert sorted(geo[1]["masses"].tolist()) == [0.25, 0.25, 0.5]
    assert abs(geo[0]["smallest_gap"] - 0.85) < 0.01   # tokens moved little before the first merge
    assert geo[0]["spread"] < 0.01


def test_prepared_rule_measures_age_from_the_first_checkpoint():
    # a prepared start at t0 = 100: the 3-cluster state lasts 110 >= r (150 - 100) but not >= r 150
    t = np.arange(100.0, 1000.0, 10.0)
    counts = np.r_[[4] * 5, [3] * 11, [2] * (len(t) - 16)]
    assert [(p.count, p.start) for p in plateaus(t, counts, prepared=True)] == [(4, 100.0), (3, 150.0), (2, 260.0)]
    r = first_plateaus(t, counts[None], prepared=True)
    assert r["count"].tolist() == [4] and r["start"].tolist() == [100.0] and r["merges"].tolist() == [2]
    assert r["truncation"].tolist() == [0.0]
    assert metastable_states(counts, prepared=True).all()
    assert not metastable_states(counts)[:16].any()


def test_plateau_table_lists_every_plateau_in_order():
    t = np.arange(1.0, 101.0)
    counts = np.stack([np.r_[[9] * 3, [4] * 10, [3] * 30, [2] * 57],     # gathered at t = 4 (4 <= 9 / 2)
                       np.r_[[8] * 50, [1] * 50],                        # never metastable
                       np.r_[[6] * 2, [3] * 98]])
    tab = plateau_table(t, counts)
    assert tab["system"].tolist() == [0, 0, 0, 2] and tab["index"].tolist() == [0, 1, 2, 0]
    assert tab["count"].tolist() == [4, 3, 2, 3] and tab["start"].tolist() == [4.0, 14.0, 44.0, 3.0]
    assert tab["censored"].tolist() == [False, False, True, True]
    np.testing.assert_allclose(tab["lifetime"], [10.0, 30.0, 56.0, 97.0])
    # the first of each system is first_plateaus'
    first = first_plateaus(t, counts)
    assert first["start"][0] == tab["start"][0] and first["start"][2] == tab["start"][3]
    assert np.isnan(first["start"][1])


def test_plateau_timing_on_a_constructed_large_n_trajectory():
    # 2 x 10^4 tokens on the circle in 4 clusters whose centres are moved by hand: clusters 0 and 1 meet at
    # t = 40, then (0+1) and 2 at t = 300; checkpoints every 10; counted with the O(n log n) circle rule
    n, rng = 20_000, np.random.default_rng(3)
    label = rng.integers(0, 4, n)
    offsets = 1e-3 * rng.standard_normal(n)
    t = np.arange(0.0, 1000.0, 10.0)

    def centres(time):
        c = np.array([0.0, 1.0, 2.5, 4.0])
        c[1] = 1.0 if time < 40 else 0.0
        if time >= 300:
            c[2] = 0.0
        return c

    counts = np.array([circle_clusters(centres(s)[label] + offsets, 0.1)["count"] for s in t])
    tab = plateau_table(t, counts[None], prepared=True)
    assert tab["count"].tolist() == [4, 3, 2] and tab["start"].tolist() == [0.0, 40.0, 300.0]
    assert tab["censored"].tolist() == [False, False, True]


@pytest.mark.parametrize("d", [2, 3])
def test_cluster_geometry_against_its_definition(d):
    rng = np.random.default_rng(10 + d)
    centres = rng.standard_normal((5, d))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    x = centres[rng.integers(0, 5, 60)] + 0.01 * rng.standard_normal((60, d))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    theta = 0.99
    g = cluster_geometry(x, theta)
    # the definition: connected components of <x_i, x_j> >= theta by brute-force flood fill
    labels = ref_components(x @ x.T >= theta)
    k = labels.max() + 1
    assert g["count"] == k == int(clusters_above(jnp.asarray(x), theta))
    assert (g["labels"] == labels).all()   # both number clusters in the order of their first token
    for c in range(k):
        mean = x[labels == c].mean(axis=0)
        np.testing.assert_allclose(g["positions"][c], mean / np.linalg.norm(mean), atol=1e-12)
        assert g["masses"][c] == np.mean(labels == c)
    gaps = [np.arccos(np.clip(g["positions"][a] @ g["positions"][b], -1, 1))
            for a, b in itertools.combinations(range(k), 2)]
    assert g["smallest_gap"] == pytest.approx(min(gaps), abs=1e-12)
    spread = max(np.arccos(np.clip(x[i] @ g["positions"][labels[i]], -1, 1)) for i in range(60))
    assert g["spread"] == pytest.approx(spread, abs=1e-12)


def test_cluster_geometry_refuses_bad_clouds():
    with pytest.raises(InputError, match="finite"):
        cluster_geometry(np.array([[1.0, np.nan]]))
    with pytest.raises(InputError, match="cloud of tokens"):
        cluster_geometry(np.zeros((0, 2)))
    one = cluster_geometry(np.array([[1.0, 0.0], [1.0, 0.0]]))
    assert one["count"] == 1 and np.isnan(one["smallest_gap"])


def test_cluster_geometry_of_many_unit_tokens_takes_the_graph_free_rule(monkeypatch):
    from attnflow.observables import _metastability

    rng = np.random.default_rng(4)
    centres = np.linalg.qr(rng.standard_normal((3, 3)))[0]          # 3 orthogonal directions
    x = centres[np.arange(900) % 3] + 1e-3 * rng.standard_normal((900, 3))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    dense = cluster_geometry(x)
    monkeypatch.setattr(_metastability, "DENSE_GEOMETRY_TOKENS", 100)
    fast = cluster_geometry(x)
    assert fast["count"] == dense["count"] == 3 and (fast["labels"] == dense["labels"]).all()
    for key in ("positions", "masses"):
        np.testing.assert_allclose(fast[key], dense[key], atol=1e-12)
    assert fast["smallest_gap"] == pytest.approx(np.pi / 2, abs=1e-2) == dense["smallest_gap"]
    with pytest.raises(InputError, match="unit norm"):
        cluster_geometry(2 * x)
