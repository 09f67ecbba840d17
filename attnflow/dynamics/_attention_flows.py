r"""The self-attention flows of SPEC section 1: raw, rescaled, and discretely rescaled.

All three share one computation, :meth:`_AttentionField.vector_field`: the raw tokens
:math:`x = M(t) y` of the state, queries and keys from x (with the weights' biases), one
``attend`` call per head, and an optional subtraction that turns
:math:`\sum_j P_{ij} W y_j` into :math:`\sum_j P_{ij} W (y_j - y_i)` (rows of P sum to one).

* :class:`AttentionFlow` (1.1):  :math:`\dot x_i = \sum_h \sum_j P^h_{ij} (V_h x_j + c_h)`, P from x
  (one head unless the weights carry a ``"head"`` axis).
* :class:`RescaledFlow` (1.2):  :math:`z = e^{-tV}x`,
  :math:`\dot z_i = \sum_j P_{ij}\, V (z_j - z_i) + e^{-tV} c`, P from :math:`x = e^{tV} z`.
* :class:`DiscreteRescaledFlow` (1.4): with :math:`R = I + \Delta t V`, one forward-Euler
  step at :math:`t = t_0 + k\Delta t` is exactly Remark 3.4:
  :math:`z[k+1] = z[k] + \Delta t \sum_j P_{ij} R^{-1} V (z_j - z_i)`, P from
  :math:`x = R^k z`. It takes :math:`\Delta t` and the layer count from the layer stepper
  (:meth:`on_grid`), never from its own constructor.
"""

from __future__ import annotations

import math
from typing import ClassVar, final

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float

from .. import _validate as v
from ..kernels import fourier as _fourier
from ..kernels import sphere as _sphere
from ..kernels import (IMPLS, NORMALISATIONS, Positions, alibi_bias, as_positions, attend, check_mask, mask_array,
                       project_qk, rotate, softmax)
from ..errors import InputError
from .._linalg import euler_transfer_matrix, expm_tV, matrix_power
from .._weights import AttentionWeights
from ._base import AbstractAttentionDynamics, grid_layer
from ._multihead import rescaling_generator

__all__ = ["AttentionFlow", "RescaledFlow", "DiscreteRescaledFlow", "as_weights"]


def as_weights(Q, K=None, V=None, beta=1.0) -> AttentionWeights:
    """``Q`` if it is already an :class:`AttentionWeights`, else ``AttentionWeights(Q, K, V, beta)``."""
    if isinstance(Q, AttentionWeights):
        if K is not None or V is not None:
            raise InputError("pass either an AttentionWeights or the matrices Q, K, V, not both.")
        return Q
    if K is None or V is None:
        raise InputError("the attention weights need Q, K and V (or one AttentionWeights).")
    return AttentionWeights(Q, K, V, beta)


def _check_mask(mask):
    """A constructor's mask: None, ``"causal"``, or a boolean (n, n) array (its n is checked per call)."""
    check_mask(mask)
    return mask if mask is None or isinstance(mask, str) else jnp.asarray(mask, bool)


class _AttentionField(AbstractAttentionDynamics):
    """Shared fields and the one drift computation of the attention flows."""

    weights: AttentionWeights
    mask: Bool[Array, "n n"] | None
    causal: bool = eqx.field(static=True)
    #: attention implementation passed to ``attend`` ("auto", "dense", "chunked", "fused", "flash")
    attention_impl: str = eqx.field(static=True)
    #: "softmax" (row-stochastic P) or "mean" (unnormalised e^{s_ij}/n; raw picture only)
    normalisation: str = eqx.field(static=True)
    #: how the field takes the O(n K) Fourier path on the circle (None: it does not; attnflow.kernels.fourier)
    fourier: _fourier.FourierPlan | None = eqx.field(static=True)
    #: how the field takes the O(n L^2) path on the sphere S^2 (None: it does not; attnflow.kernels.sphere)
    harmonic: _sphere.HarmonicPlan | None = eqx.field(static=True)
    #: where the tokens sit (ALiBi slope, rotary base; :class:`attnflow.kernels.Positions`), or None
    positions: Positions | None

    def _setup(self, Q, K, V, beta, attention_impl, mask, normalisation="softmax", fourier_max_score=None,
               unit_tokens=False, positions=None):
        w = as_weights(Q, K, V, beta)
        v.check_beta("beta", w.beta)
        if "layer" in w.axes:
            raise InputError(
                f"{type(self).__name__} uses one set of weights for every layer, but these weights have a "
                "'layer' axis; use the layer-varying dynamics, or select a layer with weights.layer(l)."
            )
        if attention_impl not in IMPLS:
            raise InputError(f"attention_impl must be one of {IMPLS}, got {attention_impl!r}.")
        if normalisation not in NORMALISATIONS:
            raise InputError(f"normalisation must be one of {NORMALISATIONS}, got {normalisation!r}.")
        if normalisation != "softmax" and self.relative:
            raise InputError(f"{type(self).__name__} writes the drift as sum_j P_ij (z_j - z_i), which needs "
                             "row-stochastic P; use AttentionFlow (raw picture) for normalisation='mean'.")
        mask = _check_mask(mask)
        positions = as_positions(positions)
        if positions is not None and attention_impl in ("fourier", "harmonic"):
            raise InputError(f"attention_impl={attention_impl!r} needs scores that depend on the tokens only; "
                             "positions (ALiBi, rotary) break that structure, so use 'auto', 'dense' or 'chunked'.")
        heads = w.Q.shape[w.axes.index("head")] if "head" in w.axes else None
        if positions is not None and positions.heads is not None and positions.heads != heads:
            raise InputError(f"positions give {positions.heads} ALiBi slopes (one per head), but the weights have "
                             f"{heads or 1} head(s): give one slope per head, or one scalar slope for all of them.")
        if positions is not None and positions.rotary is not None and w.Q.shape[-2] % 2:
            raise InputError(f"rotary positions rotate pairs of coordinates of Q x and K x, so Q and K need an even "
                             f"number of rows, got {w.Q.shape[-2]}.")
        self.positions = positions
        self.normalisation = normalisation
        self.weights = w
        self.causal = isinstance(mask, str)
        self.mask = None if isinstance(mask, str) else mask
        self.attention_impl = attention_impl
        if positions is not None:  # neither the Fourier nor the sphere path sees positions
            self.fourier = self.harmonic = None
            return
        self.fourier = _fourier.plan(w, attention_impl, mask=mask, normalisation=normalisation,
                                     max_score=fourier_max_score, unit_tokens=unit_tokens,
                                     owner=type(self).__name__, relative=self.relative)
        self.harmonic = _sphere.harmonic_plan(w, attention_impl, mask=mask, unit_tokens=unit_tokens,
                                              owner=type(self).__name__, relative=self.relative)

    # -- hooks of the pictures ------------------------------------------------------
    #: True when the field is written in differences y_j - y_i (the rescaled pictures)
    relative: ClassVar[bool] = False

    def transport(self, t) -> Float[Array, "d d"] | None:
        """Matrix M(t) with x = M(t) y; ``None`` means the identity."""
        return None

    def drift_matrix(self, V) -> Float[Array, "d d"]:
        """Matrix W in  dy_i/dt = sum_j P_ij W (y_j [- y_i])."""
        return V

    def state_bias(self, t, c) -> Float[Array, " d"]:
        """The value bias c as it enters dy/dt (c itself in the raw picture)."""
        return c

    # -- shared computation ---------------------------------------------------------
    def _mask(self):
        return "causal" if self.causal else self.mask

    def _project(self, x, w):
        """Queries and keys of one head; with rotary positions always the projections beta Q x_i and K x_j
        (rotated by :func:`~attnflow.kernels.attend`)."""
        rotary = self.positions is not None and self.positions.rotary is not None
        return project_qk(x, w.Q, w.K, w.beta, w.q_bias, w.k_bias, project=rotary)

    @property
    def state_dim(self) -> int:
        return self.weights.d

    def tokens(self, t, y):
        M = self.transport(t)
        return y if M is None else y @ M.T

    def _per_head(self, fn):
        """Apply ``fn(weights_of_one_head, positions_of_that_head)`` to every head; stacked on a leading axis if
        several (a per-head ALiBi slope is mapped with the weights)."""
        w, pos = self.weights, self.positions
        if "head" not in w.axes:
            return fn(w, pos)
        if pos is not None and pos.heads is not None:
            return jax.vmap(fn)(w, pos)
        return jax.vmap(lambda one: fn(one, pos))(w)

    def _takes_fourier(self, x) -> bool:
        """Whether this evaluation takes the Fourier path (static: from the plan, n and the dtype)."""
        return self.fourier is not None and self.fourier.applies(x.shape[0], jnp.result_type(x, self.weights.dtype))

    def _takes_harmonic(self, x) -> bool:
        """Whether this evaluation takes the sphere path (static: from the plan, n, d and the dtype)."""
        return self.harmonic is not None and self.harmonic.applies(x.shape[0], x.shape[-1],
                                                                   jnp.result_type(x, self.weights.dtype))

    def score_count(self, y) -> int:
        """0 where the evaluation takes the Fourier or the sphere path (no score matrix), else n^2 per system."""
        if len(y.shape) == 2 and (self._takes_fourier(y) or self._takes_harmonic(y)):
            return 0
        return super().score_count(y)

    def attention(self, t, y):
        self.check_state(y)
        x = self.tokens(t, y)
        if self._takes_fourier(x) or self._takes_harmonic(x):  # both paths attend with the tokens' directions
            x = x / jnp.linalg.norm(x, axis=-1, keepdims=True)
        mask = mask_array(self._mask(), x.shape[0], x.shape[0])

        def one(w, pos):
            q, k = self._project(x, w)
            if pos is not None and pos.rotary is not None:
                q, k = rotate(q, pos.rotary, pos.offset), rotate(k, pos.rotary, pos.offset)
            s = q @ k.T
            if pos is not None and pos.alibi is not None:
                s = s + alibi_bias(s.shape[0], s.shape[1], pos.alibi, s.dtype)
            return softmax(s, axis=-1, where=mask, normalisation=self.normalisation)

        return self._per_head(one)

    def vector_field(self, t, y, args=None):
        # Scores from the raw tokens x = M(t) y. Folding M into the weights instead
        # (scores y^T M^T Q^T K M y, with M^T A M formed) squares the conditioning of M:
        # measured 7e-3 relative error in the Remark 3.4 identity after 15 layers with
        # cond(R^k) ~ 1e10, against rounding level (<= eps k cond(R^k)) when x is formed first.
        self.check_state(y)
        x = self.tokens(t, y)
        if self._takes_fourier(x):
            return self._fourier_field(t, x)
        if self._takes_harmonic(x):
            return self._harmonic_field(t, x)
        mask = self._mask()

        def one(w, pos):
            q, k = self._project(x, w)
            v = y @ self.drift_matrix(w.V).T
            out = attend(q, k, v, impl=self.attention_impl, mask=mask, normalisation=self.normalisation,
                         positions=pos)
            out = out - v if self.relative else out
            if w.v_bias is not None:
                out = out + self.state_bias(t, w.v_bias)
            return out

        out = self._per_head(one)
        return out.sum(axis=0) if "head" in self.weights.axes else out

    def _fourier_field(self, t, x):
        r""":math:`\sum_h \sum_j P^h_{ij} (V_h \hat x_j + c_h)` with P of the directions
        :math:`\hat x = x/\|x\|` (raw picture: y = x), in O(n K) (:func:`attnflow.kernels.fourier.field_means`)."""
        w = self.weights
        means = _fourier.field_means(x, w, self.fourier, self.normalisation, type(self).__name__)  # (h, n, 2)
        V = w.V.reshape(-1, 1, 2, 2)
        out = means[..., :1] * V[..., 0] + means[..., 1:] * V[..., 1]  # means @ V^T, elementwise (fuses)
        if w.v_bias is not None:
            out = out + self.state_bias(t, w.v_bias.reshape(-1, 1, 2))
        return out.sum(axis=0)

    def _harmonic_field(self, t, x):
        r""":math:`\sum_h \sum_j P^h_{ij} (V_h \hat x_j + c_h)` with P of the directions :math:`\hat x = x/\|x\|`
        and scores :math:`c_h\langle\hat x_i, \hat x_j\rangle` (:math:`\beta_h Q_h^T K_h = c_h I`; raw picture), in
        O(n H) for the H harmonics of degree <= L on S^(d-1) (:func:`attnflow.kernels.sphere.head_means`)."""
        w = self.weights
        x = jnp.asarray(x, jnp.result_type(x, w.dtype))
        d = x.shape[-1]
        scales = jnp.einsum("...mi,...mi->...", w.Q, w.K) * w.beta / d  # tr(beta Q^T K) / d per head
        means = _sphere.head_means(x, scales, self.harmonic, self.normalisation)  # (h, n, d)
        out = jnp.einsum("hnj,hij->hni", means, w.V.reshape(-1, d, d))
        if w.v_bias is not None:
            out = out + self.state_bias(t, w.v_bias.reshape(-1, 1, d))
        return out.sum(axis=0)

    # convenience accessors (single head)
    @property
    def Q(self):
        return self.weights.Q

    @property
    def K(self):
        return self.weights.K

    @property
    def V(self):
        return self.weights.V

    @property
    def beta(self):
        return self.weights.beta


def _generator(self) -> Float[Array, "d d"]:
    """S of the rescaling (V; sum_h V_h for heads that commute with it: dynamics/multihead.py)."""
    w = self.weights
    return w.V.sum(axis=0) if "head" in w.axes else w.V


@final
class AttentionFlow(_AttentionField):
    r"""Raw self-attention flow :math:`\dot x_i = \sum_j P_{ij}(t) (V x_j + c)` (summed over heads).

    Args:
        Q: (m, d) query matrix, or an :class:`~attnflow.AttentionWeights` (then omit K, V, beta);
            weights with a ``"head"`` axis give multi-head attention (sum over heads).
        K: (m, d) key matrix.  V: (d, d) value matrix.
        beta: inverse temperature, finite and > 0 (the paper's model is beta = 1).
        attention_impl: ``attend``'s implementation, or ``"fourier"``: on the circle (d = 2) with
            :math:`\beta Q^T K = c R(\alpha)` a scaled rotation, no mask and no query/key bias, the
            O(n K) Fourier path of :mod:`attnflow.kernels.fourier` (exact to rounding for unit tokens; it
            attends with the directions :math:`x_j/\|x_j\|`, so tokens off the circle get the
            attention of their projections onto it); or ``"harmonic"``: on the sphere S^(d-1), d >= 3, with
            :math:`\beta Q^T K = c I` (c >= 0, concrete weights), no mask and no query/key bias, the
            O(n H) path of :mod:`attnflow.kernels.sphere` (H = (L+1)^2 harmonics on S^2;
            :mod:`attnflow.kernels.hypersphere` for d > 3; exact to rounding for unit tokens, likewise with
            the directions; :func:`attnflow.kernels.sphere.harmonic_plan` holds its rules).
            mask: None, ``"causal"`` or (n, n) bool.
        positions: where the tokens sit (:class:`~attnflow.kernels.Positions`, a kind name or a mapping,
            :func:`~attnflow.kernels.as_positions`): the ALiBi bias :math:`-\lambda|i - j|/n` on every score
            (with ``mask="causal"`` the causal form :math:`-\lambda(i - j)/n`) and/or rotary positions (:math:`Q x_i`
            and :math:`K x_j` rotated by :math:`p\,\theta_k`; m even); shared by every head. Not with the Fourier or
            sphere paths.
        normalisation: ``"softmax"`` (the paper's model) or ``"mean"`` (unnormalised attention,
            :math:`P_{ij} = e^{s_{ij}}/n`).
        fourier_max_score: an upper bound of the score scale :math:`a = |\beta c|` that fixes the
            Fourier path's number of modes; needed when the weights are traced (built inside
            jit / vmap / grad, e.g. vmapped over beta) and checked at run time. By default a is read
            from concrete weights.
        unit_tokens: the states stay on the unit circle (:func:`~attnflow.dynamics.sphere_flow` sets it);
            ``attention_impl="auto"`` then takes the Fourier path where it applies exactly (concrete
            scaled-rotation weights with :math:`a(1-\cos\alpha) \le \log 2`, no mask or query/key
            bias) and is faster (:math:`n \ge 4 (K + 1)`); on S^2 the sphere path likewise (concrete
            :math:`\beta Q^T K = cI`, :math:`n \ge 4 (L + 1)^2`); else it picks as ``attend`` does.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow import AttentionFlow
        >>> f = AttentionFlow(jnp.eye(2), jnp.eye(2), jnp.eye(2))
        >>> f(0.0, jnp.ones((3, 2))).shape
        (3, 2)
    """

    def __init__(self, Q, K=None, V=None, beta=1.0, *, attention_impl: str = "auto", mask=None,
                 normalisation: str = "softmax", fourier_max_score: float | None = None, unit_tokens: bool = False,
                 positions=None):
        self._setup(Q, K, V, beta, attention_impl, mask, normalisation, fourier_max_score, bool(unit_tokens),
                    positions)


@final
class RescaledFlow(_AttentionField):
    r"""Rescaled flow for :math:`z = e^{-(t - t_0)V} x`:
    :math:`\dot z_i = \sum_j P_{ij} V (z_j - z_i)` with P computed from
    :math:`x = e^{(t - t_0)V} z` (one ``expm`` per evaluation; P identical to the raw picture).
    ``t0`` is the start of the run: z(t0) = x(t0). Several heads rescale by
    :math:`S = \sum_h V_h` when every V_h commutes with S (e.g. a common V; see
    :mod:`attnflow.dynamics._multihead`), else an InputError. ``positions`` as for :class:`AttentionFlow`.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow import RescaledFlow
        >>> f = RescaledFlow(jnp.eye(2), jnp.eye(2), jnp.eye(2))
        >>> float(jnp.abs(f(0.5, jnp.ones((3, 2)))).max())  # identical tokens do not move
        0.0
    """

    t0: Float[Array, ""]
    relative: ClassVar[bool] = True

    def __init__(self, Q, K=None, V=None, beta=1.0, *, t0=0.0, attention_impl: str = "auto", mask=None,
                 positions=None):
        self._setup(Q, K, V, beta, attention_impl, mask, positions=positions)
        rescaling_generator(self.weights, type(self).__name__)
        v.check_real("t0", t0, "the start time of the run, a finite real scalar")
        self.t0 = jnp.asarray(t0, self.weights.dtype)

    def transport(self, t):
        return expm_tV(_generator(self), t - self.t0)

    def state_bias(self, t, c):
        return jnp.linalg.solve(self.transport(t), c)


class _LayerGrid(eqx.Module):
    """The layer grid t0 + k dt, k < num_layers, that the stepper binds (:meth:`DiscreteRescaledFlow.on_grid`)."""

    dt: Float[Array, ""]
    t0: Float[Array, ""]
    num_layers: int = eqx.field(static=True)


@final
class DiscreteRescaledFlow(_AttentionField):
    r"""Exact discrete rescaling of the Euler layer stepper (Remark 3.4).

    With :math:`R = I + \Delta t V` and :math:`k = (t - t_0)/\Delta t`, the field is
    :math:`\sum_j P_{ij} R^{-1} V (z_j - z_i)` with P from :math:`x = R^k z`. Stepping it
    with forward Euler gives :math:`z[k] = R^{-k} x[k]` exactly, where x[k] are the raw Euler
    iterates. It is defined only on the layer grid, so :math:`\Delta t`, :math:`t_0` and the
    number of layers come from the stepper: step it with
    :class:`~attnflow.integrate.EulerStepper` (or ``solve_euler``), which calls :meth:`on_grid`.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from attnflow import DiscreteRescaledFlow
        >>> from attnflow.integrate import EulerStepper
        >>> z0 = jax.random.normal(jax.random.key(0), (4, 2))
        >>> traj = EulerStepper(dt=0.5, num_layers=4).solve(DiscreteRescaledFlow(jnp.eye(2), jnp.eye(2), jnp.eye(2)), z0)
        >>> traj.ys.shape
        (5, 4, 2)
    """

    grid: _LayerGrid | None
    relative: ClassVar[bool] = True

    def __init__(self, Q, K=None, V=None, beta=1.0, *, attention_impl: str = "auto", mask=None,
                 positions=None):
        self._setup(Q, K, V, beta, attention_impl, mask, positions=positions)
        rescaling_generator(self.weights, type(self).__name__)
        self.grid = None

    def on_grid(self, dt, t0, num_layers):
        dtype = self.weights.dtype
        grid = _LayerGrid(jnp.asarray(dt, dtype), jnp.asarray(t0, dtype), int(num_layers))
        return eqx.tree_at(lambda f: f.grid, self, grid, is_leaf=lambda x: x is None)

    @property
    def dt(self):
        """The layer step (None until :meth:`on_grid`)."""
        return None if self.grid is None else self.grid.dt

    @property
    def t0(self):
        """The first layer's time (None until :meth:`on_grid`)."""
        return None if self.grid is None else self.grid.t0

    @property
    def num_layers(self):
        """The number of layers of the grid (None until :meth:`on_grid`)."""
        return None if self.grid is None else self.grid.num_layers

    def _grid(self):
        if self.grid is None:
            raise InputError(
                "DiscreteRescaledFlow is defined on the layer grid only: step it with "
                "attnflow.integrate.EulerStepper(dt, num_layers) (or solve_euler), which supplies dt."
            )
        return self.grid.dt, self.grid.t0, self.grid.num_layers

    def _R(self):
        dt, _, _ = self._grid()
        return euler_transfer_matrix(_generator(self), dt)

    def transport(self, t):
        dt, t0, num_layers = self._grid()
        k = grid_layer(t, dt, t0)
        num_bits = max(1, math.ceil(math.log2(num_layers + 2)))
        return matrix_power(self._R(), k, num_bits)

    def drift_matrix(self, V):
        return jnp.linalg.solve(self._R(), V)

    def state_bias(self, t, c):
        # x[k+1] - x[k] contains dt c, so z gains dt R^{-(k+1)} c; per unit dt: R^{-(k+1)} c
        return jnp.linalg.solve(self.transport(t) @ self._R(), c)
