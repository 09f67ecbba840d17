"""Claiming a run folder: refused when foreign, checked for writing and free space, locked.

* Every run writes into its own folder, marked by ``attnflow-run.json`` (:data:`MARKER`); a folder that
  exists and is not a previous run of the same kind is refused (nothing is overwritten).
* Claiming (:func:`claim_output_dir`) checks, before any work, that the folder can be written and that
  its disk has at least :data:`MIN_FREE_BYTES` free, and locks it (``fcntl.flock`` on
  ``DIR/.attnflow.lock``, held until the process ends, so a kill releases it): a second process is
  refused instead of computing the same results again.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import shutil
from pathlib import Path
from typing import Callable, TypeVar

from .._resources import format_bytes
from ..errors import InputError
from . import _atomic
from ._atomic import atomic_write_json, remove_stale_temporaries, temp_target

__all__ = ["MARKER", "MIN_FREE_BYTES", "claim_output_dir", "releases_output_dirs", "discard_output_dir",
           "write_marker", "read_marker"]

MARKER = "attnflow-run.json"
#: the least free disk space a folder must have to be claimed for a run
MIN_FREE_BYTES = 50 * 2**20
#: a run folder's lock files: process 0's, and those of the other processes' shares
_LOCK = re.compile(r"^\.attnflow(-\d+)?\.lock$")
#: the file :func:`claim_output_dir` creates and removes to check that a folder can be written
_WRITE_CHECK = ".attnflow-write-check"
F = TypeVar("F", bound=Callable)
_HELD: dict[str, int] = {}  # lock file -> the descriptor through which this process holds it


def _previous_run(path: Path, kind: str) -> bool:
    """True when ``path`` holds a previous run of ``kind``; False when it is absent or holds only
    the traces of a claim in progress (lock files, the marker's temporary file); refuses
    anything else."""
    if path.exists() and not path.is_dir():
        raise InputError(f"--out {path} is a file; give a folder for the results.")
    if not path.is_dir():
        return False
    try:
        names = [p.name for p in path.iterdir()]
    except OSError as err:
        raise InputError(f"--out {path} cannot be read ({err.strerror or err}); choose a folder you can read "
                         "and write.") from None
    if all(_LOCK.match(n) or temp_target(n) in (MARKER, _WRITE_CHECK) for n in names):
        return False
    try:
        previous = json.loads((path / MARKER).read_text())["kind"]
    except Exception:
        raise InputError(
            f"--out {path} exists and is not an attnflow {kind} folder (no {MARKER}); "
            "choose a new folder or remove it."
        ) from None
    if previous != kind:
        raise InputError(
            f"--out {path} holds an attnflow '{previous}' run, not a '{kind}' run; choose another folder."
        )
    return True


def _check_writable(path: Path) -> None:
    """Create and remove a file in ``path``; refuse the folder when that fails."""
    try:
        fd, probe = _atomic._create_temp(path / _WRITE_CHECK)
        os.close(fd)
        probe.unlink()
    except OSError as err:
        raise InputError(f"--out {path} cannot be written ({err.strerror or err}); choose a folder you can "
                         "write to or change its permissions.") from None


def _check_free_space(path: Path) -> None:
    free = shutil.disk_usage(path).free
    if free < MIN_FREE_BYTES:
        raise InputError(f"--out {path} is on a disk with only {format_bytes(free)} free, less than the "
                         f"{format_bytes(MIN_FREE_BYTES)} a run needs; free some space or choose a folder on "
                         "another disk.")


def _lock(path: Path, name: str) -> None:
    """Hold ``fcntl.flock`` on ``path/name`` until this process ends (again in the same process:
    a no-op); refuse the folder when another process holds it."""
    import fcntl

    lock = path / name
    key = str(lock.resolve())
    held = _HELD.pop(key, None)
    if held is not None:
        with contextlib.suppress(OSError):
            if os.path.samestat(os.fstat(held), os.stat(lock)):
                _HELD[key] = held
                return
        os.close(held)  # the folder was replaced as a whole since: lock its new lock file
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
    except PermissionError:  # another user's lock file in a shared folder: locking needs no write
        fd = os.open(lock, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as err:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
        os.close(fd)
        if not isinstance(err, BlockingIOError):
            raise InputError(f"--out {path} cannot be locked ({err.strerror or err}); choose a folder on a "
                             "local disk.") from None
        pid = f" (pid {holder})" if holder.isdigit() else ""
        raise InputError(f"--out {path} is in use by another attnflow process{pid}; wait for it to finish "
                         "or choose another folder.") from None
    with contextlib.suppress(OSError):  # the holder's pid, for the message above (not for a read-only file)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    _HELD[key] = fd


def releases_output_dirs(job: F) -> F:
    """Decorator of a job: the run folders it claims (:func:`claim_output_dir`) are unlocked when
    it returns or raises, so that a long-lived process (a notebook) does not keep them from other
    processes. Folders this process held before the call stay held.

    Example:
        >>> import tempfile, pathlib
        >>> from attnflow import runs
        >>> @runs.releases_output_dirs
        ... def job(out):
        ...     return runs.claim_output_dir(out, "demo")[1]
        >>> out = pathlib.Path(tempfile.mkdtemp()) / "run"
        >>> job(out), any(k.startswith(str(out.resolve())) for k in runs._folder._HELD)
        (False, False)
    """

    @functools.wraps(job)
    def wrapper(*args, **kwargs):
        before = set(_HELD)
        try:
            return job(*args, **kwargs)
        finally:
            for key in set(_HELD) - before:
                os.close(_HELD.pop(key))

    return wrapper  # type: ignore[return-value]


def discard_output_dir(path: str | os.PathLike) -> None:
    """Unlock and remove a run folder this process claimed when it holds nothing but its lock files
    (a first run that failed before writing anything); otherwise leave it as it is.

    Example:
        >>> import tempfile, pathlib
        >>> from attnflow.runs import claim_output_dir, discard_output_dir
        >>> out = pathlib.Path(tempfile.mkdtemp()) / "run"
        >>> _ = claim_output_dir(out, "demo")
        >>> discard_output_dir(out)
        >>> out.exists()
        False
    """
    path = Path(path)
    try:
        names = [p.name for p in path.iterdir()]
    except OSError:
        return
    if not all(_LOCK.match(n) for n in names):
        return
    for name in names:
        fd = _HELD.pop(str((path / name).resolve()), None)
        if fd is not None:
            os.close(fd)
        with contextlib.suppress(OSError):
            (path / name).unlink()
    with contextlib.suppress(OSError):
        path.rmdir()


def claim_output_dir(path: str | os.PathLike, kind: str, *, process: int = 0) -> tuple[Path, bool]:
    """Make sure ``path`` can hold a run of ``kind`` and lock it; returns (path, existed_as_same_kind).

    Refuses (InputError), before anything is written: a path that is a file, a non-empty folder
    that is not a previous attnflow run of the same kind (unrelated files are never
    overwritten); then a folder that cannot be created or written, a disk with less than
    ``MIN_FREE_BYTES`` free, and a folder another process holds. The lock is
    ``fcntl.flock`` on ``DIR/.attnflow.lock``, held until the job returns (jobs are decorated
    with :func:`releases_output_dirs`) or this process ends (a kill releases it too; this process
    may claim the folder again). Holding it, the temporary files that killed
    atomic writes left in the folder and its subfolders are removed, except in ``chunks/``,
    where each process of a sweep removes those of its own share.

    ``process`` = i > 0 is process i of a multi-process sweep, which shares process 0's folder:
    it takes ``DIR/.attnflow-{i}.lock``, the lock of its share of the chunks.

    Example:
        >>> import tempfile, pathlib
        >>> from attnflow.runs import claim_output_dir, write_marker
        >>> out = pathlib.Path(tempfile.mkdtemp()) / "run"
        >>> claim_output_dir(out, "demo")[1]
        False
        >>> write_marker(out, "demo")
        >>> claim_output_dir(out, "demo")[1]  # a previous run of the same kind
        True
        >>> claim_output_dir(out, "other")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        attnflow.errors.InputError: --out ... holds an attnflow 'demo' run, not a 'other' run; choose another folder.
    """
    path = Path(path)
    _previous_run(path, kind)  # the refusals that need no write come first
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InputError(f"--out {path} cannot be created ({err.strerror or err}); choose a folder you can "
                         "write to.") from None
    _check_writable(path)
    _check_free_space(path)
    _lock(path, ".attnflow.lock" if process == 0 else f".attnflow-{process}.lock")
    existed = _previous_run(path, kind)  # again, under the lock: its last holder may have claimed it
    if process == 0:
        for folder, subfolders, _ in os.walk(path):
            if Path(folder) == path:
                subfolders[:] = [d for d in subfolders if d != "chunks"]
            remove_stale_temporaries(Path(folder))
    return path, existed


def write_marker(path: Path, kind: str, extra: dict | None = None) -> None:
    """Write the run folder's marker ``{"kind": kind, **extra}`` atomically.

    Example:
        >>> import tempfile, pathlib
        >>> from attnflow.runs import MARKER, read_marker, write_marker
        >>> folder = pathlib.Path(tempfile.mkdtemp())
        >>> write_marker(folder, "demo", {"fingerprint": "f1"})
        >>> read_marker(folder)
        {'kind': 'demo', 'fingerprint': 'f1'}
    """
    atomic_write_json(path / MARKER, {"kind": kind, **(extra or {})})


def read_marker(path: Path) -> dict | None:
    """The marker of the run folder ``path`` (None: there is none, or it is not a JSON table).

    Example:
        >>> import tempfile, pathlib
        >>> from attnflow.runs import read_marker
        >>> read_marker(pathlib.Path(tempfile.mkdtemp())) is None
        True
    """
    try:
        marker = json.loads((Path(path) / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return marker if isinstance(marker, dict) else None
