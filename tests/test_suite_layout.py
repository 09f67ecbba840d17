"""The test target of the Makefile runs every test file and every doctest module, whatever its name."""

from __future__ import annotations

import shlex
import shutil
import subprocess
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
