r"""The weights of self-attention as one type with named axes.

One head of the paper's model is a triple (Q, K, V) and an inverse temperature beta:

.. math::  \dot x_i = \sum_j P_{ij}\,(V x_j + c),\qquad
           P_{ij} = \mathrm{softmax}_j\big(\beta \langle Q x_i + b_q, K x_j + b_k\rangle\big),

with optional biases :math:`b_q, b_k` (m,) and a value bias :math:`c` (d,) in token space
(for a trained head, :math:`c = W_O[:, h]\, b_V[h]`). Real checkpoints carry biases, and
they change the dynamics at O(1); the paper's model has none.

:class:`AttentionWeights` holds these arrays with any leading axes named in ``axes``
(drawn from ``("layer", "head")``, in that order): a multi-head stack has ``axes=("head",)``
and arrays of shape (H, m, d); per-layer weights ``axes=("layer",)``; both
``("layer", "head")``. A *batch of independent systems* is never one of these axes: it is
always explicit (``simulate(..., batch=...)`` or ``jax.vmap``).
"""

from __future__ import annotations

from typing import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from . import _validate as v
from .errors import InputError

__all__ = ["AttentionWeights", "AXIS_NAMES"]

#: the names a leading axis of the weights may carry, in this order
AXIS_NAMES = ("layer", "head")


def _lead_shape(name: str, a, base_rank: int, axes: tuple[str, ...]) -> tuple[int, ...]:
    shape = v.shape_of(name, a)
    if len(shape) != base_rank + len(axes):
        named = f"axes {axes} and " if axes else ""
        raise InputError(
            f"{name} must have rank {base_rank + len(axes)} ({named}a "
            f"{'matrix' if base_rank == 2 else 'vector'} per {'/'.join(axes) or 'head'}), got shape {shape}; "
            "name stacked heads or layers with axes=('head',) or ('layer',), and pass a batch of independent "
            "systems with simulate(..., batch=...) or jax.vmap."
        )
    return shape[: len(axes)]


def check_shapes(Q, K, V, axes: tuple[str, ...] = ()) -> tuple[int, ...]:
    """Check the shapes of Q (*lead, m, d), K (*lead, m, d), V (*lead, d, d); return ``lead``.

    Accepts anything with a ``shape`` (arrays, ``jax.ShapeDtypeStruct``); raises
    :class:`~attnflow.InputError` with one sentence on a mismatch.
    """
    lead = _lead_shape("Q", Q, 2, axes)
    for name, a in (("K", K), ("V", V)):
        if _lead_shape(name, a, 2, axes) != lead:
            raise InputError(f"{name} must have the leading axes {lead} of Q, got shape {v.shape_of(name, a)}.")
    qs, ks, vs = v.shape_of("Q", Q)[-2:], v.shape_of("K", K)[-2:], v.shape_of("V", V)[-2:]
    if vs[0] != vs[1]:
        raise InputError(f"V must be square (d, d), got {vs}.")
    if qs != ks:
        raise InputError(
            f"Q and K must have the same shape (m, d) so that <Q x_i, K x_j> is defined, got Q {qs} and K {ks}."
        )
    if qs[1] != vs[0]:
        raise InputError(f"Q and K must have shape (m, {vs[0]}) to act on tokens of dimension {vs[0]}, got {qs}.")
    return lead


class AttentionWeights(eqx.Module):
    r"""Weights of self-attention: (Q, K, V, beta) and optional biases, with named leading axes.

    Args:
        Q, K: (*lead, m, d) query and key matrices (any m).
        V: (*lead, d, d) value matrix (for a trained head, W_O[:, head] W_V[head]).
        beta: inverse temperature, scalar or (*lead,) (the paper's model: 1).
        q_bias, k_bias: (*lead, m) biases of the queries and keys.
        v_bias: (*lead, d) value bias in token space (added to every V x_j).
        axes: names of the leading axes, from ``("layer", "head")`` in that order.

    Validation (one sentence, before any compilation) checks ranks, shapes and, for
    concrete arrays, finiteness. Under ``jit`` the shapes are still checked.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow import AttentionWeights
        >>> w = AttentionWeights(jnp.eye(2), jnp.eye(2), -jnp.eye(2))
        >>> w.d, w.m, w.num_heads
        (2, 2, 1)
        >>> heads = AttentionWeights.stack([w, w, w], axis="head")
        >>> heads.Q.shape, heads.axes, heads.num_heads
        ((3, 2, 2), ('head',), 3)
        >>> heads.head(1).axes
        ()
    """

    Q: Float[Array, "*lead m d"]
    K: Float[Array, "*lead m d"]
    V: Float[Array, "*lead d d"]
    beta: Float[Array, "*lead"]
    q_bias: Float[Array, "*lead m"] | None
    k_bias: Float[Array, "*lead m"] | None
    v_bias: Float[Array, "*lead d"] | None
    axes: tuple[str, ...] = eqx.field(static=True)

    def __init__(self, Q, K, V, beta=1.0, *, q_bias=None, k_bias=None, v_bias=None, axes: Sequence[str] = ()):
        axes = tuple(axes)
        if any(a not in AXIS_NAMES for a in axes) or len(set(axes)) != len(axes) or list(axes) != sorted(
            axes, key=AXIS_NAMES.index
        ):
            raise InputError(f"axes must be a tuple drawn from {AXIS_NAMES} in that order, got {axes!r}.")
        for name, a in (("Q", Q), ("K", K), ("V", V)):
            v.check_array(name, a, "a weight matrix, or a stack of them along the named axes")
        v.check_array("beta", beta, "the inverse temperature: a scalar, or one per head/layer")
        lead = check_shapes(Q, K, V, axes)
        m, d = v.shape_of("Q", Q)[-2:]
        for name, a, size in (("q_bias", q_bias, m), ("k_bias", k_bias, m), ("v_bias", v_bias, d)):
            if a is not None and v.check_array(name, a, "a bias vector") != lead + (size,):
                raise InputError(f"{name} must have shape {lead + (size,)}, got {tuple(np.shape(a))}.")
        b_shape = tuple(np.shape(beta))
        if b_shape not in ((), lead):
            raise InputError(f"beta must be a scalar or have the leading shape {lead}, got shape {b_shape}.")
        for name, a in (("Q", Q), ("K", K), ("V", V), ("beta", beta), ("q_bias", q_bias), ("k_bias", k_bias),
                        ("v_bias", v_bias)):
            if a is not None:
                v.check_finite(name, a)
        dtype = jnp.result_type(*(jnp.asarray(a).dtype for a in (Q, K, V)), float)
        as_arr = lambda a: None if a is None else jnp.asarray(a, dtype)
        self.Q, self.K, self.V = as_arr(Q), as_arr(K), as_arr(V)
        self.beta = jnp.broadcast_to(jnp.asarray(beta, dtype), lead)
        self.q_bias, self.k_bias, self.v_bias = as_arr(q_bias), as_arr(k_bias), as_arr(v_bias)
        self.axes = axes

    # -- sizes -------------------------------------------------------------------------
    @property
    def d(self) -> int:
        """Token dimension d."""
        return self.V.shape[-1]

    @property
    def m(self) -> int:
        """Rows m of Q and K."""
        return self.Q.shape[-2]

    @property
    def dtype(self):
        return self.V.dtype

    def _size(self, name: str) -> int:
        return self.Q.shape[self.axes.index(name)] if name in self.axes else 1

    @property
    def num_heads(self) -> int:
        """Number of heads (1 without a ``"head"`` axis)."""
        return self._size("head")

    @property
    def num_layers(self) -> int:
        """Number of per-layer weight sets (1 without a ``"layer"`` axis: shared weights)."""
        return self._size("layer")

    # -- selecting along named axes -------------------------------------------------------
    def take(self, axis: str, index) -> "AttentionWeights":
        """The weights at ``index`` along the named axis (which is removed); traceable index."""
        if axis not in self.axes:
            raise InputError(f"these weights have no {axis!r} axis (axes {self.axes}).")
        pos = self.axes.index(axis)
        pick = lambda a: None if a is None else jnp.take(a, index, axis=pos)
        return AttentionWeights._unchecked(
            pick(self.Q), pick(self.K), pick(self.V), pick(self.beta), pick(self.q_bias), pick(self.k_bias),
            pick(self.v_bias), tuple(a for a in self.axes if a != axis),
        )

    def head(self, h) -> "AttentionWeights":
        """Head ``h`` (weights without the head axis)."""
        return self.take("head", h)

    def layer(self, layer) -> "AttentionWeights":
        """The weights of layer ``layer`` (traceable index, so it works inside ``lax.scan``)."""
        return self.take("layer", layer)

    @classmethod
    def _unchecked(cls, Q, K, V, beta, q_bias, k_bias, v_bias, axes) -> "AttentionWeights":
        obj = object.__new__(cls)
        for name, val in (("Q", Q), ("K", K), ("V", V), ("beta", beta), ("q_bias", q_bias), ("k_bias", k_bias),
                          ("v_bias", v_bias), ("axes", axes)):
            object.__setattr__(obj, name, val)
        return obj

    @classmethod
    def stack(cls, weights: Sequence["AttentionWeights"], axis: str) -> "AttentionWeights":
        """Stack weights of equal shapes along a new named axis (``"head"`` or ``"layer"``).

        Example:
            >>> import jax.numpy as jnp
            >>> from attnflow import AttentionWeights
            >>> w = AttentionWeights(jnp.eye(2), jnp.eye(2), jnp.eye(2))
            >>> AttentionWeights.stack([w, w], axis="layer").num_layers
            2
        """
        weights = list(weights)
        if not weights:
            raise InputError("stack needs at least one AttentionWeights.")
        axes = weights[0].axes
        if axis in axes or axis not in AXIS_NAMES:
            raise InputError(f"cannot stack along {axis!r}: weights already have axes {axes} (allowed {AXIS_NAMES}).")
        if any(w.axes != axes for w in weights):
            raise InputError("all stacked weights must have the same axes.")
        new_axes = tuple(sorted(axes + (axis,), key=AXIS_NAMES.index))
        pos = new_axes.index(axis)

        def st(name):
            vals = [getattr(w, name) for w in weights]
            if all(x is None for x in vals):
                return None
            if any(x is None for x in vals):
                raise InputError(f"either every stacked weight set has {name} or none has.")
            return jnp.stack(vals, axis=pos)

        return cls._unchecked(st("Q"), st("K"), st("V"), st("beta"), st("q_bias"), st("k_bias"), st("v_bias"),
                              new_axes)

    def astype(self, dtype) -> "AttentionWeights":
        """The same weights in another floating dtype."""
        return jax.tree_util.tree_map(lambda a: jnp.asarray(a, dtype), self)
