"""The plan of a chunked run, and the atomic, verified, resumable computation of its chunks."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from ..errors import InputError
from ._atomic import remove_stale_temporaries
from ._folder import read_marker
from ._kept import count_kept
from ._units import UnitStore, wait_for_units

__all__ = ["Chunk", "plan_chunks", "run_chunks", "WriteBehind"]


@dataclass(frozen=True)
class Chunk:
    """Systems ``start``..``stop - 1`` of the plan's group ``group``, stored as ``chunks/<name>.npz``.

    Example:
        >>> from attnflow.runs import Chunk
        >>> Chunk(1, 20, 30).file
        'g001-000000020.npz'
    """

    group: int  # index into the plan's groups
    start: int
    stop: int

    @property
    def name(self) -> str:
        return f"g{self.group:03d}-{self.start:09d}"

    @property
    def file(self) -> str:
        return f"{self.name}.npz"


def run_chunks(out: Path, chunks: list[Chunk], compute: Callable[[Chunk], dict], *, progress: bool = True,
               process_index: int = 0, process_count: int = 1, desc: str = "sweep",
               poll_s: float = 2.0, on_start: Callable[[int, int], None] | None = None,
               writer: "WriteBehind | None" = None) -> tuple[list[dict], int]:
    """Compute the missing chunks (this process's share); return all chunks' columns in plan
    order (process 0 waits for the other processes' files; the others get ``[]``) and the
    number of chunks this process computed.

    Every chunk file carries its identity (group, start, stop, the run's config fingerprint) and
    a checksum (:class:`attnflow.runs.UnitStore`). A stored chunk that is unreadable,
    misplaced or changed is set aside with a line on stderr and computed again, both when this
    process resumes its share and when process 0 reads the other processes' chunks at the end
    (process 0 keeps the columns of its own share as it computed or verified them). The temporary
    files of this share's chunks that a kill left behind are removed first (the caller holds the
    lock of this share: :func:`attnflow.runs.open_run`). ``on_start(stored, share)`` is
    called once the stored chunks of this share are known (before any is computed). The chunks of this share
    stored so far are counted (:func:`attnflow.runs.count_kept`), for the line an interrupted command prints.

    Each chunk file is written on a thread of its own while the next chunk computes (:class:`WriteBehind`), and the
    last is waited for before this returns; with the caller's ``writer`` (an open :class:`WriteBehind`) the last is
    left to it, so that the caller's tables and figures start meanwhile (leaving its block waits for it, also when
    the block ends in an error or Ctrl-C).

    Example:
        >>> import tempfile, pathlib
        >>> import numpy as np
        >>> from attnflow.runs import plan_chunks, run_chunks
        >>> out = pathlib.Path(tempfile.mkdtemp())
        >>> compute = lambda c: {"row": np.arange(c.start, c.stop)}
        >>> parts, computed = run_chunks(out, plan_chunks([5], 2), compute, progress=False)
        >>> [p["row"].tolist() for p in parts], computed
        ([[0, 1], [2, 3], [4]], 3)
        >>> run_chunks(out, plan_chunks([5], 2), compute, progress=False)[1]  # resumed: nothing computed
        0
    """
    from tqdm.auto import tqdm

    folder = out / "chunks"
    store = UnitStore(folder, "chunk", (read_marker(out) or {}).get("fingerprint"))

    def where(c: Chunk) -> dict:
        return {"group": c.group, "start": c.start, "stop": c.stop}

    # this process's chunks as computed or verified here: not read back at the end (a 2-GiB phase diagram
    # spent 5 s re-reading and re-hashing what it had just written)
    held: dict[str, dict] = {}
    keep = process_index == 0  # the other processes' results are read from their files

    def make(c: Chunk, write: Callable | None = None) -> dict:
        cols = {k: np.asarray(v) for k, v in compute(c).items()}
        if write is None:
            store.save(c.name, cols, **where(c))
        else:
            write(save_and_count, c.name, cols, **where(c))
        return cols

    mine = [c for i, c in enumerate(chunks) if i % process_count == process_index]
    remove_stale_temporaries(folder, {c.file for c in mine})
    todo = []
    for c in mine:
        cols = store.load(c.name, **where(c))
        if cols is None:
            todo.append(c)
        elif keep:
            held[c.name] = cols
    if on_start is not None:
        on_start(len(mine) - len(todo), len(mine))
    kept = count_kept(len(mine), "chunks" if process_count == 1 else f"chunks of process {process_index}'s share",
                      kept=len(mine) - len(todo))

    def save_and_count(name: str, cols: dict, **extra) -> None:
        store.save(name, cols, **extra)
        kept.add()

    total = sum(c.stop - c.start for c in mine)
    done = total - sum(c.stop - c.start for c in todo)
    bar = tqdm(total=total, initial=done, unit="sys", desc=desc, disable=not progress, smoothing=0.1,
               dynamic_ncols=True)
    with bar, WriteBehind() if writer is None else contextlib.nullcontext(writer) as write:
        for c in todo:
            cols = make(c, write)
            if keep:
                held[c.name] = cols
            bar.update(c.stop - c.start)
    computed = len(todo)
    if process_index != 0:
        return [], computed
    # the other processes' chunks (this process's own are held, their files perhaps still being written)
    wait_for_units(store, [c.name for c in chunks if c.name not in held], process_count=process_count,
                   what="chunk", poll_s=poll_s)
    parts = []
    for c in chunks:
        cols = held.pop(c.name, None)
        if cols is not None:
            parts.append(cols)
            continue
        cols = store.load(c.name, **where(c))
        if cols is None:  # damaged after it was written: computed again here
            cols = make(c)
            computed += 1
        parts.append(cols)
    return parts, computed


class WriteBehind:
    """``write(fn, *args, **kwargs)`` runs ``fn(*args, **kwargs)`` (a file's write) on one background thread, so
    that the caller computes meanwhile: calling it waits for the previous write (raising its error) and hands this
    one over; :meth:`wait` waits for the last; leaving the block waits for it too, also when the block ends in an
    error (an interrupted run keeps its finished chunks).

    Example:
        >>> from attnflow.runs import WriteBehind
        >>> done = []
        >>> with WriteBehind() as write:
        ...     write(done.append, "chunk 0")
        ...     write(done.append, "chunk 1")
        >>> done
        ['chunk 0', 'chunk 1']
    """

    def __init__(self):
        from concurrent.futures import ThreadPoolExecutor

        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="attnflow-chunk-writer")
        self._pending = None

    def __call__(self, write: Callable, *args, **kwargs) -> None:
        self.wait()
        self._pending = self._pool.submit(write, *args, **kwargs)

    def wait(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def __enter__(self) -> "WriteBehind":
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.wait()
        finally:
            self._pool.shutdown(wait=True)


def plan_chunks(sizes: list[int], chunk_size: int) -> list[Chunk]:
    """Cut groups of ``sizes`` systems into chunks of at most ``chunk_size``.

    Example:
        >>> from attnflow.runs import plan_chunks
        >>> [c.name for c in plan_chunks([5, 2], 3)]
        ['g000-000000000', 'g000-000000003', 'g001-000000000']
    """
    if chunk_size < 1:
        raise InputError(f"run.chunk_size must be >= 1, got {chunk_size}.")
    return [Chunk(g, s, min(s + chunk_size, n)) for g, n in enumerate(sizes) for s in range(0, n, chunk_size)]
