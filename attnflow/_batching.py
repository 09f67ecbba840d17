r"""How a batch of independent systems is run: ``jax.vmap``, or a ``lax.map`` on XLA:CPU.

Batching is never inferred from an array's rank: callers name the batched inputs and this
module turns the names into ``in_axes``. On CPU, code with several independent batched
LAPACK calls runs one system at a time (see :func:`loop_over_systems`), and attention runs in
cache-sized groups of systems (see :func:`vmap_systems`).
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp

__all__ = ["loop_over_systems", "map_over_batch", "lapack_needs_loop", "vmap_systems", "group_size",
           "GROUP_BYTES"]


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


def map_over_batch(fn: Callable, in_axes: tuple, group: int = 1) -> Callable:
    """``jax.vmap(fn, in_axes=in_axes)`` computed as a ``lax.map``: ``fn`` (written for one
    member) runs once per member, in sequence, or vmapped over ``group`` members at a time
    (``lax.map(..., batch_size=group)``). ``in_axes`` holds 0 (batched on the leading axis) or
    None (shared) per positional argument. See :func:`loop_over_systems` for why.

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

        return jax.lax.map(one, batched, batch_size=group if group > 1 else None)

    return mapped


#: on XLA:CPU a batch of systems runs as a ``lax.map`` over groups whose attention scores take
#: about this many bytes together (a vmap over the whole batch streams B score matrices through
#: memory between fusions). Measured on a 2-core EPYC, float32 Euler, group vs whole-batch vmap:
#: (64, 256, 128) 190 vs 121 GF/s, (32, 512, 64) 119 vs 53, (16, 1024, 64) 140 vs 112,
#: (256, 64, 32) equal (the whole batch is one group); benchmarks/NOTES.md section 9.
GROUP_BYTES = 4 * 2**20


def group_size(batch: int, n_tokens: int, itemsize: int = 4, matrices: int = 1, impl: str = "auto") -> int:
    """Systems per group for :func:`vmap_systems`: ``batch`` on accelerators; on CPU as many as
    keep their attention scores within :data:`GROUP_BYTES` (at least 1, at most ``batch``).

    One system's scores: ``matrices`` (heads, clouds, ...) x (n x n), or x the tiles the chunked
    path holds at once when ``impl`` (any of :func:`attnflow.attend`'s; ``"auto"`` as it picks) tiles.

    Example:
        >>> import jax
        >>> from attnflow.linalg import group_size
        >>> jax.default_backend() != "cpu" or group_size(64, 256) == 16
        True
    """
    if jax.default_backend() != "cpu":
        return int(batch)
    from ._chunked import DEFAULT_CHUNK, _blocks_at_once
    from .attention import select_impl

    impl = select_impl(n_tokens, n_tokens) if impl == "auto" else impl
    rows = cols = n_tokens
    if impl == "chunked":  # one key tile, times the query blocks the tiled path takes at once
        cols = min(n_tokens, DEFAULT_CHUNK)
        rows = min(n_tokens, cols * (_blocks_at_once(-(-n_tokens // cols), cols, cols, int(itemsize)) or 1))
    per_system = max(1, matrices * rows * cols * int(itemsize))
    return int(max(1, min(batch, GROUP_BYTES // per_system)))


def vmap_systems(fn: Callable, in_axes: int | tuple = 0, *, group: int | None = None, tokens: int | None = None,
                 itemsize: int | None = None, matrices: int = 1, impl: str = "auto") -> Callable:
    """``jax.vmap(fn, in_axes)`` over independent token systems, run in cache-sized groups on CPU.

    Same results as ``jax.vmap`` (to rounding); on XLA:CPU the batch runs as a ``lax.map``
    over groups of :func:`group_size` systems (from the first batched argument, taken as
    tokens (B, n, d), its dtype and the automatic attention path), each group vmapped; on
    GPU/TPU, or when one group holds the whole batch, it is ``jax.vmap``. ``group`` fixes the
    group size; ``tokens``, ``itemsize``, ``matrices`` and ``impl`` describe one system's
    attention for :func:`group_size` where the first batched argument is not its tokens.
    Traceable under jit, grad and vmap like ``jax.vmap``.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from attnflow import AttentionFlow, vmap_systems
        >>> from attnflow.integrate import solve_euler
        >>> flow = AttentionFlow(jnp.eye(2), jnp.eye(2), jnp.eye(2))
        >>> run = lambda x: solve_euler(flow, x, dt=0.1, num_steps=10, save_every=10).ys[-1]
        >>> x0 = jax.random.normal(jax.random.key(0), (6, 8, 2))
        >>> out = vmap_systems(run, group=4)(x0)
        >>> out.shape, bool(jnp.allclose(out, jax.vmap(run)(x0), atol=1e-6))
        ((6, 8, 2), True)
    """

    def batched(*args):
        axes = in_axes if isinstance(in_axes, tuple) else (in_axes,) * len(args)
        if len(axes) != len(args):
            from .errors import InputError

            raise InputError(f"in_axes has {len(axes)} entries for {len(args)} arguments.")
        if any(ax not in (0, None) for ax in axes):
            from .errors import InputError

            raise InputError(f"vmap_systems batches on the leading axis: in_axes entries must be 0 or None, got {axes}.")
        first = next((a for a, ax in zip(args, axes) if ax == 0), None)
        if first is None:
            return fn(*args)
        leaf = jax.tree_util.tree_leaves(first)[0]  # batched arguments may be pytrees (weights)
        shape = jnp.shape(leaf)
        size = group
        if size is None:
            n = tokens if tokens is not None else (shape[1] if len(shape) >= 3 else 1)
            size = group_size(shape[0], n, itemsize or jnp.dtype(leaf.dtype).itemsize, matrices, impl)
        if size >= shape[0]:
            return jax.vmap(fn, in_axes=axes)(*args)
        return map_over_batch(fn, axes, int(size))(*args)

    return batched


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
