r"""Feed-forward layers as vector fields: the paper's Section 12.2 form, and the transformer block.

* :class:`Wrapped` (diffrax's ``WrapTerm`` analogue): any field f, passed through a pointwise
  nonlinearity and a matrix, :math:`g(t, y) = W \sigma(f(t, y) + b)`. With
  f = :class:`~attnflow.RescaledFlow` (:math:`f_i = \sum_j P_{ij} V (z_j - z_i)`, P from
  :math:`x = e^{tV} z`) this is Section 12.2 of the paper,

  .. math::  \dot z_i = W \sigma\Big(V \sum_j P_{ij} (z_j - z_i) + b\Big),

  built by :func:`section12_2_flow`. W = I, :math:`\sigma` = identity and b = 0 give f back.
* :class:`FeedForward`: the token-wise two-layer MLP :math:`m(x) = W_2 \sigma(W_1 x + b_1) + b_2`
  (hidden width h) as a field; ``attention + FeedForward(...)`` is the parallel block
  :math:`\dot x = \mathrm{attn}(x) + m(x)`.
* :class:`TransformerBlock`: the standard (sequential) residual block in the layer stepper,
  :math:`x' = x + \Delta t\,\mathrm{attn}(x)`, :math:`x[k+1] = x' + \Delta t\, m(x')`. The
  stepper's Euler step :math:`x + \Delta t\, g(x)` reproduces it with
  :math:`g(x) = \mathrm{attn}(x) + m(x + \Delta t\,\mathrm{attn}(x))`, where
  :math:`\Delta t` comes from the stepper (``on_grid``). Off the grid (an ODE solver) the block
  is its :math:`\Delta t \to 0` limit, the parallel sum attn + m.

The activations are :data:`ACTIVATIONS`: ``"relu"``, ``"tanh"``, ``"gelu"`` (exact, erf form)
and ``"identity"``.
"""

from __future__ import annotations

from typing import Callable, final

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float

from .. import _validate as v
from .._activations import ACTIVATIONS
from ..errors import InputError
from ._base import AbstractDynamics
from ._wrapping import AbstractWrapper

__all__ = ["ACTIVATIONS", "activation", "Wrapped", "FeedForward", "TransformerBlock", "section12_2_flow"]


def activation(name: str) -> Callable[[Array], Array]:
    """The pointwise nonlinearity called ``name`` (one of :data:`ACTIVATIONS`).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.dynamics._feedforward import activation
        >>> activation("relu")(jnp.array([-1.0, 2.0])).tolist()
        [0.0, 2.0]
    """
    if name not in ACTIVATIONS:
        raise InputError(f"activation must be one of {tuple(ACTIVATIONS)}, got {name!r}.")
    return ACTIVATIONS[name]


_activation = activation  # constructors below have an argument called ``activation``


def _matrix(name: str, a, shape: tuple[int | None, int | None]):
    """A real, finite (when concrete) matrix of ``shape`` (None: any size there), as a float array."""
    got = v.check_array(name, a, f"a {'x'.join('.' if s is None else str(s) for s in shape)} matrix", ranks=(2,))
    if any(s is not None and s != g for s, g in zip(shape, got)) or 0 in got:
        raise InputError(f"{name} must have shape {tuple('*' if s is None else s for s in shape)}, got {got}.")
    return v.as_float(a)


def _vector(name: str, a, size: int, dtype):
    if a is None:
        return None
    if v.check_array(name, a, f"a vector of {size} entries") != (size,):
        raise InputError(f"{name} must have shape ({size},), got {tuple(v.shape_of(name, a))}.")
    return jnp.asarray(a, dtype)


@final
class Wrapped(AbstractWrapper):
    r"""A field wrapped in a nonlinearity and a matrix: :math:`g_i(t, y) = W \sigma(f_i(t, y) + b)`.

    Args:
        inner: the field f (any attnflow dynamics).
        W: (d, d) output matrix (default I).
        activation: one of ``"relu"``, ``"tanh"``, ``"gelu"``, ``"identity"``.
        bias: optional (d,) bias b inside the nonlinearity.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from attnflow import RescaledFlow
        >>> from attnflow.dynamics import Wrapped
        >>> f = RescaledFlow(jnp.eye(2), jnp.eye(2), jnp.eye(2))
        >>> z = jax.random.normal(jax.random.key(0), (5, 2))
        >>> bool(jnp.allclose(Wrapped(f, activation="identity")(0.3, z), f(0.3, z)))
        True
    """

    W: Float[Array, "d d"] | None
    bias: Float[Array, " d"] | None
    activation: str = eqx.field(static=True)

    def __init__(self, inner: AbstractDynamics, W=None, activation: str = "relu", bias=None):
        _activation(activation)  # validates the name
        self._set_inner(inner)
        d = inner.state_dim
        if W is not None:
            W = _matrix("W", W, (d, d))
            if W.shape[0] != W.shape[1]:
                raise InputError(f"W must be a square (d, d) matrix, got shape {W.shape}.")
            d = W.shape[0]
        if bias is not None and d is None:
            d = v.check_array("bias", bias, "a (d,) vector", ranks=(1,))[0]
        self.W = W
        self.bias = _vector("bias", bias, d, None)
        self.activation = activation

    @property
    def state_dim(self):
        return self.inner.state_dim if self.W is None else self.W.shape[0]

    def vector_field(self, t, y, args=None):
        self.check_state(y)
        u = self.inner.vector_field(t, y, args)
        if self.bias is not None:
            u = u + self.bias
        u = ACTIVATIONS[self.activation](u)
        return u if self.W is None else u @ self.W.T


def section12_2_flow(Q, K=None, V=None, *, W=None, activation: str = "relu", bias=None, beta=1.0,
                     attention_impl: str = "auto", mask=None, positions=None) -> Wrapped:
    r"""The paper's Section 12.2 field :math:`\dot z_i = W\sigma(V\sum_j P_{ij}(z_j - z_i) + b)`, P from :math:`e^{tV}z`.

    ``Q`` may be an :class:`~attnflow.AttentionWeights` (then omit K, V). ``positions``: as for
    :class:`~attnflow.AttentionFlow`.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from attnflow.dynamics import section12_2_flow
        >>> f = section12_2_flow(jnp.eye(2), jnp.eye(2), jnp.eye(2), activation="tanh")
        >>> f(0.0, jax.random.normal(jax.random.key(0), (4, 2))).shape
        (4, 2)
    """
    from ._attention_flows import RescaledFlow

    return Wrapped(RescaledFlow(Q, K, V, beta, attention_impl=attention_impl, mask=mask, positions=positions), W,
                   activation, bias)


@final
class FeedForward(AbstractDynamics):
    r"""Token-wise two-layer MLP field :math:`m(x)_i = W_2\, \sigma(W_1 x_i + b_1) + b_2`.

    Args:
        W1: (h, d) first layer (hidden width h).  W2: (d, h) second layer.
        b1: optional (h,) bias.  b2: optional (d,) bias.
        activation: one of :data:`ACTIVATIONS`.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.dynamics import FeedForward
        >>> mlp = FeedForward(jnp.ones((3, 2)), jnp.ones((2, 3)), activation="relu")
        >>> mlp(0.0, jnp.array([[1.0, -2.0]])).tolist()
        [[0.0, 0.0]]
    """

    W1: Float[Array, "h d"]
    W2: Float[Array, "d h"]
    b1: Float[Array, " h"] | None
    b2: Float[Array, " d"] | None
    activation: str = eqx.field(static=True)

    def __init__(self, W1, W2, b1=None, b2=None, activation: str = "gelu"):
        _activation(activation)
        self.W1 = _matrix("W1", W1, (None, None))
        h, d = self.W1.shape
        self.W2 = _matrix("W2", W2, (d, h))
        self.b1 = _vector("b1", b1, h, self.W1.dtype)
        self.b2 = _vector("b2", b2, d, self.W2.dtype)
        self.activation = activation

    @property
    def hidden_width(self) -> int:
        return self.W1.shape[0]

    @property
    def state_dim(self) -> int:
        return self.W1.shape[1]

    def vector_field(self, t, y, args=None):
        self.check_state(y)
        u = y @ self.W1.T
        if self.b1 is not None:
            u = u + self.b1
        out = ACTIVATIONS[self.activation](u) @ self.W2.T
        return out if self.b2 is None else out + self.b2


@final
class TransformerBlock(AbstractWrapper):
    r"""Attention then a feed-forward layer, both residual, as the layer stepper steps them.

    One Euler layer of step :math:`\Delta t` maps x to :math:`x' + \Delta t\, m(x')` with
    :math:`x' = x + \Delta t\, \mathrm{attn}(x)` (dt = 1: ``x = x + attn(x); x = x + mlp(x)``).
    The field is :math:`\mathrm{attn}(x) + m(x + \Delta t\,\mathrm{attn}(x))` with
    :math:`\Delta t` bound by the stepper; unbound (ODE solvers) it is the limit attn + m.

    Args:
        attention: the attention field (raw picture, e.g. :class:`~attnflow.AttentionFlow`).
        feedforward: the token-wise field m (e.g. :class:`FeedForward`).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from attnflow import AttentionFlow
        >>> from attnflow.dynamics import FeedForward, TransformerBlock
        >>> from attnflow.integrate import EulerStepper
        >>> key1, key2, key3 = jax.random.split(jax.random.key(0), 3)
        >>> mlp = FeedForward(jax.random.normal(key1, (8, 2)), 0.1 * jax.random.normal(key2, (2, 8)))
        >>> block = TransformerBlock(AttentionFlow(jnp.eye(2), jnp.eye(2), jnp.eye(2)), mlp)
        >>> EulerStepper(dt=1.0, num_layers=3).solve(block, jax.random.normal(key3, (5, 2))).ys.shape
        (4, 5, 2)
    """

    feedforward: AbstractDynamics
    dt: Float[Array, ""] | None

    def __init__(self, attention: AbstractDynamics, feedforward: AbstractDynamics):
        if not isinstance(feedforward, AbstractDynamics):
            raise InputError(f"feedforward must be an attnflow dynamics, got {type(feedforward).__name__}.")
        self._set_inner(attention)
        if None not in (attention.state_dim, feedforward.state_dim) and attention.state_dim != feedforward.state_dim:
            raise InputError(f"feedforward must act on the token dimension d = {attention.state_dim} of the "
                             f"attention, got a field on d = {feedforward.state_dim}.")
        self.feedforward, self.dt = feedforward, None

    def vector_field(self, t, y, args=None):
        a = self.inner.vector_field(t, y, args)
        half = y if self.dt is None else y + self.dt * a
        return a + self.feedforward.vector_field(t, half, args)

    def on_grid(self, dt, t0, num_layers):
        return eqx.tree_at(lambda f: (f.inner, f.feedforward, f.dt), self,
                           (self.inner.on_grid(dt, t0, num_layers), self.feedforward.on_grid(dt, t0, num_layers),
                            jnp.asarray(dt)), is_leaf=lambda x: x is None)
