"""`attnflow reproduce`: the report folder, bad input, atomic replacement, and real checks at small n."""

import json

import numpy as np
import pytest

from attnflow.cli.main import main
from attnflow.errors import InputError
from attnflow.report import case_names, reproduce
from attnflow.report import _catalogue as report_catalogue
from attnflow.runs import json_text

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
    def refuse(name):  # NaN, Infinity: not JSON; other languages' parsers refuse them
        raise ValueError(f"summary.json is not standard JSON: {name}")

    s = json.loads((out / "summary.json").read_text(), parse_constant=refuse)
    assert s == json.loads(json_text(summary))
    # a margin that is not a number (checks without a threshold): NaN in the returned summary, null in the file
    no_margin = [i for i, c in enumerate(summary["checks"]) if np.isnan(c["margin"])]
    assert no_margin and all(s["checks"][i]["margin"] is None for i in no_margin)
    assert set(s["cases"]) == set(ALL) and len(ALL) == 15 and ALL[-1] == "negative_controls"
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
    assert main(["reproduce", "--quick", "--no-progress", "--case", "thm2_1", "--out", str(out)]) == 0
    s = json.loads((out / "summary.json").read_text())
    assert list(s["cases"]) == ["thm2_1"] and s["all_passed"]
    (out / "stale.png").write_bytes(b"x")  # a previous report is replaced as a whole
    # remark7_9 does not converge in the quick horizon (t1 = 4): a failed check -> exit status 1
    assert main(["reproduce", "--quick", "--no-progress", "--case", "remark7_9", "--out", str(out)]) == 1
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


def test_interrupted_run_keeps_previous_report(tmp_path, monkeypatch):
    out = tmp_path / "r"
    reproduce(out, quick=True, cases=["remark7_9"], progress=False, figures=False)
    before = (out / "summary.json").read_text()

    def interrupted(ctx, res):
        raise KeyboardInterrupt

    title, theorem, _ = report_catalogue.CASES["thm8_5"]
    monkeypatch.setitem(report_catalogue.CASES, "thm8_5", (title, theorem, interrupted))
    with pytest.raises(KeyboardInterrupt):
        reproduce(out, quick=True, cases=["remark7_9", "thm8_5"], progress=False, figures=False)
    assert (out / "summary.json").read_text() == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary folder left


def test_failing_case_never_loses_the_report(tmp_path, capsys):
    """A solve that overflows (a field growing like e^{300 t}) is recorded with its reason and time;
    the other cases run; report.md and summary.json are written; the exit status is 1."""
    from attnflow import AttentionFlow
    from attnflow.fields import make_dynamics

    def exploding(Q, K, V, *, picture, method):
        if V.shape == (1, 1):  # thm2_1 only
            return AttentionFlow(Q, K, 300.0 * V)
        return make_dynamics(Q, K, V, picture=picture, method=method)

    out = tmp_path / "r"
    s = reproduce(out, quick=True, cases=["thm2_1", "remark7_9"], progress=False, figures=False,
                  field_factory=exploding)
    err = s["failed_cases"]["thm2_1"]
    assert list(s["failed_cases"]) == ["thm2_1"] and "t = " in err and ("Error" in err)
    assert not s["all_passed"]
    ran = {c["case"] for c in s["checks"]}
    assert ran == {"thm2_1", "remark7_9"}
    stop = [c for c in s["checks"] if c["name"] == "case ran to the end"]
    assert len(stop) == 1 and stop[0]["passed"] is False and "stopped after" in stop[0]["observed"]
    md = (out / "report.md").read_text()
    assert "did not finish" in md and (out / "checks.csv").is_file()


def test_real_checks_pass_at_small_n(tmp_path):
    """Not a smoke run: small n, the default horizons, float64: every graded check passes, and the
    graded checks are real (each reports a finite margin and a threshold in its text)."""
    cfg = tmp_path / "small.toml"
    cfg.write_text("batch = 2\nnum_saves = 81\ngif_frames = 0\n[thm2_1]\nn = 10\n[thm3_1]\nn = 12\n"
                   "[thm4_2_3d]\nn = 12\n[thm3_1_euler_dt1]\nn = 12\n")
    s = reproduce(tmp_path / "r", config=cfg, cases=["thm2_1", "thm3_1", "thm4_2_3d", "remark7_9",
                                                     "thm3_1_euler_dt1"], progress=False, figures=False)
    failed = [(c["case"], c["name"], c["observed"]) for c in s["checks"] if c["passed"] is False]
    assert not failed
    assert s["num_graded"] >= 25
    by = {(c["case"], c["name"]): c for c in s["checks"]}
    for case in ("thm2_1", "thm3_1", "thm4_2_3d", "remark7_9", "thm3_1_euler_dt1"):
        assert by[(case, "solves the paper's equation")]["margin"] > 1  # > 1 decade below its tolerance
    assert by[("remark7_9", "rank of lim P")]["passed"] and by[("remark7_9", "clusters of z")]["passed"]
    assert np.isfinite(by[("thm3_1", "conv{z(t)} non-increasing")]["margin"])
