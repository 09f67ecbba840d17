"""The plan of a sweep in chunks, and their atomic, resumable computation."""

from __future__ import annotations

import io
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from .. import runio
from ..errors import InputError

__all__ = ["Chunk", "plan_chunks", "run_chunks", "concat"]


@dataclass(frozen=True)
class Chunk:
    group: int  # index into the plan's groups
    start: int
    stop: int

    @property
    def name(self) -> str:
        return f"g{self.group:03d}-{self.start:09d}"


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
