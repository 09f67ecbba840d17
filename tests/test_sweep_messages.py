"""What ``attnflow sweep`` prints: the headline numbers, chunks resumed vs computed, the resume line."""

import re

import pytest

from attnflow.cli.main import main

SPECTRAL = """
kind = "spectral"
ensembles = ["ginibre"]
d = [3]
samples = [20]
[run]
chunk_size = 10
progress = false
"""

DYNAMICS = """
kind = "dynamics"
v_ensembles = ["positive"]
qk_ensembles = ["identity"]
d = [2]
systems = 4
n = 6
clouds = 1
t1 = 2.0
dt = 0.5
[run]
chunk_size = 2
progress = false
"""


def _config(tmp_path, text, name):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_spectral_headline_and_resume(tmp_path, capsys):
    cfg, out = _config(tmp_path, SPECTRAL, "s.toml"), tmp_path / "run"
    assert main(["sweep", cfg, "--out", str(out), "--no-progress"]) == 0
    printed, err = capsys.readouterr()
    assert "resuming" not in err
    assert re.search(r"P\(Def 4\.1\(1\)\) = 0\.\d{3} \[0\.\d{3}, [01]\.\d{3}\] \(95% CI\) over 20 systems: ginibre, "
                     r"d = 3", printed), printed
    assert printed.splitlines()[-1] == f"2 chunks: 0 resumed, 2 computed; results in {out}"

    chunks = sorted((out / "chunks").glob("*.npz"))
    assert len(chunks) == 2
    chunks[-1].unlink()  # as if the run had been interrupted before its last chunk
    assert main(["sweep", cfg, "--out", str(out), "--no-progress"]) == 0
    printed, err = capsys.readouterr()
    assert f"resuming: 1 of 2 chunks already done in {out}" in err
    assert printed.splitlines()[-1] == f"2 chunks: 1 resumed, 1 computed; results in {out}"

    assert main(["sweep", cfg, "--out", str(out), "--no-progress"]) == 0  # all done: nothing computed
    printed, err = capsys.readouterr()
    assert f"resuming: 2 of 2 chunks already done in {out}" in err
    assert printed.splitlines()[-1] == f"2 chunks: 2 resumed, 0 computed; results in {out}"


def test_dynamics_headline(tmp_path, capsys):
    out = tmp_path / "dyn"
    assert main(["sweep", _config(tmp_path, DYNAMICS, "d.toml"), "--out", str(out), "--no-progress",
                 "--figure-formats", "png,pdf"]) == 0
    printed = capsys.readouterr().out
    assert re.search(r"^4 systems; \d+ non-finite run\(s\) left out of the fractions$", printed, re.M), printed
    m = re.search(r"observed limit geometry over (\d+) finite systems \(95% CI\): (.*)$", printed, re.M)
    assert m, printed
    fractions = [float(f) for f in re.findall(r" (\d\.\d{3}) \[", m.group(2))]
    assert sum(fractions) == pytest.approx(1.0, abs=2e-3)
    assert printed.splitlines()[-1] == f"2 chunks: 0 resumed, 2 computed; results in {out}"
    assert (out / "predicted_vs_observed.png").is_file() and (out / "predicted_vs_observed.pdf").is_file()
