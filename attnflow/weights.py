r"""Attention weights with named leading axes (issue 9 contract; stand-in until main has it).

``AttentionWeights(Q, K, V, beta, *, q_bias, k_bias, v_bias, axes)``: Q, K of shape
(*lead, m, d), V (*lead, d, d), beta scalar or (*lead,), biases (*lead, m) / (*lead, d).
Scores are :math:`\beta\langle Q x_i + b_q, K x_j + b_k\rangle`; values :math:`V x_j + b_v`.
``axes`` names the leading axes, drawn from ("layer", "head") in that order.

NOTE for the merge: this file implements only the part of the issue-9 contract that the
models package uses; when main's ``attnflow/weights.py`` lands, main's version wins.
"""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float

from .errors import InputError

__all__ = ["AttentionWeights"]

_AXES = ("layer", "head")


class AttentionWeights(eqx.Module):
    r"""Weights of one attention head, or a stack of heads/layers (leading axes named by ``axes``).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.weights import AttentionWeights
        >>> w = AttentionWeights(jnp.ones((3, 2, 4)), jnp.ones((3, 2, 4)), jnp.ones((3, 4, 4)), axes=("head",))
        >>> w.num_heads, w.m, w.d, w.head(1).Q.shape
        (3, 2, 4, (2, 4))
    """

    Q: Float[Array, "*lead m d"]
    K: Float[Array, "*lead m d"]
    V: Float[Array, "*lead d d"]
    beta: Float[Array, "*lead"] | float = 1.0
    q_bias: Float[Array, "*lead m"] | None = None
    k_bias: Float[Array, "*lead m"] | None = None
    v_bias: Float[Array, "*lead d"] | None = None
    axes: tuple[str, ...] = eqx.field(static=True, default=())

    def __init__(self, Q, K, V, beta=1.0, *, q_bias=None, k_bias=None, v_bias=None, axes=()):
        axes = tuple(axes)
        if any(a not in _AXES for a in axes) or list(axes) != sorted(axes, key=_AXES.index) or len(set(axes)) != len(axes):
            raise InputError(f"axes must be drawn from {_AXES} in that order, got {axes}.")
        lead = len(axes)
        if jnp.ndim(Q) != lead + 2 or jnp.shape(Q) != jnp.shape(K):
            raise InputError(f"Q and K must both have shape (*lead, m, d) with {lead} leading axes {axes}, "
                             f"got {jnp.shape(Q)} and {jnp.shape(K)}.")
        d = jnp.shape(Q)[-1]
        if jnp.shape(V) != jnp.shape(Q)[:-2] + (d, d):
            raise InputError(f"V must have shape {jnp.shape(Q)[:-2] + (d, d)}, got {jnp.shape(V)}.")
        self.Q, self.K, self.V = Q, K, V
        self.beta = beta
        self.q_bias, self.k_bias, self.v_bias = q_bias, k_bias, v_bias
        self.axes = axes

    def _size(self, name: str) -> int:
        return int(jnp.shape(self.Q)[self.axes.index(name)]) if name in self.axes else 1

    @property
    def num_heads(self) -> int:
        return self._size("head")

    @property
    def num_layers(self) -> int:
        return self._size("layer")

    @property
    def d(self) -> int:
        return int(jnp.shape(self.Q)[-1])

    @property
    def m(self) -> int:
        return int(jnp.shape(self.Q)[-2])

    def _take(self, name: str, i: int) -> "AttentionWeights":
        ax = self.axes.index(name)

        def pick(a, tail):
            if a is None:
                return None
            if jnp.ndim(a) == len(self.axes) + tail:
                return jnp.take(jnp.asarray(a), i, axis=ax)
            return a

        return AttentionWeights(pick(self.Q, 2), pick(self.K, 2), pick(self.V, 2), pick(self.beta, 0),
                                q_bias=pick(self.q_bias, 1), k_bias=pick(self.k_bias, 1),
                                v_bias=pick(self.v_bias, 1), axes=tuple(a for a in self.axes if a != name))

    def head(self, h: int) -> "AttentionWeights":
        return self._take("head", h)

    def layer(self, l: int) -> "AttentionWeights":
        return self._take("layer", l)
