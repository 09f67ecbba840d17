r"""The interaction kernel on the circle in Fourier modes: scaled modified Bessel functions.

On the circle :math:`\langle x, y\rangle = \cos(\theta - \phi)`, and the generating function of the
modified Bessel functions of the first kind,

.. math::  e^{\beta\cos\psi} = \sum_{m\in\mathbb{Z}} I_m(\beta)\, e^{i m\psi}, \qquad
           I_m(\beta) = \frac1{2\pi}\int_0^{2\pi} e^{\beta\cos\psi}\cos(m\psi)\, d\psi,

turns every convolution with the kernel into a product of Fourier coefficients. The
coefficients are computed here by the trapezoid rule on N equally spaced nodes, which for a
periodic analytic integrand returns :math:`\sum_{p\in\mathbb{Z}} I_{m+pN}(\beta)`: the error is
the aliased tail :math:`I_{N-m} + I_{N+m} + \dots`, below :math:`10^{-18} I_0` for
:math:`m \le N/4` and :math:`\beta \le N^2/150` (scipy's ``ive``: :math:`I_{3N/4}/I_0 \approx 5\cdot 10^{-19}`
at :math:`\beta = N^2/150` for N = 512 to 2048). Pure jnp, so jit-, vmap- and grad-traceable in :math:`\beta`.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from .. import _validate as v
from .._x64 import keeps_float64
from ..kernels.fourier import kernel_coefficients

__all__ = ["kernel_modes", "quadrature_nodes"]


def quadrature_nodes(num_modes: int) -> int:
    """Trapezoid nodes N used for modes 0..num_modes: a power of two >= max(512, 4 (num_modes + 1)).

    Example:
        >>> from attnflow.meanfield._kernel import quadrature_nodes
        >>> quadrature_nodes(10), quadrature_nodes(300)
        (512, 2048)
    """
    need = max(512, 4 * (int(num_modes) + 1))
    return 1 << (need - 1).bit_length()


@keeps_float64
def kernel_modes(beta, num_modes: int, dtype=None) -> Float[Array, " M"]:
    r"""Scaled modified Bessel functions :math:`\hat I_m(\beta) = I_m(\beta)\, e^{-\beta}`, m = 0..num_modes.

    They are the Fourier coefficients of :math:`e^{\beta(\cos\psi - 1)}` (module docstring), so
    :math:`0 < \hat I_m \le 1` and no :math:`e^{\beta}` overflows; multiply by :math:`e^\beta` for
    :math:`I_m`. Traceable in ``beta`` (gradients included); ``num_modes`` is static.

    Example:
        >>> import jax
        >>> from attnflow.meanfield import kernel_modes
        >>> from scipy.special import ive
        >>> with jax.enable_x64(True):
        ...     ours = kernel_modes(3.0, 4)
        >>> [round(float(a) - float(b), 14) + 0.0 for a, b in zip(ours, ive(range(5), 3.0))]
        [0.0, 0.0, 0.0, 0.0, 0.0]
    """
    num_modes = v.check_int("num_modes", num_modes, minimum=0, meaning="the highest Fourier mode")
    v.check_beta("beta", beta, "the inverse temperature of the kernel e^(beta <x, y>)", scalar=True)
    dtype = jnp.result_type(beta, float) if dtype is None else jnp.dtype(dtype)
    return _kernel_modes(beta, num_modes, dtype)


@functools.partial(jax.jit, static_argnames=("num_modes", "dtype"))
def _kernel_modes(beta, num_modes: int, dtype):
    # the Fourier path's coefficients of e^{p cos psi + q sin psi - |p|} at p = beta, q = 0, on N nodes
    beta = jnp.asarray(beta, dtype)
    real, _ = kernel_coefficients(beta, jnp.zeros((), dtype), num_modes, grid=quadrature_nodes(num_modes))
    # the shift |p| is held constant there; e^{-beta} is differentiated here (a factor of exactly 1 in value)
    return real * jnp.exp(jax.lax.stop_gradient(beta) - beta)
