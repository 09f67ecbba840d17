"""The `attnflow` command's compilation cache: where it is, that it is used (the compiled programs and the traced
ones), that a kept program gives the same bytes, that JAX's own settings and `attnflow --help` are left alone."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from attnflow.runs import compile_cache_dir

ROOT = Path(__file__).resolve().parents[1]
CONFIG = """kind = "phase"
seed = 3
beta = {start = 0.5, stop = 4.0, num = 2}
n = 8
d = 2
systems = 4
t1 = 1.0
dt = 0.1
checkpoints = 5
dtype = "float64"
[run]
progress = false
"""


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("ATTNFLOW_COMPILE_CACHE", "JAX_COMPILATION_CACHE_DIR")}
    env.update(extra)
    return env


def _phase(config: Path, out: Path, env: dict) -> None:
    """``attnflow phase`` in a process of its own (no figures: the chunks and tables are what is compared)."""
    subprocess.run([sys.executable, "-m", "attnflow", "phase", str(config), "--out", str(out), "--no-figures"],
                   cwd=ROOT, env=env, check=True, capture_output=True, text=True)


@pytest.mark.parametrize("environ, expected", [
    ({"ATTNFLOW_COMPILE_CACHE": "/x/y"}, "/x/y"),
    ({"ATTNFLOW_COMPILE_CACHE": "OFF"}, None),
    ({"ATTNFLOW_COMPILE_CACHE": "0"}, None),
    ({"XDG_CACHE_HOME": "/c"}, "/c/attnflow/xla"),
    ({"HOME": "/home/u"}, "/home/u/.cache/attnflow/xla"),
    ({"JAX_COMPILATION_CACHE_DIR": "/j", "ATTNFLOW_COMPILE_CACHE": "/x"}, None),  # JAX's own setting wins
])
def test_where_the_cache_is(environ, expected):
    got = compile_cache_dir(environ)
    assert (None if got is None else str(got)) == expected


def test_the_command_keeps_its_programs_and_the_bytes_are_the_same(tmp_path):
    config = tmp_path / "phase.toml"
    config.write_text(CONFIG)
    cache = tmp_path / "xla"
    _phase(config, tmp_path / "first", _env(ATTNFLOW_COMPILE_CACHE=str(cache)))
    kept = sorted(p.name for p in cache.iterdir())
    assert any(name.endswith("-cache") for name in kept), kept  # the chunk program and the cloud draw
    _phase(config, tmp_path / "again", _env(ATTNFLOW_COMPILE_CACHE=str(cache)))  # from the kept programs
    _phase(config, tmp_path / "fresh", _env(ATTNFLOW_COMPILE_CACHE="off"))
    assert not (tmp_path / "off").exists()
    # a second run reads the programs instead of writing new ones
    assert sorted(p.name for p in cache.iterdir() if p.name.endswith("-cache")) == \
        [k for k in kept if k.endswith("-cache")]
    # and the traced programs (the chunk program over the devices, the cloud draw) and their compiled executables
    # (each under two names: its program's and its lowered form's) instead of tracing them
    traced = sorted(p.suffix for p in (cache / "programs").iterdir())
    assert traced == [".executable"] * 4 + [".jaxexport"] * 2, traced
    # the first run compiled the traced programs; without their executables a run reads the exports back
    executables = sorted((cache / "programs").glob("*.executable"))
    assert len({p.stat().st_ino for p in executables}) == 2
    for path in executables:
        path.unlink()
    _phase(config, tmp_path / "exported", _env(ATTNFLOW_COMPILE_CACHE=str(cache)))
    assert len(list((cache / "programs").glob("*.jaxexport"))) == 2
    for name in ("cells.csv", "metastability.csv"):
        again, fresh = (tmp_path / "again" / name).read_bytes(), (tmp_path / "fresh" / name).read_bytes()
        first, exported = (tmp_path / "first" / name).read_bytes(), (tmp_path / "exported" / name).read_bytes()
        assert again == fresh == first == exported
    chunks = sorted((tmp_path / "fresh" / "chunks").glob("*.npz"))
    assert chunks
    for chunk in chunks:
        fresh = np.load(chunk)
        for run in ("first", "again", "exported"):
            kept_chunk = np.load(tmp_path / run / "chunks" / chunk.name)
            assert sorted(kept_chunk.files) == sorted(fresh.files)
            for key in fresh.files:
                assert np.array_equal(kept_chunk[key], fresh[key], equal_nan=True), (run, chunk.name, key)


WARM_IMPORTS = """
import atexit, sys
atexit.register(lambda: print("equinox imported:", "equinox" in sys.modules, flush=True))
sys.argv = ["attnflow", "phase", sys.argv[1], "--out", sys.argv[2], "--no-figures"]
from attnflow.cli.main import run
run()
"""


def test_a_run_that_reads_its_kept_programs_does_not_import_the_modelling_stack(tmp_path):
    """A phase command whose programs are kept traces nothing, so it imports neither equinox nor the flows,
    integrators and kernels behind them (0.1-0.15 s of its start on a 2-core CPU); the first run does."""
    config = tmp_path / "phase.toml"
    config.write_text(CONFIG)
    env = _env(ATTNFLOW_COMPILE_CACHE=str(tmp_path / "xla"))

    def run(out: str) -> str:
        done = subprocess.run([sys.executable, "-c", WARM_IMPORTS, str(config), str(tmp_path / out)], cwd=ROOT,
                              env=env, check=True, capture_output=True, text=True)
        return done.stdout.strip().splitlines()[-1]

    assert run("first") == "equinox imported: True"  # traced
    assert run("again") == "equinox imported: False"  # read back


READ_IMPORTS = """
import atexit, sys
import attnflow.phase._engine as engine
real = engine.import_ahead
def spy(*modules):
    print("before the compile:", sorted(m for m in modules if m in sys.modules), flush=True)
    return real(*modules)
engine.import_ahead = spy
atexit.register(lambda: print("at the end:", sorted(m for m in engine.IMPORT_WHILE_COMPILING if m in sys.modules),
                              flush=True))
sys.argv = ["attnflow", "phase", sys.argv[1], "--out", sys.argv[2], "--no-figures"]
from attnflow.cli.main import run
run()
"""


@pytest.mark.parametrize("store", ["off", "kept"])
def test_the_modules_that_read_the_results_are_imported_while_the_program_compiles(tmp_path, store):
    """scipy.special (0.2 s of one core) is first imported on another thread once the chunk program is lowered,
    while XLA compiles it, not among the job's imports before its trace (on 2 cores that start is the one stretch
    the job cannot spread over both); the job's tables need it, so it is there at the end. Both compile paths."""
    assert "scipy.special" in __import__("attnflow.phase._engine", fromlist=["x"]).IMPORT_WHILE_COMPILING
    config = tmp_path / "phase.toml"
    config.write_text(CONFIG)
    env = _env(ATTNFLOW_COMPILE_CACHE="off" if store == "off" else str(tmp_path / "xla"))
    done = subprocess.run([sys.executable, "-c", READ_IMPORTS, str(config), str(tmp_path / "out")], cwd=ROOT,
                          env=env, check=True, capture_output=True, text=True)
    lines = done.stdout.strip().splitlines()
    assert lines[0] == "before the compile: []", done.stdout
    assert lines[-1] == "at the end: ['scipy.special']", done.stdout
    assert (tmp_path / "out" / "metastability.csv").is_file()


def test_help_does_not_import_jax_and_jax_settings_are_left_alone(tmp_path):
    code = ("import sys; from attnflow.runs._compile_cache import enable_compile_cache; "
            "p = enable_compile_cache(); print(p, 'jax' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=_env(ATTNFLOW_COMPILE_CACHE=str(tmp_path / "c")),
                         check=True, capture_output=True, text=True).stdout.split()
    assert out == [str(tmp_path / "c"), "False"]
    code = ("import jax; jax.config.update('jax_compilation_cache_dir', '/mine'); "
            "from attnflow.runs import enable_compile_cache; print(enable_compile_cache(), "
            "jax.config.jax_compilation_cache_dir)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=_env(ATTNFLOW_COMPILE_CACHE=str(tmp_path / "c")),
                         check=True, capture_output=True, text=True).stdout.split()
    assert out == ["None", "/mine"]
