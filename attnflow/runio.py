"""Run folders, configs and provenance: results a user can trust.

* Configs are TOML. The shipped file in ``configs/`` is both the default and the schema: a
  user config may only use its keys, with values of the same type (one clear error otherwise).
* Every run writes into its own folder, marked by ``attnflow-run.json``; a folder that exists
  and is not a previous run of the same kind is refused (nothing is overwritten).
* Claiming a folder (:func:`claim_output_dir`) checks, before any work, that it can be written
  and that its disk has at least ``MIN_FREE_BYTES`` free, and locks it (``fcntl.flock`` on
  ``DIR/.attnflow.lock``, held until the process ends, so a kill releases it): a second process
  is refused instead of computing the same results again.
* Files are written atomically (temporary file ``.{name}.{random}.tmp`` + rename), with the mode
  the umask gives any new file: an interrupted run never leaves a half-written result, and the
  temporary files a kill left behind are removed when the folder is claimed again.
* Stored arrays that a run reads back (sweep chunks, probe checkpoints) carry their identity
  and a SHA-256 checksum (:func:`save_verified_npz`); a file that is unreadable, misplaced or
  changed is never used (:func:`load_verified_npz` sets it aside and says so).
* A job counts the units of work it has kept (:func:`count_kept`: chunks, units, sentences, optimiser
  steps, cases), so that an interrupted command says in one line what it kept
  (:func:`interrupted_sentence`).
"""

from __future__ import annotations

import contextlib
import functools
import copy
import datetime as _dt
import difflib
import hashlib
import json
import os
import platform
import re
import secrets
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any, Callable, TypeVar

from ._resources import format_bytes
from .errors import InputError

__all__ = [
    "CONFIG_DIR",
    "default_config_path",
    "load_config",
    "read_toml",
    "merge_config",
    "claim_output_dir",
    "atomic_write_bytes",
    "atomic_write_text",
    "atomic_write_json",
    "provenance",
    "config_fingerprint",
    "write_marker",
    "atomic_path",
    "remove_stale_temporaries",
    "save_verified_npz",
    "load_verified_npz",
    "set_aside",
    "MIN_FREE_BYTES",
    "KeptWork",
    "count_kept",
    "interrupted_sentence",
    "npz_problem",
]

CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"
MARKER = "attnflow-run.json"
#: the least free disk space a folder must have to be claimed for a run
MIN_FREE_BYTES = 50 * 2**20
#: a temporary file of an atomic write: ``.{name}.{random}.tmp`` or ``.{stem}.{random}.tmp{suffix}``
_TEMP = re.compile(r"^\.(?P<base>.+)\.[a-z0-9_]{8}\.tmp(?P<suffix>\.[^.]+)?$")
#: a run folder's lock files: process 0's, and those of the other processes' shares
_LOCK = re.compile(r"^\.attnflow(-\d+)?\.lock$")
#: the file :func:`claim_output_dir` creates and removes to check that a folder can be written
_WRITE_CHECK = ".attnflow-write-check"
#: the stored entry of :func:`save_verified_npz` that holds the identity and the checksum
_META = "__meta__"
F = TypeVar("F", bound=Callable)
_HELD: dict[str, int] = {}  # lock file -> the descriptor through which this process holds it


class KeptWork:
    """The units of work a running job has kept: ``kept`` of ``total`` ``unit`` (e.g. chunks), stored where the
    same command finds them again when ``resumes``; else done but kept nowhere (the job writes its results
    only at the end). Made by :func:`count_kept`; the job calls :meth:`add` as each unit is stored."""

    def __init__(self, total: int, unit: str, kept: int = 0, resumes: bool = True):
        self.total, self.unit, self.kept, self.resumes = int(total), unit, int(kept), bool(resumes)

    def add(self, count: int = 1) -> None:
        """Count ``count`` more units stored (or done, for a job that does not resume)."""
        self.kept += int(count)

    def sentence(self) -> str:
        """What an interruption now leaves, in words.

        Example:
            >>> from attnflow.runio import KeptWork
            >>> KeptWork(20, "chunks", kept=7).sentence()
            'interrupted: 7 of 20 chunks kept; the same command resumes'
            >>> KeptWork(14, "cases", kept=3, resumes=False).sentence()
            'interrupted after 3 of 14 cases; nothing is kept (the results are written when every one has run)'
        """
        if not self.resumes:
            return (f"interrupted after {self.kept} of {self.total} {self.unit}; nothing is kept (the results are "
                    "written when every one has run)")
        return f"interrupted: {self.kept} of {self.total} {self.unit} kept; the same command resumes"


_KEPT: list[KeptWork] = []  # the count of the job running in this process (the latest one started)


def count_kept(total: int, unit: str, *, kept: int = 0, resumes: bool = True) -> KeptWork:
    """Start counting the units of work the running job keeps (replacing an earlier count of this process):
    ``total`` units named ``unit``, ``kept`` of them already stored (resumed). Returns the count, which the
    job advances (:meth:`KeptWork.add`) as it stores each unit; :func:`interrupted_sentence` reads it.

    Example:
        >>> from attnflow.runio import count_kept, interrupted_sentence
        >>> kept = count_kept(20, "chunks", kept=5)
        >>> kept.add(2)
        >>> interrupted_sentence()
        'interrupted: 7 of 20 chunks kept; the same command resumes'
    """
    _KEPT[:] = [KeptWork(total, unit, kept, resumes)]
    return _KEPT[0]


def interrupted_sentence() -> str:
    """The one line an interrupted command prints: the running job's :class:`KeptWork`, or only that it was
    interrupted when no job has counted its work yet."""
    return _KEPT[0].sentence() if _KEPT else "interrupted before any work was kept"


def default_config_path(name: str) -> Path:
    """Path of a shipped config, e.g. ``default_config_path("reproduce.toml")``."""
    path = CONFIG_DIR / name
    if not path.is_file():
        raise InputError(f"the default config {path} is missing; pass --config PATH explicitly.")
    return path


def _type_name(value: Any) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
            list: "a list", dict: "a table"}.get(type(value), type(value).__name__)


def _check_value(key: str, default: Any, value: Any, where: str) -> Any:
    """``value`` for ``key`` if it has the default's type (an integer passes for a number; a number must be
    finite: TOML's ``nan`` and ``inf`` are refused), list entries checked against the default's first."""
    import math

    if isinstance(default, bool) or isinstance(value, bool):
        ok = isinstance(default, bool) and isinstance(value, bool)
    elif isinstance(default, float):
        ok = isinstance(value, (int, float))
        value = float(value) if ok else value
        if ok and not math.isfinite(value):
            raise InputError(f"config key '{key}' in {where} must be a finite number, got {value!r} "
                             "(TOML's nan and inf are not accepted).")
    elif isinstance(default, list):
        ok = isinstance(value, list)
        if ok and default:
            value = [_check_value(f"{key}[{i}]", default[0], item, where) for i, item in enumerate(value)]
    else:
        ok = isinstance(value, type(default))
    if not ok:
        raise InputError(
            f"config key '{key}' in {where} must be {_type_name(default)} (like the default {default!r}), "
            f"got {_type_name(value)} {value!r}."
        )
    return value


def merge_config(defaults: dict, user: dict, where: str = "config", prefix: str = "") -> dict:
    """Overlay ``user`` on ``defaults``; unknown keys and wrong types raise :class:`InputError`.

    A table whose default is empty (``{}``) accepts any keys (free-form sections).

    Example:
        >>> from attnflow.runio import merge_config
        >>> merge_config({"n": 20, "t1": 10.0}, {"t1": 5})
        {'n': 20, 't1': 5.0}
    """
    out = copy.deepcopy(defaults)
    for key, value in user.items():
        full = f"{prefix}{key}"
        if key not in defaults:
            close = difflib.get_close_matches(key, list(defaults), n=1)
            hint = f" (did you mean '{prefix}{close[0]}'?)" if close else ""
            raise InputError(
                f"unknown config key '{full}' in {where}{hint}; known keys here: "
                f"{', '.join(sorted(defaults)) or '(none)'}."
            )
        default = defaults[key]
        if isinstance(default, dict):
            if not isinstance(value, dict):
                raise InputError(f"config key '{full}' in {where} must be a table, got {_type_name(value)} {value!r}.")
            out[key] = copy.deepcopy(value) if not default else merge_config(default, value, where, f"{full}.")
        else:
            out[key] = _check_value(full, default, value, where)
    return out


def read_toml(path: str | os.PathLike) -> dict:
    """The table of the TOML file ``path``; a missing, unreadable, non-UTF-8 or invalid file raises
    :class:`InputError` naming it."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"config file {path} does not exist.")
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except UnicodeDecodeError as err:
        raise InputError(f"config file {path} is not UTF-8 text (byte {err.start}); save it as UTF-8 TOML.") from err
    except tomllib.TOMLDecodeError as err:
        raise InputError(f"config file {path} is not valid TOML: {err}.") from err
    except OSError as err:
        raise InputError(f"config file {path} cannot be read: {err.strerror}.") from err


def load_config(path: str | os.PathLike | None, default_name: str) -> dict:
    """Load the shipped default ``configs/<default_name>`` and overlay the user's TOML file."""
    defaults_path = default_config_path(default_name)
    defaults = read_toml(defaults_path)
    if path is None or Path(path).resolve() == defaults_path:
        return defaults
    return merge_config(defaults, read_toml(path), where=str(path))


def config_fingerprint(config: dict) -> str:
    """A stable hash of a resolved config (to refuse resuming a run whose config changed)."""
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _temp_target(name: str) -> str | None:
    """The file an atomic write's temporary file ``name`` was to become (None: not one)."""
    m = _TEMP.match(name)
    return None if m is None else m["base"] + (m["suffix"] or "")


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
    if all(_LOCK.match(n) or _temp_target(n) in (MARKER, _WRITE_CHECK) for n in names):
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
        fd, probe = _create_temp(path / _WRITE_CHECK)
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
        >>> from attnflow import runio
        >>> @runio.releases_output_dirs
        ... def job(out):
        ...     return runio.claim_output_dir(out, "demo")[1]
        >>> out = pathlib.Path(tempfile.mkdtemp()) / "run"
        >>> job(out), any(k.startswith(str(out.resolve())) for k in runio._HELD)
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
    (a first run that failed before writing anything); otherwise leave it as it is."""
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


def remove_stale_temporaries(folder: Path, targets: set[str] | None = None) -> None:
    """Remove the temporary files of atomic writes in ``folder`` (those of ``targets`` only, when
    given) that a kill left behind. Call it only while holding the lock that covers their writers."""
    with contextlib.suppress(FileNotFoundError):
        for entry in os.scandir(folder):
            target = _temp_target(entry.name)
            if target is not None and (targets is None or target in targets) and entry.is_file(follow_symlinks=False):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)


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
    atomic_write_json(path / MARKER, {"kind": kind, **(extra or {})})


def _create_temp(path: Path, suffix: str = "") -> tuple[int, Path]:
    """Create ``.{name}.{random}.tmp{suffix}`` beside ``path``, with the mode the umask gives a new
    file (``0o666 & ~umask``); returns its descriptor (open for writing) and path."""
    while True:
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp{suffix}")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), tmp
        except FileExistsError:
            continue


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file in the same folder and ``os.replace``.

    Example:
        >>> import os, tempfile, pathlib
        >>> from attnflow.runio import atomic_write_bytes
        >>> target = pathlib.Path(tempfile.mkdtemp()) / "a.bin"
        >>> atomic_write_bytes(target, b"done")
        >>> target.read_bytes(), os.listdir(target.parent)
        (b'done', ['a.bin'])
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _create_temp(path)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike):
    """Yield a temporary path beside ``path``; on success it replaces ``path``, else it is removed.

    For writers that need a file name (e.g. an animation writer).

    Example:
        >>> import tempfile, pathlib
        >>> from attnflow.runio import atomic_path
        >>> target = pathlib.Path(tempfile.mkdtemp()) / "a.txt"
        >>> with atomic_path(target) as tmp:
        ...     _ = tmp.write_text("done")
        >>> target.read_text()
        'done'
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _create_temp(path.with_name(path.stem), path.suffix)  # .{stem}.{random}.tmp{suffix}
    os.close(fd)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def _json_default(obj: Any) -> Any:
    import numpy as np

    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating,)):
        return float(obj)
    if isinstance(obj, (np.bool_,)):
        return bool(obj)
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, complex):
        return {"re": obj.real, "im": obj.imag}
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
    """Atomic JSON write; NumPy scalars/arrays are converted, NaN written as null-safe strings."""
    atomic_write_text(path, json.dumps(obj, indent=2, default=_json_default, allow_nan=True) + "\n")


def _checksum(arrays: dict) -> str:
    """SHA-256 over every array's name, dtype, shape and bytes, in sorted key order."""
    import numpy as np

    h = hashlib.sha256()
    for key in sorted(arrays):
        a = np.asarray(arrays[key])
        h.update(json.dumps([key, a.dtype.str, list(a.shape)]).encode())
        h.update(_bytes_of(a))  # the bytes of a.tobytes(), without the copy
    return h.hexdigest()


#: deflate (level 1) pays for an array when samples of it shrink below this fraction (:func:`save_verified_npz`)
DEFLATE_BELOW = 0.25


def _bytes_of(a) -> memoryview:
    """The bytes of an array without a copy (a copy only when it is not C-contiguous)."""
    import numpy as np

    return memoryview(np.ascontiguousarray(a).reshape(-1).view(np.uint8))


def _deflates(a) -> bool:
    """Whether deflate pays for ``a``: eight 64-KiB samples spread over it, compressed at level 1, come to
    under :data:`DEFLATE_BELOW` of their size (the start alone misleads: a phase job's energies of its
    first, smallest beta repeat; those of the rest do not).

    Measured on a phase job's per-system arrays (2-core Intel Xeon): count-valued arrays (clusters, span,
    the fraction of clustered pairs) shrink 13-130x at 270-560 MB/s; float64 measurements (energies, inner
    products) shrink only to 0.3-0.8 of their size, at 30-80 MB/s (the largest inner products, 0.3: 2.5 s
    to save 140 of 200 MB), so deflating them cost most of the writing.
    """
    import zlib

    import numpy as np

    raw = _bytes_of(a)
    piece = 1 << 16
    if len(raw) <= 8 * piece:
        sample = bytes(raw)
    else:
        starts = np.linspace(0, len(raw) - piece, 8).astype(np.int64)
        sample = b"".join(raw[s:s + piece] for s in starts)
    return len(sample) > 0 and len(zlib.compress(sample, 1)) < DEFLATE_BELOW * len(sample)


def save_verified_npz(path: str | os.PathLike, arrays: dict, identity: dict, *, compress: bool = False) -> None:
    """Write ``arrays`` atomically as ``.npz``, with ``identity`` (a JSON-able dict, by convention with
    ``kind``, ``name`` and the run's ``fingerprint``) and their checksum in a ``__meta__`` entry (JSON
    bytes as uint8, so that reading needs no pickle).

    With ``compress``, each array that deflate shrinks to under a quarter (:func:`_deflates`, judged on
    samples of it) is zip-deflated at level 1; the others are stored as they are. ``np.load`` reads either.
    The archive is written straight into the temporary file that replaces ``path``.

    Example:
        >>> import tempfile, pathlib, zipfile
        >>> import numpy as np
        >>> from attnflow.runio import save_verified_npz
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "a.npz"
        >>> noise = np.random.default_rng(0).normal(size=20_000)
        >>> save_verified_npz(path, {"counts": np.zeros(20_000), "noise": noise}, {"kind": "demo"}, compress=True)
        >>> {i.filename: i.compress_type == zipfile.ZIP_DEFLATED for i in zipfile.ZipFile(path).infolist()}
        {'counts.npy': True, 'noise.npy': False, '__meta__.npy': False}
    """
    import zipfile

    import numpy as np

    arrays = {k: np.asarray(v) for k, v in arrays.items()}
    meta = json.dumps({"identity": identity, "sha256": _checksum(arrays)}, sort_keys=True).encode()
    arrays[_META] = np.frombuffer(meta, np.uint8)
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as fh:
            with zipfile.ZipFile(fh, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
                for key, a in arrays.items():
                    member = key + ".npy"  # by name: the archive's deflate at level 1
                    if not (compress and _deflates(a)):
                        member = zipfile.ZipInfo(member, date_time=time.localtime()[:6])
                        member.compress_type = zipfile.ZIP_STORED
                    with archive.open(member, "w", force_zip64=True) as out:
                        np.lib.format.write_array(out, a, allow_pickle=False)
            fh.flush()
            os.fsync(fh.fileno())


def _describe(identity: Any) -> str:
    if not isinstance(identity, dict):
        return "an unknown file"
    return " ".join(str(identity[k]) for k in ("kind", "name") if k in identity) or "an unknown file"


def npz_problem(path: str | os.PathLike) -> str | None:
    """Why the file ``path`` is not an ``.npz`` archive, from its first bytes (None: it begins as one), so that a
    reader says what the file is instead of numpy's errors (an empty file's ``EOFError``, a text file's advice
    to unpickle it); raises :class:`InputError` when it cannot be read.

    Example:
        >>> import tempfile, pathlib
        >>> from attnflow.runio import npz_problem
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "a.npz"
        >>> _ = path.write_text("t, x")
        >>> npz_problem(path)
        'it is not an .npz file (it does not begin as a zip archive does)'
    """
    try:
        with open(path, "rb") as fh:
            head = fh.read(6)
    except OSError as err:
        raise InputError(f"{path} cannot be read ({err.strerror or err}).") from None
    if not head:
        return "it is an empty file (0 bytes)"
    if head == b"\x93NUMPY":
        return "it is a single NumPy array (.npy), not an .npz file"
    if head[:4] != b"PK\x03\x04":
        return "it is not an .npz file (it does not begin as a zip archive does)"
    return None


def _verify_npz(path: Path, identity: dict) -> tuple[dict | None, str]:
    """(the arrays, "") of a stored file of ``identity``; (None, why not) otherwise."""
    import numpy as np

    if path.is_dir():
        return None, "a folder, not a file"
    try:
        problem = npz_problem(path)
        if problem is not None:
            return None, problem.removeprefix("it is ")
        with np.load(path, allow_pickle=False) as f:
            data = {k: f[k] for k in f.files}
    except Exception as err:
        return None, f"not a readable .npz file ({type(err).__name__}: {err})"
    try:
        meta = json.loads(data.pop(_META).tobytes())
        stored, digest = meta["identity"], meta["sha256"]
    except Exception:
        return None, "no identity or checksum inside (written by an older attnflow or another program)"
    if digest != _checksum(data):
        return None, "its checksum does not match its contents (changed after it was written)"
    expected = json.loads(json.dumps(identity))
    if stored != expected:
        if isinstance(stored, dict) and {**stored, "fingerprint": None} == {**expected, "fingerprint": None}:
            return None, (f"written by a run of another config (fingerprint {stored.get('fingerprint')}, "
                          f"this run {expected.get('fingerprint')})")
        return None, f"content is {_describe(stored)}, not {_describe(expected)} (misplaced)"
    return data, ""


def set_aside(path: Path, reason: str, then: str) -> None:
    """Move a stored file that must not be used to ``<path>.damaged`` (replacing an older one) and
    say on stderr which file, why, and what happens ``then``."""
    aside = path.with_name(path.name + ".damaged")
    try:
        if aside.is_dir() and not aside.is_symlink():
            shutil.rmtree(aside)
        elif aside.exists() and path.is_dir():
            aside.unlink()
        os.replace(path, aside)
    except OSError as err:
        raise InputError(f"{path} cannot be used ({reason}) nor moved aside ({err.strerror or err}); remove it "
                         "and run again.") from None
    print(f"{path}: {reason}; moved to {aside.name}, {then}.", file=sys.stderr, flush=True)


def load_verified_npz(path: str | os.PathLike, identity: dict, *, then: str) -> dict | None:
    """The arrays :func:`save_verified_npz` stored in ``path`` with this ``identity``; None when
    there is no such file, or when it is unreadable, of another identity or fails its checksum:
    then it is set aside (:func:`set_aside`, with ``then`` saying what the caller does instead).

    Example:
        >>> import tempfile, pathlib, numpy as np
        >>> from attnflow.runio import save_verified_npz, load_verified_npz
        >>> folder = pathlib.Path(tempfile.mkdtemp())
        >>> save_verified_npz(folder / "a.npz", {"x": np.arange(3)}, {"kind": "chunk", "name": "a"})
        >>> load_verified_npz(folder / "a.npz", {"kind": "chunk", "name": "a"}, then="recomputing it")
        {'x': array([0, 1, 2])}
        >>> (folder / "a.npz").rename(folder / "b.npz")
        PosixPath(...)
        >>> load_verified_npz(folder / "b.npz", {"kind": "chunk", "name": "b"}, then="recomputing it") is None
        True
    """
    path = Path(path)
    if not os.path.lexists(path):
        return None
    data, reason = _verify_npz(path, identity)
    if data is None:
        set_aside(path, reason, then)
    return data


def _git_commit() -> str | None:
    repo = Path(__file__).resolve().parent.parent
    try:
        out = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        if out.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return out.stdout.strip() + ("+dirty" if dirty else "")
    except Exception:
        return None


def provenance(seed: int | None = None, config: dict | None = None) -> dict:
    """Versions, machine, devices, git commit, command line, time and seed of this run."""
    from importlib import metadata

    import jax

    versions = {}
    for pkg in ("attnflow", "jax", "jaxlib", "equinox", "diffrax", "optax", "numpy", "matplotlib"):
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = None
    return {
        "time_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": sys.argv,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "devices": [str(d) for d in jax.devices()],
        "versions": versions,
        "git_commit": _git_commit(),
        "seed": seed,
        "config_fingerprint": None if config is None else config_fingerprint(config),
    }
