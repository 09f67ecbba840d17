"""The test target of the Makefile runs every test file and every doctest module, whatever its name."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: pytest options that would leave tests out of a run
_SELECTING = ("-k", "-m", "--ignore", "--ignore-glob", "--deselect", "--lf", "--last-failed", "-x", "--exitfirst",
              "--maxfail", "--sw", "--stepwise")


def _pytest_invocations(makefile_dry_run: str) -> list[list[str]]:
    """The argument lists after ``pytest`` in each shell command of ``make -n test``."""
    runs = []
    for line in makefile_dry_run.splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        command: list[str] = []
        for token in [*lexer, ";"]:
            if token in (";", "&&", "||", "|", "&"):
                if "pytest" in command:
                    runs.append(command[command.index("pytest") + 1:])
                command = []
            else:
                command.append(token)
    return runs


def test_invocations_are_split_at_shell_operators():
    line = 'ulimit -s 1 || true; python -m pytest -q tests && echo "done; ok"'
    assert _pytest_invocations(line) == [["-q", "tests"]]


def _uncovered(test_files: list[Path], runs: list[list[str]]) -> list[Path]:
    """Test files that no pytest invocation names, itself or through a folder above it."""
    paths = [(ROOT / a).resolve() for run in runs for a in run if not a.startswith("-")]
    return [f for f in test_files if not any(f == p or p in f.parents for p in paths)]


def test_uncovered_detects_a_file_left_out():
    runs = [["-q", "tests/test_a.py"]]
    left_out = _uncovered([ROOT / "tests" / "test_a.py", ROOT / "tests" / "test_suite_layout.py"], runs)
    assert left_out == [ROOT / "tests" / "test_suite_layout.py"]


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_test_runs_every_test_file_in_one_process():
    out = subprocess.run(["make", "-n", "test"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    runs = _pytest_invocations(out)
    assert len(runs) == 1, f"make test should run one pytest process, found {len(runs)}: {runs}"
    (args,) = runs
    selecting = [a for a in args if a.split("=")[0] in _SELECTING]
    assert not selecting, f"make test passes options that leave tests out: {selecting}"
    assert not any(ch in a for a in args for ch in "*?["), f"make test chooses files by a glob: {args}"
    test_files = sorted((ROOT / "tests").glob("test_*.py"))
    assert test_files and not _uncovered(test_files, runs)
    assert (ROOT / "attnflow").resolve() in [(ROOT / a).resolve() for a in args if not a.startswith("-")], \
        "make test must collect the doctests of attnflow/"


#: a pytest plugin that prints each file pytest's collection takes (after testpaths, python_files,
#: ignore options and conftest hooks have had their say), as a test module or as a doctest module
#: (--doctest-modules also takes a test file whose name python_files rejects), and then drops it,
#: so that no module is imported
_COLLECTED_FILES_PLUGIN = """
import pytest

@pytest.hookimpl(wrapper=True)
def pytest_collect_file(file_path, parent):
    collectors = yield
    for c in collectors:
        print("COLLECTS", "doctests" if type(c).__name__ == "DoctestModule" else "tests", file_path)
    return []
"""


def _in_one_process(args: list[str]) -> list[str]:
    """``args`` without pytest-xdist's worker options (the probe reads collection in this process)."""
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a in ("-n", "--numprocesses", "--dist"):
            skip = True
        elif not a.startswith(("--numprocesses=", "--dist=")) and not (a.startswith("-n") and a[2:].isdigit()):
            out.append(a)
    return out + ["-p", "no:xdist"]


def test_worker_options_are_dropped_for_the_probe():
    assert _in_one_process(["-q", "-n", "2", "--dist", "loadfile", "tests", "-n4"]) == ["-q", "tests", "-p", "no:xdist"]


def _files_pytest_collects(args: list[str], cwd: Path, plugin_dir: Path) -> dict[str, set[Path]]:
    """The files ``pytest <args>`` run in ``cwd`` would collect tests from: {"tests": test modules,
    "doctests": doctest modules}."""
    (plugin_dir / "_collected_files_probe.py").write_text(_COLLECTED_FILES_PLUGIN)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(plugin_dir), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, "-m", "pytest", *_in_one_process(args), "--collect-only", "-p",
                        "_collected_files_probe"],
                       cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode in (0, 5), r.stdout[-3000:] + r.stderr[-3000:]  # 5: nothing collected
    collected: dict[str, set[Path]] = {"tests": set(), "doctests": set()}
    for line in r.stdout.splitlines():
        if line.startswith("COLLECTS "):
            _, kind, path = line.split(" ", 2)
            collected[kind].add(Path(path).resolve())
    return collected


def test_collection_probe_sees_a_file_the_configuration_leaves_out(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.pytest.ini_options]\npython_files = ["check_*.py"]\n')
    (tmp_path / "tests").mkdir()
    for name in ("test_left_out.py", "check_taken.py"):
        (tmp_path / "tests" / name).write_text("def test_one():\n    assert True\n")
    plugin_dir = tmp_path / "plugin"
    plugin_dir.mkdir()
    tests = tmp_path / "tests"
    collected = _files_pytest_collects(["-q", "-p", "no:cacheprovider", "--doctest-modules", "tests"], tmp_path, plugin_dir)
    assert collected["tests"] == {(tests / "check_taken.py").resolve()}
    assert collected["doctests"] == {(tests / "check_taken.py").resolve(), (tests / "test_left_out.py").resolve()}


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_pytest_collects_every_test_file_and_doctest_module_from_make_test(tmp_path):
    out = subprocess.run(["make", "-n", "test"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    (args,) = _pytest_invocations(out)
    collected = _files_pytest_collects(args, ROOT, tmp_path)
    test_files = {p.resolve() for p in (ROOT / "tests").rglob("test_*.py")}
    assert Path(__file__).resolve() in collected["tests"]
    assert not sorted(test_files - collected["tests"]), f"make test does not collect {sorted(test_files - collected['tests'])}"
    package = ROOT / "attnflow"
    modules = {p.resolve() for p in package.rglob("*.py") if p.name != "__main__.py"}  # pytest never imports those
    left_out = sorted(modules - collected["doctests"])
    assert not left_out, f"make test does not collect the doctests of {left_out}"
