"""Provenance: versions, machine, devices, git commit, command line, time and seed of a run."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import subprocess
import sys
from pathlib import Path

from ._fingerprint import fingerprint as run_fingerprint

__all__ = ["provenance", "git_commit"]


def git_commit() -> str | None:
    """The commit of the attnflow checkout (``+dirty`` when tracked files changed); None outside git.

    Example:
        >>> from attnflow.runs import git_commit
        >>> git_commit() is None or len(git_commit()) >= 40
        True
    """
    repo = Path(__file__).resolve().parent.parent.parent
    try:
        out = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        if out.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return out.stdout.strip() + ("+dirty" if dirty else "")
    except Exception:
        return None


def provenance(seed: int | None = None, config: dict | None = None, *, fingerprint: str | None = None) -> dict:
    """Versions, machine, devices, git commit, command line, time and seed of this run, and its config
    fingerprint (``fingerprint``, or :func:`attnflow.runs.fingerprint` of ``config``; None without either).

    Example:
        >>> from attnflow.runs import provenance
        >>> p = provenance(seed=3, fingerprint="f1")
        >>> p["seed"], p["config_fingerprint"], "jax" in p["versions"]
        (3, 'f1', True)
    """
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
        "git_commit": git_commit(),
        "seed": seed,
        "config_fingerprint": fingerprint if config is None else run_fingerprint(config),
    }
