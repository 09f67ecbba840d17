"""The ``attnflow`` command keeps its compiled XLA programs between runs (JAX's persistent compilation cache).

A job compiles the same programs every time it runs the same shapes: a phase diagram over another beta grid, a
resumed sweep, a report drawn again. XLA's compile is a fixed cost of each command (about 0.8 s of the
4-second small phase diagram on a 2-core CPU); kept on disk it is paid once per machine and program.

:func:`enable_compile_cache` is called by the ``attnflow`` command's process only (``attnflow.cli.main.run``),
before any computation: importing attnflow, or calling its functions from Python, configures nothing. Where:

* ``ATTNFLOW_COMPILE_CACHE`` = a folder: that folder; ``off`` (or ``0``, ``false``, ``no``): no cache;
* unset: ``$XDG_CACHE_HOME/attnflow/xla`` (``~/.cache/attnflow/xla``);
* a cache of JAX's own (``JAX_COMPILATION_CACHE_DIR``, or ``jax.config`` set already) is left as it is.

Every program is kept, however short its compile (JAX's default keeps those of 1 s or more), in at most
:data:`MAX_CACHE_BYTES` (least recently used programs are dropped first, where the ``filelock`` package that
JAX's eviction needs is installed). A kept program is the same compiled code: results are bit for bit those of
a fresh compile. The process's traced programs are kept in its ``programs`` folder
(:mod:`attnflow.runs._programs`), so that a later run skips tracing them too.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["COMPILE_CACHE_ENV", "MAX_CACHE_BYTES", "compile_cache_dir", "enable_compile_cache"]

#: the environment variable that moves (a folder) or disables (``off``) the command's compilation cache
COMPILE_CACHE_ENV = "ATTNFLOW_COMPILE_CACHE"
#: the cache's size bound in bytes (1 GiB; a phase diagram's programs take about 100 KiB)
MAX_CACHE_BYTES = 2**30
_OFF = ("off", "0", "false", "no", "none", "")


def compile_cache_dir(environ: dict | None = None) -> Path | None:
    """The folder the command's compiled programs are kept in, or None (disabled, or JAX's own cache set by its
    environment variable).

    Example:
        >>> from attnflow.runs import compile_cache_dir
        >>> str(compile_cache_dir({"ATTNFLOW_COMPILE_CACHE": "/tmp/xla-programs"}))
        '/tmp/xla-programs'
        >>> compile_cache_dir({"ATTNFLOW_COMPILE_CACHE": "off"}) is None
        True
        >>> str(compile_cache_dir({"XDG_CACHE_HOME": "/data/cache"}))
        '/data/cache/attnflow/xla'
    """
    env = os.environ if environ is None else environ
    if env.get("JAX_COMPILATION_CACHE_DIR"):
        return None
    chosen = env.get(COMPILE_CACHE_ENV)
    if chosen is not None:
        return None if chosen.strip().lower() in _OFF else Path(chosen).expanduser()
    base = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME") or Path.home()) / ".cache")
    return Path(base) / "attnflow" / "xla"


def enable_compile_cache(environ: dict | None = None) -> Path | None:
    """Point JAX's persistent compilation cache at :func:`compile_cache_dir` for this process (and the processes
    it starts), keeping every program; returns the folder, or None where nothing was changed (disabled, JAX's own
    cache configured, or the folder cannot be created: the command then compiles as usual).

    Before JAX is imported this sets JAX's own environment variables (so that ``attnflow --help`` still does not
    import JAX); after, it updates ``jax.config``.

    Example:
        >>> from attnflow.runs import enable_compile_cache
        >>> enable_compile_cache({"ATTNFLOW_COMPILE_CACHE": "off"}) is None
        True
    """
    import sys

    env = os.environ if environ is None else environ
    path = compile_cache_dir(env)
    if path is None:
        return None
    jax = sys.modules.get("jax")
    if jax is not None and jax.config.jax_compilation_cache_dir:  # set by the caller's own code: theirs
        return None
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    try:  # JAX's least-recently-used eviction needs filelock
        import filelock  # noqa: F401
        bounded = True
    except ImportError:
        bounded = False
    settings = {"jax_compilation_cache_dir": str(path), "jax_persistent_cache_min_compile_time_secs": 0.0,
                "jax_persistent_cache_min_entry_size_bytes": 0,
                **({"jax_compilation_cache_max_size": MAX_CACHE_BYTES} if bounded else {})}
    for name, value in settings.items():
        if jax is not None:
            jax.config.update(name, value)
        else:
            env[name.upper()] = str(value)
    if environ is None:  # this process's own settings: its traced programs are kept beside the compiled ones
        from ._programs import PROGRAMS_SUBDIR, enable_program_store

        enable_program_store(path / PROGRAMS_SUBDIR)
    return path
