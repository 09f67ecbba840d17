"""The ``attnflow`` command keeps its traced programs between runs (``jax.export``), next to XLA's compiled ones.

XLA's persistent cache (:mod:`attnflow.runs._compile_cache`) skips the compile of a program seen before, but
its key is the lowered program, so every run still traces the Python code and lowers it first: the phase job's
chunk program and its start-cloud drawer took 0.5-0.6 s of a 3.8-second small phase diagram to trace and lower
(2-core Intel Xeon) before the compile cache could answer. The store keeps each program as JAX exports it
(``jax.export``: the lowered StableHLO with its input and output trees and shardings, in a few tens of KiB): a
later run of the same program reads it back and lowers a call to it (the two programs in about 0.2 s there), and
XLA's cache then holds its compiled code too.

A stored program is only ever used for the exact program it was made from. Its name is a hash of

* the caller's ``key``: everything its Python code reads to build the program (for the phase job, every
  field of the parsed config and of the group), and the inputs' shapes, dtypes and shardings;
* the source of the attnflow package itself (every ``.py`` file of it, read once a process), the versions of
  Python, JAX, jaxlib, NumPy, equinox and diffrax, and every JAX setting in force (float64, the default
  matmul precision, the PRNG, ...), the backend and its devices,

so that any change of code, package or setting makes another program. A first run in one process compiles the
traced program and exports it meanwhile (:func:`_compile_and_export`); a run of several processes, and a later run
that has the export but not the executable (below), run the exported program. The two give the same bits (tests
hold them equal on the phase job's chunks and tables). Where a program cannot be exported (a host callback, a
custom call without a stability guarantee), a marker says so and the program is traced as usual; an unreadable
file is traced and written anew.

Reading the export back still lowers it and hashes the result for XLA's cache (0.15-0.2 s of the phase job's
chunk program). So where XLA compiled a program anew (not from its cache: an executable read from it cannot be
written out again), the store also keeps the compiled executable
(:func:`jax.experimental.serialize_executable.serialize`, as XLA's cache does), named by the program, its
shardings and this machine's processor (XLA:CPU's code is this processor's); a later run loads it directly
(about 0.03 s) and falls back to the export where it cannot. It is the same compiled code, so the same bits.
An executable has a second name, by what XLA compiled (the lowered program, :func:`_compiled_name`): after a
change of the package that leaves a program's lowered form as it was, its first run finds the executable there
instead of compiling (XLA's cache would answer, and no executable could be kept for the new name).
An executable is machine code read back as a pickle, as XLA's own cache reads its files: the store's folder must
be as much yours as that cache's (the command keeps both in ``~/.cache/attnflow/xla``).

At most :data:`MAX_PROGRAMS` programs are kept, and as many executables in :data:`MAX_EXECUTABLE_BYTES` (the
least recently used go first). The
store is enabled by the ``attnflow`` command's process only
(:func:`attnflow.runs.enable_compile_cache`); from Python every program is traced as usual.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import os
import platform
import sys
import threading
from pathlib import Path
from typing import Any, Callable

__all__ = ["PROGRAMS_SUBDIR", "compile_kept", "enable_program_store", "kept_jit", "program_store", "source_digest"]

#: the store's folder inside the command's compilation cache folder (XLA's own files sit at its top level)
PROGRAMS_SUBDIR = "programs"
#: the most programs kept (a few tens of KiB each): past it, the least recently used are removed as one is added
MAX_PROGRAMS = 1000
#: the most bytes of compiled executables kept (the phase job's chunk program: about 370 KiB), besides their count
MAX_EXECUTABLE_BYTES = 2**28
#: the store of this process (None: off)
_STORE: list[Path | None] = [None]
#: settings that name where things are kept or logged, not what a program computes
_UNKEYED_SETTINGS = ("jax_compilation_cache_dir", "jax_persistent_cache", "jax_log_compiles",
                     "jax_explain_cache_misses", "jax_traceback", "jax_include_full_tracebacks")


def enable_program_store(path: str | Path | None) -> Path | None:
    """Keep traced programs in ``path`` (None: stop); returns the folder, or None where JAX cannot serialise
    programs here (its ``flatbuffers`` dependency missing) or the folder cannot be created.

    Example:
        >>> import tempfile
        >>> from attnflow.runs._programs import enable_program_store, program_store
        >>> folder = enable_program_store(tempfile.mkdtemp())
        >>> program_store() == folder
        True
        >>> enable_program_store(None) is None, program_store() is None
        (True, True)
    """
    if path is None or importlib.util.find_spec("flatbuffers") is None:
        _STORE[0] = None
        return None
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError:
        _STORE[0] = None
        return None
    _STORE[0] = path
    return path


def program_store() -> Path | None:
    """The folder traced programs are kept in by this process, or None (off: the default; the ``attnflow``
    command turns it on, :func:`attnflow.runs.enable_compile_cache`).

    Example:
        >>> from attnflow.runs import program_store
        >>> program_store() is None  # from Python, every program is traced as usual
        True
    """
    return _STORE[0]


@functools.lru_cache(maxsize=1)
def source_digest() -> str:
    """SHA-256 of the attnflow package's source: every ``.py`` file under it, by relative path and content.

    Example:
        >>> from attnflow.runs._programs import source_digest
        >>> len(source_digest()), source_digest() == source_digest()
        (64, True)
    """
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


@functools.lru_cache(maxsize=1)
def _versions() -> str:
    from importlib import metadata

    found = []
    for name in ("jax", "jaxlib", "numpy", "equinox", "diffrax"):
        try:
            found.append(f"{name}={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            found.append(f"{name}=-")
    return f"python={sys.version}|" + "|".join(found)


def _settings() -> str:
    """Every JAX setting in force in this thread (a context such as ``jax.enable_x64`` included), by name."""
    import jax

    values = []
    for name in sorted(jax.config.values):
        if name.startswith(_UNKEYED_SETTINGS):
            continue
        try:
            value = getattr(jax.config, name)
        except AttributeError:
            value = jax.config.values[name]
        values.append(f"{name}={value!r}")
    return "|".join(values)


def _devices() -> str:
    import jax

    return "|".join(f"{d.platform}:{d.device_kind}:{d.id}" for d in jax.devices())


@functools.lru_cache(maxsize=1)
def _processor() -> str:
    """This machine's processor: its architecture, and on Linux the model and feature flags of /proc/cpuinfo
    (XLA:CPU compiles for the features of the processor it runs on)."""
    found = {}
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                name, _, value = line.partition(":")
                name = name.strip()
                if name in ("model name", "flags", "Features", "CPU implementer", "CPU part") and name not in found:
                    found[name] = value.strip()
    except OSError:
        pass
    return "|".join([platform.machine(), platform.processor(), *(f"{k}={v}" for k, v in sorted(found.items()))])


def program_name(key: str, avals: tuple) -> str:
    """The file name of a program: a hash of the caller's ``key``, the inputs' avals, the package source,
    versions, settings and devices (see the module's docstring).

    Example:
        >>> import jax, numpy as np
        >>> from attnflow.runs._programs import program_name
        >>> a = (jax.ShapeDtypeStruct((4,), np.float32),)
        >>> program_name("demo", a) == program_name("demo", a), program_name("demo", a) == program_name("other", a)
        (True, False)
    """
    parts = [key, repr(_signature(avals)), source_digest(), *_environment()]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:40]


def _environment() -> list[str]:
    """What a program depends on besides its own code: the versions, every JAX setting in force in this thread and
    the devices."""
    return [_versions(), _settings(), _devices()]


def _signature(avals: tuple) -> tuple:
    """The shapes and dtypes of ``avals``, hashable."""
    return tuple((tuple(a.shape), str(a.dtype)) for a in avals)


def _avals(args: tuple) -> tuple:
    import jax
    import numpy as np

    return tuple(a if isinstance(a, jax.ShapeDtypeStruct) else jax.ShapeDtypeStruct(np.shape(a), np.result_type(a))
                 for a in args)


def compile_kept(jitted: Callable, avals: tuple, *, key: str, in_shardings: Any = None,
                 out_shardings: Any = None, on_lowered: Callable[[], None] | None = None) -> Callable | None:
    """The stored program of ``key`` for ``avals`` (``jax.ShapeDtypeStruct``), compiled: read back, or exported
    from ``jitted`` (a ``jax.jit`` function of positional arrays) and stored; None where the store is off
    (:func:`program_store`) or the program cannot be exported (the caller then runs ``jitted`` itself).
    ``in_shardings`` / ``out_shardings``: the shardings of the program's inputs and outputs (as for
    ``jax.jit``; a program over several devices needs them), None for one device. ``on_lowered()`` is called
    once the program is lowered, before XLA compiles it (which releases Python's lock): a caller can start
    Python work of its own on another thread there (not called when None is returned).

    Example:
        >>> import jax, numpy as np, tempfile
        >>> from attnflow.runs._programs import compile_kept, enable_program_store
        >>> f = jax.jit(lambda a: {"sq": a ** 2})
        >>> avals = (jax.ShapeDtypeStruct((3,), np.float32),)
        >>> compile_kept(f, avals, key="squares") is None  # the store is off
        True
        >>> _ = enable_program_store(tempfile.mkdtemp())
        >>> compile_kept(f, avals, key="squares")(np.arange(3, dtype=np.float32))["sq"].tolist()
        [0.0, 1.0, 4.0]
        >>> _ = enable_program_store(None)
    """
    store = program_store()
    if store is None:
        return None
    import jax

    name = program_name(key, avals)
    path, refused = store / f"{name}.jaxexport", store / f"{name}.refused"
    executable = store / f"{_executable_name(name, in_shardings, out_shardings)}.executable"
    program = _load_executable(executable)
    if program is not None:
        _touch(path)  # its export is used too (the fallback): as recent as the executable
        if on_lowered is not None:
            on_lowered()
        return program
    exported = None
    if path.is_file():
        try:
            exported = jax.export.deserialize(bytearray(path.read_bytes()))
        except Exception:  # noqa: BLE001 - damaged or of another format: traced and written anew below
            exported = None
        else:
            _touch(path)
    if exported is None:
        if refused.exists():
            return None
        # one process: the traced program is compiled (its executable kept) and exported meanwhile; the processes of
        # a multi-process run each compile the exported program, the same lowered program in every process
        if jax.process_count() == 1:
            return _compile_and_export(jitted, avals, store, path, refused, executable, in_shardings=in_shardings,
                                       out_shardings=out_shardings, on_lowered=on_lowered)
        exported = _export_to(jitted, avals, store, path, refused)
        if exported is None:
            return None
    lowered = jax.jit(exported.call, in_shardings=in_shardings, out_shardings=out_shardings).lower(*avals)
    twin = _twin(store, lowered, in_shardings, out_shardings)
    if on_lowered is not None:
        on_lowered()
    program = _load_twin(twin)
    if program is not None:
        _link(twin, executable)
        return program
    compiled, anew = _compile(lowered)
    if anew:
        _keep(compiled, executable, twin)
    return compiled


def _compile(lowered: Any) -> tuple[Any, bool]:
    """``lowered`` compiled, and whether XLA compiled it anew (:func:`_compiles_anew`: only such an executable can
    be kept)."""
    with _compiles_anew() as anew:
        compiled = lowered.compile()
    return compiled, anew()


def _compile_and_export(jitted: Callable, avals: tuple, store: Path, path: Path, refused: Path, executable: Path, *,
                        in_shardings: Any, out_shardings: Any, on_lowered: Callable[[], None] | None) -> Callable:
    """A program seen for the first time, in a run of one process: ``jitted`` traced, lowered and compiled (XLA's
    compile on a second thread: it releases Python's lock), while this thread exports it (JAX's trace cache gives
    the export the traced program: it lowers it again, 0.07 s of the phase job's chunk program) and writes the
    export or the refusal marker. The export runs in this thread because JAX's settings in scope (``enable_x64``
    and the others) are this thread's. The compiled executable is kept where the export succeeded: later runs load
    it (the same code, so the same bits), and the export serves where they cannot. An executable kept before under
    its second name (:func:`_compiled_name`: the same lowered program) is loaded instead of compiling."""
    from concurrent.futures import ThreadPoolExecutor

    import jax

    lowered = jax.jit(jitted, in_shardings=in_shardings, out_shardings=out_shardings).lower(*avals)
    twin = _twin(store, lowered, in_shardings, out_shardings)
    program = _load_twin(twin)  # compiled before, under another name (the package's source changed)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="attnflow-compile") as pool:
        compiling = pool.submit(_compile, lowered) if program is None else None
        if on_lowered is not None:
            on_lowered()
        exported = _export_to(jitted, avals, store, path, refused) is not None
        compiled, anew = (program, False) if compiling is None else compiling.result()
    if exported and program is not None:
        _link(twin, executable)
    elif exported and anew:
        _keep(compiled, executable, twin)
    return compiled


def _export_to(jitted: Callable, avals: tuple, store: Path, path: Path, refused: Path) -> Any:
    """Export ``jitted`` for ``avals`` and write it to ``path`` (the store then bounded); the ``jax.export.Exported``,
    or None where it cannot be exported (the reason then written to ``refused``). A disk that refuses the file changes
    nothing else (this run still has the program; later runs trace it again)."""
    import jax

    from ._atomic import atomic_write_bytes

    try:
        exported = jax.export.export(jitted)(*avals)
        data = exported.serialize()
    except Exception as err:  # noqa: BLE001 - not exportable (a callback, an unstable custom call)
        try:
            atomic_write_bytes(refused, f"{type(err).__name__}: {err}"[:2000].encode())
        except OSError:
            pass
        return None
    try:
        atomic_write_bytes(path, data)
        _bound(store)
    except OSError:
        pass
    return exported


def _executable_name(name: str, in_shardings: Any, out_shardings: Any) -> str:
    """The file name of a program's compiled executable: the program's ``name``, its shardings (an executable is
    compiled for them) and :func:`_machine` (its processor, XLA's flags, the process's index)."""
    parts = [name, repr(in_shardings), repr(out_shardings), _machine()]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:40]


def _machine() -> str:
    """What an executable is compiled for besides its program: this machine's processor (:func:`_processor`), XLA's
    flags (``XLA_FLAGS``: code generation options among them) and the process's index (each process of a
    multi-process run runs on its own devices)."""
    import jax

    return "\n".join([_processor(), "XLA_FLAGS=" + os.environ.get("XLA_FLAGS", ""), f"process={jax.process_index()}"])


def _compiled_name(lowered: Any, in_shardings: Any, out_shardings: Any) -> str:
    """The second name of an executable: what XLA compiles (the lowered program's text, without source locations),
    the trees of its inputs and outputs, its shardings, the versions, JAX's settings, the devices and
    :func:`_machine`. A program of another name (the package's source changed) that lowers to the same program
    finds the executable compiled before under it (:func:`_load_twin`): XLA's cache would answer its compile, and
    an executable read from that cache cannot be kept, so without it no executable would ever be kept for that
    name again (every later run would read the export back and lower it: about 0.08 s of the small phase row's
    3-second command on a 2-core Xeon)."""
    parts = [lowered.as_text(), repr(lowered.in_tree), repr(lowered.out_tree), repr(in_shardings),
             repr(out_shardings), *_environment(), _machine()]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:40]


def _twin(store: Path, lowered: Any, in_shardings: Any, out_shardings: Any) -> Path | None:
    """The path of the executable of ``lowered`` under its second name (:func:`_compiled_name`), or None where the
    lowered program cannot be printed (the store then goes on without the second name)."""
    try:
        return store / f"{_compiled_name(lowered, in_shardings, out_shardings)}.executable"
    except Exception:  # noqa: BLE001 - an optimisation only: never the reason a run fails
        return None


def _load_twin(twin: Path | None) -> Callable | None:
    """The executable stored under its second name ``twin`` (:func:`_compiled_name`), loaded; None where there is
    none (or no ``twin``). The caller links it under the program's own name."""
    return None if twin is None else _load_executable(twin)


def _keep(compiled: Any, executable: Path, twin: Path | None) -> None:
    """Write ``compiled`` (compiled anew) as ``executable``, with ``twin`` (:func:`_compiled_name`; None: none) a second
    name of the same file."""
    if _save_executable(executable, compiled) and twin is not None:
        _link(executable, twin)


def _link(source: Path, name: Path) -> None:
    """Make ``name`` a second name of the stored file ``source`` (a hard link, put in place atomically; a copy where
    the disk has no hard links); a disk that refuses, or ``source`` removed meanwhile, changes nothing."""
    from ._atomic import atomic_link

    try:
        atomic_link(source, name)
    except OSError:
        pass


#: the threads compiling under :func:`_compiles_anew`, each with the XLA cache requests it made meanwhile, and the
#: XLA cache hits of the whole process so far
_COMPILING: dict[int, list] = {}
_HITS: list[int] = [0]
_LISTENING: list[bool] = [False]
_LISTEN_LOCK = threading.Lock()


def _on_jax_event(event: str, **kwargs) -> None:
    if event == "/jax/compilation_cache/cache_hits":
        _HITS[0] += 1
    elif event == "/jax/compilation_cache/compile_requests_use_cache":
        requests = _COMPILING.get(threading.get_ident())
        if requests is not None:
            requests.append(event)


@contextlib.contextmanager
def _compiles_anew():
    """``with _compiles_anew() as anew:`` around a compile in this thread: ``anew()`` says that XLA compiled it
    anew, not read it from its persistent cache (an executable read from it cannot be serialised again, and one
    written so would fail when run): no cache hit anywhere in the process meanwhile, and either this thread asked
    the cache (and missed) or the cache is off. Where JAX's events cannot tell, it says False."""
    import jax

    with _LISTEN_LOCK:
        if not _LISTENING[0]:  # one listener for the process, registered on first use
            jax.monitoring.register_event_listener(_on_jax_event)
            _LISTENING[0] = True
    cache_off = not (jax.config.jax_compilation_cache_dir and jax.config.jax_enable_compilation_cache)
    requests = _COMPILING[threading.get_ident()] = []
    hits = _HITS[0]
    try:
        yield lambda: _HITS[0] == hits and (bool(requests) or cache_off)
    finally:
        _COMPILING.pop(threading.get_ident(), None)


def _devices_of(sharding: Any) -> list | None:
    """The devices an executable runs on, in its order, from one of its inputs' or outputs' shardings (a mesh's
    devices, or the single device); None for other layouts."""
    mesh = getattr(sharding, "mesh", None)
    if mesh is not None and hasattr(mesh, "devices"):
        return list(mesh.devices.flat)
    devices = getattr(sharding, "device_set", None)
    return list(devices) if devices is not None and len(devices) == 1 else None


def _save_executable(path: Path, compiled: Any) -> bool:
    """Write ``compiled`` (a ``jax.stages.Compiled`` compiled anew) with the ids of its devices, atomically; whether
    it was written (not where it cannot be serialised or the disk refuses)."""
    import pickle

    import jax
    from jax.experimental import serialize_executable

    from ._atomic import atomic_write_bytes

    shardings = [*compiled.input_shardings[0], *jax.tree_util.tree_leaves(compiled.output_shardings)]
    devices = _devices_of(shardings[0]) if shardings else None
    local = {d.id for d in jax.local_devices()}
    if devices is None or any(d.id not in local for d in devices):  # a program over several processes: not kept
        return False
    try:
        payload = serialize_executable.serialize(compiled)
        data = pickle.dumps(([d.id for d in devices], payload), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # noqa: BLE001 - not serialisable here: the export serves the later runs
        return False
    try:
        atomic_write_bytes(path, data)
        _bound(path.parent, kind=_KINDS[1], most_bytes=MAX_EXECUTABLE_BYTES)
    except OSError:
        return False
    return path.is_file()


def _load_executable(path: Path) -> Callable | None:
    """The compiled executable stored at ``path`` loaded on its devices, or None (no file, other devices, or a
    file that cannot be read back: the caller then goes through the export)."""
    import pickle

    import jax
    from jax.experimental import serialize_executable

    try:
        data = path.read_bytes()
    except OSError:
        return None
    try:
        ids, (serialized, in_tree, out_tree) = pickle.loads(data)
        by_id = {d.id: d for d in jax.local_devices()}  # this process's own (another's: not loaded)
        program = serialize_executable.deserialize_and_load(serialized, in_tree, out_tree,
                                                            execution_devices=[by_id[i] for i in ids])
    except Exception:  # noqa: BLE001 - damaged, or of another jaxlib: the export path writes it anew
        return None
    _touch(path)
    return program


def _touch(path: Path) -> None:
    """Mark a stored file used now, so that it is the last to be removed (:func:`_bound`); a store that refuses
    (read-only, or the file removed by another process meanwhile) changes nothing."""
    try:
        os.utime(path)
    except OSError:
        pass


#: the kinds of file the store bounds, each on its own: exported programs (and refusal markers), executables
_KINDS = ((".jaxexport", ".refused"), (".executable",))


def _bound(store: Path, most: int | None = None, kind: tuple[str, ...] = _KINDS[0],
           most_bytes: int | None = None) -> None:
    """Remove the least recently used files of one ``kind`` (exported programs and refusal markers, or compiled
    executables) of ``store`` beyond ``most`` (default :data:`MAX_PROGRAMS`) files and ``most_bytes`` bytes (None:
    no byte bound). A file of two names (an executable, :func:`_link`) counts once and goes with both."""
    most = MAX_PROGRAMS if most is None else most
    files: dict[tuple[int, int], list] = {}
    for p in store.iterdir():
        if p.suffix in kind:
            try:
                info = p.stat()
            except FileNotFoundError:  # removed by another process meanwhile
                continue
            files.setdefault((info.st_dev, info.st_ino), [info.st_mtime, info.st_size, []])[2].append(p)
    dated = sorted(files.values(), key=lambda entry: entry[0])
    total = sum(size for _, size, _ in dated)
    for i, (_, size, names) in enumerate(dated):
        if len(dated) - i <= most and (most_bytes is None or total <= most_bytes):
            break
        for p in names:
            try:
                p.unlink()
            except FileNotFoundError:
                pass
        total -= size


def kept_jit(jitted: Callable, key: str | None, *, in_shardings: Any = None, out_shardings: Any = None) -> Callable:
    """``jitted`` (a ``jax.jit`` function of positional arrays) as the program store runs it: ``f(*arrays)`` runs
    the stored program of ``key`` for the arguments' shapes and dtypes (:func:`compile_kept`, compiled once per
    shapes), or ``jitted`` itself where the store is off, ``key`` is None (a program never stored) or the program
    cannot be exported; ``f.precompile(*avals, on_lowered=None)`` compiles ahead of the call (``on_lowered()``:
    called once, when the program is lowered and XLA's compile begins, or at once where it was compiled
    already). ``key`` must name everything ``jitted``'s Python code reads to build the program.

    Example:
        >>> import jax, numpy as np
        >>> from attnflow.runs._programs import kept_jit
        >>> f = kept_jit(jax.jit(lambda a: a + 1), "plus one")
        >>> f(np.arange(3)).tolist()
        [1, 2, 3]
    """
    compiled: dict = {}

    def stored() -> bool:
        return key is not None and program_store() is not None

    def precompile(*avals, on_lowered: Callable[[], None] | None = None) -> Callable | None:
        avals = _avals(avals)
        called = []

        def lowered() -> None:
            if on_lowered is not None and not called:
                called.append(True)
                on_lowered()

        signature = _signature(avals)
        if signature not in compiled:  # the first precompile of these shapes
            program = compile_kept(jitted, avals, key=key, in_shardings=in_shardings, out_shardings=out_shardings,
                                   on_lowered=lowered) if stored() else None
            if program is None:  # traced as usual (no store, or not exportable)
                plain = jitted.lower(*avals)
                lowered()
                plain.compile()
            compiled[signature] = program
        lowered()
        return compiled[signature] if stored() else None

    def call(*arrays):
        program = precompile(*arrays) if stored() else None
        return jitted(*arrays) if program is None else program(*arrays)

    call.precompile = precompile
    return call
