"""`attnflow reproduce`: the report folder, bad input, atomic replacement, and real checks at small n."""

import json

import numpy as np
import pytest

from attnflow.cli.main import main
from attnflow.errors import InputError
from attnflow.report import case_names, reproduce
from attnflow.report import base as report_base

ALL = case_names()


@pytest.fixture(scope="module")
def quick_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("rep") / "quick"
    summary = reproduce(out, quick=True, progress=False)
    return out, summary


def test_quick_report_folder_complete(quick_report):
    out, summary = quick_report
    for name in ("report.md", "summary.json", "checks.csv", "systems.csv", "config.json", "provenance.json",
                 "attnflow-run.json"):
        assert (out / name).is_file(), name
    s = json.loads((out / "summary.json").read_text())
    assert s == json.loads(json.dumps(summary))
    assert set(s["cases"]) == set(ALL) and len(ALL) == 14
    for c in s["checks"]:
        assert set(c) >= {"case", "name", "hypotheses", "predicted", "observed", "passed", "margin"}
        assert c["passed"] in (True, False, None)
    # every case draws figures; the polytope and hyperplane cases animate
    for name, case in s["cases"].items():
        assert case["figures"], name
        for f in case["figures"]:
            assert (out / f).stat().st_size > 1000, f
    assert (out / "thm3_1.gif").read_bytes()[:3] == b"GIF"
    assert (out / "thm4_2_2d.gif").read_bytes()[:3] == b"GIF"
    md = (out / "report.md").read_text()
    table = md.index("| case | check |")
    assert table < md.index("![")  # the table comes before the figures
    assert md.count("\n| [") == len(s["checks"]) + len(s["cases"])  # overview + all checks
    prov = json.loads((out / "provenance.json").read_text())
    assert prov["seed"] == 0 and "jax" in prov["versions"]
    assert json.loads((out / "config.json").read_text())["quick"] is True


def test_cli_case_selection_and_rerun_replaces(tmp_path, capsys):
    out = tmp_path / "r"
    assert main(["reproduce", "--quick", "--no-progress", "--case", "remark7_9", "--out", str(out)]) == 0
    s = json.loads((out / "summary.json").read_text())
    assert list(s["cases"]) == ["remark7_9"]
    (out / "stale.png").write_bytes(b"x")  # a previous report is replaced as a whole
    assert main(["reproduce", "--quick", "--no-progress", "--case", "remark7_9", "--out", str(out)]) == 0
    assert not (out / "stale.png").exists()
    assert main(["reproduce", "--list"]) == 0
    assert "thm8_5" in capsys.readouterr().out


@pytest.mark.parametrize(
    "config, message",
    [
        ("nonsense = 1\n", "unknown config key 'nonsense'"),
        ("batch = 'four'\n", "config key 'batch'"),
        ("[thm3_1]\nn = 2.5\n", "thm3_1.n"),
        ("rel_tol = 2.0\n", "rel_tol"),
        ("[thm2_1]\ntt1 = 3.0\n", "did you mean 'thm2_1.t1'"),
    ],
)
def test_bad_config_is_refused_before_work(tmp_path, config, message):
    cfg = tmp_path / "c.toml"
    cfg.write_text(config)
    out = tmp_path / "out"
    with pytest.raises(InputError, match=message.replace("(", r"\(")):
        reproduce(out, config=cfg, quick=True, progress=False)
    assert not out.exists()


def test_bad_case_and_foreign_folder(tmp_path, capsys):
    with pytest.raises(InputError, match="unknown case name.*'thm9_9'.*known cases: thm2_1"):
        reproduce(tmp_path / "o", cases=["thm9_9"], progress=False)
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("precious")
    with pytest.raises(InputError, match="not an attnflow reproduce folder"):
        reproduce(foreign, quick=True, cases=["remark7_9"], progress=False)
    assert (foreign / "notes.txt").read_text() == "precious"
    afile = tmp_path / "file"
    afile.write_text("x")
    assert main(["reproduce", "--quick", "--case", "remark7_9", "--out", str(afile)]) == 2
    assert "is a file" in capsys.readouterr().err


def test_failed_run_keeps_previous_report(tmp_path, monkeypatch):
    out = tmp_path / "r"
    reproduce(out, quick=True, cases=["remark7_9"], progress=False)
    before = (out / "summary.json").read_text()

    def boom(ctx):
        raise RuntimeError("simulated crash")

    title, theorem, _ = report_base.CASES["thm8_5"]
    monkeypatch.setitem(report_base.CASES, "thm8_5", (title, theorem, boom))
    with pytest.raises(RuntimeError, match="simulated crash"):
        reproduce(out, quick=True, cases=["remark7_9", "thm8_5"], progress=False)
    assert (out / "summary.json").read_text() == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary folder left


def test_real_checks_pass_at_small_n(tmp_path):
    """Not a smoke run: small n, the default horizons, float64: every graded check passes."""
    cfg = tmp_path / "small.toml"
    cfg.write_text("batch = 2\nnum_saves = 81\ngif_frames = 0\n[thm2_1]\nn = 10\n[thm3_1]\nn = 12\n"
                   "[thm4_2_2d]\nn = 12\n[thm3_1_euler_dt1]\nn = 12\n")
    s = reproduce(tmp_path / "r", config=cfg, cases=["thm2_1", "thm3_1", "thm4_2_2d", "remark7_9",
                                                     "thm3_1_euler_dt1"], progress=False)
    failed = [(c["case"], c["name"], c["observed"]) for c in s["checks"] if c["passed"] is False]
    assert not failed
    assert s["num_graded"] >= 20
    by = {(c["case"], c["name"]): c for c in s["checks"]}
    assert by[("remark7_9", "rank of lim P")]["passed"] and by[("remark7_9", "clusters of z")]["passed"]
    assert np.isfinite(by[("thm3_1", "conv{z(t)} non-increasing")]["margin"])
