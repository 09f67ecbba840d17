"""The PyTorch phase-diagram baseline (benchmarks/phase_torch.py) computes what ``attnflow phase`` computes:
from the same start clouds, the same per-beta means of every statistic at every checkpoint."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import numpy as np
import pytest

from attnflow.phase import OBSERVABLES, check_phase_config, load_phase_config
from attnflow.phase._engine import make_chunk_fn
from attnflow.phase._engine import group_pairs, start_clouds
from attnflow.phase._tables import cell_rows
from attnflow.runs import make_mesh

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import phase_torch  # noqa: E402

pytestmark = pytest.mark.usefixtures("x64")  # float64 on both sides

#: statistics that are counts per system: equal (no pair lies within rounding of the threshold here), their
#: means over the systems up to the order of the sum (1e-14: a few ulps of a sum of 5 fractions k / 56)
COUNTS = ("pairs_clustered", "clusters", "span")


def test_torch_baseline_statistics_equal_the_phase_job_on_the_same_clouds(tmp_path):
    pytest.importorskip("torch")
    cfg = load_phase_config(None)
    cfg.update(beta={"start": 0.5, "stop": 6.0, "num": 3}, n=8, d=2, systems=5, t1=3.0, dt=0.1, checkpoints=7,
               threshold=0.99, seed=3)
    config = check_phase_config(cfg)
    group = config.groups[0]
    cols = make_chunk_fn(config, group, make_mesh(1))(0, group_pairs(config))
    want = cell_rows(config, group, cols)  # the cell table's columns (what cells.csv holds)

    np.save(tmp_path / "x0.npy", start_clouds(config, group, np.arange(config.systems)))
    out = tmp_path / "torch.csv"
    assert phase_torch.main(["--x0", str(tmp_path / "x0.npy"), "--betas", "0.5", "6", "3", "--t1", "3", "--dt", "0.1",
                             "--checkpoints", "7", "--threshold", "0.99", "--threads", "1", "--out", str(out)]) == 0
    with open(out) as fh:
        rows = list(csv.DictReader(fh))
    got = {k: np.array([float(r[k]) for r in rows]) for k in rows[0]}

    np.testing.assert_array_equal(got["beta"], want["beta"])
    np.testing.assert_array_equal(got["layer"], want["layer"])
    assert (got["nonfinite"] == 0).all() and (got["systems"] == config.systems).all()
    # the runs cluster (the counts are not trivially equal): some pairs join, clouds lose dimensions ...
    assert want["pairs_clustered"].max() > 0.2 and want["clusters"].min() < 6
    for name in COUNTS:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-14, atol=0, err_msg=name)
    # ... and the continuous statistics agree to rounding: the same float64 formulas in another order
    # (matmul kernels, sums), over 30 layers of a contracting flow; values are O(1) to e^6 / 12 ~ 34
    for name in set(OBSERVABLES) - set(COUNTS):
        np.testing.assert_allclose(got[name], want[name], rtol=1e-10, atol=1e-12, err_msg=name)


def test_the_noisy_torch_baseline_agrees_in_law_with_the_noisy_phase_job(tmp_path):
    """With --sigma the baseline adds tangent Euler-Maruyama noise as the job does (other draws, the same law):
    from the same clouds, the per-beta mean inner product at t1 agrees with the job's within 4 standard errors
    of the difference (the systems' spread, both sides), while the noiseless means lie far outside that band
    (the noise moves the statistic by many standard errors: the check can fail)."""
    pytest.importorskip("torch")
    from attnflow.phase import ensemble

    cfg = load_phase_config(None)
    cfg.update(beta={"start": 1.0, "stop": 2.0, "num": 2}, n=8, d=2, systems=200, t1=5.0, dt=0.1, checkpoints=4,
               sigma=1.0, seed=5)
    config = check_phase_config(cfg)
    arrays = ensemble(cfg)
    job = arrays["ip_mean"][:, :, -1]  # (beta, system) at t1
    np.save(tmp_path / "x0.npy", start_clouds(config, config.groups[0], np.arange(config.systems)))
    means = {}
    for sigma in ("0.0", "1.0"):
        out = tmp_path / f"torch-{sigma}.csv"
        assert phase_torch.main(["--x0", str(tmp_path / "x0.npy"), "--betas", "1", "2", "2", "--t1", "5", "--dt", "0.1",
                                 "--checkpoints", "4", "--threads", "1", "--sigma", sigma, "--seed", "1",
                                 "--out", str(out)]) == 0
        with open(out) as fh:
            rows = [r for r in csv.DictReader(fh) if int(r["layer"]) == 50]
        means[sigma] = np.array([float(r["ip_mean"]) for r in rows])
    se = np.sqrt(2) * job.std(axis=1, ddof=1) / np.sqrt(config.systems)  # the same spread assumed on both sides
    gap = np.abs(means["1.0"] - job.mean(axis=1))
    assert np.all(gap < 4 * se), (gap, se)
    assert np.all(np.abs(means["0.0"] - job.mean(axis=1)) > 8 * se), (means["0.0"], job.mean(axis=1), se)
