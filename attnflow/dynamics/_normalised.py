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
"""

from __future__ import annotations

from typing import final

import jax.numpy as jnp
from jaxtyping import Array, Float

from ._attention_flows import AttentionFlow
from ._base import AbstractDynamics
from ._wrapping import AbstractWrapper

__all__ = ["normalise", "tangent_projection", "TangentProjected", "PreNorm", "sphere_flow"]


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
                normalisation: str = "softmax", fourier_max_score: float | None = None) -> TangentProjected:
    r"""Post-LN attention on the sphere, :math:`\dot x_i = \mathrm{Proj}_{x_i^\perp}(\sum_j P_{ij} V x_j)`.

    ``Q`` may be an :class:`~attnflow.AttentionWeights` (then omit K, V, beta). Step it with
    ``EulerStepper(..., shift=sphere_shift)`` for the layer version (renormalised after each
    layer), or any ODE solver for the flow.

    **On the circle** (d = 2) with :math:`\beta Q^T K = c R(\alpha)` a scaled rotation (Q = K = I),
    ``attention_impl="fourier"`` computes the attention in O(n K) instead of O(n^2)
    (:mod:`attnflow._fourier`: a Fourier series of the kernel with K modes, exact to rounding;
    ``fourier_max_score`` bounds :math:`a = |\beta c|` when the weights are traced, see
    :class:`~attnflow.AttentionFlow`), and ``"auto"`` takes it where it is exact and faster
    (concrete weights, :math:`a(1-\cos\alpha) \le \log 2`, no mask, :math:`n \ge 4(K+1)`).
    With the Euler stepper and ``sphere_shift`` the states are unit vectors to rounding, and the
    path equals the direct sum to rounding. Inside an ODE solver the stages leave the circle by the
    solver's local error; the path then attends with the directions :math:`x_j/\|x_j\|` (the sphere
    field extended off the circle by projecting the tokens onto it, where the direct sum uses
    :math:`\|x_i\|\|x_j\|`-scaled scores): both extensions agree on the circle, so the solutions
    differ by the order of the solver's error, not by a modelling change.

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
    """
    return TangentProjected(AttentionFlow(Q, K, V, beta, attention_impl=attention_impl, mask=mask,
                                          normalisation=normalisation, fourier_max_score=fourier_max_score,
                                          unit_tokens=True))
