"""The ``attnflow`` entry point: a lazy top-level parser (no JAX for ``--help``), one table of
sub-commands, and ``--figure-formats`` on every job that writes figures."""

import subprocess
import sys
from pathlib import Path

import pytest

from attnflow.cli._commands import COMMANDS, FIGURE_COMMANDS
from attnflow.cli.main import build_parser, figure_formats_arg, main

REPO = Path(__file__).resolve().parent.parent

_IMPORTS_JAX = """
import sys
from attnflow.cli.main import main
try:
    main({argv!r})
except SystemExit:
    pass
print("JAX IMPORTED" if "jax" in sys.modules else "NO JAX")
"""


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300)


def test_top_level_help_does_not_import_jax():
    r = _run(_IMPORTS_JAX.format(argv=["--help"]))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().endswith("NO JAX"), r.stdout
    for name, (_, summary) in COMMANDS.items():
        assert name in r.stdout and summary.split()[0] in r.stdout


def test_python_dash_m_help_lists_the_commands():
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "attnflow", "--help"], capture_output=True,
                       text=True, cwd=REPO, timeout=300)
    assert r.returncode == 0 and "COMMAND" in r.stdout
    assert all(name in r.stdout for name in COMMANDS)
    imported = {line.split("|")[-1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")}
    assert "jax" not in imported and "attnflow.cli.main" in imported


@pytest.mark.parametrize("command", list(COMMANDS))
def test_command_help_avoids_jax(command):
    r = _run(_IMPORTS_JAX.format(argv=[command, "--help"]))
    assert r.returncode == 0, r.stderr
    assert f"usage: attnflow {command}" in r.stdout and r.stdout.strip().endswith("NO JAX"), r.stdout


def test_table_matches_the_modules():
    """Every sub-command of the table is built by its module with the table's one-line help;
    the figure-writing jobs take --figure-formats, heads does not."""
    parser = build_parser()  # all modules
    sub = next(a for a in parser._actions if a.dest == "command")
    assert list(sub.choices) == list(COMMANDS)
    assert {a.dest: a.help for a in sub._choices_actions} == {n: h for n, (_, h) in COMMANDS.items()}
    for name, p in sub.choices.items():
        assert p.add_help, name  # the real parser, not a placeholder
        assert ("--figure-formats" in p.format_help()) == (name in FIGURE_COMMANDS), name


def test_figure_formats_option(capsys):
    assert figure_formats_arg("png,pdf") == ("png", "pdf")
    assert figure_formats_arg("SVG, png, svg") == ("svg", "png")
    with pytest.raises(SystemExit):
        main(["sweep", "x.toml", "--out", "o", "--figure-formats", "png,gif"])
    assert "give comma-separated formats among png, pdf, svg" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["nonsense"])
    assert "invalid choice: 'nonsense'" in capsys.readouterr().err


def test_help_constants_match_the_jobs():
    """The defaults that --help shows without importing the jobs are the jobs' own."""
    from attnflow.cli._commands import DEFAULT_OUTS, EXTENSION_STUDIES
    from attnflow.report._extensions import DEFAULT_OUT as EXT_OUT, STUDIES
    from attnflow.report._run import DEFAULT_OUT as REPRO_OUT

    assert DEFAULT_OUTS == {"reproduce": REPRO_OUT, "extensions": EXT_OUT}
    assert EXTENSION_STUDIES == tuple(STUDIES)


def test_the_command_process_flushes_its_output_runs_atexit_and_keeps_the_exit_status(tmp_path):
    """``attnflow`` ends its process with ``os._exit`` once the command returned: everything it printed (buffered
    into a pipe) arrives, its atexit handlers have run, and the command's status is the process's."""
    marker = tmp_path / "atexit-ran"
    code = f"""
import atexit, importlib, sys
cli = importlib.import_module("attnflow.cli.main")  # the module (attnflow.cli.main is also its function)
def command():
    atexit.register(lambda: open({str(marker)!r}, "w").write("yes"))
    for k in range(20000):
        print(f"line {{k}}")
    print("to stderr", file=sys.stderr)
    return 3
cli.main = command
cli.run()
print("never printed")
"""
    import os

    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # block-buffered, as a pipe is
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=env, timeout=300)
    assert r.returncode == 3, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 20000 and lines[-1] == "line 19999"
    assert "to stderr" in r.stderr and marker.read_text() == "yes"


def test_the_command_process_prints_a_warning_as_one_line_naming_the_command():
    """In the ``attnflow`` process a warning is one line, ``attnflow COMMAND: warning: ...`` (no source line under it);
    one from outside attnflow names where it came from. ``main`` called from Python leaves warnings to the caller."""
    code = """
import importlib, sys, warnings
cli = importlib.import_module("attnflow.cli.main")
def command():
    import attnflow.probe._optimize as lib  # a warning raised inside attnflow ...
    exec(compile("import warnings; warnings.warn('3 members frozen', RuntimeWarning)", lib.__file__, "exec"))
    exec(compile("import warnings; warnings.warn('from a library')", "/v/site-packages/jax/_src/x.py", "exec"))
    return 0
cli.main = command
sys.argv = ["attnflow", "probe", "c.toml", "--out", "o"]
cli.run()
"""
    r = subprocess.run([sys.executable, "-W", "always", "-c", code], capture_output=True, text=True, cwd=REPO,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stderr.splitlines() == ["attnflow probe: warning: 3 members frozen (RuntimeWarning)",
                                     "attnflow probe: warning: from a library (UserWarning, from jax/_src/x.py:1)"]
    import warnings

    before = warnings.showwarning
    assert main(["reproduce", "--list"]) == 0 and warnings.showwarning is before


_WORKERS_BEFORE_JAX = """
import sys
import attnflow.cli.phase as phase
seen = []
start = phase._figure_workers
def hook(args):
    seen.append("jax" in sys.modules)
    return start(args)
phase._figure_workers = hook
from attnflow.cli.main import main
code = main(["phase", {config!r}, "--out", {out!r}, "--no-progress"])
print(code, seen)
"""


def test_the_phase_commands_figure_workers_start_before_jax_is_imported(tmp_path):
    """The workers import matplotlib on the cores the command leaves idle while it imports JAX; started after it
    (the command's float64 scope imported JAX first), their start-up ran into the program's load and computation."""
    config = tmp_path / "phase.toml"
    config.write_text('kind = "phase"\nbeta = [1.0]\nn = 4\nd = 2\nsystems = 2\nt1 = 0.5\ncheckpoints = 2\n')
    r = _run(_WORKERS_BEFORE_JAX.format(config=str(config), out=str(tmp_path / "out")))
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[-2] == "0 [False]", r.stdout
