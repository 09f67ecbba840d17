r"""Chunked, resumable, sharded execution of a job: :func:`start_chunked` and :class:`ChunkedRun`.

A chunked job (a sweep, a phase diagram) is a list of *groups* of systems indexed 0..N-1, each
system's inputs depending only on its seed. The work is cut into chunks of at most ``chunk_size``
systems of one group:

* every finished chunk is written atomically to ``chunks/<group>-<start>.npz`` (temporary file +
  rename, verified: :class:`attnflow.runs.UnitStore`), so a run killed at any moment (even SIGKILL)
  and started again skips what is done; the final table is assembled from the chunks in plan order,
  so it is identical to that of an uninterrupted run;
* the run folder's marker stores the config fingerprint (:func:`attnflow.runs.open_run`); a changed
  config refuses to resume into the old folder (execution-only keys are not part of it);
* inside a chunk the batch axis is sharded over the local devices with ``shard_map`` (each device
  runs its own vmapped computation; the chunk is padded to a multiple of the device count by
  repeating its last system, and the padding is dropped);
* with ``run.distributed = true`` the process calls :func:`jax.distributed.initialize` and takes
  every P-th chunk (P processes, all writing to one shared folder); process 0 waits for all chunk
  files and writes the tables.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from jax.sharding import Mesh

from .._resources import ANNOUNCE_S, check_fits, check_work, describe_work
from ..spectral import eig_route
from ._chunks import Chunk, run_chunks
from ._distributed import init_distributed
from ._mesh import check_eig_route, make_mesh
from ._open import open_run
from ._tables import check_table_formats

__all__ = ["ChunkedRun", "start_chunked", "check_table_memory"]


def check_table_memory(what: str, key: str, value: int, default: int, rows: int, row_bytes: int) -> None:
    """Refuse a job whose final table (``rows`` rows of about ``row_bytes`` bytes, held at once while it is
    written) cannot fit; the message says how large ``key`` (now ``value``, by default ``default``) may be.

    Example:
        >>> from attnflow.runs import check_table_memory
        >>> check_table_memory("a sweep", "samples", 1000, 1000, rows=1000, row_bytes=512)  # fits: no refusal
    """
    check_fits(f"the table of {what} ({rows} rows)", float(rows) * row_bytes, [(key, value, default, 1)])


@dataclass(frozen=True)
class ChunkedRun:
    """A started chunked run: its folder, seed, eig route, device mesh and process layout."""

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

    def run_chunks(self, chunks: list[Chunk], compute: Callable[[Chunk], dict], desc: str,
                   writer=None) -> tuple[list[dict], dict]:
        """:func:`run_chunks` for this sweep; returns the parts (``[]`` on processes other than 0)
        and what this process did (index, count, chunks resumed from an earlier run and chunks
        computed here, chunks in all). A run that finds finished chunks of its share says so on
        stderr before it computes the others. ``writer``: an open :class:`~attnflow.runs.WriteBehind` of the
        caller's, which is left to write the last chunk's file."""
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
                                     on_start=on_start, writer=writer)
        return parts, {"process_index": self.process_index, "process_count": self.process_count,
                       "chunks_resumed_here": resumed[0], "chunks_computed_here": computed, "chunks": len(chunks)}


def start_chunked(config, out: str | Path, kind: str, *, num_devices: int | None = None,
                progress: bool | None = None, processes: dict | None = None,
                check_sizes: Callable[[int], None] | None = None,
                work: Callable[[], tuple[str, float, float, list]] | None = None) -> ChunkedRun:
    """Check the execution settings (table formats, eig route on this mesh), join the processes
    (:func:`init_distributed`), refuse sizes that cannot fit (``check_sizes(devices)``, called with the
    number of devices of the mesh) and work that cannot finish (``work()`` gives ``(what, flops, sequential
    steps, keys)`` of the whole sweep; each process does its share: :func:`attnflow._resources.check_work`),
    then open ``out`` (:func:`attnflow.runs.open_run`, fingerprinted by the table the parsed ``config`` came from): every
    refusal comes before the folder is touched.

    Example:
        >>> import tempfile, pathlib
        >>> from attnflow.runs import plan_chunks, start_chunked
        >>> from attnflow.sweep import load_sweep_config, parse_sweep_config
        >>> cfg = parse_sweep_config(load_sweep_config("ginibre-spectral.toml"))
        >>> run = start_chunked(cfg, pathlib.Path(tempfile.mkdtemp()) / "run", "demo", num_devices=1, progress=False)
        >>> parts, done = run.run_chunks(plan_chunks([3], 2), lambda c: {"row": list(range(c.start, c.stop))}, "demo")
        >>> [p["row"].tolist() for p in parts], done["chunks_computed_here"]
        ([[0, 1], [2]], 2)
    """
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
    out = open_run(out, kind, config, process=pidx, seed=config.seed).out
    return ChunkedRun(out=out, seed=config.seed, route=route, mesh=mesh, formats=formats, process_index=pidx,
                    process_count=pcount, progress=show, estimate=estimate)
