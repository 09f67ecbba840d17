"""The job runtime (attnflow.runs): one way to open a run folder, fingerprints that do not move, and a run
folder written by an earlier attnflow that resumes."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from attnflow import runs
from attnflow.errors import InputError

DATA = Path(__file__).resolve().parent / "data"

#: the fingerprints of the shipped configs, as the attnflow before attnflow.runs stored them in run folders
#: (a changed value would refuse every earlier run folder of that config)
SHIPPED_FINGERPRINTS = {
    "ginibre-spectral.toml": "2281f0355a59c86b",
    "ginibre-dynamics.toml": "57ee434ba8ae50c8",
    "phase.toml": "d0f4cba5431dfda3",
    "meanfield.toml": "c45432449f4feeef",
    "probe-distance-to-failure.toml": "75407121d545db49",
    "probe-beyond-pd.toml": "5660c963239034b3",
    "probe-sensitivity.toml": "4c63fe8395a1f87c",
}


def _shipped(name: str):
    if name.startswith("ginibre"):
        from attnflow.sweep import load_sweep_config, parse_sweep_config

        return parse_sweep_config(load_sweep_config(name))
    if name == "phase.toml":
        from attnflow.phase import load_phase_config
        from attnflow.phase._config import check_phase_config

        return check_phase_config(load_phase_config(None))
    if name == "meanfield.toml":
        from attnflow.meanfield import load_meanfield_config
        from attnflow.meanfield._config import check_meanfield_config

        return check_meanfield_config(load_meanfield_config(None))
    from attnflow.probe import load_probe_config
    from attnflow.probe._config import parse_probe_config

    return parse_probe_config(load_probe_config(name))


@pytest.mark.parametrize("name", sorted(SHIPPED_FINGERPRINTS))
def test_the_shipped_configs_keep_their_fingerprints(name):
    config = _shipped(name)
    identity = getattr(config, "identity", None) or {}
    # the table a run is fingerprinted by: keys added later are left out at their original value (phase: sigma = 0)
    table = config.fingerprint_table() if hasattr(config, "fingerprint_table") else config.as_dict()
    assert runs.fingerprint({**table, **identity}) == SHIPPED_FINGERPRINTS[name]
    if hasattr(type(config), "fingerprint") or hasattr(config, "fingerprint"):
        fp = getattr(config, "fingerprint", None)
        assert fp is None or fp == SHIPPED_FINGERPRINTS[name]


def test_a_sweep_folder_written_before_attnflow_runs_resumes(tmp_path):
    """tests/data/spectral_run_v1 holds the marker, config.json and the first of two chunks that the
    attnflow before attnflow.runs wrote for sweep.toml, and the table it wrote: the sweep resumes it (one
    chunk kept, one computed). The kept chunk's rows are the stored table's, byte for byte; the computed
    chunk's rows are those of an uninterrupted run here (its last digits depend on XLA's flags, which the
    test suite sets)."""
    from attnflow.sweep import load_sweep_config, run_sweep

    fixture = DATA / "spectral_run_v1"
    config = load_sweep_config(fixture / "sweep.toml")
    out = tmp_path / "run"
    shutil.copytree(fixture, out, ignore=shutil.ignore_patterns("sweep.toml", "table.csv"))
    marker = (out / runs.MARKER).read_text()
    summary = run_sweep(config, out)
    assert summary["chunks_resumed_here"] == 1 and summary["chunks_computed_here"] == 1
    run_sweep(config, tmp_path / "fresh")
    rows = (out / "table.csv").read_text().splitlines()
    stored = (fixture / "table.csv").read_text().splitlines()
    fresh = (tmp_path / "fresh" / "table.csv").read_text().splitlines()
    assert rows[:11] == stored[:11] and rows[11:] == fresh[11:] and len(rows) == len(stored) == 21
    assert (out / runs.MARKER).read_text() == marker
    assert (out / "config.json").read_bytes() == (fixture / "config.json").read_bytes()


def _csv_rows(path: Path) -> list[dict]:
    """The rows of a CSV table as dicts of the cells' text (:func:`attnflow.runs.read_csv`'s columns, by row)."""
    columns = runs.read_csv(path)
    return [dict(zip(columns, cells)) for cells in zip(*columns.values())]


def _resumable(tmp_path: Path, name: str, config_file: str) -> tuple[Path, Path, str]:
    """The stored folder ``tests/data/<name>`` copied to ``tmp_path/run`` without its config file and tables:
    (fixture, the copy, its marker's text)."""
    fixture = DATA / name
    out = tmp_path / "run"
    shutil.copytree(fixture, out, ignore=shutil.ignore_patterns(config_file, "*.csv"))
    return fixture, out, (out / runs.MARKER).read_text()


def _assert_row_close(row: dict, old: dict, where: str, rel: float = 1e-9) -> None:
    """Every column of the stored ``old`` row in ``row``: numbers to ``rel`` relative (1e-12 absolute), the
    rest character for character."""
    for key, value in old.items():
        try:
            expected = float(value)
        except ValueError:
            assert row[key] == value, (where, key)
            continue
        assert float(row[key]) == pytest.approx(expected, rel=rel, abs=1e-12, nan_ok=True), (where, key)


def test_a_phase_folder_written_before_attnflow_runs_resumes(tmp_path):
    """tests/data/phase_run_v1 holds the marker, config.json and the first of three chunks that attnflow before
    attnflow.runs (commit ccaffaf) wrote for its phase.toml, and the cells.csv and metastability.csv of that run
    finished (written under the suite's XLA options, tests/conftest.py, on an Intel Xeon). The job resumes it: the
    chunk is kept, the other two are computed, and the tables are those of an uninterrupted run here with the kept
    chunk in place of its first, byte for byte (a second run here, its first chunk swapped for the kept one and its
    tables written again from the chunks). The first beta's pairs all lie in the kept chunk, so its rows are the old
    run's, character for character, in every column the old code wrote (sigma and the order parameter are columns
    added since); the last beta's all lie in chunks computed here, so its rows are the uninterrupted run's. Where
    this machine computes the kept chunk's bits itself (XLA:CPU's code for the softmax's exponentials is the
    processor's own: an AMD EPYC rounds some entries of this chunk otherwise than the Xeon), the resumed tables are
    the uninterrupted run's entire."""
    from attnflow.phase import load_phase_config, run_phase

    fixture, out, marker = _resumable(tmp_path, "phase_run_v1", "phase.toml")
    config = load_phase_config(fixture / "phase.toml")
    summary = run_phase(config, out, figures=False)
    assert summary["chunks_resumed_here"] == 1 and summary["chunks_computed_here"] == 2
    kept = out / "chunks" / "g000-000000000.npz"
    assert kept.read_bytes() == (fixture / "chunks" / kept.name).read_bytes()
    assert (out / runs.MARKER).read_text() == marker
    assert (out / "config.json").read_bytes() == (fixture / "config.json").read_bytes()
    fresh, swapped = tmp_path / "fresh", tmp_path / "swapped"
    run_phase(config, fresh, figures=False)
    shutil.copytree(fresh, swapped, ignore=shutil.ignore_patterns("*.csv"))
    shutil.copyfile(kept, swapped / "chunks" / kept.name)
    assert run_phase(config, swapped, figures=False)["chunks_computed_here"] == 0
    with np.load(kept) as old_chunk, np.load(fresh / "chunks" / kept.name) as new_chunk:
        columns = [k for k in old_chunk if not k.startswith("__")]  # the chunk's columns (not its metadata)
        same_bits_here = all(np.array_equal(old_chunk[k], new_chunk[k]) for k in columns)
    for table, added in (("cells.csv", {"sigma", "order", "order_lo", "order_hi"}), ("metastability.csv", {"sigma"})):
        assert (out / table).read_bytes() == (swapped / table).read_bytes(), table
        if same_bits_here:
            assert (out / table).read_bytes() == (fresh / table).read_bytes(), table
        rows, stored, uninterrupted = _csv_rows(out / table), _csv_rows(fixture / table), _csv_rows(fresh / table)
        assert len(rows) == len(stored) == len(uninterrupted) and set(rows[0]) - set(stored[0]) == added, table
        first_beta = [(row, old) for row, old in zip(rows, stored) if old["beta"] == "0.5"]
        assert first_beta and all(row[k] == old[k] for row, old in first_beta for k in old), table
        last_beta = [(row, new) for row, new in zip(rows, uninterrupted) if new["beta"] == "6.0"]
        assert last_beta and all(row == new for row, new in last_beta), table


def test_a_meanfield_folder_written_before_attnflow_runs_resumes(tmp_path):
    """tests/data/meanfield_run_v1 holds the marker, config.json and 5 of the 10 units (the n = 64 particles, the
    convergence PDE, the growth PDE) that attnflow before attnflow.runs (commit ccaffaf) wrote for its
    meanfield.toml, and the tables of that run finished (under the suite's XLA options, tests/conftest.py). The job
    resumes it: the 5 units are kept as they are, the other 5 computed. The n = 64 rows read only kept units: they
    are the old run's, character for character. The other rows hold units computed here: equal to the old run's
    to 1e-9 relative. Under XLA's default options a resumed run's tables are an uninterrupted run's bytes
    (measured); under the suite's options, when a process solves neither the PDE nor an n = 64 system before the
    rest (both kept), the units it computes round otherwise, by up to 1.5e-13 relative (measured; with either of
    them solved first, the bytes again), and another machine's code generation may add its own rounding: 1e-9 is
    far above both and far below what a wrong unit moves (a seed or a size changes W1 and the modes in their second
    digit)."""
    from attnflow.meanfield import load_meanfield_config, run_meanfield

    fixture, out, marker = _resumable(tmp_path, "meanfield_run_v1", "meanfield.toml")
    config = load_meanfield_config(fixture / "meanfield.toml")
    summary = run_meanfield(config, out, progress=False, figures=False)
    assert summary["units_resumed"] == 5 and summary["units_computed"] == 5
    for unit in (fixture / "units").iterdir():
        assert (out / "units" / unit.name).read_bytes() == unit.read_bytes(), unit.name
    assert (out / runs.MARKER).read_text() == marker
    assert (out / "config.json").read_bytes() == (fixture / "config.json").read_bytes()
    for table in ("convergence.csv", "growth.csv", "rates.csv"):
        rows, stored = _csv_rows(out / table), _csv_rows(fixture / table)
        assert len(rows) == len(stored) and list(rows[0]) == list(stored[0]), table
        for row, old in zip(rows, stored):
            if table == "convergence.csv" and old["n"] == "64":
                assert row == old
            else:
                _assert_row_close(row, old, table)


@pytest.mark.usefixtures("x64_here")
def test_a_probe_folder_written_before_attnflow_runs_resumes(tmp_path):
    """tests/data/probe_run_v1 holds the marker, config.json and the optimizer checkpoint (step 3 of 6) that attnflow
    before attnflow.runs (commit ccaffaf) wrote for its probe.toml, interrupted, and the tables of that run
    uninterrupted (float64, under the suite's XLA options). The probe resumes from step 3, and its tables are the
    old run's: the losses character for character, every number to 1e-9 relative (lambda_min_rel, an eigenvalue of
    the best A, moves by an ulp between two runs in one process, measured; the steps after the checkpoint are
    computed here, and another machine's code generation may round them otherwise)."""
    from attnflow.probe import load_probe_config, run_probe

    fixture, out, marker = _resumable(tmp_path, "probe_run_v1", "probe.toml")
    config = load_probe_config(fixture / "probe.toml")
    summary = run_probe(config, out, progress=False)
    assert summary["resumed_from_step"] == 3 and summary["optimizer_steps"] == 6
    assert runs.read_marker(out) == json.loads(marker)  # the same fields (written again, in another order)
    assert (out / "config.json").read_bytes() == (fixture / "config.json").read_bytes()
    for table in ("starts.csv", "horizons.csv"):
        rows, stored = _csv_rows(out / table), _csv_rows(fixture / table)
        assert len(rows) == len(stored) > 0 and list(rows[0]) == list(stored[0]), table
        for row, old in zip(rows, stored):
            _assert_row_close(row, old, table)
    assert [(r["first_loss"], r["final_loss"]) for r in _csv_rows(out / "starts.csv")] == [
        (r["first_loss"], r["final_loss"]) for r in _csv_rows(fixture / "starts.csv")]


def test_open_run_refuses_another_config_with_one_sentence(tmp_path):
    out = tmp_path / "run"
    first = runs.open_run(out, "demo", {"seed": 0, "run": {"chunk_size": 4, "devices": 1}}, seed=0)
    assert not first.resumed and runs.read_marker(out) == {"kind": "demo", "fingerprint": first.fingerprint}
    again = runs.open_run(out, "demo", {"seed": 0, "run": {"chunk_size": 4, "devices": 2, "progress": False}})
    assert again.resumed and again.fingerprint == first.fingerprint  # execution-only keys: the same run
    other = runs.fingerprint({"seed": 1, "run": {"chunk_size": 4}})
    with pytest.raises(InputError, match=rf"^--out {out} holds a demo run of another config \(fingerprint "
                                         rf"{first.fingerprint}, this config {other}\); repeat the command with "
                                         r"that run's config \(.*config\.json\) or choose a new folder\.$"):
        runs.open_run(out, "demo", {"seed": 1, "run": {"chunk_size": 4}})
    assert json.loads((out / "config.json").read_text())["run"]["devices"] == 1  # written when the folder was new
    assert json.loads((out / "provenance.json").read_text())["config_fingerprint"] == first.fingerprint


def test_open_run_fingerprints_what_the_run_reads_besides_its_config(tmp_path):
    table = {"seed": 0}
    run = runs.open_run(tmp_path / "a", "demo", table, identity={"weights_sha256": "ab"}, marker={"study": "x"})
    assert run.fingerprint == runs.config_fingerprint({"seed": 0, "weights_sha256": "ab"})
    assert runs.read_marker(run.out) == {"kind": "demo", "fingerprint": run.fingerprint, "study": "x"}
    with pytest.raises(InputError, match="another config"):
        runs.open_run(tmp_path / "a", "demo", table, identity={"weights_sha256": "cd"})


def test_the_unit_store_sets_aside_a_changed_unit_and_computes_it_again(tmp_path, capfd):
    store = runs.UnitStore(tmp_path / "units", "demo-unit", "f1")
    calls = []

    def compute():
        calls.append(1)
        return {"x": np.arange(3.0)}

    store.get("a", compute)
    other = runs.UnitStore(tmp_path / "units", "demo-unit", "f2")  # a run of another config, same folder
    assert other.get("a", compute)["x"].tolist() == [0.0, 1.0, 2.0] and len(calls) == 2
    assert "written by a run of another config (fingerprint f1, this run f2)" in capfd.readouterr().err
    assert (tmp_path / "units" / "a.npz.damaged").exists()


def test_read_csv_reads_back_what_write_table_wrote(tmp_path):
    parts = [{"d": np.array([2, 3]), "x": np.array([0.1, np.nan]), "ok": np.array([True, False])}]
    runs.write_table(tmp_path / "t.csv", parts, ["d", "x", "ok"])
    assert runs.read_csv(tmp_path / "t.csv") == {"d": ["2", "3"], "x": ["0.1", "nan"], "ok": ["true", "false"]}


def _strict_json(text: str):
    """``json.loads`` that refuses the non-standard constants NaN, Infinity and -Infinity."""
    def refuse(name):
        raise ValueError(f"not standard JSON: {name}")

    return json.loads(text, parse_constant=refuse)


def test_json_files_are_standard_json_with_null_for_numbers_that_are_not_finite(tmp_path):
    """Run folders' JSON (summary, config, provenance) goes through atomic_write_json: standard JSON that other
    languages read, every non-finite float null, whatever its type; finite floats back bit for bit."""
    rng = np.random.default_rng(7)
    finite = rng.normal(size=5) * 10.0 ** rng.integers(-300, 300, size=5)
    obj = {"median": [float("nan"), float(finite[0]), float("inf")], "margin": -np.inf,
           "f32": np.float32(np.nan), "f64": np.float64(finite[1]), "ints": np.arange(3, dtype=np.int64),
           "array": np.array([[finite[2], np.nan], [-np.inf, finite[3]]]), "flag": np.bool_(True),
           "z": complex(finite[4], np.nan), "nested": ({"x": np.float16(np.inf)},), "path": tmp_path, "none": None}
    runs.atomic_write_json(tmp_path / "s.json", obj)
    got = _strict_json((tmp_path / "s.json").read_text())
    assert got == {"median": [None, finite[0], None], "margin": None, "f32": None, "f64": finite[1], "ints": [0, 1, 2],
                   "array": [[finite[2], None], [None, finite[3]]], "flag": True, "z": {"re": finite[4], "im": None},
                   "nested": [{"x": None}], "path": str(tmp_path), "none": None}
    assert _strict_json(runs.json_text(obj, indent=None)) == got
    # strict=False (records only Python reads back): Python's NaN and infinities kept, the rest as above
    loose = json.loads(runs.json_text(obj, strict=False))
    assert np.isnan(loose["median"][0]) and loose["median"][1:] == [finite[0], np.inf] and loose["margin"] == -np.inf
    assert loose["array"][1] == [-np.inf, finite[3]] and loose["ints"] == [0, 1, 2]
    with pytest.raises(TypeError, match="not JSON serialisable: object"):
        runs.json_text({"x": object()})


def test_no_job_imports_another_jobs_modules():
    """The runtime every job needs is attnflow.runs; a job's package imports no other job's package (the
    probes read a real model's heads through attnflow.models, the one exception: that package also loads
    models for the library)."""
    import ast

    root = Path(__file__).resolve().parent.parent / "attnflow"
    jobs = {"sweep", "phase", "meanfield", "probe", "report", "models"}
    allowed = {("probe", "models")}
    found = []
    for job in sorted(jobs):
        for path in (root / job).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and node.level >= 2 and node.module:
                    other = node.module.split(".")[0]
                    if other in jobs and other != job and (job, other) not in allowed:
                        found.append(f"{path.relative_to(root)}: from {'.' * node.level}{node.module}")
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("attnflow."):
                    other = node.module.split(".")[1]
                    if other in jobs and other != job and (job, other) not in allowed:
                        found.append(f"{path.relative_to(root)}: from {node.module}")
    assert not found, found


def test_write_table_formats_whole_columns_as_csv_cell_formats_each_value(tmp_path):
    """Columns of every NumPy dtype a job writes (formatted as a whole) and of Python values (cell by cell)
    give the cells :func:`csv_cell` gives value by value: every digit of a float, its non-finite values,
    -0.0, float32 widened exactly, booleans and integers."""
    import csv

    rng = np.random.default_rng(7)
    x = rng.normal(size=40) * 10.0 ** rng.integers(-30, 30, size=40)
    x[:5] = [np.nan, np.inf, -np.inf, -0.0, 0.0]
    parts = [{"f64": x, "f32": x.astype(np.float32), "i64": rng.integers(-10**12, 10**12, size=40),
              "u8": rng.integers(0, 255, size=40).astype(np.uint8), "b": rng.random(40) < 0.5,
              "s": np.array([f"g{k}" for k in range(40)]), "py": [float(v) for v in x]},
             {"f64": x[:3], "f32": x[:3].astype(np.float32), "i64": np.arange(3), "u8": np.arange(3, dtype=np.uint8),
              "b": np.array([True, False, True]), "s": np.array(["a,b", "c", "d"]), "py": [1, True, "x"]}]
    columns = ["f64", "f32", "i64", "u8", "b", "s", "py"]
    assert runs.write_table(tmp_path / "t.csv", parts, columns) == 43
    with open(tmp_path / "t.csv") as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == columns
    expected = [[runs.csv_cell(p[c][i]) for c in columns] for p in parts for i in range(len(p["f64"]))]
    assert rows[1:] == expected
    assert rows[1][:2] == ["nan", "nan"] and rows[4][0] == "-0.0" and rows[2][1] == "inf"
