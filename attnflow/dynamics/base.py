r"""The vector-field interface every dynamics implements.

A dynamics is an equinox Module with one method ``vector_field(t, y, args) -> dy/dt``
(also reachable as ``__call__``) that ``diffrax.ODETerm`` takes directly and the
Euler layer stepper calls unchanged. ``y`` is the state of one system of tokens,
shape (n, d). Batching is done outside by ``jax.vmap`` (or by :class:`FoldedBatch`).

Besides the vector field a dynamics exposes what diagnostics need:
``attention(t, y)`` (the matrix P at that state) and ``tokens(t, y)`` (the raw
tokens x for a state y written in the dynamics' own coordinates).
"""

from __future__ import annotations

import abc

import equinox as eqx
import jax
from jaxtyping import Array, Float, PyTree


class AbstractDynamics(eqx.Module):
    """Base class: a time-dependent vector field on token configurations."""

    @abc.abstractmethod
    def vector_field(self, t: Float[Array, ""], y: Float[Array, "n d"], args: PyTree) -> Float[Array, "n d"]:
        """dy/dt at time t."""

    def __call__(self, t, y, args=None):
        return self.vector_field(t, y, args)

    @abc.abstractmethod
    def attention(self, t: Float[Array, ""], y: Float[Array, "n d"]) -> Float[Array, "n n"]:
        """The attention matrix P at time t and state y (row-stochastic)."""

    def tokens(self, t: Float[Array, ""], y: Float[Array, "n d"]) -> Float[Array, "n d"]:
        """The raw tokens x represented by the state y (identity by default)."""
        return y


class FoldedBatch(AbstractDynamics):
    """Run a batch of systems that share one dynamics as a single state (B, n, d).

    With an adaptive solver all members then share one step-size sequence (one solve,
    no masking waste); with constant steps or the Euler stepper it is identical to
    ``jax.vmap`` over the members.
    """

    dynamics: AbstractDynamics

    def vector_field(self, t, y, args=None):
        return jax.vmap(lambda yb: self.dynamics.vector_field(t, yb, args))(y)

    def attention(self, t, y):
        return jax.vmap(lambda yb: self.dynamics.attention(t, yb))(y)

    def tokens(self, t, y):
        return jax.vmap(lambda yb: self.dynamics.tokens(t, yb))(y)
