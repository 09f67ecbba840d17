r"""The attention kernel: one max-subtracted softmax, used by every dynamics.

For tokens stored as rows of an array ``x`` of shape (n, d) and weights Q, K of
shape (m, d), the attention matrix is

.. math::  P_{ij} = \frac{\exp(\beta \langle Q x_i, K x_j\rangle)}
                        {\sum_l \exp(\beta \langle Q x_i, K x_l\rangle)},

row-stochastic with positive entries. Scores grow like :math:`e^{2\lambda t}` along
the flow, so the softmax always subtracts the row maximum before exponentiating.

``attend(q, k, v)`` computes ``softmax(q k^T) v`` without keeping P; it is the one
hot spot of every vector field, and the place where faster implementations plug in.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

__all__ = ["softmax", "scores", "attention_matrix", "attend"]


def softmax(s: Float[Array, "... n"], axis: int = -1) -> Float[Array, "... n"]:
    r"""Max-subtracted softmax along ``axis``: :math:`e^{s_j - \max s} / \sum_l e^{s_l - \max s}`.

    Finite for any finite input (scores of size 1e4 and beyond) and invariant to
    adding a constant to a row.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow import softmax
        >>> p = softmax(jnp.array([[1e4, 1e4 - 1.0, 0.0]]))
        >>> bool(jnp.isclose(p.sum(), 1.0))
        True
    """
    s_max = jax.lax.stop_gradient(jnp.max(s, axis=axis, keepdims=True))
    e = jnp.exp(s - s_max)
    return e / jnp.sum(e, axis=axis, keepdims=True)


def scores(
    x: Float[Array, "n d"],
    Q: Float[Array, "m d"],
    K: Float[Array, "m d"],
    beta: float | Float[Array, ""] = 1.0,
) -> Float[Array, "n n"]:
    r"""Attention scores :math:`S_{ij} = \beta \langle Q x_i, K x_j \rangle = \beta\, x_i^T Q^T K x_j`.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow import scores
        >>> scores(jnp.eye(2), jnp.eye(2), 2 * jnp.eye(2)).tolist()
        [[2.0, 0.0], [0.0, 2.0]]
    """
    q, k = project_qk(x, Q, K, beta)
    return q @ k.T


def project_qk(
    x: Float[Array, "n d"],
    Q: Float[Array, "m d"],
    K: Float[Array, "m d"],
    beta: float | Float[Array, ""] = 1.0,
) -> tuple[Float[Array, "n r"], Float[Array, "n r"]]:
    r"""Queries and keys with :math:`q_i \cdot k_j = \beta \langle Q x_i, K x_j\rangle`.

    Scores depend on (Q, K) only through :math:`A = Q^T K`. When m > d it is
    cheaper to use A (d x d) directly: :math:`q_i = \beta A^T x_i`, :math:`k_j = x_j`.
    """
    m, d = Q.shape
    if m > d:
        A = Q.T @ K
        return beta * (x @ A), x
    return beta * (x @ Q.T), x @ K.T


def attention_matrix(
    x: Float[Array, "n d"],
    Q: Float[Array, "m d"],
    K: Float[Array, "m d"],
    beta: float | Float[Array, ""] = 1.0,
) -> Float[Array, "n n"]:
    r"""The attention matrix :math:`P = \mathrm{softmax}_{\text{rows}}(\beta\, x Q^T K x^T)`.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from attnflow import attention_matrix
        >>> x = jax.random.normal(jax.random.key(0), (5, 3))
        >>> P = attention_matrix(x, jnp.eye(3), jnp.eye(3))
        >>> bool(jnp.allclose(P.sum(axis=1), 1.0)) and bool((P > 0).all())
        True
    """
    return softmax(scores(x, Q, K, beta), axis=-1)


def attend(
    q: Float[Array, "n r"],
    k: Float[Array, "n r"],
    v: Float[Array, "n e"],
) -> Float[Array, "n e"]:
    r"""Attention output :math:`\sum_j \mathrm{softmax}_j(q_i \cdot k_j)\, v_j` (scale 1).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow import attend
        >>> attend(jnp.zeros((2, 1)), jnp.zeros((2, 1)), jnp.array([[0.0], [2.0]])).tolist()
        [[1.0], [1.0]]
    """
    return softmax(q @ k.T, axis=-1) @ v
