"""The one definition of a run's fingerprint: the config table without its execution-only keys.

A run folder stores the fingerprint of the config that made it (in ``attnflow-run.json``) and every
stored file carries it; a resumed run is refused when its fingerprint differs. Keys that change how a
run executes but not its results (:data:`EXECUTION_KEYS` of the ``[run]`` table) are left out, so a run
resumes on another number of devices or without its progress bar.
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

__all__ = ["EXECUTION_KEYS", "execution_free", "config_fingerprint", "fingerprint"]

#: the ``[run]`` settings that do not change results (not part of the fingerprint)
EXECUTION_KEYS = ("devices", "progress", "distributed", "table_formats")


def config_fingerprint(config: Any) -> str:
    """A stable hash of a JSON-able table (sorted keys): 16 hex digits.

    Example:
        >>> from attnflow.runs import config_fingerprint
        >>> config_fingerprint({"b": 1, "a": 2}) == config_fingerprint({"a": 2, "b": 1})
        True
    """
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:16]


def execution_free(config: dict) -> dict:
    """A copy of ``config`` without the execution-only keys of its ``[run]`` table.

    Example:
        >>> from attnflow.runs import execution_free
        >>> execution_free({"seed": 0, "run": {"chunk_size": 10, "devices": 2, "progress": True}})
        {'seed': 0, 'run': {'chunk_size': 10}}
    """
    cfg = copy.deepcopy(config)
    run = cfg.get("run") if isinstance(cfg, dict) else None
    if isinstance(run, dict):
        for key in EXECUTION_KEYS:
            run.pop(key, None)
    return cfg


def fingerprint(config: dict) -> str:
    """The fingerprint of a run of ``config``: :func:`config_fingerprint` of :func:`execution_free`.

    Example:
        >>> from attnflow.runs import fingerprint
        >>> fingerprint({"seed": 0, "run": {"devices": 1}}) == fingerprint({"seed": 0, "run": {"devices": 4}})
        True
    """
    return config_fingerprint(execution_free(config))
