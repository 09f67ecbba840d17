r"""Chunked, resumable, sharded execution of a sweep.

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
"""

from __future__ import annotations

import copy
import csv
import io
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import jax
import numpy as np
from jax.sharding import Mesh, PartitionSpec as P

from .. import runio
from ..errors import InputError
from ..linalg import loop_over_systems
from ..spectral.batched import eig_route

__all__ = ["Chunk", "make_mesh", "needs_per_system_loop", "loop_over_systems", "check_eig_route", "sharded", "execution_free", "open_run", "run_chunks", "write_table",
           "write_tables", "check_table_formats",
           "SweepRun", "start_sweep"]

EXECUTION_KEYS = ("devices", "progress", "distributed", "table_formats")


@dataclass(frozen=True)
class Chunk:
    group: int  # index into the plan's groups
    start: int
    stop: int

    @property
    def name(self) -> str:
        return f"g{self.group:03d}-{self.start:09d}"


def make_mesh(num_devices: int = 0) -> Mesh:
    """A 1-d mesh ``("batch",)`` over the first ``num_devices`` local devices (0: all).

    Example:
        >>> from attnflow.sweep.runner import make_mesh
        >>> make_mesh(1).shape["batch"]
        1
    """
    devs = jax.local_devices()
    if num_devices < 0 or num_devices > len(devs):
        raise InputError(f"run.devices must be between 0 (all) and {len(devs)} (local devices), got {num_devices}.")
    devs = devs[: num_devices or len(devs)]
    return Mesh(np.array(devs), ("batch",))


def needs_per_system_loop(mesh: Mesh) -> bool:
    """Whether each device should loop over its systems (``lax.map``) instead of vmapping.

    True on a CPU mesh of several devices. There, XLA:CPU may run a batched LAPACK custom call
    (eig, svd, eigh, getrf ... of a vmapped batch) as the continuation of a matmul on an
    intra-op pool thread; the LAPACK kernel then splits its batch over that same pool and waits
    for it, and when the pool's threads are all taken (2 cores, 2 devices) the wait never ends
    (seen with gdb: ``jax::ParallelBatchMap`` blocked in ``lapack_dsyevd_ffi``). A batch of one
    runs inline, so looping over systems avoids the deadlock; on a CPU it costs nothing, since
    the devices already occupy the cores. Accelerators keep the vmap.

    Example:
        >>> from attnflow.sweep.runner import make_mesh, needs_per_system_loop
        >>> needs_per_system_loop(make_mesh(1))
        False
    """
    devices = mesh.devices.ravel()
    return len(devices) > 1 and all(d.platform == "cpu" for d in devices)


def check_eig_route(route: str, mesh: Mesh) -> None:
    """Refuse the ``"host"`` eig route (a NumPy callback inside the sharded function) on a mesh of
    several CPU devices: the callback waits for its argument on the same XLA:CPU thread pool
    that is busy running the devices, and the sweep hangs (seen with gdb on 2 cores).

    Example:
        >>> from attnflow.sweep.runner import check_eig_route, make_mesh
        >>> check_eig_route("host", make_mesh(1))  # one device: fine
    """
    if route == "host" and needs_per_system_loop(mesh):
        raise InputError(
            f"run.eig_route = 'host' cannot run on {mesh.shape['batch']} CPU devices (the NumPy callback "
            "deadlocks XLA:CPU's thread pool); use 'auto' / 'device' (LAPACK), 'cpu', or run.devices = 1.")


def sharded(fn: Callable, mesh: Mesh, *, per_system_loop: bool | None = None) -> Callable:
    """Wrap a batched ``fn(*arrays) -> pytree`` (leading axis = systems) so that the batch is
    split over ``mesh`` with ``shard_map``; pads to a multiple of the device count.

    ``per_system_loop`` (default: :func:`needs_per_system_loop`) makes each device call ``fn``
    on one system at a time (``lax.map`` over batches of one) instead of on its whole shard.
    ``fn`` must treat systems independently (every sweep function does), so the results are
    the same either way.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.sweep.runner import make_mesh, sharded
        >>> f = sharded(lambda a: {"sq": a ** 2}, make_mesh())
        >>> f(jnp.arange(5.0))["sq"].tolist()
        [0.0, 1.0, 4.0, 9.0, 16.0]
    """
    ndev = mesh.shape["batch"]
    if per_system_loop is None:
        per_system_loop = needs_per_system_loop(mesh)
    body = loop_over_systems(fn) if per_system_loop else fn
    inner = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("batch"), out_specs=P("batch"), check_vma=False))

    def call(*arrays):
        b = np.shape(arrays[0])[0]
        pad = (-b) % ndev
        if pad:
            arrays = tuple(np.concatenate([np.asarray(a), np.repeat(np.asarray(a)[-1:], pad, axis=0)]) for a in arrays)
        out = inner(*arrays)
        return jax.tree_util.tree_map(lambda a: np.asarray(a)[:b], out)

    return call


def execution_free(config: dict) -> dict:
    """The config without execution-only keys (what the fingerprint covers)."""
    cfg = copy.deepcopy(config)
    for key in EXECUTION_KEYS:
        cfg.get("run", {}).pop(key, None)
    return cfg


def open_run(out: str | Path, kind: str, config: dict, seed: int, process_index: int = 0) -> tuple[Path, bool]:
    """Claim ``out`` for a sweep of ``kind``; refuse it when it holds a sweep of another config.
    Returns (folder, resumed)."""
    fp = runio.config_fingerprint(execution_free(config))
    if process_index != 0:  # process 0 claims the folder; the others wait for its marker
        deadline = time.time() + 600
        while not (Path(out) / runio.MARKER).exists():
            if time.time() > deadline:
                raise InputError(f"--out {out}: process 0 did not create the run folder within 600 s.")
            time.sleep(0.5)
    out, existed = runio.claim_output_dir(out, kind)
    if existed:
        marker = json.loads((out / runio.MARKER).read_text())
        if marker.get("fingerprint") != fp:
            raise InputError(
                f"--out {out} holds a {kind} sweep with another config (fingerprint "
                f"{marker.get('fingerprint')}, this config {fp}); resume it with its own config "
                f"({out / 'config.json'}) or choose a new folder."
            )
    elif process_index == 0:
        runio.write_marker(out, kind, {"fingerprint": fp})
        runio.atomic_write_json(out / "config.json", config)
    if process_index == 0:
        runio.atomic_write_json(out / "provenance.json", runio.provenance(seed, execution_free(config)))
    return out, existed


def _save_npz(path: Path, columns: dict) -> None:
    buf = io.BytesIO()
    np.savez(buf, **{k: np.asarray(v) for k, v in columns.items()})
    runio.atomic_write_bytes(path, buf.getvalue())


def _load_npz(path: Path) -> dict:
    with np.load(path, allow_pickle=False) as f:
        return {k: f[k] for k in f.files}


def run_chunks(out: Path, chunks: list[Chunk], compute: Callable[[Chunk], dict], *, progress: bool = True,
               process_index: int = 0, process_count: int = 1, desc: str = "sweep",
               poll_s: float = 2.0) -> tuple[list[dict], int]:
    """Compute the missing chunks (this process's share); return all chunks' columns in plan
    order (process 0 waits for the other processes' files; the others get ``[]``) and the
    number of chunks this process computed."""
    from tqdm.auto import tqdm

    folder = out / "chunks"
    folder.mkdir(exist_ok=True)
    mine = [c for i, c in enumerate(chunks) if i % process_count == process_index]
    todo = [c for c in mine if not (folder / f"{c.name}.npz").exists()]
    total = sum(c.stop - c.start for c in mine)
    done = total - sum(c.stop - c.start for c in todo)
    bar = tqdm(total=total, initial=done, unit="sys", desc=desc, disable=not progress, smoothing=0.1,
               dynamic_ncols=True)
    with bar:
        for c in todo:
            cols = compute(c)
            _save_npz(folder / f"{c.name}.npz", cols)
            bar.update(c.stop - c.start)
    if process_index != 0:
        return [], len(todo)
    told = False
    while True:
        missing = [c for c in chunks if not (folder / f"{c.name}.npz").exists()]
        if not missing:
            break
        if not told:
            print(f"process 0: waiting for {len(missing)} chunk(s) of the other {process_count - 1} process(es) "
                  f"in {folder}", file=sys.stderr, flush=True)
            told = True
        time.sleep(poll_s)
    return [_load_npz(folder / f"{c.name}.npz") for c in chunks], len(todo)


def _fmt(v) -> str:
    if isinstance(v, (bool, np.bool_)):
        return "true" if v else "false"
    if isinstance(v, (float, np.floating)):
        return repr(float(v)) if np.isfinite(v) else ("nan" if np.isnan(v) else ("inf" if v > 0 else "-inf"))
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    return str(v)


def write_table(path: Path, parts: list[dict], columns: list[str]) -> int:
    """Write the tidy CSV (one row per system) atomically; returns the number of rows."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(columns)
    rows = 0
    for part in parts:
        n = len(part[columns[0]])
        for i in range(n):
            w.writerow([_fmt(part[c][i]) for c in columns])
        rows += n
    runio.atomic_write_text(path, buf.getvalue())
    return rows


TABLE_FORMATS = ("csv", "parquet")


def check_table_formats(formats: list[str]) -> list[str]:
    """Validate ``run.table_formats`` (before any work); Parquet needs pyarrow.

    Example:
        >>> from attnflow.sweep.runner import check_table_formats
        >>> check_table_formats(["csv"])
        ['csv']
    """
    bad = [f for f in formats if f not in TABLE_FORMATS]
    if bad or not formats:
        raise InputError(f"run.table_formats must be a non-empty list of {TABLE_FORMATS}, got {formats}.")
    if "parquet" in formats:
        try:
            import pyarrow  # noqa: F401
        except ImportError as e:
            raise InputError("run.table_formats asks for 'parquet', but pyarrow is not installed: "
                             "pip install 'attnflow[parquet]', or use table_formats = [\"csv\"].") from e
    return list(formats)


def write_tables(out: Path, parts: list[dict], columns: list[str], formats: list[str]) -> list[Path]:
    """Write the tidy table as ``out/table.csv`` and/or ``out/table.parquet`` (same rows and
    columns; Parquet keeps the dtypes: bool, int64, float64, string), each atomically."""
    written = []
    if "csv" in formats:
        write_table(out / "table.csv", parts, columns)
        written.append(out / "table.csv")
    if "parquet" in formats:
        import pyarrow as pa
        import pyarrow.parquet as pq

        cols = concat(parts)
        table = pa.table({c: pa.array(np.asarray(cols[c]).tolist() if np.asarray(cols[c]).dtype.kind == "U"
                                      else np.asarray(cols[c])) for c in columns})
        with runio.atomic_path(out / "table.parquet") as tmp:
            pq.write_table(table, tmp)
        written.append(out / "table.parquet")
    return written


def concat(parts: list[dict]) -> dict:
    """Columns of all chunks, concatenated in plan order."""
    if not parts:
        return {}
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def plan_chunks(sizes: list[int], chunk_size: int) -> list[Chunk]:
    """Cut groups of ``sizes`` systems into chunks of at most ``chunk_size``.

    Example:
        >>> from attnflow.sweep.runner import plan_chunks
        >>> [c.name for c in plan_chunks([5, 2], 3)]
        ['g000-000000000', 'g000-000000003', 'g001-000000000']
    """
    if chunk_size < 1:
        raise InputError(f"run.chunk_size must be >= 1, got {chunk_size}.")
    return [Chunk(g, s, min(s + chunk_size, n)) for g, n in enumerate(sizes) for s in range(0, n, chunk_size)]


def init_distributed(enabled: bool, coordinator: str | None = None, num_processes: int | None = None,
                     process_id: int | None = None) -> tuple[int, int]:
    """Join a multi-process run; returns (process_index, process_count).

    With ``coordinator`` / ``num_processes`` / ``process_id`` (all three), calls
    ``jax.distributed.initialize`` with them (a manual launch: one command per process, the
    same ``coordinator`` "host:port" for all, served by process 0). Otherwise, when ``enabled``
    (``run.distributed = true``), calls it without arguments, so that JAX reads the launcher's
    environment (SLURM, Open MPI, Kubernetes, Cloud TPU). Must run before any JAX computation;
    a second call in one process is a no-op.

    Example:
        >>> from attnflow.sweep.runner import init_distributed
        >>> init_distributed(False)
        (0, 1)
    """
    manual = (coordinator, num_processes, process_id)
    if any(v is not None for v in manual):
        if any(v is None for v in manual):
            raise InputError("a manual multi-process launch needs all three of --coordinator HOST:PORT, "
                             f"--num-processes P and --process-id I; got {coordinator=}, {num_processes=}, "
                             f"{process_id=}.")
        if not (num_processes >= 1 and 0 <= process_id < num_processes):
            raise InputError(f"--process-id must be in 0 .. {num_processes - 1} and --num-processes >= 1, "
                             f"got {process_id} of {num_processes}.")
        if ":" not in coordinator:
            raise InputError(f"--coordinator must be HOST:PORT (process 0's address), got {coordinator!r}.")
        enabled = True
    if enabled and not jax.distributed.is_initialized():
        try:
            jax.distributed.initialize(*manual)
        except (ValueError, RuntimeError) as e:
            if all(v is None for v in manual):
                raise InputError(
                    "run.distributed = true, but JAX found no cluster launcher (SLURM, Open MPI, Kubernetes, "
                    "Cloud TPU) to read the process layout from; launch one process per host with "
                    f"--coordinator HOST:PORT --num-processes P --process-id I ({e})") from e
            raise
    return jax.process_index(), jax.process_count()


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

    def run_chunks(self, chunks: list[Chunk], compute: Callable[[Chunk], dict], desc: str) -> tuple[list[dict], dict]:
        """:func:`run_chunks` for this sweep; returns the parts (``[]`` on processes other than 0)
        and what this process did (index, count, chunks computed here, chunks in all)."""
        parts, computed = run_chunks(self.out, chunks, compute, progress=self.progress, desc=desc,
                                     process_index=self.process_index, process_count=self.process_count)
        return parts, {"process_index": self.process_index, "process_count": self.process_count,
                       "chunks_computed_here": computed, "chunks": len(chunks)}


def start_sweep(config: dict, out: str | Path, kind: str, *, num_devices: int | None = None,
                progress: bool | None = None, processes: dict | None = None) -> SweepRun:
    """Check the execution settings (table formats, eig route on this mesh), join the processes
    (:func:`init_distributed`), then claim ``out`` (:func:`open_run`): every refusal comes
    before the folder is touched."""
    run = config["run"]
    formats = check_table_formats(run["table_formats"])
    pidx, pcount = init_distributed(bool(run["distributed"]), **(processes or {}))
    route = eig_route(run["eig_route"])
    mesh = make_mesh(int(run["devices"] if num_devices is None else num_devices))
    check_eig_route(route, mesh)
    seed = int(config["seed"])
    out, _ = open_run(out, kind, config, seed, pidx)
    return SweepRun(out=out, seed=seed, route=route, mesh=mesh, formats=formats, process_index=pidx,
                    process_count=pcount, progress=bool(run["progress"] if progress is None else progress))
