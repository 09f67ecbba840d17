"""The ``[run]`` table of a chunked job (sweep, phase): how it executes, checked once.

:func:`check_job_table` checks what every chunked job's config shares before any work: the schema
of its shipped config, ``kind``, ``seed``, ``dtype``, ``density`` and the ``[run]`` table.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import _validate as v
from ..errors import InputError
from .._eig_routes import EIG_ROUTES
from ._tables import TABLE_FORMATS
from ._toml import load_config, merge_config

__all__ = ["RunSettings", "run_settings", "check_job_table", "DTYPES"]

#: the precisions a chunked job computes in
DTYPES = ("float32", "float64")


@dataclass(frozen=True)
class RunSettings:
    """The ``[run]`` table: how a chunked job executes (``devices``, ``progress``, ``distributed`` and
    ``table_formats`` do not change results and are not fingerprinted:
    :data:`attnflow.runs.EXECUTION_KEYS`)."""

    chunk_size: int
    devices: int
    eig_route: str
    distributed: bool
    progress: bool
    table_formats: tuple[str, ...]


def run_settings(run: dict) -> RunSettings:
    """The checked ``[run]`` table as :class:`RunSettings`.

    Example:
        >>> from attnflow.runs import run_settings
        >>> run_settings({"chunk_size": 10, "devices": 0, "eig_route": "auto", "distributed": False,
        ...               "progress": False, "table_formats": ["csv"]}).table_formats
        ('csv',)
    """
    return RunSettings(int(run["chunk_size"]), int(run["devices"]), run["eig_route"], bool(run["distributed"]),
                       bool(run["progress"]), tuple(run["table_formats"]))


def check_job_table(config: dict, kind: str, default_name: str) -> dict:
    """The checks every chunked job's config passes before any work: the schema of ``configs/<default_name>``
    (no unknown or missing key, the default's types), then ``kind``, ``seed``, ``dtype``, ``density`` and the
    ``[run]`` table. Returns the config with the schema's types (an integer given for a number as a float).

    Example:
        >>> from attnflow.runs import check_job_table, load_config
        >>> cfg = load_config(None, "ginibre-spectral.toml")
        >>> check_job_table(cfg, "spectral", "ginibre-spectral.toml")["kind"]
        'spectral'
    """
    defaults = load_config(None, default_name)
    if not isinstance(config, dict):
        raise InputError(f"a {kind} sweep config must be a table (dict), got {type(config).__name__}.")
    for table, have, prefix in ((defaults, config, ""), (defaults["run"], config.get("run", {}), "run.")):
        missing = [k for k in table if k not in have]
        if missing:
            raise InputError(f"config key '{prefix}{missing[0]}' is missing from the {kind} sweep config; "
                             f"start from configs/{default_name} (its defaults fill every key).")
    cfg = merge_config(defaults, config, where=f"the {kind} sweep config")
    if cfg["kind"] != kind:
        raise InputError(f"kind must be {kind!r} for this sweep, got {cfg['kind']!r}.")
    v.check_int("seed", cfg["seed"], 0, "the base seed of every system's draw")
    v.check_choice("dtype", cfg["dtype"], DTYPES, "the precision of the sweep")
    v.check_number("density", cfg["density"], "the fraction of nonzero entries of a sparse_symmetric V",
                   low=0, high=1, closed="high")
    run = cfg["run"]
    v.check_int("run.chunk_size", run["chunk_size"], 1, "systems per chunk file")
    v.check_int("run.devices", run["devices"], 0, "local devices to shard over; 0: all")
    v.check_choice("run.eig_route", run["eig_route"], EIG_ROUTES, "where the non-symmetric eig runs")
    v.check_names("run.table_formats", run["table_formats"], TABLE_FORMATS, "the table files to write")
    return cfg
