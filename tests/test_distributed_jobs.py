"""Every job that runs chunks or units splits over processes (``jax.distributed``): phase, meanfield and the
probe's studies, each launched as two CPU processes of ``python -m attnflow <job> --coordinator 127.0.0.1:PORT
--num-processes 2 --process-id I`` sharing one output folder, write the tables of a one-process run byte for
byte, and each process computes its own share (not nothing, not everything).

Of the probe's studies, sensitivity stands for the ones that split (its systems, as distance-to-failure's
two searches, are units stored in the shared folder and waited for by process 0) and beyond-pd for the one
that runs on process 0 only; distance-to-failure's two-process run (about 40 s of CPU more, mostly
compiling its searches twice) is left out to keep this file near a minute on two cores.

All two-process launches start at once (a free port each) and run while this process computes the
one-process references; the tests then read what each launch printed and wrote.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

#: 2 beta x 4 systems in chunks of 2 pairs: 4 chunks, 2 per process
PHASE_TOML = """
kind = "phase"
beta = [0.5, 4.0]
n = 6
d = 2
systems = 4
t1 = 2.0
dt = 0.1
checkpoints = 5
[run]
chunk_size = 2
progress = false
"""

#: 8 units in plan order: the PDE, 4 particle runs of the convergence study, growth particles and PDE, the
#: largest run; process 1's particle runs need process 0's PDE
MEANFIELD_TOML = """
normalisations = ["softmax"]
[convergence]
n = [32, 64]
seeds = 2
times = [0.0, 0.5]
frames = 2
grid = 32
[growth]
beta = [2.0]
n = 64
seeds = 1
modes = 2
saves = 5
grid = 32
[largest]
n = 256
layers = 1
"""

PROBE_TOML = {
    # the systems are the units: one each
    "sensitivity": """
        study = "sensitivity"
        [system]
        num_triples = 2
        n = 5
        d = 2
        [dynamics]
        t1 = 1.0
        dt = 0.25
        """,
    # one batched optimisation: process 0 runs it, process 1 computes nothing
    "beyond-pd": """
        study = "beyond-pd"
        [system]
        num_starts = 2
        n = 5
        [dynamics]
        t1 = 1.0
        dt = 0.25
        [optimizer]
        num_steps = 3
        checkpoint_every = 2
        [check]
        horizons = [1.0]
        """,
}

#: job -> (sub-command, config text)
JOBS = {"phase": ("phase", PHASE_TOML), "meanfield": ("meanfield", MEANFIELD_TOML),
        **{study: ("probe", textwrap.dedent(text)) for study, text in PROBE_TOML.items()}}

#: the jobs' figures are left out (their tables and summaries are the results compared): no figure is drawn
NO_FIGURES = {"phase": ["--no-figures"], "meanfield": ["--no-figures"]}

#: summary.json fields that say how a run executed, not what it found (they differ between a fresh and a
#: resumed one-process run too): left out of the comparison, as is every key ending in "_s" (a timing)
EXECUTION_FIELDS = {"provenance", "seconds", "units_computed", "units_resumed", "devices"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _one_process(job: str, config: Path, out: Path) -> None:
    """The job's one-process run of ``config`` into ``out``: the command line, in this process."""
    from attnflow.cli.main import main

    command = JOBS[job][0]
    assert main([command, str(config), "--out", str(out), "--no-progress", *NO_FIGURES.get(command, [])]) == 0


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """job -> (the one-process folder, the two-process folder, [(exit code, stdout, stderr) of process 0, 1])."""
    tmp = tmp_path_factory.mktemp("distributed")
    launched = {}
    try:
        for job, (command, text) in JOBS.items():
            config = tmp / f"{job}.toml"
            config.write_text(text)
            port = _free_port()
            # the coordinator bound to IPv4 localhost (JAX's default "[::]:PORT" needs IPv6)
            env = dict(os.environ, JAX_PLATFORMS="cpu", JAX_COORDINATOR_BIND_ADDRESS=f"127.0.0.1:{port}",
                       MPLBACKEND="Agg")
            procs = []
            for i in range(2):
                logs = [open(tmp / f"{job}-{i}.{kind}", "w") for kind in ("out", "err")]
                procs.append((subprocess.Popen(
                    [sys.executable, "-m", "attnflow", command, str(config), "--out", str(tmp / f"{job}-two"),
                     "--no-progress", *NO_FIGURES.get(command, []), "--coordinator", f"127.0.0.1:{port}",
                     "--num-processes", "2", "--process-id", str(i)], cwd=REPO, env=env, stdout=logs[0],
                    stderr=logs[1]), logs))
            launched[job] = procs
        for job in JOBS:  # meanwhile, the one-process references
            _one_process(job, tmp / f"{job}.toml", tmp / f"{job}-one")
        results = {}
        for job, procs in launched.items():
            done = []
            for i, (p, logs) in enumerate(procs):
                p.wait(timeout=300)
                for log in logs:
                    log.close()
                done.append((p.returncode, (tmp / f"{job}-{i}.out").read_text(), (tmp / f"{job}-{i}.err").read_text()))
            results[job] = (tmp / f"{job}-one", tmp / f"{job}-two", done)
        yield results
    finally:
        for procs in launched.values():
            for p, logs in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
                for log in logs:
                    log.close()


def _results(summary):
    """summary.json without its execution fields (at every depth)."""
    if isinstance(summary, dict):
        return {k: _results(v) for k, v in summary.items() if k not in EXECUTION_FIELDS and not k.endswith("_s")}
    if isinstance(summary, list):
        return [_results(v) for v in summary]
    return summary


def _check_same_results(one: Path, two: Path) -> None:
    tables = sorted(p.name for p in one.glob("*.csv"))
    assert tables and tables == sorted(p.name for p in two.glob("*.csv"))
    for name in tables:
        assert (two / name).read_bytes() == (one / name).read_bytes(), name
    first, second = (json.loads((folder / "summary.json").read_text()) for folder in (one, two))
    assert _results(second) == _results(first)


def _check_exits(done) -> None:
    for code, stdout, stderr in done:
        assert code == 0, stderr[-3000:]


def test_phase_two_processes_compute_half_of_the_chunks_each_and_write_the_one_process_tables(runs):
    one, two, done = runs["phase"]
    _check_exits(done)
    assert "process 0 of 2: computed 2 of 4 chunks" in done[0][1] and "results in" in done[0][1]
    assert "resumed, " not in done[0][1]  # the other process's chunks are not called resumed
    assert "process 1 of 2: computed 2 of 4 chunks" in done[1][1] and "results in" not in done[1][1]
    _check_same_results(one, two)
    assert not list(one.glob("*.png")) and not list(two.glob("*.png"))  # --no-figures


def test_meanfield_two_processes_compute_half_of_the_units_each_and_write_the_one_process_tables(runs):
    one, two, done = runs["meanfield"]
    _check_exits(done)
    assert "process 0 of 2: computed 4 of 8 units" in done[0][1] and "results in" in done[0][1]
    assert "process 1 of 2: computed 4 of 8 units" in done[1][1] and "results in" not in done[1][1]
    # every unit stored once, in the shared folder
    assert len(list((two / "units").glob("*.npz"))) == 8
    _check_same_results(one, two)
    assert not list(one.glob("*.png")) and not list(two.glob("*.png"))  # --no-figures


@pytest.mark.parametrize("study, lines", [
    ("sensitivity", ("process 0 of 2: computed 1 of 2 units", "process 1 of 2: computed 1 of 2 units")),
    ("beyond-pd", ("process 0 of 2: computed 1 of 1 units", "process 1 of 2: computed 0 of 1 units")),
])
def test_probe_two_processes_split_the_independent_units_and_write_the_one_process_tables(runs, study, lines):
    one, two, done = runs[study]
    _check_exits(done)
    for (code, stdout, stderr), line in zip(done, lines):
        assert line in stdout, stdout
    assert "report in" in done[0][1] and "report in" not in done[1][1]
    _check_same_results(one, two)


def test_phase_two_processes_with_the_program_store_read_their_own_programs_back(runs, tmp_path):
    """The command's program store shared by the two processes (their exports, and each process's executables on
    its own devices): a second two-process run reads them back and writes the one-process tables (an executable of
    process 0's device loaded in process 1 failed there: its output was not process 1's to read)."""
    one = runs["phase"][0]
    config = tmp_path / "phase.toml"
    config.write_text(PHASE_TOML)
    cache = tmp_path / "xla"
    for run in ("first", "again"):
        port = _free_port()
        env = dict(os.environ, JAX_PLATFORMS="cpu", JAX_COORDINATOR_BIND_ADDRESS=f"127.0.0.1:{port}",
                   MPLBACKEND="Agg", ATTNFLOW_COMPILE_CACHE=str(cache))
        procs = [subprocess.Popen([sys.executable, "-m", "attnflow", "phase", str(config), "--out", str(tmp_path / run),
                                   "--no-progress", "--no-figures", "--coordinator", f"127.0.0.1:{port}",
                                   "--num-processes", "2",
                                   "--process-id", str(i)], cwd=REPO, env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for i in range(2)]
        for p in procs:
            _, err = p.communicate(timeout=300)
            assert p.returncode == 0, err[-3000:]
        _check_same_results(one, tmp_path / run)
    kept = sorted(p.suffix for p in (cache / "programs").iterdir())
    assert ".jaxexport" in kept and ".executable" in kept, kept
