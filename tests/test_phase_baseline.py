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
