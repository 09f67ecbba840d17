r"""Weights that vary across layers (no weight sharing; SPEC section 3, nothing proved).

The paper's dynamics use one triple for every layer (ALBERT); a standard transformer has one per
layer. With a stack :math:`(Q_l, K_l, V_l, \beta_l)_{l < L}` (an :class:`~attnflow.AttentionWeights`
with a ``"layer"`` axis):

* :class:`LayeredFlow`, for the layer stepper: on the grid :math:`t_k = t_0 + k\Delta t`, layer k
  uses the weights of index k, :math:`x[k+1] = x[k] + \Delta t \sum_j P^{(k)}_{ij} V_k x_j[k]`.
  The stepper supplies :math:`\Delta t, t_0` (``on_grid``) and the layer index is
  :func:`~attnflow.dynamics._base.grid_layer`, so the stack is scanned with the layers.
* :class:`TimeVaryingFlow`, for the ODE solvers: weights that are a function of t,
  :math:`\dot x_i = \sum_j P_{ij}(t) V(t) x_j`, e.g. :class:`LayerInterpolation` (piecewise-linear
  in t through the layer weights at the nodes :math:`t_0 + l\Delta t`, continuous in t) or any
  user function ``t -> AttentionWeights``.
* :func:`perturbed_layers`: a shared triple plus a per-layer perturbation of relative Frobenius size
  :math:`\varepsilon`, :math:`X_l = X + \varepsilon \|X\|_F G_l/\|G_l\|_F` (X = Q, K, V; G_l i.i.d.
  Gaussian, seeded): the ALBERT defence study (:math:`\varepsilon = 0` is weight sharing).

Each layer may carry heads too (``axes=("layer", "head")``).
"""

from __future__ import annotations

from typing import Callable, final

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PRNGKeyArray

from .. import _validate as v
from ..kernels import IMPLS, NORMALISATIONS, Positions, as_positions
from ..errors import InputError
from .._weights import AttentionWeights
from ._attention_flows import AttentionFlow, _check_mask
from ._base import AbstractAttentionDynamics, grid_layer

__all__ = ["LayeredFlow", "TimeVaryingFlow", "LayerInterpolation", "perturbed_layers"]


def perturbed_layers(weights: AttentionWeights, num_layers: int, epsilon: float,
                     key: PRNGKeyArray) -> AttentionWeights:
    r"""``num_layers`` copies of shared weights, each perturbed by relative Frobenius size epsilon.

    :math:`X_l = X + \varepsilon \|X\|_F\, G_l / \|G_l\|_F` for X in (Q, K, V), with independent
    standard Gaussian :math:`G_l` drawn from ``key``; so :math:`\|X_l - X\|_F = \varepsilon \|X\|_F`
    exactly. beta and biases are shared. Returns weights with a leading ``"layer"`` axis.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from attnflow import AttentionWeights
        >>> from attnflow.dynamics import perturbed_layers
        >>> w = AttentionWeights(jnp.eye(2), jnp.eye(2), jnp.eye(2))
        >>> stack = perturbed_layers(w, 4, 0.5, jax.random.key(0))
        >>> stack.axes, stack.num_layers
        (('layer',), 4)
        >>> float(jnp.linalg.norm(stack.V[2] - w.V) / jnp.linalg.norm(w.V)).__round__(6)
        0.5
    """
    if not isinstance(weights, AttentionWeights) or "layer" in weights.axes:
        raise InputError("perturbed_layers needs shared AttentionWeights (without a 'layer' axis).")
    num_layers = v.check_int("num_layers", num_layers, meaning="the number of perturbed copies")
    v.check_real("epsilon", epsilon, "the relative Frobenius size of the perturbation, a finite real scalar")
    if v.is_concrete(epsilon) and not epsilon >= 0:
        raise InputError(f"epsilon (relative Frobenius size of the perturbation) must be >= 0, got {epsilon!r}.")
    if not (isinstance(key, jax.Array) and key.shape in ((), (2,))):
        raise InputError(f"key must be a JAX random key (jax.random.key(seed)), got {type(key).__name__}.")
    keys = jax.random.split(key, 3)

    def perturb(X, k):
        G = jax.random.normal(k, (num_layers,) + X.shape, X.dtype)
        axes = tuple(range(X.ndim - 1, X.ndim + 1))  # the matrix axes of every head
        unit = G / jnp.linalg.norm(G, axis=axes, keepdims=True)
        scale = jnp.linalg.norm(X, axis=tuple(range(X.ndim - 2, X.ndim)), keepdims=True)
        return X[None] + epsilon * scale[None] * unit

    Q, K, V = (perturb(X, k) for X, k in zip((weights.Q, weights.K, weights.V), keys))
    rep = lambda a: None if a is None else jnp.broadcast_to(a, (num_layers,) + a.shape)
    return AttentionWeights(Q, K, V, rep(weights.beta), q_bias=rep(weights.q_bias), k_bias=rep(weights.k_bias),
                            v_bias=rep(weights.v_bias), axes=("layer",) + weights.axes)


class _PerTimeAttention(AbstractAttentionDynamics):
    """Shared part: the attention field of the weights in force at time t (raw picture)."""

    mask: object
    attention_impl: str = eqx.field(static=True)
    normalisation: str = eqx.field(static=True)
    positions: Positions | None

    def _options(self, attention_impl, mask, normalisation, positions=None):
        if attention_impl not in IMPLS:
            raise InputError(f"attention_impl must be one of {IMPLS}, got {attention_impl!r}.")
        if attention_impl == "harmonic":
            raise InputError("attention_impl='harmonic' takes one set of concrete weights for every layer (its degree "
                             "comes from their score scale); layer-varying dynamics use 'auto', 'dense' or 'chunked'.")
        if normalisation not in NORMALISATIONS:
            raise InputError(f"normalisation must be one of {NORMALISATIONS}, got {normalisation!r}.")
        self.mask = _check_mask(mask)
        self.attention_impl, self.normalisation = attention_impl, normalisation
        self.positions = as_positions(positions)

    def weights_at(self, t) -> AttentionWeights:
        raise NotImplementedError

    def field_at(self, t) -> AttentionFlow:
        """The (shared-weight) attention field of the weights in force at time t."""
        return AttentionFlow(self.weights_at(t), attention_impl=self.attention_impl, mask=self.mask,
                             normalisation=self.normalisation, positions=self.positions)

    def vector_field(self, t, y, args=None):
        return self.field_at(t).vector_field(t, y, args)

    def attention(self, t, y):
        return self.field_at(t).attention(t, y)


@final
class LayeredFlow(_PerTimeAttention):
    r"""Per-layer weights in the layer stepper: layer k of the grid uses ``weights.layer(k)``.

    Args:
        weights: :class:`~attnflow.AttentionWeights` with a ``"layer"`` axis (L layers; the
            stepper may run at most L layers).
        attention_impl, mask, normalisation, positions: as for :class:`~attnflow.AttentionFlow`.

    Defined on the layer grid only (dt and t0 come from :class:`~attnflow.integrate.EulerStepper`);
    for an ODE solver use :class:`TimeVaryingFlow` with :class:`LayerInterpolation`.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from attnflow import AttentionWeights
        >>> from attnflow.dynamics import LayeredFlow, perturbed_layers
        >>> from attnflow.integrate import EulerStepper
        >>> w = perturbed_layers(AttentionWeights(jnp.eye(2), jnp.eye(2), jnp.eye(2)), 6, 0.1, jax.random.key(0))
        >>> x0 = jax.random.normal(jax.random.key(1), (5, 2))
        >>> EulerStepper(dt=1.0, num_layers=6).solve(LayeredFlow(w), x0).ys.shape
        (7, 5, 2)
    """

    weights: AttentionWeights
    dt: Float[Array, ""] | None
    t0: Float[Array, ""] | None

    def __init__(self, weights: AttentionWeights, *, attention_impl: str = "auto", mask=None,
                 normalisation: str = "softmax", positions=None):
        if not isinstance(weights, AttentionWeights) or "layer" not in weights.axes:
            raise InputError("LayeredFlow needs AttentionWeights with a 'layer' axis (one weight set per layer); "
                             "stack them with AttentionWeights.stack(..., axis='layer').")
        v.check_beta("beta", weights.beta)
        self._options(attention_impl, mask, normalisation, positions)
        self.weights, self.dt, self.t0 = weights, None, None

    @property
    def state_dim(self) -> int:
        return self.weights.d

    def on_grid(self, dt, t0, num_layers):
        if num_layers > self.weights.num_layers:
            raise InputError(f"the stepper runs {num_layers} layers but the weights hold only "
                             f"{self.weights.num_layers} (one set per layer).")
        dtype = self.weights.dtype
        return eqx.tree_at(lambda f: (f.dt, f.t0), self, (jnp.asarray(dt, dtype), jnp.asarray(t0, dtype)),
                           is_leaf=lambda x: x is None)

    def weights_at(self, t):
        if self.dt is None:
            raise InputError("LayeredFlow is defined on the layer grid only: step it with "
                             "attnflow.integrate.EulerStepper; for ODE solvers use TimeVaryingFlow(LayerInterpolation(...)).")
        k = jnp.clip(grid_layer(t, self.dt, self.t0), 0, self.weights.num_layers - 1)
        return self.weights.layer(k)


@final
class LayerInterpolation(eqx.Module):
    r"""Weights of time, linear between the layer weights at the nodes :math:`t_0 + l\Delta t`.

    :math:`W(t) = (1-a) W_l + a W_{l+1}` with :math:`s = (t - t_0)/\Delta t`, :math:`l = \lfloor s\rfloor`,
    a = s - l; constant before the first and after the last node. Continuous in t (so an
    adaptive solver sees no jump), equal to layer l's weights at :math:`t_0 + l\Delta t`.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow import AttentionWeights
        >>> from attnflow.dynamics import LayerInterpolation
        >>> I = jnp.eye(2)
        >>> w = AttentionWeights.stack([AttentionWeights(I, I, I), AttentionWeights(I, I, 3 * I)], axis="layer")
        >>> LayerInterpolation(w)(0.5).V.tolist()
        [[2.0, 0.0], [0.0, 2.0]]
    """

    weights: AttentionWeights
    dt: float
    t0: float

    def __init__(self, weights: AttentionWeights, dt: float = 1.0, t0: float = 0.0):
        if not isinstance(weights, AttentionWeights) or "layer" not in weights.axes:
            raise InputError("LayerInterpolation needs AttentionWeights with a 'layer' axis.")
        v.check_beta("beta", weights.beta)
        v.check_positive("dt", dt, "the spacing of the layer nodes, a finite positive scalar")
        v.check_real("t0", t0, "the time of the first node, a finite real scalar")
        self.weights, self.dt, self.t0 = weights, float(dt), float(t0)

    def __call__(self, t) -> AttentionWeights:
        L = self.weights.num_layers
        s = jnp.clip((t - self.t0) / self.dt, 0.0, L - 1.0)
        lo = jnp.clip(jnp.floor(s).astype(jnp.int32), 0, max(L - 2, 0))
        a = s - lo
        w0, w1 = self.weights.layer(lo), self.weights.layer(jnp.minimum(lo + 1, L - 1))
        return jax.tree_util.tree_map(lambda u, v: (1 - a) * u + a * v, w0, w1)


@final
class TimeVaryingFlow(_PerTimeAttention):
    r"""Attention flow with weights that depend on time: :math:`\dot x_i = \sum_j P_{ij}(t) V(t) x_j`.

    Args:
        weights_of_time: ``t -> AttentionWeights`` (no ``"layer"`` axis), e.g. a
            :class:`LayerInterpolation`, or any JAX-traceable function.
        attention_impl, mask, normalisation, positions: as for :class:`~attnflow.AttentionFlow`.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from attnflow import AttentionWeights
        >>> from attnflow.dynamics import TimeVaryingFlow
        >>> I = jnp.eye(2)
        >>> f = TimeVaryingFlow(lambda t: AttentionWeights(I, I, jnp.cos(t) * I))
        >>> float(jnp.abs(f(jnp.pi / 2, jnp.ones((3, 2)))).max()) < 1e-6
        True
    """

    weights_of_time: Callable[[Array], AttentionWeights]

    def __init__(self, weights_of_time: Callable[[Array], AttentionWeights], *, attention_impl: str = "auto",
                 mask=None, normalisation: str = "softmax", positions=None):
        if not callable(weights_of_time):
            raise InputError("weights_of_time must be a function t -> AttentionWeights.")
        self._options(attention_impl, mask, normalisation, positions)
        self.weights_of_time = weights_of_time

    def weights_at(self, t):
        w = self.weights_of_time(t)
        if not isinstance(w, AttentionWeights):
            raise InputError(f"weights_of_time(t) must return AttentionWeights, got {type(w).__name__}.")
        return w
