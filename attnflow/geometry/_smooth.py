r"""Smooth stand-ins for min and max, the building blocks of the soft geometry.

Two relaxations, both with an absolute temperature :math:`T > 0` (callers pass
``temperature * scale`` with a **fixed** scale):

* :func:`soft_max` / :func:`soft_min` -- log-sum-exp:
  :math:`\mathrm{smax}_T(x) = T \log\sum_k e^{x_k/T}`, with
  :math:`\max x \le \mathrm{smax}_T(x) \le \max x + T\log N` (N entries); soft_min mirrors it.
  Used for the hyperplane levels a (min) and b (max), which must move smoothly with the tokens.
* :func:`boltzmann_min` -- the Boltzmann-weighted mean
  :math:`\sum_k w_k x_k`, :math:`w = \mathrm{softmax}(-x/T)`, with
  :math:`\min x \le \cdot \le \min x + (N-1)T/e`; it stays >= 0 on non-negative inputs, so it is
  the soft min for distances (a log-sum-exp soft min of distances can be negative).

Both converge to the hard min/max as :math:`T \to 0` at the stated rates; both are smooth
(infinitely differentiable) for :math:`T > 0`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from .. import _validate as v
from .._x64 import keeps_float64
from ..errors import InputError

__all__ = ["soft_max", "soft_min", "boltzmann_min", "boltzmann_max", "safe_sqrt", "safe_norm"]


def safe_sqrt(x: Float[Array, "*s"]) -> Float[Array, "*s"]:
    r""":math:`\sqrt{\max(x, \text{tiny})}`: the square root with a finite derivative at 0 (where
    :math:`d\sqrt{x}/dx` is infinite and would turn a gradient into NaN).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from attnflow.geometry._smooth import safe_sqrt
        >>> float(jax.grad(safe_sqrt)(jnp.asarray(0.0)))
        0.0
    """
    return jnp.sqrt(jnp.maximum(x, jnp.finfo(x.dtype).tiny))


@keeps_float64
def safe_norm(A: Array) -> Float[Array, ""]:
    r"""Frobenius (vector 2-) norm, real or complex, with gradient 0 (a subgradient) where it
    vanishes instead of NaN.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from attnflow.geometry import safe_norm
        >>> float(safe_norm(jnp.array([3.0, 4.0]))), jax.grad(safe_norm)(jnp.zeros(2)).tolist()
        (5.0, [0.0, 0.0])
    """
    return safe_sqrt(jnp.sum(jnp.real(A) ** 2 + jnp.imag(A) ** 2))


def _check_reduction(x, temperature, axis) -> None:
    """x a real array with the axis to reduce (finite when concrete); T a finite scalar > 0."""
    shape = v.check_array("x", x, "the values to reduce", min_rank=1)
    if isinstance(axis, bool) or not isinstance(axis, int) or not -len(shape) <= axis < len(shape) or shape[axis] == 0:
        raise InputError(f"axis must be an int naming a non-empty axis of x (shape {shape}), got {axis!r}.")
    v.check_positive("temperature", temperature, "an absolute temperature T, a finite positive scalar")


@keeps_float64
def soft_max(x: Float[Array, "*b N"], temperature, axis: int = -1) -> Float[Array, "*b"]:
    r"""Log-sum-exp maximum :math:`T\log\sum_k e^{x_k/T}` along ``axis``
    (:math:`\max x \le \cdot \le \max x + T\log N`).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.geometry import soft_max
        >>> x = jnp.array([0.0, 1.0, 3.0])
        >>> bool(3.0 <= soft_max(x, 0.01) <= 3.0 + 0.01 * jnp.log(3.0))
        True
    """
    _check_reduction(x, temperature, axis)
    x = v.as_float(x)
    T = jnp.asarray(temperature, x.dtype)
    return T * jax.nn.logsumexp(x / T, axis=axis)


@keeps_float64
def soft_min(x: Float[Array, "*b N"], temperature, axis: int = -1) -> Float[Array, "*b"]:
    r"""Log-sum-exp minimum :math:`-T\log\sum_k e^{-x_k/T}`
    (:math:`\min x - T\log N \le \cdot \le \min x`).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.geometry import soft_min
        >>> round(float(soft_min(jnp.array([2.0, -1.0, 5.0]), 1e-3)), 6)
        -1.0
    """
    return -soft_max(-jnp.asarray(x), temperature, axis=axis)


@keeps_float64
def boltzmann_min(x: Float[Array, "*b N"], temperature, axis: int = -1) -> Float[Array, "*b"]:
    r"""Boltzmann-weighted mean :math:`\sum_k \mathrm{softmax}(-x/T)_k\, x_k`, a soft minimum with
    :math:`\min x \le \cdot \le \min x + (N-1)T/e` (each weighted excess
    :math:`w_k (x_k - \min x) \le e^{-(x_k-\min x)/T}(x_k - \min x) \le T/e`).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.geometry import boltzmann_min
        >>> x = jnp.array([4.0, 1.0, 9.0])
        >>> bool(1.0 <= boltzmann_min(x, 0.1) <= 1.0 + 2 * 0.1 / jnp.e)
        True
    """
    _check_reduction(x, temperature, axis)
    x = v.as_float(x)
    T = jnp.asarray(temperature, x.dtype)
    w = jax.nn.softmax(-x / T, axis=axis)
    return jnp.sum(w * x, axis=axis)


@keeps_float64
def boltzmann_max(x: Float[Array, "*b N"], temperature, axis: int = -1) -> Float[Array, "*b"]:
    r"""Boltzmann-weighted mean with weights :math:`\mathrm{softmax}(x/T)`, a soft maximum with
    :math:`\max x - (N-1)T/e \le \cdot \le \max x`.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.geometry import boltzmann_max
        >>> round(float(boltzmann_max(jnp.array([0.2, 0.9, 0.1]), 1e-3)), 6)
        0.9
    """
    return -boltzmann_min(-jnp.asarray(x), temperature, axis=axis)
