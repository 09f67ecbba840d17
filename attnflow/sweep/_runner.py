r"""Chunked, resumable, sharded execution of a sweep: :func:`start_sweep` and :class:`SweepRun`.

A sweep is a list of *groups* (one ensemble / dimension each) of systems indexed
0..N-1; each system's matrices depend only on its seed
(:func:`attnflow.ensembles.system_seeds`). The work is cut into chunks of at most
``chunk_size`` systems of one group:

* every finished chunk is written atomically to ``chunks/<group>-<start>.npz``
  (temporary file + rename), so a sweep killed at any moment (even SIGKILL) and started
  again skips what is done; the final table is assembled from the chunk files in plan order,
  so it is identical to that of an uninterrupted run;
* the run folder's marker stores the config fingerprint; a changed config refuses to resume
  into the old folder (execution-only keys -- ``run.devices``, ``run.progress``,
  ``run.distributed`` -- are not part of it: results do not depend on them);
* inside a chunk the batch axis is sharded over the local devices with ``shard_map`` (each
  device runs its own vmapped computation; the chunk is padded to a multiple of the device
  count by repeating its last system, and the padding is dropped);
* with ``run.distributed = true`` the process calls :func:`jax.distributed.initialize` and
  takes every P-th chunk (P processes, all writing to one shared folder); process 0 waits
  for all chunk files and writes the table.

The pieces live in private modules along the way a sweep runs: ``_distributed``
(processes), ``_mesh`` (devices, shard_map), ``_rundir`` (the folder and its fingerprint),
``_chunks`` (plan, atomic chunk files, resume), ``_tables`` (CSV / Parquet).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from jax.sharding import Mesh

from .. import _validate as v
from .._resources import ANNOUNCE_S, check_fits, check_work, describe_work
from .._batching import loop_over_systems
from ..errors import InputError
from ..runio import load_config, merge_config
from ..spectral._eig import EIG_ROUTES, eig_route
from ._chunks import Chunk, concat, plan_chunks, run_chunks
from ._distributed import init_distributed
from ._mesh import check_eig_route, make_mesh, needs_per_system_loop, sharded
from ._rundir import EXECUTION_KEYS, execution_free, open_run
from ._tables import TABLE_FORMATS, check_table_formats, write_table, write_tables

__all__ = ["Chunk", "make_mesh", "needs_per_system_loop", "loop_over_systems", "check_eig_route", "sharded",
           "execution_free", "open_run", "run_chunks", "plan_chunks", "concat", "write_table", "write_tables",
           "check_table_formats", "init_distributed", "SweepRun", "start_sweep", "EXECUTION_KEYS", "TABLE_FORMATS",
           "check_sweep_config", "check_table_memory"]

#: the precisions a sweep computes in
DTYPES = ("float32", "float64")


def check_sweep_config(config: dict, kind: str, default_name: str) -> dict:
    """The checks every sweep config passes before any work: the schema of ``configs/<default_name>`` (no
    unknown or missing key, the default's types), then ``kind``, ``seed``, ``dtype``, ``density`` and the
    ``[run]`` table. Returns the config with the schema's types (an integer given for a number as a float)."""
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


def check_table_memory(what: str, key: str, value: int, default: int, rows: int, row_bytes: int) -> None:
    """Refuse a sweep whose final table (``rows`` rows of about ``row_bytes`` bytes, held at once while it is
    written) cannot fit; the message says how large ``key`` (now ``value``, by default ``default``) may be."""
    check_fits(f"the table of {what} ({rows} rows)", float(rows) * row_bytes, [(key, value, default, 1)])


@dataclass(frozen=True)
class SweepRun:
    """A started sweep: its folder, seed, eig route, device mesh and process layout."""

    out: Path
    seed: int
    route: str
    mesh: Mesh
    progress: bool
    formats: list
    process_index: int
    process_count: int
    #: the work estimate printed before the chunks run (with the progress bar, or for a long sweep), or None
    estimate: str | None = None

    def run_chunks(self, chunks: list[Chunk], compute: Callable[[Chunk], dict], desc: str) -> tuple[list[dict], dict]:
        """:func:`run_chunks` for this sweep; returns the parts (``[]`` on processes other than 0)
        and what this process did (index, count, chunks resumed from an earlier run and chunks
        computed here, chunks in all). A run that finds finished chunks of its share says so on
        stderr before it computes the others."""
        resumed = [0]
        if self.estimate:
            print(self.estimate, file=sys.stderr, flush=True)

        def on_start(stored: int, share: int) -> None:
            resumed[0] = stored
            if stored:
                whose = "" if self.process_count == 1 else f"process {self.process_index}: "
                print(f"{whose}resuming: {stored} of {share} chunks already done in {self.out}", file=sys.stderr,
                      flush=True)

        parts, computed = run_chunks(self.out, chunks, compute, progress=self.progress, desc=desc,
                                     process_index=self.process_index, process_count=self.process_count,
                                     on_start=on_start)
        return parts, {"process_index": self.process_index, "process_count": self.process_count,
                       "chunks_resumed_here": resumed[0], "chunks_computed_here": computed, "chunks": len(chunks)}


def start_sweep(config, out: str | Path, kind: str, *, num_devices: int | None = None,
                progress: bool | None = None, processes: dict | None = None,
                check_sizes: Callable[[int], None] | None = None,
                work: Callable[[], tuple[str, float, float, list]] | None = None) -> SweepRun:
    """Check the execution settings (table formats, eig route on this mesh), join the processes
    (:func:`init_distributed`), refuse sizes that cannot fit (``check_sizes(devices)``, called with the
    number of devices of the mesh) and work that cannot finish (``work()`` gives ``(what, flops, sequential
    steps, keys)`` of the whole sweep; each process does its share: :func:`attnflow._resources.check_work`),
    then claim ``out`` (:func:`open_run`, fingerprinted by the table the parsed ``config`` came from): every
    refusal comes before the folder is touched."""
    run = config.run
    formats = check_table_formats(list(run.table_formats))
    pidx, pcount = init_distributed(run.distributed, **(processes or {}))
    route = eig_route(run.eig_route)
    mesh = make_mesh(run.devices if num_devices is None else int(num_devices))
    check_eig_route(route, mesh)
    if check_sizes is not None:
        check_sizes(int(mesh.shape["batch"]))
    estimate = None
    show = run.progress if progress is None else bool(progress)
    if work is not None:  # said before the chunks run with the progress bar, and always for a long sweep
        what, flops, steps, keys = work()
        if check_work(what, flops / pcount, keys, steps=steps / pcount) >= ANNOUNCE_S or show:
            estimate = f"{what}: {describe_work(flops / pcount, steps / pcount)}"
    out, _ = open_run(out, kind, config.source, config.seed, pidx)
    return SweepRun(out=out, seed=config.seed, route=route, mesh=mesh, formats=formats, process_index=pidx,
                    process_count=pcount, progress=show, estimate=estimate)
