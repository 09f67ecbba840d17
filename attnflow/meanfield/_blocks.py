"""Sums over particles in blocks: O(block x width) working memory at any n (a leaf module)."""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
from jaxtyping import Array, PyTree

#: particles per block of the blockwise sums (a (block, K) complex128 tile is 2 MiB at K = 32)
DEFAULT_BLOCK = 8192


def sum_over_blocks(fn: Callable[..., PyTree], arrays: tuple[Array, ...], block: int = DEFAULT_BLOCK) -> PyTree:
    """``sum_b fn(*(a[b] for a in arrays))`` over consecutive row blocks b of the arrays (a ``lax.scan``).

    The last block is padded with zero rows, so ``fn`` must map zero rows to zero (pass the
    particle weights among the arrays and multiply by them). Exact up to the order of summation.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.meanfield._blocks import sum_over_blocks
        >>> a = jnp.arange(10.0)
        >>> float(sum_over_blocks(lambda x: jnp.sum(x ** 2), (a,), block=3))
        285.0
    """
    n = arrays[0].shape[0]
    size = max(1, min(int(block), n))
    num = -(-n // size)
    pad = num * size - n
    stacked = tuple(jnp.pad(a, [(0, pad)] + [(0, 0)] * (a.ndim - 1)).reshape((num, size) + a.shape[1:])
                    for a in arrays)
    if num == 1:
        return fn(*(s[0] for s in stacked))
    first = jax.eval_shape(fn, *(s[0] for s in stacked))
    init = jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), first)

    def body(total, blocks):
        return jax.tree_util.tree_map(jnp.add, total, fn(*blocks)), None

    total, _ = jax.lax.scan(body, init, stacked)
    return total
