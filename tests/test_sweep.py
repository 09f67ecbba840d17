"""Sweeps: resumable chunks, config fingerprint, SIGKILL safety, sharding, CLI, classifier."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

import attnflow  # noqa: F401
from attnflow.errors import InputError
from attnflow.observables import GEOMETRY_LABELS, classify_configuration, classify_geometry
from attnflow.sweep import load_sweep_config, run_sweep, wilson_interval
from attnflow.spectral import check_batch, unstable_projector

pytestmark = pytest.mark.usefixtures("x64")  # float64 references

REPO = Path(__file__).resolve().parent.parent

SPECTRAL_TOML = """
kind = "spectral"
ensembles = ["ginibre", "positive"]
d = [3, 5]
samples = [60]
[run]
chunk_size = 25
progress = false
"""

DYNAMICS_TOML = """
kind = "dynamics"
v_ensembles = ["positive", "ginibre"]
qk_ensembles = ["identity"]
d = [3]
systems = 24
n = 12
clouds = 2
t1 = 8.0
dt = 0.1
[run]
chunk_size = 6
progress = false
"""


def _cfg(tmp_path, text, name):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_spectral_sweep_resume_identical_and_refuse_changed_config(tmp_path):
    cfg = load_sweep_config(_cfg(tmp_path, SPECTRAL_TOML, "s.toml"))
    out = tmp_path / "run"
    s = run_sweep(cfg, out)
    table = (out / "table.csv").read_bytes()
    assert len(table.decode().strip().splitlines()) == 1 + 4 * 60
    chunks = sorted((out / "chunks").glob("[!.]*.npz"))
    assert len(chunks) == 4 * 3
    # positive matrices satisfy Def 4.1(1) (Perron-Frobenius); each fraction is the table's count, and its
    # 95% interval is Wilson's score interval for that count, written out here
    import csv
    import io

    rows = list(csv.DictReader(io.StringIO(table.decode())))
    z = 1.959963984540054
    for g in s["groups"]:
        mine = [r for r in rows if r["ensemble"] == g["ensemble"] and int(r["d"]) == g["d"]]
        k, n = sum(r["cond1"] == "true" for r in mine), len(mine)
        assert n == 60 and g["frac_cond1"] == k / n
        p = k / n
        centre = (p + z * z / (2 * n)) / (1 + z * z / n)
        half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
        np.testing.assert_allclose(g["frac_cond1_ci"], [max(0.0, centre - half), min(1.0, centre + half)],
                                   rtol=1e-12, atol=1e-15)
        if g["ensemble"] == "positive":
            assert g["frac_cond1"] == 1.0
        else:  # real Ginibre: about a third at d = 3, fewer at d = 5 (SPEC 4: the fraction falls with d)
            assert 0.05 < g["frac_cond1"] < 0.7
    assert (out / "fraction_vs_d.png").stat().st_size > 1000
    json.loads((out / "provenance.json").read_text())
    # lose two chunks and the table: the rerun recomputes exactly those and gives the same bytes
    chunks[3].unlink()
    chunks[7].unlink()
    (out / "table.csv").unlink()
    mtimes = {c: c.stat().st_mtime_ns for c in chunks if c.exists()}
    run_sweep(cfg, out)
    assert (out / "table.csv").read_bytes() == table
    assert all(c.stat().st_mtime_ns == t for c, t in mtimes.items())  # done chunks were skipped
    # execution-only keys may change; the science may not
    cfg2 = dict(cfg, run=dict(cfg["run"], devices=1, progress=False))
    run_sweep(cfg2, out)
    with pytest.raises(InputError, match="another config"):
        run_sweep(dict(cfg, seed=1), out)
    with pytest.raises(InputError, match="sweep-spectral"):
        run_sweep(load_sweep_config(_cfg(tmp_path, DYNAMICS_TOML, "d.toml")), out)


def test_config_errors(tmp_path):
    with pytest.raises(InputError, match="unknown config key 'sample'"):
        load_sweep_config(_cfg(tmp_path, 'kind = "spectral"\nsample = [3]\n', "a.toml"))
    with pytest.raises(InputError, match="kind"):
        load_sweep_config(_cfg(tmp_path, 'kind = "other"\n', "b.toml"))
    cfg = load_sweep_config(_cfg(tmp_path, 'kind = "spectral"\nd = [2, 3]\nsamples = [1, 2, 3]\n', "c.toml"))
    with pytest.raises(InputError, match="samples"):
        run_sweep(cfg, tmp_path / "x")
    cfg = load_sweep_config(_cfg(tmp_path, 'kind = "dynamics"\nt1 = 1.05\ndt = 0.1\n', "e.toml"))
    with pytest.raises(InputError, match="whole number"):
        run_sweep(cfg, tmp_path / "y")
    assert not (tmp_path / "y").exists()


def test_wilson_interval():
    lo, hi = wilson_interval(0, 100)
    assert lo == 0 and 0.03 < hi < 0.04
    lo, hi = wilson_interval(50, 100)
    assert abs((lo + hi) / 2 - 0.5) < 1e-12 and abs(hi - lo - 2 * 1.96 * 0.05) < 0.005


@pytest.fixture(scope="module")
def dynamics_reference(tmp_path_factory):
    """One uninterrupted in-process run of DYNAMICS_TOML (shared by the tests below)."""
    tmp = tmp_path_factory.mktemp("dynref")
    cfg = load_sweep_config(_cfg(tmp, DYNAMICS_TOML, "d.toml"))
    return run_sweep(cfg, tmp / "dyn"), tmp / "dyn"


def test_dynamics_sweep_predictions_hold_for_positive_V(dynamics_reference, tmp_path):
    s, out = dynamics_reference
    g = {r["v_ensemble"]: r for r in s["groups"]}
    # positive V, Q^T K = I: paranormal with dim F = 1 -> Thm 5.2 for every system
    assert g["positive"]["predicted"] == {"polytope x subspace": 24}
    assert g["positive"]["frac_consistent_where_predicted"] >= 0.9
    assert s["nonfinite"] == 0
    lines = (out / "table.csv").read_text().splitlines()
    assert len(lines) == 1 + 48 and lines[0].startswith("system,seed,v_ensemble")
    assert (out / "predicted_vs_observed.png").exists()


def _host_label(z, V, x, scale):
    return classify_geometry(np.asarray(z), np.asarray(V), x=np.asarray(x), scale=scale)


def test_batched_classifier_matches_host_classifier():
    rng = np.random.default_rng(0)
    cases = []
    # hyperplanes: V = diag(1, 0.5, -0.3): levels of the first coordinate, free transverse part
    V = np.diag([1.0, 0.5, -0.3])
    z = np.c_[rng.choice([-1.0, 0.0, 2.0], 20), rng.normal(size=(20, 2))]
    cases.append((z, V))
    # polytope: V = I, four vertices
    z = rng.choice([-1.0, 1.0], size=(20, 3))
    cases.append((z, np.eye(3)))
    # codim-k: two unstable directions, three values of W z
    Vk = np.diag([1.0, 0.8, -0.5])
    base = np.array([[0.0, 0.0], [1.0, 2.0], [3.0, -1.0]])[rng.integers(0, 3, 20)]
    z = np.c_[base, rng.normal(size=20)]
    cases.append((z, Vk + 0.3 * np.triu(rng.normal(size=(3, 3)), 1)))
    # nothing: a random cloud, complex top eigenvalue
    cases.append((rng.normal(size=(20, 3)), np.array([[0.0, -2.0, 0.0], [2.0, 0.0, 0.0], [0.0, 0.0, 1.0]])))
    # origin: tiny raw tokens
    cases.append((rng.normal(size=(20, 3)), -np.eye(3)))
    for i, (z, V) in enumerate(cases):
        x = z * (1e-4 if i == 4 else 1.0)
        scale = float(np.linalg.norm(z, axis=1).max())
        I = jnp.eye(3)[None]
        sb = check_batch(I, I, jnp.asarray(V)[None])
        P, k = unstable_projector(jnp.asarray(V))
        o = classify_configuration(jnp.asarray(z), jnp.asarray(x), scale, sb.phi_dual[0],
                                   sb.stats.lambda1[0], sb.paranormal[0], sb.para_dim_F[0], P, k)
        h = _host_label(z, V, x, scale)
        assert GEOMETRY_LABELS[int(o.label)] == h.label, (i, h)
        assert int(o.num_clusters) == h.num_clusters
        assert int(o.num_levels) == h.num_levels
        assert int(o.num_subspaces) == h.num_subspaces
        assert [bool(c) for c in o.criteria] == [h.criteria[lab] for lab in GEOMETRY_LABELS]
    assert {GEOMETRY_LABELS[int(classify_configuration(jnp.asarray(z), jnp.asarray(z), 1.0,
                                                       jnp.zeros(3), 1j, False, 0, jnp.zeros((3, 3)), 0).label)]
            for z, _ in cases[:1]} == {"none"}


def _run_cli(args, env=None, **kw):
    return subprocess.Popen([sys.executable, "-m", "attnflow", "sweep", *args], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)


def test_sigkill_then_resume_gives_the_uninterrupted_table(dynamics_reference, tmp_path):
    cfgp = _cfg(tmp_path, DYNAMICS_TOML, "d.toml")
    ref = dynamics_reference[1]
    out = tmp_path / "killed"
    p = _run_cli([str(cfgp), "--out", str(out), "--no-progress"])
    deadline = time.time() + 240
    while time.time() < deadline and p.poll() is None:
        if (out / "chunks").is_dir() and list((out / "chunks").glob("[!.]*.npz")):
            break
        time.sleep(0.02)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    done = list((out / "chunks").glob("[!.]*.npz"))
    assert 1 <= len(done) < 8 and not (out / "table.csv").exists()
    p = _run_cli([str(cfgp), "--out", str(out), "--no-progress"])
    assert p.wait(timeout=300) == 0, p.stderr.read().decode()
    assert (out / "table.csv").read_bytes() == (ref / "table.csv").read_bytes()
    s = json.loads((out / "summary.json").read_text())
    assert s["systems"] == 48


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_processes_with_jax_distributed_give_the_one_process_table(dynamics_reference, tmp_path):
    """A manual two-process launch (jax.distributed with a coordinator on localhost): each process
    computes every other chunk into the shared folder, process 0 writes the same table."""
    cfgp = _cfg(tmp_path, DYNAMICS_TOML, "d.toml")
    out, port = tmp_path / "two", _free_port()
    # bind the coordinator to IPv4 localhost (JAX's default "[::]:port" needs IPv6)
    env = dict(os.environ, JAX_PLATFORMS="cpu", JAX_COORDINATOR_BIND_ADDRESS=f"127.0.0.1:{port}")
    procs = [_run_cli([str(cfgp), "--out", str(out), "--no-progress", "--coordinator", f"127.0.0.1:{port}",
                       "--num-processes", "2", "--process-id", str(i)], env=env, text=True) for i in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (so, se) in zip(procs, outs):
        assert p.returncode == 0, se[-3000:]
    # 8 chunks: 4 each, and process 0 reports the table
    assert "process 0 of 2: computed 4 of 8 chunks" in outs[0][0] and "results in" in outs[0][0]
    assert "process 1 of 2: computed 4 of 8 chunks" in outs[1][0] and "results in" not in outs[1][0]
    assert (out / "table.csv").read_bytes() == (dynamics_reference[1] / "table.csv").read_bytes()
    # a half-given launch is refused before any work
    p = _run_cli([str(cfgp), "--out", str(tmp_path / "bad"), "--coordinator", "127.0.0.1:1"], env=env, text=True)
    so, se = p.communicate(timeout=120)
    assert p.returncode == 2 and "needs all three" in se, se


MULTI = textwrap.dedent("""
    import sys, json, filecmp
    from pathlib import Path
    import jax
    import attnflow
    from attnflow.sweep import load_sweep_config, run_sweep
    assert len(jax.devices()) == 4, jax.devices()
    tmp = Path(sys.argv[1])
    # one spectral and one dynamics config (d = 64: the size that deadlocked batched LAPACK inside
    # shard_map), each on 1 and 4 devices; the "cpu" eig route (eigenproblems on the CPU device outside
    # shard_map) on the dynamics one
    runs_all = (("s.toml", ((1, "auto"), (4, "auto"))), ("d64.toml", ((1, "auto"), (4, "auto"), (4, "cpu"))))
    for name, runs in runs_all:
        cfg = load_sweep_config(tmp / name)
        cfg["run"]["chunk_size"] = 7          # not a multiple of 4: padding is exercised
        tables = []
        for devices, route in runs:
            cfg["run"]["eig_route"] = route
            out = tmp / f"{name}-{devices}-{route}"
            s = run_sweep(cfg, out, num_devices=devices)
            assert s["devices"] == devices
            tables.append((out / "table.csv").read_text())
        assert tables[0] == tables[1], name + ": 1 vs 4 devices differ"
        print(name, "rows", len(tables[0].splitlines()), "other route == device route", tables[-1] == tables[0])
    cfg["run"]["eig_route"] = "host"  # a NumPy callback inside shard_map on several CPU devices: refused
    try:
        run_sweep(cfg, tmp / "host", num_devices=2)
        raise SystemExit("host route on 2 CPU devices was not refused")
    except attnflow.errors.InputError as e:
        assert "deadlocks" in str(e), e
    # the phase job on the same machinery: 1 and 4 devices, a chunk of 5 pairs (padding on 4 devices)
    from attnflow.phase import load_phase_config, run_phase
    pc = load_phase_config(None)
    pc.update(beta=[0.5, 3.0, 8.0], n=8, d=[2, 3], systems=7, t1=3.0, checkpoints=7, seed=3)
    pc["run"].update(chunk_size=5, progress=False)
    cells = []
    for devices in (1, 4):
        s = run_phase(pc, tmp / f"phase-{devices}", num_devices=devices, figures=False)
        assert s["devices"] == devices, s["devices"]
        cells.append((tmp / f"phase-{devices}" / "cells.csv").read_text())
    assert cells[0] == cells[1], "phase: 1 vs 4 devices differ"
    print("phase rows", len(cells[0].splitlines()))
""")

# d = 64, n = 64: the size at which batched LAPACK calls inside shard_map deadlocked XLA:CPU's
# thread pool on 2 cores before the per-system loop (runner.needs_per_system_loop).
D64_TOML = """
kind = "dynamics"
v_ensembles = ["ginibre"]
qk_ensembles = ["identity"]
d = [64]
systems = 6
n = 64
clouds = 1
t1 = 1.0
dt = 0.1
[run]
chunk_size = 6
progress = false
"""


def test_sharded_over_four_devices_identical_to_one(tmp_path):
    _cfg(tmp_path, SPECTRAL_TOML.replace('["ginibre", "positive"]', '["ginibre"]').replace("[3, 5]", "[5, 96]"),
         "s.toml")
    _cfg(tmp_path, D64_TOML, "d64.toml")
    script = _cfg(tmp_path, MULTI, "multi.py")
    # four CPU devices under XLA's default compile options, the ones users run (not the suite's faster ones,
    # tests/conftest.py): the identity across device counts is XLA's per-program codegen, not a law; with
    # the suite's options (optimisation level 0, no fusion emitters) the d = 64 table differs in its last bits
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu")
    r = subprocess.run([sys.executable, str(script), str(tmp_path)], env=env, cwd=REPO, capture_output=True,
                       text=True, timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = [l for l in r.stdout.splitlines() if "rows" in l]
    assert len(lines) == 3, r.stdout
    print(r.stdout)


def test_cli_sweep(tmp_path, capsys):
    from attnflow.cli.main import main

    cfgp = _cfg(tmp_path, SPECTRAL_TOML.replace("[3, 5]", "[4]"), "s.toml")
    assert main(["sweep", str(cfgp), "--out", str(tmp_path / "o"), "--no-progress"]) == 0
    assert "results in" in capsys.readouterr().out
    for f in ("table.csv", "summary.json", "config.json", "provenance.json", "attnflow-run.json",
              "fraction_vs_d.png"):
        assert (tmp_path / "o" / f).is_file()
    bad = _cfg(tmp_path, 'kind = "spectral"\nd = "4"\n', "bad.toml")
    assert main(["sweep", str(bad), "--out", str(tmp_path / "p")]) == 2
    assert "must be a list" in capsys.readouterr().err


def test_parquet_table_matches_csv_and_missing_pyarrow_is_refused(tmp_path, monkeypatch):
    import csv

    import pyarrow.parquet as pq

    cfg = load_sweep_config(_cfg(tmp_path, SPECTRAL_TOML.replace("progress = false",
                                                                  'progress = false\ntable_formats = ["csv", "parquet"]'),
                                 "s.toml"))
    run_sweep(cfg, tmp_path / "o")
    table = pq.read_table(tmp_path / "o" / "table.parquet")
    with open(tmp_path / "o" / "table.csv") as f:
        rows = list(csv.DictReader(f))
    assert table.num_rows == len(rows) == 4 * 60 and table.column_names == list(rows[0])
    cols = table.to_pydict()
    assert str(table.schema.field("cond1").type) == "bool" and str(table.schema.field("d").type) == "int64"
    for name in ("seed", "d", "num_real"):
        assert [str(v) for v in cols[name]] == [r[name] for r in rows]
    for name in ("lambda1_re", "gap"):
        np.testing.assert_array_equal(np.array(cols[name], float), np.array([float(r[name]) for r in rows]))
    assert [("true" if v else "false") for v in cols["cond1"]] == [r["cond1"] for r in rows]
    assert cols["ensemble"] == [r["ensemble"] for r in rows]
    # without pyarrow the sweep refuses before creating anything
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(InputError, match="pyarrow is not installed"):
        run_sweep(cfg, tmp_path / "p")
    assert not (tmp_path / "p").exists()
