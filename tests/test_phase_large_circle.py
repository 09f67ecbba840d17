"""The phase job on large clouds in the plane (d = 2, n > LARGE_CLOUD_ABOVE): statistics from the sorted
angles and Fourier moments, the sphere's attention on the Fourier path, no n x n matrix; the same numbers as the
dense Gram matrix and the dense identity sphere (to rounding: the fields are two exact evaluations of the same
attention, the statistics two exact evaluations of the same pair sums; the counts are equal)."""

from __future__ import annotations

import numpy as np
import pytest

import attnflow.phase._engine as engine
from attnflow import InputError
from attnflow.phase import check_phase_config, ensemble, load_phase_config
from attnflow.phase._run import check_phase_sizes


def config(**kw):
    cfg = load_phase_config(None)
    cfg.update(beta=[0.5, 1.5], beta_law="log", n=[4200], d=[2], systems=1, t1=1.0, dt=0.1, checkpoints=3,
               dtype="float64")
    cfg.update(kw)
    return cfg


def test_large_circle_groups_equal_the_dense_statistics(monkeypatch):
    # n = 1100 with the large-cloud threshold lowered to 1024: the same code path as above 4096, against a dense
    # n x n reference 15 times cheaper than at n = 4200
    monkeypatch.setattr(engine, "LARGE_CLOUD_ABOVE", 1024)
    cfg = config(n=[1100])
    assert engine.circle_statistics_modes(check_phase_config(cfg), check_phase_config(cfg).groups[0]) is not None
    fast = ensemble(cfg)
    monkeypatch.setattr(engine, "LARGE_CLOUD_ABOVE", 10**9)
    assert engine.circle_statistics_modes(check_phase_config(cfg), check_phase_config(cfg).groups[0]) is None
    dense = ensemble(cfg)
    assert fast["finite"].all() and dense["finite"].all()
    for key in ("clusters", "pairs_clustered", "span"):
        np.testing.assert_array_equal(fast[key], dense[key])
    for key in ("energy", "ip_min", "ip_mean", "ip_max"):
        # 10 layers of two exact evaluations of the same field: rounding differences, 1e-12 of the scale
        np.testing.assert_allclose(fast[key], dense[key], rtol=0, atol=1e-12 * np.abs(dense[key]).max())
    np.testing.assert_allclose(fast["order"], dense["order"], rtol=0, atol=1e-12)


def test_which_groups_read_the_circle_statistics():
    c = check_phase_config(config(n=[64, 4096, 4097, 100000], d=[2, 3], beta=[1.0, 2.0]))
    modes = {(g.n, g.d): engine.circle_statistics_modes(c, g) for g in c.groups}
    assert [k for k, m in modes.items() if m is not None] == [(4097, 2), (100000, 2)]
    # the modes are exact to rounding for the group's largest beta, 2 log n
    from attnflow.kernels.fourier import fourier_modes
    assert modes[(100000, 2)] == fourier_modes(2 * np.log(100000), "float64")


def test_large_clouds_in_the_plane_and_in_r3_fit_in_memory_and_in_r4_are_refused_naming_n():
    check_phase_sizes(check_phase_config(config(n=[100000])), 1)
    check_phase_sizes(check_phase_config(config(n=[100000], d=[3])), 1)
    with pytest.raises(InputError, match="lower n to at most about"):
        check_phase_sizes(check_phase_config(config(n=[100000], d=[4])), 1)
