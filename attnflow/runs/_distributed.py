"""Joining a multi-process (multi-host) run with jax.distributed."""

from __future__ import annotations

import jax

from ..errors import InputError

__all__ = ["init_distributed"]


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
        >>> from attnflow.runs import init_distributed
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
