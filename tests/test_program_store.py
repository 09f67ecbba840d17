"""The command's store of traced programs (attnflow.runs._programs): a program is read back instead of traced,
only for the exact program it was made from, with the same results; what cannot be stored is traced as usual."""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attnflow.runs._programs as programs
from attnflow.runs import enable_program_store, kept_jit, make_mesh, program_store, sharded

X = np.random.default_rng(5).normal(size=(7, 3)).astype(np.float32)


@pytest.fixture
def store(tmp_path):
    folder = enable_program_store(tmp_path / "programs")
    assert folder is not None and program_store() == folder
    yield folder
    enable_program_store(None)


def _counted():
    """``(new, traced)``: ``new()`` makes a new function object of the same code (as a new process would: JAX's
    own caches do not know it), which records each time it is traced in ``traced``."""
    traced = []

    def new():
        def f(a):
            traced.append(a.shape)
            return {"y": jnp.sin(a) * 2.0 + jnp.cumsum(a, axis=0)}
        return f

    return new, traced


def _stored(folder):
    return sorted(p.name for p in folder.glob("*.jaxexport"))


def _executables(folder):
    """The stored executables, one name of each (an executable has two: its program's and its lowered form's)."""
    names: dict = {}
    for p in folder.glob("*.executable"):
        names[p.stat().st_ino] = min(names.get(p.stat().st_ino, p.name), p.name)
    return sorted(names.values())


def _program_executable(folder, key, shardings=None):
    """The executable stored under the name of the program of ``key`` for ``X``."""
    name = programs.program_name(key, programs._avals((X,)))
    return folder / f"{programs._executable_name(name, shardings, shardings)}.executable"


def _no_export_read(monkeypatch):
    """Fail any reading back of an exported program (a program then comes from its stored executable)."""
    def refuse(*args, **kwargs):
        raise AssertionError("an exported program was read back")

    monkeypatch.setattr(jax.export, "deserialize", refuse)


def test_without_a_store_the_program_is_traced_as_usual():
    assert program_store() is None
    new, traced = _counted()
    got = kept_jit(jax.jit(new()), "demo")(X)
    assert np.array_equal(got["y"], jax.jit(new())(X)["y"])
    assert len(traced) == 2  # two jits, two traces


def test_a_stored_program_is_read_back_without_tracing_and_gives_the_same_bits(store):
    new, traced = _counted()
    first = kept_jit(jax.jit(new()), "demo")(X)
    stored = _stored(store)
    assert len(traced) == 1 and len(stored) == 1
    again = kept_jit(jax.jit(new()), "demo")(X)  # a new jit of the same code, as a later process would make
    assert len(traced) == 1, "the stored program was traced again"
    assert _stored(store) == stored
    plain = jax.jit(new())(X)
    assert np.array_equal(first["y"], again["y"]) and np.array_equal(again["y"], plain["y"])


def test_every_part_of_a_program_names_another_file(store, monkeypatch):
    new, traced = _counted()
    kept_jit(jax.jit(new()), "demo")(X)
    kept_jit(jax.jit(new()), "another key")(X)
    kept_jit(jax.jit(new()), "demo")(X[:4])  # other shapes
    kept_jit(jax.jit(new()), "demo")(X.astype(np.int32))  # other dtypes
    assert len(_stored(store)) == 4 and len(traced) == 4
    with jax.enable_x64(True):  # another JAX setting
        kept_jit(jax.jit(new()), "demo")(X)
    monkeypatch.setattr(programs, "source_digest", lambda: "0" * 64)  # another version of the package
    kept_jit(jax.jit(new()), "demo")(X)
    assert len(_stored(store)) == 6 and len(traced) == 6


def test_an_executable_is_kept_for_xlas_flags(store, monkeypatch):
    """XLA's flags (code generation options among them) name another executable of the same program: one compiled
    under other flags is never loaded."""
    new, traced = _counted()
    kept_jit(jax.jit(new()), "demo")(X)
    name = programs.program_name("demo", programs._avals((X,)))
    before = programs._executable_name(name, None, None)
    monkeypatch.setenv("XLA_FLAGS", os.environ.get("XLA_FLAGS", "") + " --xla_cpu_enable_fast_math=false")
    assert programs._executable_name(name, None, None) != before
    kept_jit(jax.jit(new()), "demo")(X)  # the export read back; compiled for these flags, kept beside the first
    assert len(_executables(store)) == 2 and len(traced) == 1
    avals = (jax.ShapeDtypeStruct(X.shape, X.dtype),)
    assert programs.program_name("demo", avals) != programs.program_name("demo ", avals)


def test_a_damaged_file_is_traced_and_written_anew(store):
    new, traced = _counted()
    want = jax.jit(new())(X)["y"]
    kept_jit(jax.jit(new()), "demo")(X)
    (path,), executables = store.glob("*.jaxexport"), sorted(store.glob("*.executable"))
    path.write_bytes(b"not a program")
    executables[0].write_bytes(b"not an executable")  # both names of the one executable
    assert len(executables) == 2 and all(p.read_bytes() == b"not an executable" for p in executables)
    assert np.array_equal(kept_jit(jax.jit(new()), "demo")(X)["y"], want)
    assert path.read_bytes() != b"not a program"
    assert all(p.read_bytes() != b"not an executable" for p in executables)  # both written anew
    assert np.array_equal(kept_jit(jax.jit(new()), "demo")(X)["y"], want)
    assert len(traced) == 3  # the plain jit, the first store, the rewrite; not the last call


def test_a_compiled_executable_is_loaded_without_reading_the_export_and_gives_the_same_bits(store, monkeypatch):
    new, traced = _counted()
    first = kept_jit(jax.jit(new()), "demo")(X)
    assert len(_executables(store)) == 1 and len(_stored(store)) == 1
    with monkeypatch.context() as m:
        _no_export_read(m)
        again = kept_jit(jax.jit(new()), "demo")(X)
    assert len(traced) == 1 and np.array_equal(first["y"], again["y"])
    executable = _program_executable(store, "demo")  # a damaged executable: the export serves, no tracing
    executable.write_bytes(b"damaged")
    assert np.array_equal(kept_jit(jax.jit(new()), "demo")(X)["y"], first["y"])
    assert len(traced) == 1 and executable.read_bytes() != b"damaged"  # compiled anew, and written again


def test_an_executable_is_kept_for_its_processor(store, monkeypatch):
    new, traced = _counted()
    want = kept_jit(jax.jit(new()), "demo")(X)["y"]
    monkeypatch.setattr(programs, "_processor", lambda: "another processor")
    reads = []
    deserialize = jax.export.deserialize
    monkeypatch.setattr(jax.export, "deserialize", lambda *a, **k: reads.append(1) or deserialize(*a, **k))
    assert np.array_equal(kept_jit(jax.jit(new()), "demo")(X)["y"], want)
    assert reads == [1] and len(traced) == 1  # the export, read back: this processor had no executable
    assert len(_executables(store)) == 2 and len(_stored(store)) == 1


def test_an_executable_is_kept_for_its_shardings(store):
    """One exported program, lowered with and without shardings: an executable is compiled for its shardings, so
    each has its own."""
    from jax.sharding import NamedSharding, PartitionSpec

    new, traced = _counted()
    split = NamedSharding(make_mesh(1), PartitionSpec("batch"))
    plain = kept_jit(jax.jit(new()), "demo")(X)["y"]
    placed = kept_jit(jax.jit(new()), "demo", in_shardings=split, out_shardings=split)(X)["y"]
    assert np.array_equal(plain, placed) and placed.sharding == split
    assert len(_stored(store)) == 1 and len(_executables(store)) == 2 and len(traced) == 1


EXECUTABLE_FROM_XLA_CACHE = """
import sys, jax, jax.numpy as jnp, numpy as np
jax.config.update("jax_compilation_cache_dir", sys.argv[1])
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
compiles, reads = [], []
jax.monitoring.register_event_listener(
    lambda event, **kw: compiles.append(1) if event == "/jax/compilation_cache/compile_requests_use_cache" else None)
deserialize = jax.export.deserialize
jax.export.deserialize = lambda *a, **k: reads.append(1) or deserialize(*a, **k)
from attnflow.runs._programs import enable_program_store, kept_jit
store = enable_program_store(sys.argv[2])
key = sys.argv[3] if len(sys.argv) > 3 else "demo"
y = kept_jit(jax.jit(lambda a: jnp.where(a > 0, a * 3.0, 0.0).sum()), key)(np.arange(-5.0, 5.0))
files = {p.stat().st_ino for p in store.glob("*.executable")}
print(float(y), len(files), len(list(store.glob("*.executable"))), len(compiles), len(reads))
"""


def _run_kept(tmp_path, *key):
    """Run EXECUTABLE_FROM_XLA_CACHE in a process of its own: [the result, the executables kept (files, names), XLA's
    compiles (from its cache or not), the exports read back]."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", EXECUTABLE_FROM_XLA_CACHE, str(tmp_path / "xla"),
                           str(tmp_path / "programs"), *key], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_an_executable_that_xla_read_from_its_cache_is_not_written(tmp_path):
    """XLA's cache answers the second process's compile (its program files removed first), and the fourth's (its
    executable removed): such an executable cannot be serialised again (it would fail when run), so none is
    written; the export serves that program."""
    import shutil

    # compiled anew: its executable written, under two names (the program's, the lowered program's)
    assert _run_kept(tmp_path) == ["30.0", "1", "2", "1", "0"]
    shutil.rmtree(tmp_path / "programs")
    assert _run_kept(tmp_path) == ["30.0", "0", "0", "1", "0"]  # read from XLA's cache: none
    # the export read back (no executable): a call to it is another lowered program, which XLA compiles anew
    assert _run_kept(tmp_path) == ["30.0", "1", "2", "1", "1"]
    for path in (tmp_path / "programs").glob("*.executable"):
        path.unlink()
    assert _run_kept(tmp_path) == ["30.0", "0", "0", "1", "1"]  # that one read from XLA's cache: none written


def test_a_new_version_of_a_program_that_lowers_as_before_finds_its_executable(tmp_path):
    """Another package source (here: another key, as the source's digest is part of a program's name) whose program
    lowers to the same program: its first run finds the executable by its lowered form, without compiling (XLA's
    cache would answer, and an executable read from it cannot be kept), and keeps it under the new name, so the
    next run loads it without reading the export back."""
    assert _run_kept(tmp_path, "version 1") == ["30.0", "1", "2", "1", "0"]
    assert _run_kept(tmp_path, "version 2") == ["30.0", "1", "3", "0", "0"]  # no compile: found, a third name
    assert _run_kept(tmp_path, "version 2") == ["30.0", "1", "3", "0", "0"]  # loaded: no export read back


def test_a_program_that_cannot_be_exported_is_traced_each_time_and_marked_once(store, monkeypatch):
    def with_callback(a):
        doubled = jax.pure_callback(lambda v: np.asarray(v) * 2, jax.ShapeDtypeStruct(a.shape, a.dtype), a)
        return doubled + 1.0

    got = kept_jit(jax.jit(with_callback), "callback")(X)
    assert np.array_equal(np.asarray(got), X * 2 + 1)
    assert _stored(store) == [] and len(list(store.glob("*.refused"))) == 1

    def refuse(*args, **kwargs):
        raise AssertionError("export tried again after the marker")

    monkeypatch.setattr(jax.export, "export", refuse)
    assert np.array_equal(np.asarray(kept_jit(jax.jit(with_callback), "callback")(X)), X * 2 + 1)


def test_a_sharded_program_is_kept_with_its_shardings_and_fills_the_callers_arrays(store, monkeypatch):
    mesh = make_mesh()
    new, traced = _counted()
    want = sharded(new(), mesh)(X)["y"]
    got = sharded(new(), mesh, keep="demo")(X)["y"]
    into = {"y": np.empty_like(X)}
    again = sharded(new(), mesh, keep="demo")
    again.precompile(jax.ShapeDtypeStruct(X.shape, X.dtype))
    filled = again(X, into=into)
    assert filled["y"] is into["y"]
    assert np.array_equal(want, got) and np.array_equal(want, into["y"])
    assert len(_stored(store)) == 1 and len(traced) == 2  # the plain program and the stored one
    assert len(_executables(store)) == 1
    _no_export_read(monkeypatch)  # the executable, on the mesh's devices
    assert np.array_equal(sharded(new(), mesh, keep="demo")(X)["y"], want) and len(traced) == 2


def test_the_store_keeps_the_most_recently_used_programs(store, monkeypatch):
    monkeypatch.setattr(programs, "MAX_PROGRAMS", 2)  # three programs (other shapes: other lowered programs too)
    new, traced = _counted()
    kept_jit(jax.jit(new()), "a")(X)
    first, first_executable = _stored(store), _executables(store)
    first_files = {p.stat().st_ino for p in [*store.glob("*.jaxexport"), *store.glob("*.executable")]}
    kept_jit(jax.jit(new()), "b")(X[:6])
    for path in [*store.glob("*.jaxexport"), *store.glob("*.executable")]:  # "a" older than "b"
        os.utime(path, (1.0, 1.0) if path.stat().st_ino in first_files else (2.0, 2.0))
    kept_jit(jax.jit(new()), "a")(X)  # read back: now the most recent
    kept_jit(jax.jit(new()), "c")(X[:5])  # a third: "b", the least recently used, goes
    assert len(_stored(store)) == 2 and first[0] in _stored(store) and len(traced) == 3
    assert len(_executables(store)) == 2 and first_executable[0] in _executables(store)
    kept_jit(jax.jit(new()), "b")(X[:6])
    assert len(traced) == 4  # "b" was traced again


@pytest.mark.parametrize("with_store", [False, True])
def test_on_lowered_is_called_once_a_precompile_whatever_the_path(tmp_path, with_store):
    enable_program_store(tmp_path / "programs" if with_store else None)
    try:
        new, _ = _counted()
        calls = []
        aval = jax.ShapeDtypeStruct(X.shape, X.dtype)
        f = kept_jit(jax.jit(new()), "demo")
        f.precompile(aval, on_lowered=lambda: calls.append("first"))  # traced (and stored)
        f.precompile(aval, on_lowered=lambda: calls.append("compiled"))  # compiled already
        kept_jit(jax.jit(new()), "demo").precompile(aval, on_lowered=lambda: calls.append("again"))  # read back
        refused = kept_jit(jax.jit(lambda a: jax.pure_callback(np.sin, jax.ShapeDtypeStruct(a.shape, a.dtype), a)),
                           "callback")
        refused.precompile(aval, on_lowered=lambda: calls.append("refused"))
        assert calls == ["first", "compiled", "again", "refused"]
        assert np.allclose(np.asarray(refused(X)), np.sin(X))
    finally:
        enable_program_store(None)


def test_the_executables_are_kept_within_their_byte_bound(store, monkeypatch):
    new, traced = _counted()
    kept_jit(jax.jit(new()), "a")(X)
    first = sorted(store.glob("*.executable"))  # its two names, one file
    assert len(first) == 2 and first[0].stat().st_ino == first[1].stat().st_ino
    monkeypatch.setattr(programs, "MAX_EXECUTABLE_BYTES", first[0].stat().st_size + 1)  # room for one (counted once)
    os.utime(first[0], (1.0, 1.0))
    kept_jit(jax.jit(new()), "b")(X[:6])  # another lowered program
    assert len(_executables(store)) == 1 and not any(p.exists() for p in first)  # the older one went, both names
    assert len(list(store.glob("*.executable"))) == 2  # the newer one, under both names
    assert len(_stored(store)) == 2  # the exports are bounded by their count only


def test_only_a_program_of_the_same_lowered_form_and_trees_shares_an_executable(store):
    """The second name of an executable holds the lowered program and the trees of its inputs and outputs (a
    dict's keys): a program that differs in its computation or in the names of its outputs compiles its own."""
    plain = kept_jit(jax.jit(lambda a: {"y": jnp.sin(a)}), "a")(X)
    renamed = kept_jit(jax.jit(lambda a: {"z": jnp.sin(a)}), "b")(X)
    assert list(plain) == ["y"] and list(renamed) == ["z"] and np.array_equal(plain["y"], renamed["z"])
    assert len(_executables(store)) == 2
    again = kept_jit(jax.jit(lambda a: {"y": jnp.sin(a)}), "c")(X)  # the same as "a" under another name: found
    assert list(again) == ["y"] and len(_executables(store)) == 2 and len(list(store.glob("*.executable"))) == 5
    other = kept_jit(jax.jit(lambda a: {"y": jnp.cos(a)}), "d")(X)  # the same trees, another computation
    assert np.array_equal(other["y"], jnp.cos(X)) and len(_executables(store)) == 3


def test_a_lowered_program_that_cannot_be_named_is_kept_under_its_own_name_only(store, monkeypatch):
    """The second name is an optimisation: where the lowered program cannot be printed, the run goes on and its
    executable is kept under the program's name, which the next run loads."""
    def refuse(*args, **kwargs):
        raise RuntimeError("cannot print this program")

    monkeypatch.setattr(programs, "_compiled_name", refuse)
    new, traced = _counted()
    first = kept_jit(jax.jit(new()), "demo")(X)
    assert [p.name for p in store.glob("*.executable")] == [_program_executable(store, "demo").name]
    _no_export_read(monkeypatch)
    assert np.array_equal(kept_jit(jax.jit(new()), "demo")(X)["y"], first["y"]) and len(traced) == 1
