"""One definition of a metastable state (attnflow.observables.metastable_states), read by the phase job's plateau
rule and by the extensions' sphere study."""

from __future__ import annotations

import numpy as np

from attnflow.observables import first_plateaus, metastable_states, plateaus
from attnflow.observables._metastability import _count_runs


def _random_counts(rng, S=20, K=40, n=32):
    decay = np.exp(-np.cumsum(rng.exponential(0.15, (S, K)), axis=1))
    counts = np.maximum(1, np.round(n * decay)).astype(int)
    counts += rng.random((S, K)) < 0.1  # flickers up by one
    counts[:, 0] = n - (rng.random(S) < 0.3)  # two tokens within the threshold at the start, now and then
    return counts


def test_each_save_on_its_own_count_is_the_extensions_band():
    rng = np.random.default_rng(0)
    counts = _random_counts(rng)
    n = 32
    band = (counts >= 2) & (counts <= n // 2)  # the sphere study's "2 <= clusters <= n/2"
    assert np.array_equal(metastable_states(counts, reference=n, running_min=False), band)
    assert np.array_equal(metastable_states(counts[3], reference=n, running_min=False), band[3])


def test_running_minimum_states_hold_every_plateau():
    rng = np.random.default_rng(1)
    t = np.cumsum(rng.uniform(0.2, 1.0, 40))
    counts = _random_counts(rng)
    states = metastable_states(counts)
    runs = _count_runs(t, counts, 0.0, 1.0)
    assert np.array_equal(runs["plateau"], runs["start"] & states & (runs["end"] - t >= t))
    first = first_plateaus(t, counts)
    for s in range(counts.shape[0]):
        c = counts[s]
        g = int(np.argmax(c <= c[0] / 2)) if np.any(c <= c[0] / 2) else len(c)
        settled = np.minimum.accumulate(c[g:])
        expect = np.zeros(len(c), bool)
        expect[g:] = settled >= 2
        assert np.array_equal(states[s], expect)
        found = plateaus(t, c)
        if found:  # the first plateau starts in a metastable state, with the running minimum's count
            k = int(np.searchsorted(t, found[0].start))
            assert states[s, k] and found[0].count == settled[k - g] == first["count"][s]


def test_reference_per_system():
    counts = np.array([[10, 6, 4, 2, 1], [10, 6, 4, 2, 1]])
    out = metastable_states(counts, reference=np.array([10, 16]))
    assert out.astype(int).tolist() == [[0, 0, 1, 1, 0], [0, 1, 1, 1, 0]]
