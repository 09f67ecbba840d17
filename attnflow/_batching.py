r"""How a batch of independent systems is run: ``jax.vmap``, or a ``lax.map`` on XLA:CPU.

Batching is never inferred from an array's rank: callers name the batched inputs and this
module turns the names into ``in_axes``. On CPU, code with several independent batched
LAPACK calls runs one system at a time (see :func:`loop_over_systems`).
"""

from __future__ import annotations

from typing import Callable

import jax

__all__ = ["loop_over_systems", "map_over_batch", "lapack_needs_loop"]


def loop_over_systems(fn: Callable) -> Callable:
    """``fn`` applied to batches of one system in a ``lax.map`` (same outputs as ``fn``, whose
    positional arguments are arrays with the systems on the leading axis).

    On XLA:CPU, use it around code with several *independent* batched LAPACK calls (e.g. eig of
    V and eigvalsh of Q^T K): the executor may start them at once on its intra-op pool, each
    then splits its batch over the same pool and waits, and with two cores both threads wait
    forever (seen with gdb: two ``jax::ParallelBatchMap`` in ``lapack_dgeev_ffi``). A batch of
    one runs inline, so a loop cannot deadlock.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.linalg import loop_over_systems
        >>> loop_over_systems(lambda a: a.sum(axis=-1))(jnp.ones((3, 2))).tolist()
        [2.0, 2.0, 2.0]
    """

    def member(*args):  # fn on a batch of one, batch axis dropped
        return jax.tree_util.tree_map(lambda a: a[0], fn(*(a[None] for a in args)))

    return lambda *arrays: map_over_batch(member, (0,) * len(arrays))(*arrays)


def map_over_batch(fn: Callable, in_axes: tuple) -> Callable:
    """``jax.vmap(fn, in_axes=in_axes)`` computed as a ``lax.map``: ``fn`` (written for one
    member) runs once per member, in sequence. ``in_axes`` holds 0 (batched on the leading axis)
    or None (shared) per positional argument. See :func:`loop_over_systems` for why.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.linalg import map_over_batch
        >>> map_over_batch(lambda a, b: a * b, (0, None))(jnp.arange(3.0), 2.0).tolist()
        [0.0, 2.0, 4.0]
    """

    def mapped(*args):
        batched = tuple(a for a, ax in zip(args, in_axes) if ax is not None)

        def one(members):
            it = iter(members)
            return fn(*(next(it) if ax is not None else a for a, ax in zip(args, in_axes)))

        return jax.lax.map(one, batched)

    return mapped


def lapack_needs_loop() -> bool:
    """Whether batched LAPACK code should run through :func:`loop_over_systems` on the default
    backend: True on CPU (XLA:CPU's LAPACK kernels share its thread pool), False on GPU/TPU.

    Example:
        >>> import jax
        >>> from attnflow.linalg import lapack_needs_loop
        >>> lapack_needs_loop() == (jax.default_backend() == "cpu")
        True
    """
    return jax.default_backend() == "cpu"
