"""Every benchmark baseline computes the same dynamics as attnflow (small inputs, float64)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import attnflow

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import baselines  # noqa: E402

pytestmark = pytest.mark.usefixtures("x64")  # compared with float64 references at float64 tolerances


def _problem(seed, B=2, n=12, d=3, m=None, dtype=np.float64):
    rng = np.random.default_rng(seed)
    m = d if m is None else m
    x0 = rng.standard_normal((B, n, d)).astype(dtype)
    Q = (rng.standard_normal((m, d)) / np.sqrt(d)).astype(dtype)
    K = (rng.standard_normal((m, d)) / np.sqrt(d)).astype(dtype)
    V = (np.eye(d) + 0.5 * rng.standard_normal((d, d)) / np.sqrt(d)).astype(dtype)
    return x0, Q, K, V


def _attnflow_euler(x0, Q, K, V, dt, steps, beta=1.0):
    sim = attnflow.simulate(x0, Q, K, V, t1=dt * steps, dt=dt, method="euler", beta=beta,
                            dtype="float64", save_every=steps, batch="x0")
    return np.asarray(sim.tokens[:, -1])


@pytest.mark.parametrize("seed,m,beta", [(0, None, 1.0), (1, 5, 2.0)])
def test_numpy_euler_matches_attnflow(seed, m, beta):
    x0, Q, K, V = _problem(seed, m=m)
    ref = _attnflow_euler(x0, Q, K, V, 0.1, 20, beta)
    out = baselines.numpy_euler(x0, Q, K, V, dt=0.1, num_steps=20, beta=beta)
    assert np.abs(out - x0).max() > 0.1  # the tokens moved
    np.testing.assert_allclose(out, ref, rtol=1e-11, atol=1e-11)


def test_python_loop_matches_attnflow():
    x0, Q, K, V = _problem(2, B=1, n=8)
    ref = _attnflow_euler(x0, Q, K, V, 0.25, 8)
    out = baselines.python_loop_euler(x0, Q, K, V, dt=0.25, num_steps=8)
    np.testing.assert_allclose(out, ref, rtol=1e-11, atol=1e-11)


def test_torch_euler_matches_attnflow():
    pytest.importorskip("torch")
    x0, Q, K, V = _problem(3, m=4)
    ref = _attnflow_euler(x0, Q, K, V, 0.1, 20, 1.5)
    out = baselines.torch_euler(x0, Q, K, V, dt=0.1, num_steps=20, beta=1.5)
    np.testing.assert_allclose(out, ref, rtol=1e-11, atol=1e-11)
    out32 = baselines.torch_euler(x0.astype(np.float32), Q, K, V, dt=0.1, num_steps=20, beta=1.5)
    assert out32.dtype == np.float32
    np.testing.assert_allclose(out32, ref, rtol=1e-4, atol=1e-4)


def test_torchdiffeq_matches_attnflow():
    pytest.importorskip("torchdiffeq")
    x0, Q, K, V = _problem(4)
    sim = attnflow.simulate(x0, Q, K, V, t1=1.0, method="tsit5", rtol=1e-10, atol=1e-12,
                            dtype="float64", num_saves=2, batch="x0")
    ref = np.asarray(sim.tokens[:, -1])
    out, nfe = baselines.torchdiffeq_solve(x0, Q, K, V, t1=1.0, rtol=1e-10, atol=1e-12)
    assert nfe > 10
    np.testing.assert_allclose(out, ref, rtol=1e-7, atol=1e-7)


def test_suite_smoke_run_writes_its_folder(tmp_path):
    """The benchmark suite end to end at a toy size (no torch rows, no timing asserted)."""
    import json

    from benchmarks import suite
    from benchmarks.common import attention_flops

    assert attention_flops(2, 16, 4) == 2 * (2 * 16 * 16 * 8 + 2 * 16 * 4 * 12)
    out = tmp_path / "run"
    # the whole-job benchmarks (phase, mean field) have smoke tests of their own
    summary = suite.main(["--quick", "--sizes", "2x16x4", "--steps", "3", "--no-torch", "--no-tiny", "--no-phase",
                          "--no-meanfield", "--no-noise", "--no-sphere", "--loop-max-n", "16", "--out", str(out)])
    for name in ("config.json", "summary.json", "table.csv", "table.md", "throughput.png"):
        assert (out / name).is_file(), name
    rows = {(r["method"], r["dtype"]): r for r in json.loads((out / "summary.json").read_text())["rows"]}
    assert rows[("torch euler (bmm)", "float32")]["note"] == "skipped: --no-torch"
    # every baseline that ran reproduces attnflow's float64 Euler map (float32 rounding)
    for key in [("numpy euler", "float32"), ("python per-token loop", "float64"), ("attnflow euler [dense]", "float32")]:
        assert rows[key]["err_ref"] == "f64 euler" and rows[key]["rel_err"] < 1e-5, key
    assert rows[("attnflow tsit5 adaptive", "float64")]["rel_err"] < 1e-8
    assert summary["headline"][0]["euler_speedup_vs_numpy"] > 0
    # the gradient benchmark ran too, honouring --no-torch
    grads = json.loads((out / "gradients.json").read_text())
    kinds = {(r["kind"], r["steps"]) for r in grads["rows"]}
    assert {("euler", 5), ("euler-store-all", 5), ("euler-autodiff-softmax", 5), ("euler-diffrax", 5),
            ("tsit5-adaptive", "adaptive")} <= kinds
    assert not any(k == "torch-euler" for k, _ in kinds)
    assert all(r["ratio"] > 0 and r["grad_temp_bytes"] > 0 for r in grads["rows"])
    assert [e["tol"] for e in grads["backsolve_error"]] == [1e-4, 1e-6, 1e-8, 1e-10]
    assert grads["backsolve_error"][-1]["rel_error"] < 1e-8  # 4.6e-10 measured


def test_sweep_benchmark_smoke_run(tmp_path):
    """benchmarks/bench_sweeps.py end to end at a toy size (it builds its chunk config from the
    shipped dynamics config, so a new sweep key cannot break it again); no timing asserted."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    out = tmp_path / "sweeps.json"
    subprocess.run([sys.executable, "benchmarks/bench_sweeps.py", "--d", "4", "--n", "8", "--layers", "2",
                    "--systems", "2", "--spectral-systems", "4", "--repeats", "1", "--out", str(out)],
                   cwd=root, check=True, capture_output=True, timeout=300)
    row = json.loads(out.read_text())["rows"][0]
    assert row["dynamics_systems_per_s"] > 0 and row["spectral_systems_per_s"] > 0
