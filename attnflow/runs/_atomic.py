"""Atomic writes: a temporary file beside the target, then ``os.replace``.

A temporary file is named ``.{name}.{random}.tmp`` (or ``.{stem}.{random}.tmp{suffix}`` for writers that
need the suffix) and made with the mode the umask gives any new file; an interrupted write never leaves a
half-written result, and :func:`remove_stale_temporaries` removes the temporaries a kill left behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
from pathlib import Path
from typing import Any, Iterator

__all__ = ["atomic_write_bytes", "atomic_write_text", "atomic_write_json", "json_text", "atomic_path",
           "remove_stale_temporaries", "temp_target"]

#: a temporary file of an atomic write: ``.{name}.{random}.tmp`` or ``.{stem}.{random}.tmp{suffix}``
_TEMP = re.compile(r"^\.(?P<base>.+)\.[a-z0-9_]{8}\.tmp(?P<suffix>\.[^.]+)?$")


def temp_target(name: str) -> str | None:
    """The file an atomic write's temporary file ``name`` was to become (None: not one).

    Example:
        >>> from attnflow.runs import temp_target
        >>> temp_target(".table.0a1b2c3d.tmp.parquet"), temp_target("notes.tmp")
        ('table.parquet', None)
    """
    m = _TEMP.match(name)
    return None if m is None else m["base"] + (m["suffix"] or "")


def _temp_name(path: Path, suffix: str = "") -> Path:
    """A fresh temporary name ``.{name}.{random}.tmp{suffix}`` beside ``path`` (:data:`_TEMP`)."""
    return path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp{suffix}")


def _create_temp(path: Path, suffix: str = "") -> tuple[int, Path]:
    """Create ``.{name}.{random}.tmp{suffix}`` beside ``path``, with the mode the umask gives a new
    file (``0o666 & ~umask``); returns its descriptor (open for writing) and path."""
    while True:
        tmp = _temp_name(path, suffix)
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), tmp
        except FileExistsError:
            continue


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file in the same folder and ``os.replace``.

    Example:
        >>> import os, tempfile, pathlib
        >>> from attnflow.runs import atomic_write_bytes
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
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it replaces ``path``, else it is removed.

    For writers that need a file name (e.g. an animation writer).

    Example:
        >>> import tempfile, pathlib
        >>> from attnflow.runs import atomic_path
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


def atomic_link(source: str | os.PathLike, path: str | os.PathLike) -> None:
    """Make ``path`` a second name of the file ``source``, atomically: a hard link made under a temporary name, then
    ``os.replace``; a copy (:func:`atomic_write_bytes`) where the disk has no hard links. Raises ``OSError`` where
    neither can be made (``source`` gone, the disk refusing).

    Example:
        >>> import pathlib, tempfile
        >>> from attnflow.runs._atomic import atomic_link
        >>> folder = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (folder / "a.bin").write_bytes(b"kept")
        >>> atomic_link(folder / "a.bin", folder / "b.bin")
        >>> (folder / "b.bin").read_bytes(), sorted(p.name for p in folder.iterdir())
        (b'kept', ['a.bin', 'b.bin'])
    """
    source, path = Path(source), Path(path)
    tmp = _temp_name(path)
    try:
        os.link(source, tmp)
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
        atomic_write_bytes(path, source.read_bytes())


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """:func:`atomic_write_bytes` of ``text`` as UTF-8.

    Example:
        >>> import tempfile, pathlib
        >>> from attnflow.runs import atomic_write_text
        >>> target = pathlib.Path(tempfile.mkdtemp()) / "a.md"
        >>> atomic_write_text(target, "# done")
        >>> target.read_text()
        '# done'
    """
    atomic_write_bytes(path, text.encode("utf-8"))


def _json_value(obj: Any, strict: bool) -> Any:
    """``obj`` with every number JSON can hold: NumPy scalars and arrays as Python numbers and lists, a float
    that is not finite (NaN, +-inf) as None where ``strict``, a complex number as ``{"re", "im"}``, a path as its
    text."""
    import math

    import numpy as np

    if isinstance(obj, float):  # Python floats and np.float64
        return float(obj) if math.isfinite(obj) or not strict else None
    if isinstance(obj, (bool, int, str)) or obj is None:
        return obj
    if isinstance(obj, dict):
        return {k: _json_value(v, strict) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_value(v, strict) for v in obj]
    if isinstance(obj, np.generic) and not isinstance(obj, np.complexfloating):
        return _json_value(obj.item(), strict)
    if isinstance(obj, np.ndarray):
        return _json_value(obj.tolist(), strict)
    if isinstance(obj, (complex, np.complexfloating)):
        return {"re": _json_value(obj.real, strict), "im": _json_value(obj.imag, strict)}
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "tolist"):
        return _json_value(obj.tolist(), strict)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def json_text(obj: Any, *, indent: int | None = 2, strict: bool = True) -> str:
    """``obj`` as standard JSON text (RFC 8259), for the files and outputs other programs read.

    JSON has no NaN or infinity (Python's ``json`` would write the non-standard ``NaN`` / ``Infinity``, which
    JavaScript, R's jsonlite and Go reject): a float that is not finite is written as ``null``. NumPy scalars and
    arrays become numbers and lists, complex numbers ``{"re": ..., "im": ...}``, paths their text.
    ``strict=False`` keeps Python's ``NaN`` / ``Infinity`` instead, for a record that only Python code reads back
    and computes with (the benchmarks' records).

    Example:
        >>> import numpy as np
        >>> from attnflow.runs import json_text
        >>> json_text({"margin": float("nan"), "t": np.array([1.5, np.inf]), "n": np.int64(3)}, indent=None)
        '{"margin": null, "t": [1.5, null], "n": 3}'
        >>> json_text({"margin": np.float32(np.nan)}, indent=None, strict=False)
        '{"margin": NaN}'
    """
    return json.dumps(_json_value(obj, strict), indent=indent, allow_nan=not strict)


def atomic_write_json(path: str | os.PathLike, obj: Any, *, strict: bool = True) -> None:
    """Atomic write of ``obj`` as JSON (:func:`json_text`: indent 2; standard, a non-finite float as null, unless
    ``strict=False``), with a final newline.

    Example:
        >>> import tempfile, pathlib
        >>> import numpy as np
        >>> from attnflow.runs import atomic_write_json
        >>> target = pathlib.Path(tempfile.mkdtemp()) / "a.json"
        >>> atomic_write_json(target, {"n": np.int64(3), "slope": np.nan})
        >>> target.read_text()
        '{\\n  "n": 3,\\n  "slope": null\\n}\\n'
    """
    atomic_write_text(path, json_text(obj, strict=strict) + "\n")


def remove_stale_temporaries(folder: Path, targets: set[str] | None = None) -> None:
    """Remove the temporary files of atomic writes in ``folder`` (those of ``targets`` only, when
    given) that a kill left behind. Call it only while holding the lock that covers their writers.

    Example:
        >>> import os, tempfile, pathlib
        >>> from attnflow.runs import remove_stale_temporaries
        >>> folder = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (folder / ".a.json.0a1b2c3d.tmp").write_text("half")
        >>> remove_stale_temporaries(folder)
        >>> os.listdir(folder)
        []
    """
    with contextlib.suppress(FileNotFoundError):
        for entry in os.scandir(folder):
            target = temp_target(entry.name)
            if target is not None and (targets is None or target in targets) and entry.is_file(follow_symlinks=False):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)
