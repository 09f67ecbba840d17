r"""The vector-field interface, and the ways fields combine.

A dynamics is an equinox Module with one method ``vector_field(t, y, args) -> dy/dt``
(also reachable as ``__call__``) that ``diffrax.ODETerm`` takes directly and the Euler
layer stepper calls unchanged. ``y`` is the state of one system of tokens, shape (n, d).
Batching over systems is done outside (``jax.vmap``, or :class:`FoldedBatch`).

Two optional hooks, with defaults:

* ``tokens(t, y)``: the raw tokens x represented by the state y (identity; a rescaled
  picture returns :math:`e^{tV} z`).
* ``on_grid(dt, t0, num_layers)``: the field as stepped on the layer grid
  :math:`t_k = t_0 + k\,\Delta t` (identity; the exact discrete rescaling of Remark 3.4 and
  per-layer weights need the grid). Only the layer stepper calls it, so dt is owned by
  the stepper and cannot disagree with the field.

Fields add, like diffrax terms: ``f + g`` is a :class:`SumOfFields`. Concrete classes
are final (not meant to be subclassed); bases are abstract (equinox's pattern).

Example:
    >>> import jax.numpy as jnp
    >>> from attnflow import AttentionFlow
    >>> f = AttentionFlow(jnp.eye(2), jnp.eye(2), jnp.eye(2))
    >>> g = f + f
    >>> bool(jnp.allclose(g(0.0, jnp.ones((3, 2))), 2 * f(0.0, jnp.ones((3, 2)))))
    True
"""

from __future__ import annotations

import abc
import math
from typing import final

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, PyTree

from ..errors import InputError

__all__ = ["AbstractDynamics", "AbstractAttentionDynamics", "SumOfFields", "FoldedBatch"]


class AbstractDynamics(eqx.Module):
    """Base class: a time-dependent vector field on token configurations."""

    @abc.abstractmethod
    def vector_field(self, t: Float[Array, ""], y: Float[Array, "n d"], args: PyTree) -> Float[Array, "n d"]:
        """dy/dt at time t."""

    def __call__(self, t, y, args=None):
        return self.vector_field(t, y, args)

    @property
    def state_dim(self) -> int | None:
        """The token dimension d the field acts on (None: any)."""
        return None

    def check_state(self, y) -> None:
        """Shape check of a state (n, d) (or (B, n, d)) against :attr:`state_dim`; static, so it
        also runs under ``jit`` (once, at trace time)."""
        shape, d = np.shape(y), self.state_dim
        if len(shape) < 2 or (d is not None and shape[-1] != d):
            raise InputError(f"the state y (y0 of a solve) must be tokens (n, {'d' if d is None else d}) for "
                             f"{type(self).__name__}, got shape {shape}.")

    def tokens(self, t: Float[Array, ""], y: Float[Array, "n d"]) -> Float[Array, "n d"]:
        """The raw tokens x represented by the state y (identity unless the picture is rescaled)."""
        return y

    def score_count(self, y) -> int:
        """How many attention scores one evaluation at a state shaped like ``y`` ((n, d) or (B, n, d)) holds:
        what one layer's reverse pass keeps. Static (from the shapes and dtype only, so any array, tracer or
        ``jax.ShapeDtypeStruct``); :math:`B n^2` unless a field says otherwise (the harmonic paths on the
        circle and the sphere form no score matrix: 0). The layer stepper unrolls its checkpointed
        segments only where this is large (:class:`attnflow.integrate.EulerStepper`).

        Example:
            >>> import jax.numpy as jnp
            >>> from attnflow import AttentionFlow
            >>> f = AttentionFlow(jnp.eye(2), jnp.eye(2), jnp.eye(2))
            >>> f.score_count(jnp.ones((3, 50, 2)))
            7500
        """
        shape = tuple(y.shape)
        return math.prod(shape[:-2]) * shape[-2] ** 2 if len(shape) >= 2 else 0

    def on_grid(self, dt, t0, num_layers: int) -> "AbstractDynamics":
        """This field as the layer stepper steps it, on the grid t0 + k dt, k < num_layers."""
        return self

    def __add__(self, other: "AbstractDynamics") -> "SumOfFields":
        if not isinstance(other, AbstractDynamics):
            return NotImplemented
        left = self.terms if isinstance(self, SumOfFields) else (self,)
        right = other.terms if isinstance(other, SumOfFields) else (other,)
        return SumOfFields(left + right)


class AbstractAttentionDynamics(AbstractDynamics):
    """A field driven by an attention matrix P: it also exposes P at a state."""

    @abc.abstractmethod
    def attention(self, t: Float[Array, ""], y: Float[Array, "n d"]) -> Float[Array, "*H n n"]:
        """The attention matrix P at time t and state y (row-stochastic; (H, n, n) for H heads)."""


@final
class SumOfFields(AbstractAttentionDynamics):
    r"""The sum of fields, :math:`f(t, y) = \sum_k f_k(t, y)` (e.g. attention + feed-forward).

    The raw tokens are those of the first term that has a picture other than the identity
    (all terms of a sum must describe the same state). Its attention matrix is that of its first
    attention term (an :class:`~attnflow.InputError` when it has none).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow import AttentionFlow
        >>> f = AttentionFlow(jnp.eye(2), jnp.eye(2), jnp.eye(2))
        >>> len((f + f + f).terms)
        3
    """

    terms: tuple[AbstractDynamics, ...]

    def __check_init__(self):
        if not self.terms or not all(isinstance(f, AbstractDynamics) for f in self.terms):
            raise InputError(f"terms must be a non-empty tuple of attnflow dynamics, got {self.terms!r}.")
        dims = [f.state_dim for f in self.terms]
        if len({d for d in dims if d is not None}) > 1:
            raise InputError(f"the terms of a sum of fields must act on one token dimension d, got d = {dims}.")

    @property
    def state_dim(self):
        return next((f.state_dim for f in self.terms if f.state_dim is not None), None)

    def vector_field(self, t, y, args=None):
        out = self.terms[0].vector_field(t, y, args)
        for term in self.terms[1:]:
            out = out + term.vector_field(t, y, args)
        return out

    def tokens(self, t, y):
        return self.terms[0].tokens(t, y)

    def score_count(self, y) -> int:
        """The most scores any term holds (the terms are evaluated one after another)."""
        return max(term.score_count(y) for term in self.terms)

    def on_grid(self, dt, t0, num_layers):
        return SumOfFields(tuple(term.on_grid(dt, t0, num_layers) for term in self.terms))

    def attention(self, t, y):
        """P of the first attention term."""
        for term in self.terms:
            if isinstance(term, AbstractAttentionDynamics):
                return term.attention(t, y)
        raise InputError("this sum of fields has no attention term, so it has no attention matrix.")


@final
class FoldedBatch(AbstractAttentionDynamics):
    """Run a batch of systems that share one dynamics as a single state (B, n, d).

    With an adaptive solver all members then share one step-size sequence (one solve,
    no masking waste); with constant steps or the Euler stepper it is identical to
    ``jax.vmap`` over the members.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow import AttentionFlow, FoldedBatch
        >>> FoldedBatch(AttentionFlow(jnp.eye(2), jnp.eye(2), jnp.eye(2)))(0.0, jnp.ones((4, 3, 2))).shape
        (4, 3, 2)
    """

    dynamics: AbstractDynamics

    def __check_init__(self):
        if not isinstance(self.dynamics, AbstractDynamics):
            raise InputError(f"dynamics must be an attnflow dynamics, got {type(self.dynamics).__name__}.")

    @property
    def state_dim(self):
        return self.dynamics.state_dim

    def vector_field(self, t, y, args=None):
        return jax.vmap(lambda yb: self.dynamics.vector_field(t, yb, args))(y)

    def attention(self, t, y):
        return jax.vmap(lambda yb: self.dynamics.attention(t, yb))(y)

    def tokens(self, t, y):
        return jax.vmap(lambda yb: self.dynamics.tokens(t, yb))(y)

    def score_count(self, y) -> int:
        """The member's count times the batch (the members run together)."""
        return y.shape[0] * self.dynamics.score_count(jax.ShapeDtypeStruct(tuple(y.shape[1:]), y.dtype))

    def on_grid(self, dt, t0, num_layers):
        return FoldedBatch(self.dynamics.on_grid(dt, t0, num_layers))


def grid_layer(t, dt, t0) -> Array:
    """The layer index k of the grid time t = t0 + k dt (rounded; an int32 scalar)."""
    return jnp.round((t - t0) / dt).astype(jnp.int32)
