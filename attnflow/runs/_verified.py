"""Verified ``.npz`` files: arrays stored with their identity and a SHA-256 checksum.

A file that a run reads back (sweep chunks, units, probe checkpoints) is written by
:func:`save_verified_npz`; :func:`load_verified_npz` never uses one that is unreadable, misplaced
(another identity) or changed (its checksum fails): it is set aside (:func:`set_aside`) and the
caller computes it again.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from ..errors import InputError
from ._atomic import atomic_path

__all__ = ["save_verified_npz", "load_verified_npz", "npz_problem", "set_aside", "DEFLATE_BELOW"]

#: the stored entry of :func:`save_verified_npz` that holds the identity and the checksum
_META = "__meta__"


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
    The archive is written straight into the temporary file that replaces ``path``, the checksum computed on
    another thread meanwhile (a phase job's 413 MB chunk into memory: 0.66-0.76 s -> 0.38-0.46 s, 2-core AMD EPYC).

    Example:
        >>> import tempfile, pathlib, zipfile
        >>> import numpy as np
        >>> from attnflow.runs import save_verified_npz
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "a.npz"
        >>> noise = np.random.default_rng(0).normal(size=20_000)
        >>> save_verified_npz(path, {"counts": np.zeros(20_000), "noise": noise}, {"kind": "demo"}, compress=True)
        >>> {i.filename: i.compress_type == zipfile.ZIP_DEFLATED for i in zipfile.ZipFile(path).infolist()}
        {'counts.npy': True, 'noise.npy': False, '__meta__.npy': False}
    """
    import zipfile
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np

    arrays = {k: np.asarray(v) for k, v in arrays.items()}
    json.dumps(identity)  # an identity JSON cannot hold fails here, before any array is written
    with atomic_path(path) as tmp, ThreadPoolExecutor(1, thread_name_prefix="attnflow-checksum") as hashing:
        # the checksum (SHA-256 releases the GIL) is computed while the arrays are written; its entry comes last
        digest = hashing.submit(_checksum, arrays)
        with open(tmp, "wb") as fh:
            with zipfile.ZipFile(fh, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive:

                def put(key, a):
                    member = key + ".npy"  # by name: the archive's deflate at level 1
                    if not (compress and _deflates(a)):
                        member = zipfile.ZipInfo(member, date_time=time.localtime()[:6])
                        member.compress_type = zipfile.ZIP_STORED
                    with archive.open(member, "w", force_zip64=True) as out:
                        np.lib.format.write_array(out, a, allow_pickle=False)

                for key, a in arrays.items():
                    put(key, a)
                meta = json.dumps({"identity": identity, "sha256": digest.result()}, sort_keys=True).encode()
                put(_META, np.frombuffer(meta, np.uint8))
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
        >>> from attnflow.runs import npz_problem
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
    say on stderr which file, why, and what happens ``then``.

    Example:
        >>> import tempfile, pathlib
        >>> from attnflow.runs import set_aside
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "a.npz"
        >>> _ = path.write_text("not an archive")
        >>> set_aside(path, "not an .npz file", "recomputing it")
        >>> sorted(p.name for p in path.parent.iterdir())
        ['a.npz.damaged']
    """
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
        >>> from attnflow.runs import save_verified_npz, load_verified_npz
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
