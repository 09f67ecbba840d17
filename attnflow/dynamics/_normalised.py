r"""Layer normalisation as geometry: tokens on the unit sphere (post-LN), pre-LN, unnormalised attention.

Normalisation here is the map :math:`N(x) = x/\|x\|` onto the unit sphere (RMS normalisation up
to the factor :math:`\sqrt d`, without centring or gain), the model of the sphere literature
(Geshkovski, Letrouit, Polyanskiy, Rigollet, *A mathematical perspective on Transformers*, 2023).

* **Post-LN** (:func:`sphere_flow`): tokens live on :math:`S^{d-1}` and move along the tangent
  projection of the attention drift,

  .. math::  \dot x_i = \mathrm{Proj}_{x_i^\perp}\Big(\sum_j P_{ij} V x_j\Big), \qquad
             \mathrm{Proj}_{x^\perp} u = u - \frac{\langle u, x\rangle}{\|x\|^2}\, x,

  which keeps :math:`\|x_i\|` constant (:class:`TangentProjected` wraps any field). Its layer
  version is the projected Euler step
  :math:`x_i[k+1] = N(x_i[k] + \Delta t\, \mathrm{Proj}(\cdot))`:
  ``EulerStepper(dt, L, shift=sphere_shift)``, which renormalises after each layer, so the
  tokens stay on the sphere to rounding error.
* **Pre-LN** (:class:`PreNorm`): attention is computed from the normalised tokens and the
  residual is added to the raw ones, :math:`\dot x_i = \sum_j P_{ij}(N(x))\, V N(x_j)`
  (the update of ``x + attn(LN(x))``).
* **Unnormalised attention** (``normalisation="mean"`` of :class:`~attnflow.AttentionFlow`,
  computed by the same ``softmax``/``attend``): :math:`P_{ij} = e^{\beta\langle Qx_i, Kx_j\rangle}/n`
  instead of dividing by the row sum; on the sphere with Q = K = V = I it is the gradient
  flow of the interaction energy :math:`\frac1{2\beta n^2}\sum_{ij} e^{\beta\langle x_i, x_j\rangle}`
  (:func:`sphere_flow` with ``normalisation="mean"``).
* **The identity sphere** (:class:`IdentitySphereFlow`): post-LN attention with Q = K = V = I, the
  model of the sphere literature, without the three d x d projections (exact identities there);
  ``normalisation="mean"`` is computed from the softmax and its row sums without forming
  :math:`e^\beta`, optionally divided by a step scale, and the row sums are the field's by-product
  (``vector_field_with_aux``), from which the interaction energy follows.
"""

from __future__ import annotations

import math
from typing import final

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .. import _validate as v
from ..kernels import IMPLS, NORMALISATIONS, attend, attend_with_row_sums, softmax
from ..kernels.sphere import HarmonicPlan, harmonic_sums, sphere_degree
from ..errors import InputError
from ._attention_flows import AttentionFlow
from ._base import AbstractAttentionDynamics, AbstractDynamics
from ._wrapping import AbstractWrapper

__all__ = ["normalise", "tangent_projection", "TangentProjected", "PreNorm", "sphere_flow", "IdentitySphereFlow"]


def normalise(x: Float[Array, "n d"]) -> Float[Array, "n d"]:
    r"""Each token scaled to unit norm, :math:`N(x_i) = x_i/\|x_i\|`.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.dynamics import normalise
        >>> [round(float(c), 4) for c in normalise(jnp.array([[3.0, 4.0]]))[0]]
        [0.6, 0.8]
    """
    return x / jnp.linalg.norm(x, axis=-1, keepdims=True)


def tangent_projection(x: Float[Array, "n d"], u: Float[Array, "n d"]) -> Float[Array, "n d"]:
    r"""Row-wise projection of u onto the tangent space at x: :math:`u_i - \frac{\langle u_i, x_i\rangle}{\|x_i\|^2} x_i`.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.dynamics._normalised import tangent_projection
        >>> tangent_projection(jnp.array([[1.0, 0.0]]), jnp.array([[2.0, 3.0]])).tolist()
        [[0.0, 3.0]]
    """
    return u - (_row_dot(u, x) / _row_dot(x, x)) * x


def _row_dot(a, b):
    """Row-wise inner products (keeping the last axis), as a sum of columns for small d: XLA:CPU runs a
    reduction over a trailing axis of 2 or 3 about 3x slower than the same sum written out (10^6 tokens)."""
    d = a.shape[-1]
    if d > 8:
        return jnp.sum(a * b, axis=-1, keepdims=True)
    return sum(a[..., k:k + 1] * b[..., k:k + 1] for k in range(1, d)) + a[..., :1] * b[..., :1]


@final
class TangentProjected(AbstractWrapper):
    r"""The inner field projected onto the tangent spaces of the spheres through the tokens.

    :math:`g_i(t, x) = \mathrm{Proj}_{x_i^\perp} f_i(t, x)`, so :math:`\frac{d}{dt}\|x_i\|^2 = 2\langle x_i, g_i\rangle = 0`.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from attnflow import AttentionFlow
        >>> from attnflow.dynamics import TangentProjected
        >>> x = jax.random.normal(jax.random.key(0), (4, 3))
        >>> g = TangentProjected(AttentionFlow(jnp.eye(3), jnp.eye(3), jnp.eye(3)))(0.0, x)
        >>> float(jnp.abs(jnp.sum(g * x, axis=1)).max()) < 1e-6
        True
    """

    def __init__(self, inner: AbstractDynamics):
        self._set_inner(inner)

    def vector_field(self, t, y, args=None):
        return tangent_projection(y, self.inner.vector_field(t, y, args))


@final
class PreNorm(AbstractWrapper):
    r"""Pre-LN: the inner field evaluated at the normalised tokens, :math:`g(t, x) = f(t, N(x))`.

    With f = :class:`~attnflow.AttentionFlow` this is
    :math:`\dot x_i = \sum_j P_{ij}(N(x))\, V N(x_j)`: the residual stream x is not normalised,
    only what the attention reads. ``attention`` reports P of the normalised tokens.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from attnflow import AttentionFlow
        >>> from attnflow.dynamics import PreNorm
        >>> f = AttentionFlow(jnp.eye(2), jnp.eye(2), jnp.eye(2))
        >>> x = jax.random.normal(jax.random.key(0), (4, 2))
        >>> bool(jnp.allclose(PreNorm(f)(0.0, 5.0 * x), PreNorm(f)(0.0, x)))
        True
    """

    def __init__(self, inner: AbstractDynamics):
        self._set_inner(inner)

    def vector_field(self, t, y, args=None):
        return self.inner.vector_field(t, normalise(y), args)

    def attention(self, t, y):
        return super().attention(t, normalise(y))


def sphere_flow(Q, K=None, V=None, beta=1.0, *, attention_impl: str = "auto", mask=None,
                normalisation: str = "softmax", fourier_max_score: float | None = None,
                positions=None) -> TangentProjected:
    r"""Post-LN attention on the sphere, :math:`\dot x_i = \mathrm{Proj}_{x_i^\perp}(\sum_j P_{ij} V x_j)`.

    ``Q`` may be an :class:`~attnflow.AttentionWeights` (then omit K, V, beta). Step it with
    ``EulerStepper(..., shift=sphere_shift)`` for the layer version (renormalised after each
    layer), or any ODE solver for the flow.

    **On the circle** (d = 2) with :math:`\beta Q^T K = c R(\alpha)` a scaled rotation (Q = K = I),
    ``attention_impl="fourier"`` computes the attention in O(n K) instead of O(n^2)
    (:mod:`attnflow.kernels.fourier`: a Fourier series of the kernel with K modes, exact to rounding;
    ``fourier_max_score`` bounds :math:`a = |\beta c|` when the weights are traced, see
    :class:`~attnflow.AttentionFlow`), and ``"auto"`` takes it where it is exact and faster
    (concrete weights, :math:`a(1-\cos\alpha) \le \log 2`, no mask, :math:`n \ge 4(K+1)`).
    With the Euler stepper and ``sphere_shift`` the states are unit vectors to rounding, and the
    path equals the direct sum to rounding. Inside an ODE solver the stages leave the circle by the
    solver's local error; the path then attends with the directions :math:`x_j/\|x_j\|` (the sphere
    field extended off the circle by projecting the tokens onto it, where the direct sum uses
    :math:`\|x_i\|\|x_j\|`-scaled scores): both extensions agree on the circle, so the solutions
    differ by the order of the solver's error, not by a modelling change.

    **On S^(d-1)**, d >= 3, with :math:`\beta Q^T K = c I` (Q = K = I, any V), ``attention_impl="harmonic"``
    computes the attention in O(n H) for the H harmonics of degree <= L (:mod:`attnflow.kernels.sphere` on S^2,
    :math:`H = (L+1)^2`; :mod:`attnflow.kernels.hypersphere` above: the Funk-Hecke series of the kernel to degree
    L, exact to rounding, concrete weights), and ``"auto"`` takes it where it is faster (:math:`n \ge 4H`), with
    the same reading of tokens off the sphere.

    ``positions`` (ALiBi, rotary; :class:`~attnflow.kernels.Positions`) as for :class:`~attnflow.AttentionFlow`
    (then neither of those paths).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from attnflow.dynamics import normalise, sphere_flow
        >>> from attnflow.integrate import EulerStepper, sphere_shift
        >>> x0 = normalise(jax.random.normal(jax.random.key(0), (6, 3)))
        >>> I = jnp.eye(3)
        >>> traj = EulerStepper(dt=0.5, num_layers=10, shift=sphere_shift).solve(sphere_flow(I, I, I, 4.0), x0)
        >>> float(jnp.abs(jnp.linalg.norm(traj.ys, axis=-1) - 1).max()) < 1e-6
        True
        >>> circle = normalise(jax.random.normal(jax.random.key(1), (500, 2)))
        >>> I2 = jnp.eye(2)
        >>> fast = sphere_flow(I2, I2, I2, 4.0, attention_impl="fourier")(0.0, circle)
        >>> bool(jnp.allclose(fast, sphere_flow(I2, I2, I2, 4.0, attention_impl="dense")(0.0, circle), atol=1e-5))
        True
        >>> s2 = normalise(jax.random.normal(jax.random.key(2), (300, 3)))
        >>> V = jax.random.normal(jax.random.key(3), (3, 3))
        >>> fast = sphere_flow(I, I, V, 4.0, attention_impl="harmonic")(0.0, s2)
        >>> bool(jnp.allclose(fast, sphere_flow(I, I, V, 4.0, attention_impl="dense")(0.0, s2), atol=1e-5))
        True
    """
    return TangentProjected(AttentionFlow(Q, K, V, beta, attention_impl=attention_impl, mask=mask,
                                          normalisation=normalisation, fourier_max_score=fourier_max_score,
                                          unit_tokens=True, positions=positions))


@final
def _bounded_plan(beta, attention_impl: str, bound) -> HarmonicPlan:
    """The sphere path's plan of :class:`IdentitySphereFlow` for a beta bounded by ``harmonic_max_score``."""
    if attention_impl != "harmonic":
        raise InputError(f"harmonic_max_score sets the sphere path's degree, which attention_impl='harmonic' takes; "
                         f"got attention_impl={attention_impl!r}: set attention_impl='harmonic' or drop "
                         "harmonic_max_score.")
    v.check_real("harmonic_max_score", bound, "an upper bound of beta, a finite real scalar >= 0", positive=False)
    if v.is_traced(bound) or float(bound) < 0:
        raise InputError(f"harmonic_max_score must be a concrete number >= 0 (it fixes the sphere path's degree), got "
                         f"{bound!r}.")
    bound = float(bound)
    if v.is_concrete(beta) and float(np.asarray(beta)) > bound * (1 + 1e-12):
        raise InputError(f"harmonic_max_score = {bound:.6g} is below beta = {float(np.asarray(beta)):.6g}; raise "
                         "it (it only sets the sphere path's degree).")
    sphere_degree(bound)  # refuses a bound that needs more than MAX_DEGREE
    return HarmonicPlan(bound, auto=False)


class IdentitySphereFlow(AbstractAttentionDynamics):
    r"""Post-LN attention on the unit sphere with Q = K = V = I, without the projections.

    .. math::  \dot x_i = \frac{1}{s}\,\mathrm{Proj}_{x_i^\perp}\Big(\sum_j P_{ij}\, x_j\Big),
               \qquad P_{ij} = \mathrm{softmax}_j(\beta\langle x_i, x_j\rangle) \quad\text{or}\quad
               \frac{e^{\beta\langle x_i, x_j\rangle}}{n},

    the field of :func:`sphere_flow` with Q = K = V = I (the same numbers to rounding; the three d x d
    projections, exact identities here, cost several times the attention itself at d >> n). The
    softmax field (``normalisation="softmax"``) has s = 1. The 1/n field (``"mean"``) is divided by
    :math:`s = e^{\text{log\_scale}}` (default 1) and computed from the softmax as
    :math:`P_{ij}/s = \mathrm{softmax}_{ij}\, r_i\, e^{\beta - \log s}/n`, where
    :math:`r_i = \sum_j e^{\beta\langle x_i, x_j\rangle - \beta}` are the row sums of the max-shifted
    exponentials (for tokens of unit norm the largest score of a row is its diagonal, :math:`\beta`),
    so no :math:`e^\beta` is formed and every beta is finite.

    ``vector_field_with_aux(t, y, args) -> (dy, r)`` hands the row sums r (n,) to a layer stepper's
    ``save_fn`` (``save_aux=True``): the interaction energy of unit tokens follows from them,
    :math:`E_\beta = \frac{e^\beta}{2\beta n^2}\sum_i r_i`
    (:func:`attnflow.observables.sphere_energy_from_row_sums`). It computes the attention
    densely (:func:`attnflow.kernels.attend_with_row_sums`); ``vector_field`` of the softmax field
    uses :func:`attnflow.attend` with ``attention_impl`` (dense or tiled by size). On S^(d-1), d >= 3, with a
    concrete beta, ``attention_impl="harmonic"`` computes both, the field and its row sums, in O(n H) for the H
    harmonics of degree <= L (:func:`attnflow.kernels.sphere.harmonic_sums`, exact to rounding; H = (L+1)^2 on
    S^2), and ``"auto"`` takes that path from :math:`n \ge 4H` tokens on. A traced beta (a batch of temperatures
    under vmap, a derivative in beta) takes it with ``harmonic_max_score``, an upper bound of beta that fixes the
    degree (checked at run time: a larger beta is an error, inside jit too).
    The tokens must be of unit norm (step it with ``EulerStepper(..., shift=sphere_shift)``).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from attnflow.dynamics import IdentitySphereFlow, normalise, sphere_flow
        >>> x = normalise(jax.random.normal(jax.random.key(0), (6, 3)))
        >>> I = jnp.eye(3)
        >>> fast, general = IdentitySphereFlow(4.0)(0.0, x), sphere_flow(I, I, I, 4.0)(0.0, x)
        >>> bool(jnp.allclose(fast, general, atol=1e-6))
        True
        >>> dy, row_sums = IdentitySphereFlow(4.0, normalisation="mean").vector_field_with_aux(0.0, x, None)
        >>> row_sums.shape, bool(jnp.allclose(dy, sphere_flow(I, I, I, 4.0, normalisation="mean")(0.0, x), atol=1e-5))
        ((6,), True)
    """

    beta: Float[Array, ""]
    #: log s: the 1/n field is divided by s (0 for the softmax)
    log_scale: Float[Array, ""]
    normalisation: str = eqx.field(static=True)
    #: attention implementation of the softmax field's ``vector_field`` (passed to :func:`attnflow.attend`)
    attention_impl: str = eqx.field(static=True)
    #: the sphere path's plan on S^(d-1) (None: not taken; :mod:`attnflow.kernels.sphere`)
    harmonic: HarmonicPlan | None = eqx.field(static=True)

    def __init__(self, beta=1.0, *, normalisation: str = "softmax", log_scale=None, attention_impl: str = "auto",
                 harmonic_max_score: float | None = None):
        v.check_beta("beta", beta)
        if normalisation not in NORMALISATIONS:
            raise InputError(f"normalisation must be one of {NORMALISATIONS}, got {normalisation!r}.")
        if log_scale is not None and normalisation != "mean":
            raise InputError(f"log_scale divides the 1/n field (normalisation=\"mean\"): drop it, or give "
                             f"normalisation=\"mean\" (got {normalisation!r}).")
        if attention_impl not in IMPLS or attention_impl == "fourier":
            raise InputError(f"attention_impl of the identity sphere must be one of "
                             f"{tuple(i for i in IMPLS if i != 'fourier')}, got {attention_impl!r}.")
        harmonic = None
        if harmonic_max_score is not None:
            harmonic = _bounded_plan(beta, attention_impl, harmonic_max_score)
        elif attention_impl in ("harmonic", "auto") and v.is_concrete(beta):
            b = float(np.asarray(beta))
            try:
                sphere_degree(b)  # refuses a beta that needs more than MAX_DEGREE on S^2 (the lowest degree of any d)
                harmonic = HarmonicPlan(b, auto=attention_impl == "auto")
            except InputError:
                if attention_impl == "harmonic":
                    raise
        elif attention_impl == "harmonic":
            raise InputError("attention_impl='harmonic' chooses its degree from a concrete beta, and this beta is "
                             "traced (jit/vmap/grad); give harmonic_max_score=, an upper bound of beta, build the "
                             "field outside the transformation, or use 'auto'.")
        if log_scale is not None:
            v.check_real("log_scale", log_scale, "the log of the step scale s, a finite real scalar")
        dtype = jnp.result_type(beta, float)
        self.beta = jnp.asarray(beta, dtype)
        self.log_scale = jnp.zeros((), dtype) if log_scale is None else jnp.asarray(log_scale, dtype)
        self.normalisation, self.attention_impl, self.harmonic = normalisation, attention_impl, harmonic

    def _takes_harmonic(self, y) -> bool:
        if self.attention_impl == "harmonic" and y.shape[-1] < 3:
            raise InputError(f"attention_impl='harmonic' is the path of tokens on S^(d-1) with d >= 3, got tokens in "
                             f"d = {y.shape[-1]}; use 'auto', 'dense' or 'chunked'.")
        return self.harmonic is not None and self.harmonic.applies(y.shape[-2], y.shape[-1], y.dtype)

    def score_count(self, y) -> int:
        """0 where the evaluation takes the sphere path (no score matrix), else n^2 per system."""
        return 0 if len(y.shape) == 2 and self._takes_harmonic(y) else super().score_count(y)

    def vector_field(self, t, y, args=None):
        if self.normalisation == "softmax" and not self._takes_harmonic(y):
            return tangent_projection(y, attend(self.beta * y, y, y, impl=self.attention_impl))
        return self.vector_field_with_aux(t, y, args)[0]

    def vector_field_with_aux(self, t, y, args=None) -> tuple[Float[Array, "n d"], Float[Array, " n"]]:
        """The field and the row sums :math:`r_i` of its max-shifted exponentials (one dense attention, or the
        sphere path's sums)."""
        if self._takes_harmonic(y):
            beta = self.beta
            if not self.harmonic.auto:  # a bound given for a traced beta: the degree holds up to it only
                beta = eqx.error_if(beta, beta > self.harmonic.bound * (1 + 1e-12),
                                    "IdentitySphereFlow: beta exceeds harmonic_max_score, for which the sphere path's "
                                    "degree was chosen; raise harmonic_max_score.")
            row_sums, sums = harmonic_sums(y, beta, self.harmonic)
            if self.normalisation == "softmax":
                out = sums / row_sums[:, None]
            else:  # P_ij / s = e^{beta <x_i, x_j>} / (n s): the max-shifted sums times e^{beta - log s} / n
                out = sums * jnp.exp(self.beta - self.log_scale - math.log(y.shape[-2]))
            return tangent_projection(y, out), row_sums
        out, row_sums = attend_with_row_sums(self.beta * y, y, y, "softmax")
        if self.normalisation == "mean":  # P_ij / s = softmax_ij r_i e^{beta - log s} / n (max score beta)
            out = out * (row_sums * jnp.exp(self.beta - self.log_scale - math.log(y.shape[-2])))[:, None]
        return tangent_projection(y, out), row_sums

    def attention(self, t, y):
        scores = self.beta * (y @ y.T)
        if self.normalisation == "softmax":
            return softmax(scores)
        return jnp.exp(scores - self.beta) * jnp.exp(self.beta - self.log_scale - math.log(y.shape[-2]))
