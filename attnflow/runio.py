"""Run folders, configs and provenance: results a user can trust.

* Configs are TOML. The shipped file in ``configs/`` is both the default and the schema: a
  user config may only use its keys, with values of the same type (one clear error otherwise).
* Every run writes into its own folder, marked by ``attnflow-run.json``; a folder that exists
  and is not a previous run of the same kind is refused (nothing is overwritten).
* Files are written atomically (temporary file + rename): an interrupted run never leaves a
  half-written result.
"""

from __future__ import annotations

import contextlib
import copy
import datetime as _dt
import difflib
import json
import os
import platform
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path
from typing import Any

from .errors import InputError

__all__ = [
    "CONFIG_DIR",
    "default_config_path",
    "load_config",
    "merge_config",
    "claim_output_dir",
    "atomic_write_bytes",
    "atomic_write_text",
    "atomic_write_json",
    "provenance",
    "config_fingerprint",
    "write_marker",
    "atomic_path",
    "atomic_save_figure",
]

CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"
MARKER = "attnflow-run.json"


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
    if isinstance(default, bool) or isinstance(value, bool):
        ok = isinstance(default, bool) and isinstance(value, bool)
    elif isinstance(default, float):
        ok = isinstance(value, (int, float))
        value = float(value) if ok else value
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


def load_config(path: str | os.PathLike | None, default_name: str) -> dict:
    """Load the shipped default ``configs/<default_name>`` and overlay the user's TOML file."""
    defaults_path = default_config_path(default_name)
    with open(defaults_path, "rb") as fh:
        defaults = tomllib.load(fh)
    if path is None or Path(path).resolve() == defaults_path:
        return defaults
    path = Path(path)
    if not path.is_file():
        raise InputError(f"config file {path} does not exist.")
    try:
        with open(path, "rb") as fh:
            user = tomllib.load(fh)
    except tomllib.TOMLDecodeError as err:
        raise InputError(f"config file {path} is not valid TOML: {err}.") from err
    return merge_config(defaults, user, where=str(path))


def config_fingerprint(config: dict) -> str:
    """A stable hash of a resolved config (to refuse resuming a run whose config changed)."""
    import hashlib

    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:16]


def claim_output_dir(path: str | os.PathLike, kind: str) -> tuple[Path, bool]:
    """Make sure ``path`` can hold a run of ``kind``; returns (path, existed_as_same_kind).

    Refuses (InputError) a path that is a file, or a non-empty folder that is not a previous
    attnflow run of the same kind, so that unrelated files are never overwritten.
    """
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise InputError(f"--out {path} is a file; give a folder for the results.")
    if path.is_dir() and any(path.iterdir()):
        marker = path / MARKER
        try:
            previous = json.loads(marker.read_text())["kind"]
        except Exception:
            raise InputError(
                f"--out {path} exists and is not an attnflow {kind} folder (no {MARKER}); "
                "choose a new folder or remove it."
            ) from None
        if previous != kind:
            raise InputError(
                f"--out {path} holds an attnflow '{previous}' run, not a '{kind}' run; choose another folder."
            )
        return path, True
    path.mkdir(parents=True, exist_ok=True)
    return path, False


def write_marker(path: Path, kind: str, extra: dict | None = None) -> None:
    atomic_write_json(path / MARKER, {"kind": kind, **(extra or {})})


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file in the same folder and ``os.replace``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
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
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=path.suffix, dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def atomic_save_figure(fig, path: str | os.PathLike, **savefig_kwargs) -> str:
    """Save a matplotlib figure atomically (format from the suffix), close it; returns the file name."""
    import io

    import matplotlib.pyplot as plt

    path = Path(path)
    buf = io.BytesIO()
    fig.savefig(buf, format=path.suffix.lstrip(".") or "png", **savefig_kwargs)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())
    return path.name


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
