r"""Where the layer normalisation sits: Peri-LN, Mix-LN and nGPT as fields, beside post-LN and pre-LN.

With :math:`N(x) = x/\|x\|` and the attention output of the normalised tokens
:math:`A_i(x) = \sum_j P_{ij}(N(x))\, V N(x_j)` (the inner field evaluated at :math:`N(x)`), writing
:math:`x_i = r_i\theta_i`:

* **Post-LN** (``sphere``): :math:`\dot\theta_i = \mathrm{Proj}_{\theta_i^\perp} A_i`, r = 1.
* **Pre-LN** (``prenorm``, :class:`PreNorm`): :math:`\dot x_i = A_i`, so :math:`\dot r_i = \langle\theta_i, A_i\rangle`
  and :math:`\dot\theta_i = \mathrm{Proj}_{\theta_i^\perp} A_i / r_i`: the directions slow down as the
  residual stream grows.
* **Peri-LN** (:class:`PeriNorm`, ``periln``): the output normalised too, :math:`\dot x_i = N(A_i)`: every
  token moves at unit speed, :math:`\dot\theta_i = \mathrm{Proj}_{\theta_i^\perp} A_i/(r_i\|A_i\|)`.
* **Mix-LN** (:class:`MixNorm`, ``mixln``): post-LN up to the time ``switch``, pre-LN after it.
* **nGPT** (:class:`NormalisedGPT`, ``ngpt``): tokens on the sphere, :math:`x \leftarrow N(x + \alpha(h - x))` with
  :math:`h = N(A)`; as a flow :math:`\dot\theta_i = \alpha\,\mathrm{Proj}_{\theta_i^\perp} N(A_i)`.

Each changes only the speed at which the directions move along the post-LN direction field (Karagodin, Ge,
Polyanskiy and Rigollet, arXiv 2510.22026: normalisation as speed regulation);
:mod:`attnflow.equiangular` derives what that does to a cloud's inner products.
"""

from __future__ import annotations

from typing import final

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .. import _validate as v
from ..errors import InputError
from ._base import AbstractDynamics
from ._normalised import normalise, tangent_projection
from ._wrapping import AbstractWrapper

__all__ = ["PeriNorm", "MixNorm", "NormalisedGPT"]


@final
class PeriNorm(AbstractWrapper):
    r"""Peri-LN: the inner field read at the normalised tokens and its output normalised token by token,
    :math:`\dot x_i = N(f_i(t, N(x)))` (the update of ``x + LN(attn(LN(x)))``).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from attnflow import AttentionFlow
        >>> from attnflow.dynamics import PeriNorm
        >>> x = jax.random.normal(jax.random.key(0), (5, 3))
        >>> g = PeriNorm(AttentionFlow(jnp.eye(3), jnp.eye(3), jnp.eye(3)))(0.0, 4.0 * x)
        >>> bool(jnp.allclose(jnp.linalg.norm(g, axis=1), 1.0))   # every token moves at unit speed
        True
    """

    def __init__(self, inner: AbstractDynamics):
        self._set_inner(inner)

    def vector_field(self, t, y, args=None):
        return normalise(self.inner.vector_field(t, normalise(y), args))

    def attention(self, t, y):
        return super().attention(t, normalise(y))


@final
class MixNorm(AbstractWrapper):
    r"""Mix-LN: post-LN before the time ``switch`` (the tangent projection of the inner field at the tokens,
    which stay on their spheres as a flow), pre-LN from it on (the inner field at the normalised tokens, added
    to the raw ones). Start it on the unit sphere.

    With the layer stepper (plain shift) the post-LN layers are not renormalised: a token's norm drifts by
    :math:`O(\Delta t^2)` a layer there; an ODE solver keeps it to its tolerance.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from attnflow import AttentionFlow
        >>> from attnflow.dynamics import MixNorm, normalise
        >>> x = normalise(jax.random.normal(jax.random.key(0), (5, 3)))
        >>> f = MixNorm(AttentionFlow(jnp.eye(3), jnp.eye(3), jnp.eye(3)), switch=2.0)
        >>> float(jnp.abs(jnp.sum(f(1.0, x) * x, axis=1)).max()) < 1e-6   # before the switch: tangent
        True
    """

    switch: Float[Array, ""]

    def __init__(self, inner: AbstractDynamics, switch):
        v.check_array("switch", switch, "the time at which post-LN gives way to pre-LN")
        if np.shape(switch) != ():
            raise InputError(f"switch must be one number (the time at which post-LN gives way to pre-LN), got "
                             f"shape {np.shape(switch)}.")
        if v.is_concrete(switch) and not float(switch) >= 0:
            raise InputError(f"switch must be >= 0 (the time at which post-LN gives way to pre-LN), got {switch!r}.")
        self._set_inner(inner)
        self.switch = jnp.asarray(switch, float)

    def vector_field(self, t, y, args=None):
        u = normalise(y)
        drift = self.inner.vector_field(t, u, args)
        return jnp.where(jnp.asarray(t) < self.switch, tangent_projection(y, drift), drift)

    def attention(self, t, y):
        return super().attention(t, normalise(y))


@final
class NormalisedGPT(AbstractWrapper):
    r"""nGPT on the sphere: :math:`\dot x_i = \alpha\,\mathrm{Proj}_{x_i^\perp} N(f_i(t, x))`, tokens of unit norm
    (step it with ``sphere_shift``). Its layer :math:`N(x + \alpha\Delta t\,\mathrm{Proj}_{x^\perp}h)` and nGPT's
    :math:`N(x + \alpha(h - x))` move x towards :math:`h = N(f)` along the same great circle, by angles that agree
    to first order in :math:`\alpha`.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from attnflow import AttentionFlow
        >>> from attnflow.dynamics import NormalisedGPT, normalise
        >>> x = normalise(jax.random.normal(jax.random.key(0), (5, 3)))
        >>> g = NormalisedGPT(AttentionFlow(jnp.eye(3), jnp.eye(3), jnp.eye(3)), alpha=0.5)(0.0, x)
        >>> bool(jnp.all(jnp.linalg.norm(g, axis=1) <= 0.5 + 1e-6))
        True
    """

    alpha: Float[Array, ""]

    def __init__(self, inner: AbstractDynamics, alpha=1.0):
        v.check_beta("alpha", alpha, "nGPT's step size alpha", scalar=True)
        self._set_inner(inner)
        self.alpha = jnp.asarray(alpha, float)

    def vector_field(self, t, y, args=None):
        return tangent_projection(y, self.alpha * normalise(self.inner.vector_field(t, y, args)))
