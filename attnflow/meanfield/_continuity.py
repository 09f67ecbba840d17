r"""The right-hand side of the continuity equation on the circle as a field of the project's interface.

:class:`CircleContinuity` is :math:`D\partial_\theta^2\rho - \partial_\theta(\rho\, v[\rho])` on a density of G grid
points (D = sigma^2/2 for tokens with independent noise of strength sigma, 0 without noise)
(:mod:`attnflow.meanfield._pde` holds the scheme and the solver). Like every field it is built through the
registry, ``attnflow.fields.build_field("continuity", I, I, I, beta=beta, num_points=G)`` with the 2 x 2
identity: the mean-field limit of the field ``"sphere"`` with Q = K = V = I on the circle. This module
imports no registry, so that the registry can build the field from here.
"""

from __future__ import annotations

import math
from typing import final

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float

from .. import _validate as v
from ..dynamics import AbstractDynamics
from ..errors import InputError
from ._kernel import kernel_modes

__all__ = ["NORMALISATIONS", "CircleContinuity", "kept_modes"]

#: the two attention normalisations of the circle flow
NORMALISATIONS = ("softmax", "mean")
TWO_PI = 2 * math.pi


def kept_modes(num_points: int, dealias: bool = True) -> int:
    r"""The highest mode :math:`m_{max}` that :class:`CircleContinuity` moves on G grid points:
    :math:`\lfloor (G-1)/3\rfloor` with the 2/3 rule (``dealias=True``), else the highest mode below Nyquist.

    Example:
        >>> from attnflow.meanfield._continuity import kept_modes
        >>> kept_modes(32), kept_modes(32, dealias=False)
        (10, 15)
    """
    num_points = v.check_int("num_points", num_points, meaning="the number of grid points")
    modes = num_points // 2
    resolved = modes - 1 if num_points % 2 == 0 else modes  # the Nyquist mode is never differentiated
    return (num_points - 1) // 3 if dealias else resolved


def _check_normalisation(normalisation):
    return v.check_choice("normalisation", normalisation, NORMALISATIONS, "how attention weights are normalised")


@final
class CircleContinuity(AbstractDynamics):
    r"""Right-hand side :math:`-\partial_\theta(\rho\, v[\rho])` of the continuity equation on a grid of G points.

    A field of the project's interface (``vector_field(t, rho, args)``), so that
    :func:`attnflow.integrate.solve_ode` integrates it; the state is the density (G,) on
    :func:`~attnflow.meanfield.circle_grid`. ``beta`` may be traced (derivatives in beta). Built through the
    registry: ``build_field("continuity", I, I, I, beta=beta, num_points=G)`` (I the 2 x 2 identity).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.fields import build_field
        >>> from attnflow.meanfield import circle_grid
        >>> rho = (1 + 0.1 * jnp.cos(circle_grid(16))) / (2 * jnp.pi)
        >>> I = jnp.eye(2)
        >>> field = build_field("continuity", I, I, I, beta=2.0, num_points=16)
        >>> type(field).__name__, abs(float(jnp.sum(field(0.0, rho)))) < 1e-6        # mass is conserved
        ('CircleContinuity', True)
    """

    kernel_hat: Float[Array, " M"]
    velocity_scale: Float[Array, ""]
    diffusion: Float[Array, ""]  # D = sigma^2 / 2 of tokens with independent noise: + D d^2 rho / d theta^2
    keep: Float[Array, " M"]   # the modes m of the tendency kept (0 for those removed)
    slope: Float[Array, " M"]  # the modes m of the velocity's derivative (0 at Nyquist)
    num_points: int = eqx.field(static=True)
    normalisation: str = eqx.field(static=True)

    def __init__(self, beta, num_points: int, *, normalisation: str = "softmax", dealias: bool = True,
                 diffusion=0.0, dtype=None):
        v.check_beta("beta", beta, "the inverse temperature", scalar=True)
        v.check_real("diffusion", diffusion, "the diffusion coefficient sigma^2/2 of noisy tokens, >= 0")
        if v.is_concrete(diffusion) and float(diffusion) < 0:
            raise InputError(f"diffusion must be >= 0 (sigma^2/2 of the tokens' noise), got {float(diffusion)!r}.")
        num_points = v.check_int("num_points", num_points, meaning="the number of grid points")
        if num_points < 4:
            raise InputError(f"num_points must be at least 4 (grid points of the density), got {num_points}.")
        self.normalisation = _check_normalisation(normalisation)
        self.num_points = num_points
        dtype = jnp.result_type(beta, float) if dtype is None else dtype
        beta = jnp.asarray(beta, dtype)
        self.diffusion = jnp.asarray(diffusion, dtype)
        modes = num_points // 2
        self.kernel_hat = TWO_PI * kernel_modes(beta, modes, dtype)  # 2 pi I_m e^{-beta}
        # mean: v = (1/beta) d(K * rho) = (e^beta / beta) d(K~ * rho), K~ = e^{-beta} K; softmax: the e^beta cancels
        self.velocity_scale = jnp.exp(beta) / beta if self.normalisation == "mean" else 1 / beta
        m = jnp.arange(modes + 1)
        # real multipliers m (times i where used): diffrax is given no complex leaves
        self.slope = jnp.where(m <= kept_modes(num_points, False), m, 0).astype(dtype)
        self.keep = jnp.where(m <= kept_modes(num_points, dealias), m, 0).astype(dtype)

    def _derivative(self, values_hat):
        return jnp.fft.irfft(values_hat * (1j * self.keep), n=self.num_points)

    def velocity(self, rho: Float[Array, " G"]) -> Float[Array, " G"]:
        r""":math:`v[\rho]` at the grid points."""
        conv_hat = jnp.fft.rfft(rho) * self.kernel_hat
        slope = jnp.fft.irfft(conv_hat * (1j * self.slope), n=self.num_points)
        if self.normalisation == "mean":
            return self.velocity_scale * slope
        return self.velocity_scale * slope / jnp.fft.irfft(conv_hat, n=self.num_points)

    def nonlinear(self, t, y, args=None):
        r"""The transport :math:`-\partial_\theta(\rho\, v[\rho])` alone (the field less its diffusion)."""
        return -self._derivative(jnp.fft.rfft(y * self.velocity(y)))

    def _diffusion_modes(self, dtype):
        m = jnp.arange(self.num_points // 2 + 1, dtype=dtype)
        return -self.diffusion.astype(dtype) * m * m  # the eigenvalues -D m^2 of D d^2/d theta^2

    def linear_flow(self, tau, y):
        r""":math:`e^{\tau D\partial_\theta^2} y`: the diffusion's exact flow over a time :math:`\tau \ge 0` (the heat
        kernel, diagonal in Fourier modes), for integrating-factor (Lawson) Runge-Kutta steps."""
        return jnp.fft.irfft(jnp.fft.rfft(y) * jnp.exp(tau * self._diffusion_modes(y.dtype)), n=self.num_points)

    def vector_field(self, t, y, args=None):
        transport = self.nonlinear(t, y, args)
        if v.is_concrete(self.diffusion) and float(self.diffusion) == 0:  # no noise: the transport, as it was
            return transport
        return transport + jnp.fft.irfft(jnp.fft.rfft(y) * self._diffusion_modes(y.dtype), n=self.num_points)
