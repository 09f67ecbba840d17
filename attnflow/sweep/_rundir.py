"""A sweep's run folder: claimed and locked, fingerprinted by its config, refused to another config."""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path

from .. import runio
from ..errors import InputError

__all__ = ["EXECUTION_KEYS", "execution_free", "open_run", "run_fingerprint"]

#: run settings that do not change results (not part of the config fingerprint)
EXECUTION_KEYS = ("devices", "progress", "distributed", "table_formats")


def execution_free(config: dict) -> dict:
    """The config without execution-only keys (what the fingerprint covers)."""
    cfg = copy.deepcopy(config)
    for key in EXECUTION_KEYS:
        cfg.get("run", {}).pop(key, None)
    return cfg


def run_fingerprint(out: Path) -> str | None:
    """The config fingerprint in the marker of the run folder ``out`` (None: no marker)."""
    marker = out / runio.MARKER
    return json.loads(marker.read_text()).get("fingerprint") if marker.is_file() else None


def open_run(out: str | Path, kind: str, config: dict, seed: int, process_index: int = 0) -> tuple[Path, bool]:
    """Claim ``out`` for a sweep of ``kind`` (process 0 locks the folder, process i > 0 its share:
    :func:`attnflow.runio.claim_output_dir`); refuse it when it holds a sweep of another config.
    Returns (folder, resumed)."""
    fp = runio.config_fingerprint(execution_free(config))
    if process_index != 0:  # process 0 claims the folder; the others wait for its marker
        deadline = time.time() + 600
        while not (Path(out) / runio.MARKER).exists():
            if time.time() > deadline:
                raise InputError(f"--out {out}: process 0 did not create the run folder within 600 s.")
            time.sleep(0.5)
    out, existed = runio.claim_output_dir(out, kind, process=process_index)
    if existed:
        previous = run_fingerprint(out)
        if previous != fp:
            raise InputError(
                f"--out {out} holds a {kind} sweep with another config (fingerprint "
                f"{previous}, this config {fp}); resume it with its own config "
                f"({out / 'config.json'}) or choose a new folder."
            )
    elif process_index == 0:
        runio.write_marker(out, kind, {"fingerprint": fp})
        runio.atomic_write_json(out / "config.json", config)
    if process_index == 0:
        runio.atomic_write_json(out / "provenance.json", runio.provenance(seed, execution_free(config)))
    return out, existed
