"""The former home of the job runtime, kept as a face of :mod:`attnflow.runs` for existing imports.

Everything here is :mod:`attnflow.runs`'s own object (the same function, not a copy): configs
(:func:`load_config`), run folders (:func:`claim_output_dir`, :func:`open_run`), atomic writes,
verified ``.npz`` files, provenance and the count of kept work. New code imports :mod:`attnflow.runs`.

Example:
    >>> from attnflow import runio, runs
    >>> runio.save_verified_npz is runs.save_verified_npz
    True
"""

from __future__ import annotations

from .runs import (CONFIG_DIR, MARKER, MIN_FREE_BYTES, KeptWork, atomic_path, atomic_write_bytes,
                   atomic_write_json, atomic_write_text, claim_output_dir, config_fingerprint, count_kept,
                   default_config_path, discard_output_dir, interrupted_sentence, load_config, load_verified_npz,
                   merge_config, npz_problem, open_run, provenance, read_toml, releases_output_dirs,
                   remove_stale_temporaries, save_verified_npz, set_aside, write_marker)

__all__ = [
    "CONFIG_DIR", "default_config_path", "load_config", "read_toml", "merge_config", "claim_output_dir",
    "open_run", "atomic_write_bytes", "atomic_write_text", "atomic_write_json", "provenance",
    "config_fingerprint", "write_marker", "atomic_path", "remove_stale_temporaries", "save_verified_npz",
    "load_verified_npz", "set_aside", "MIN_FREE_BYTES", "KeptWork", "count_kept", "interrupted_sentence",
    "npz_problem", "releases_output_dirs", "discard_output_dir", "MARKER",
]
