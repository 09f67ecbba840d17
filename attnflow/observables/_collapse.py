r"""Collapse (Thm 8.5, V = -I, Q^T K = I): every token goes to 0, P to :math:`\frac1n 11^T`,
and :math:`\|x_i(t)\| \le \max(\max_j \|x_j(0)\|, \sqrt{2n})` for all t."""

from __future__ import annotations

import jax.numpy as jnp
from jaxtyping import Array, Float

from .. import _validate as v
from .._x64 import keeps_float64

__all__ = ["max_norm", "uniform_distance", "collapse_bound"]


@keeps_float64
@v.jit_entry
def max_norm(x: Float[Array, "n d"]) -> Float[Array, ""]:
    r""":math:`\max_i \|x_i\|`.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.observables import max_norm
        >>> float(max_norm(jnp.array([[3.0, 4.0], [1.0, 0.0]])))
        5.0
    """
    v.check_array("x", x, "tokens (n, d); vmap for a batch", ranks=(2,), nonempty=True)
    return jnp.max(jnp.linalg.norm(x, axis=-1))


@keeps_float64
@v.jit_entry
def uniform_distance(P: Float[Array, "n n"]) -> Float[Array, ""]:
    r"""Max-norm distance :math:`\max_{ij} |P_{ij} - 1/n|` to the uniform attention.

    See also:
        :func:`attnflow.geometry.uniform_distance_soft`, smooth in P (this max has a gradient that jumps where
        the largest deviation changes).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.observables import uniform_distance
        >>> float(uniform_distance(jnp.array([[0.75, 0.25], [0.5, 0.5]])))
        0.25
    """
    v.check_square("P", P, "an attention matrix (n, n); vmap for a batch")
    return jnp.max(jnp.abs(P - 1.0 / P.shape[-1]))


@keeps_float64
@v.jit_entry
def collapse_bound(x0: Float[Array, "n d"]) -> Float[Array, ""]:
    r"""Thm 8.5's bound :math:`\max(\max_j \|x_j(0)\|, \sqrt{2n})`.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.observables import collapse_bound
        >>> float(collapse_bound(jnp.zeros((8, 2))))
        4.0
    """
    n = x0.shape[-2]
    return jnp.maximum(max_norm(x0), jnp.sqrt(jnp.asarray(2.0 * n, x0.dtype)))
