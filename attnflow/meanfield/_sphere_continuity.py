r"""The right-hand side of the continuity equation on the sphere :math:`S^2` as a field of the project's interface,
with the spectral transforms it is made of.

:class:`SphereContinuity` is :math:`\frac{\sigma^2}{2}\Delta\rho - \mathrm{div}(\rho\, v[\rho])` on a density
:math:`\rho` given by its real spherical-harmonic coefficients up to degree L
(:mod:`attnflow.meanfield._sphere_pde` holds the solver and the user's helpers). Like every field it is built through
the registry, ``attnflow.fields.build_field("sphere_continuity", I, I, I, beta=beta, degree=L)`` with the 3 x 3
identity: the mean-field limit of the field ``"sphere"`` with Q = K = V = I on :math:`S^2`. This module imports no
registry, so that the registry can build the field from here.

**Coefficients.** :math:`\rho = \sum_{l \le L}\sum_{m=-l}^{l} a_{lm} Y_{lm}` in the real harmonics of
:func:`attnflow.kernels.sphere.sphere_harmonics` (mean square 1 over the sphere,
:math:`Y_{lm} = \bar P_l^{|m|}(\cos\theta)\cos m\varphi` for m >= 0 and :math:`\bar P_l^{|m|}(\cos\theta)\sin|m|\varphi`
for m < 0), stored flat, entry :math:`l^2 + l + m`. Then :math:`a_{lm} = \frac1{4\pi}\int\rho Y_{lm}`, the mass is
:math:`4\pi a_{00}` and the uniform probability density is :math:`a_{00} = 1/(4\pi)`.

**Grid.** :math:`N_\theta` Gauss-Legendre nodes :math:`z_j = \cos\theta_j` (from the north pole down) times
:math:`N_\varphi` equispaced longitudes :math:`\varphi_k = 2\pi k/N_\varphi`, with
:math:`N_\theta = \lceil (3L+1)/2\rceil`, :math:`N_\varphi = 2N_\theta \ge 3L + 1` (:func:`grid_shape`). The quadrature
:math:`\sum_{jk} w_j \frac{2\pi}{N_\varphi} f(z_j, \varphi_k)` integrates exactly every polynomial in (x, y, z) of
degree <= 3L on the sphere (Gauss-Legendre: degree :math:`2N_\theta - 1 \ge 3L` in z; the trapezoid rule:
frequencies below :math:`N_\varphi`).

**Transforms** (of this module; no dependency). Synthesis: for each order m a sum over l against the table
:math:`\bar P_l^m(z_j)`, then an inverse real FFT along each ring of latitude. Analysis: an FFT along each ring,
then the Gauss-Legendre sum against the same table. Gradients use the tables :math:`\partial_\theta\bar P_l^m(z_j)`
and :math:`m\bar P_l^m(z_j)/\sin\theta_j` (smooth: :math:`\bar P_l^m` carries :math:`\sin^m\theta`). The three
tables are the harmonics of :func:`attnflow.kernels.sphere.sphere_harmonics` (its recurrence, no second one) at the
nodes of the meridian :math:`\varphi = 0`, and from them the derivatives by the identity
:math:`(1-z^2)\frac{d}{dz}\bar P_l^m = \sqrt{\tfrac{(2l+1)(l^2-m^2)}{2l-1}}\,\bar P_{l-1}^m - l z\bar P_l^m` (the
nodes avoid the poles); they agree with forward-mode autodiff of the polynomials to rounding (tests). Computed once
per (L, :math:`N_\theta`), in float64 when JAX's float64 mode is on.

**The tendency in weak form.** With :math:`F = \rho v` tangent,
:math:`\int(-\mathrm{div}F)\,Y = \int F\cdot\nabla Y`, so

.. math::  \dot a_{lm} = \frac1{4\pi}\int_{S^2} \big(F_\theta\,\partial_\theta Y_{lm}
           + F_\varphi \tfrac{1}{\sin\theta}\partial_\varphi Y_{lm}\big)\,dA \;-\; \frac{\sigma^2}{2}\,l(l+1)\,a_{lm},

the integral by the grid's quadrature. :math:`\nabla Y_{00} = 0`, so the degree-0 tendency is exactly 0 (its table
rows are zeros): the mass :math:`4\pi a_{00}` never changes. For the mean normalisation the integrand
:math:`\rho\,\nabla(K*\rho)\cdot\nabla Y` is a polynomial of degree <= 3L on the sphere, which the grid integrates
exactly: the scheme is the Galerkin truncation of the equation to degree L, with no aliasing (the 3/2 rule). For
softmax the quotient by :math:`K*\rho` is not band-limited; the grid then damps the aliasing but does not remove it.

**Velocity** (Funk-Hecke). :math:`e^{\beta t} = \sum_l(2l+1)\,i_l(\beta)P_l(t)` and the addition theorem give
:math:`(K*\rho)_{lm} = 4\pi\, i_l(\beta)\, a_{lm}` for :math:`K*\rho(x) = \int e^{\beta\langle x,y\rangle}\rho(y)\,dy`;
in the max-subtracted form of :func:`attnflow.kernels.sphere.sphere_kernel_coefficients`,
:math:`g_l = e^{-\beta}(2l+1)i_l(\beta)`, :math:`\tilde U = e^{-\beta}K*\rho` has coefficients
:math:`4\pi g_l a_{lm}/(2l+1)` (exact, no quadrature). Then :math:`v = \frac{e^\beta}{\beta}\nabla\tilde U` (mean,
:math:`P_{ij} = e^{\beta\langle x_i, x_j\rangle}/n`) or :math:`v = \frac1\beta\nabla\tilde U/\tilde U` (softmax), since
:math:`\mathrm{Proj}_{x^\perp}\int e^{\beta\langle x, y\rangle}y\,\rho(y)\,dy = \frac1\beta\nabla_{S^2}(K*\rho)(x)`.
"""

from __future__ import annotations

import functools
import math
from typing import final

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .. import _validate as v
from .._x64 import float64_enabled
from ..dynamics import AbstractDynamics
from ..errors import InputError
from ..kernels.sphere import sphere_harmonics, sphere_kernel_coefficients
from ._continuity import NORMALISATIONS, _check_normalisation

__all__ = ["NORMALISATIONS", "SphereContinuity", "grid_shape", "num_coefficients", "coefficient_degree"]

FOUR_PI = 4 * math.pi
#: the highest degree the field takes (the tables hold O(L^3) numbers)
MAX_SPHERE_DEGREE = 128


def grid_shape(degree: int) -> tuple[int, int]:
    r"""The grid :math:`(N_\theta, N_\varphi)` of degree L: :math:`N_\theta = \lceil(3L+1)/2\rceil` Gauss-Legendre
    nodes in :math:`z = \cos\theta`, :math:`N_\varphi = 2N_\theta` longitudes (exact quadrature of degree 3L).

    Example:
        >>> from attnflow.meanfield._sphere_continuity import grid_shape
        >>> grid_shape(8), grid_shape(16)
        ((13, 26), (25, 50))
    """
    degree = check_degree(degree)
    num_theta = -(-(3 * degree + 1) // 2)
    return num_theta, 2 * num_theta


def check_degree(degree) -> int:
    """The band limit L as an int in 1..MAX_SPHERE_DEGREE, else an InputError sentence."""
    degree = v.check_int("degree", degree, minimum=1, meaning="the highest harmonic degree L kept, >= 1")
    if degree > MAX_SPHERE_DEGREE:
        raise InputError(f"degree must be at most {MAX_SPHERE_DEGREE} (the highest harmonic degree kept), got "
                         f"{degree}.")
    return degree


def num_coefficients(degree: int) -> int:
    """:math:`(L+1)^2`, the real harmonics of degree <= L.

    Example:
        >>> from attnflow.meanfield._sphere_continuity import num_coefficients
        >>> num_coefficients(4)
        25
    """
    return (int(degree) + 1) ** 2


def coefficient_degree(size: int) -> int | None:
    """L >= 1 with :math:`(L+1)^2` = ``size``, else None.

    Example:
        >>> from attnflow.meanfield._sphere_continuity import coefficient_degree
        >>> coefficient_degree(25), coefficient_degree(24)
        (4, None)
    """
    root = math.isqrt(int(size))
    return root - 1 if root * root == size and root >= 2 else None


# -- static tables ----------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=32)
def _layout(degree: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(kind, m, l) of every flat entry (kind 0: cosine, m >= 0; 1: sine, m >= 1), and the flat index of every
    padded entry [kind, m, l] (``num_coefficients(L)``, a zero appended to the flat vector, where there is none)."""
    ls = np.concatenate([np.full(2 * d + 1, d) for d in range(degree + 1)])
    ms = np.concatenate([np.arange(-d, d + 1) for d in range(degree + 1)])
    kind, order = (ms < 0).astype(np.int64), np.abs(ms)
    inverse = np.full((2, degree + 1, degree + 1), ls.size, np.int64)
    inverse[kind, order, ls] = np.arange(ls.size)
    return kind, order, ls, inverse


def degrees(degree: int) -> np.ndarray:
    """The degree l of every flat entry (numpy)."""
    return _layout(degree)[2]


@functools.lru_cache(maxsize=32)
def _nodes(num_theta: int) -> tuple[np.ndarray, np.ndarray]:
    """Gauss-Legendre nodes z (from +1 down) and weights (sum 2), float64."""
    z, w = np.polynomial.legendre.leggauss(num_theta)
    return z[::-1].copy(), w[::-1].copy()


def _tables(degree: int, num_theta: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r"""(M, L+1, N) tables at the nodes :math:`z_j` of the meridian :math:`\varphi = 0`, M = L + 1 orders:
    :math:`\bar P_l^m(z_j)`, :math:`\partial_\theta\bar P_l^m(z_j)` and :math:`m\bar P_l^m(z_j)/\sin\theta_j`, zero
    where l < m (and the last two for l = 0, m = 0 rows: exactly zero). Computed once per (L, N) and precision (in
    float64 when JAX's float64 mode is on, else in float32), eagerly even inside a trace."""
    return _tables_in(degree, num_theta, float64_enabled())


@functools.lru_cache(maxsize=32)
def _tables_in(degree: int, num_theta: int, wide: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    z, _ = _nodes(num_theta)
    s = np.sqrt(np.maximum(1 - z * z, 0))
    points = np.stack([s, np.zeros_like(z), z], axis=1)
    with jax.ensure_compile_time_eval():  # concrete numbers even when called inside a trace
        values = np.asarray(sphere_harmonics(jnp.asarray(points, np.float64 if wide else np.float32), degree),
                            np.float64)
    M = degree + 1
    P = np.zeros((M, M, num_theta))
    for l in range(M):
        for m in range(l + 1):
            P[m, l] = values[:, l * l + l + m]
    # derivatives from the values: (1 - z^2) dP_l^m/dz = (l + m) P_{l-1}^m - l z P_l^m, normalised, and
    # d/dtheta = -sin(theta) d/dz; the Gauss nodes avoid the poles (sin(theta) > 0)
    l = np.arange(M)[None, :, None].astype(float)
    m = np.arange(M)[:, None, None].astype(float)
    below = np.concatenate([np.zeros((M, 1, num_theta)), P[:, :-1]], axis=1)  # P_{l-1}^m (0 where l - 1 < m)
    ratio = np.sqrt(np.maximum((2 * l + 1) * (l * l - m * m), 0) / np.maximum(2 * l - 1, 1))
    dP = (l * z * P - ratio * below) / s
    mP = m * P / s
    dP[0, 0] = 0.0  # the constant harmonic: no gradient (degree 0 never moves)
    return P, dP, mP


# -- transforms -----------------------------------------------------------------------------------------------


def padded(y: Array, degree: int) -> tuple[Array, Array]:
    """Flat coefficients (..., (L+1)^2) -> the cosine and sine arrays (..., M, L+1) [m, l], zero where l < m."""
    inverse = _layout(degree)[3]
    ext = jnp.concatenate([y, jnp.zeros(y.shape[:-1] + (1,), y.dtype)], axis=-1)
    # int32 positions through take: NumPy int64 indices fail when float64 mode is switched on after a first trace
    both = jnp.take(ext, jnp.asarray(inverse.reshape(-1), jnp.int32), axis=-1).reshape(y.shape[:-1] + inverse.shape)
    return both[..., 0, :, :], both[..., 1, :, :]


def flat(a: Array, b: Array, degree: int) -> Array:
    """The inverse of :func:`padded`."""
    kind, order, ls, _ = _layout(degree)
    size = degree + 1
    both = jnp.stack([a, b], axis=-3)
    both = both.reshape(both.shape[:-3] + (2 * size * size,))
    return jnp.take(both, jnp.asarray((kind * size + order) * size + ls, jnp.int32), axis=-1)


def synthesis(a: Array, b: Array, table: Array, num_phi: int) -> Array:
    r""":math:`f(z_j, \varphi_k) = \sum_{m,l}(a_{ml}\cos m\varphi_k + b_{ml}\sin m\varphi_k)\,T_{mlj}` on the grid
    (N, num_phi), a and b (M, L+1), T (M, L+1, N); needs M - 1 < num_phi / 2."""
    fc = jnp.einsum("ml,mlj->jm", a, table)
    fs = jnp.einsum("ml,mlj->jm", b, table)
    orders = fc.shape[1]
    scale = jnp.where(jnp.arange(orders) == 0, float(num_phi), num_phi / 2).astype(fc.dtype)
    spectrum = (fc - 1j * fs) * scale
    spectrum = jnp.pad(spectrum, ((0, 0), (0, num_phi // 2 + 1 - orders)))
    return jnp.fft.irfft(spectrum, n=num_phi, axis=1)


def ring_spectrum(values: Array, orders: int) -> Array:
    r""":math:`\sum_k f(z_j, \varphi_k)e^{-im\varphi_k}`, m < ``orders``: (N, orders) complex."""
    return jnp.fft.rfft(values, axis=1)[:, :orders]


def analysis(values: Array, table: Array, weights: Array) -> tuple[Array, Array]:
    r"""The coefficients :math:`\frac1{4\pi}\int f\,Y` of grid values (N, num_phi) by the grid's quadrature, as the
    cosine and sine arrays (M, L+1); ``weights`` are :math:`w_j/(2N_\varphi)`."""
    g = ring_spectrum(values, table.shape[0])
    return (jnp.einsum("mlj,j,jm->ml", table, weights, g.real),
            -jnp.einsum("mlj,j,jm->ml", table, weights, g.imag))


@final
class SphereContinuity(AbstractDynamics):
    r"""Right-hand side :math:`\frac{\sigma^2}2\Delta\rho - \mathrm{div}(\rho\, v[\rho])` of the continuity equation
    on :math:`S^2`, on the flat harmonic coefficients ((L+1)^2,) of the density (module docstring).

    A field of the project's interface (``vector_field(t, a, args)``), so that :func:`attnflow.integrate.solve_ode`
    and :class:`attnflow.integrate.RKStepper` integrate it; ``nonlinear`` and ``linear_flow`` (the diffusion's exact
    flow, diagonal in l) are its integrating-factor split (``RKStepper(lawson=True)``). ``beta`` may be traced.
    Built through the registry: ``build_field("sphere_continuity", I, I, I, beta=beta, degree=L)`` (I the 3 x 3
    identity).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.fields import build_field
        >>> from attnflow.meanfield import perturbed_uniform_sphere_density
        >>> a = perturbed_uniform_sphere_density(4, 2, 0.1)
        >>> I = jnp.eye(3)
        >>> field = build_field("sphere_continuity", I, I, I, beta=2.0, degree=4)
        >>> da = field(0.0, a)
        >>> type(field).__name__, float(da[0]), float(jnp.abs(da[4:9]).max()) > 0     # mass is conserved
        ('SphereContinuity', 0.0, True)
    """

    kernel: Float[Array, "2 M L1"]      # 4 pi g_l / (2l+1) in the padded layout: the coefficients of e^-beta K * rho
    velocity_scale: Float[Array, ""]
    diffusion: Float[Array, ""]         # D = sigma^2 / 2: + D Laplace rho
    legendre: Float[Array, "M L1 N"]
    d_theta: Float[Array, "M L1 N"]
    d_phi: Float[Array, "M L1 N"]
    weights: Float[Array, " N"]         # w_j / (2 N_phi)
    degree: int = eqx.field(static=True)
    num_phi: int = eqx.field(static=True)
    normalisation: str = eqx.field(static=True)
    noiseless: bool = eqx.field(static=True)

    def __init__(self, beta, degree: int, *, normalisation: str = "softmax", diffusion=0.0, dtype=None):
        v.check_beta("beta", beta, "the inverse temperature", scalar=True)
        v.check_real("diffusion", diffusion, "the diffusion coefficient sigma^2/2 of noisy tokens, >= 0")
        if v.is_concrete(diffusion) and float(diffusion) < 0:
            raise InputError(f"diffusion must be >= 0 (sigma^2/2 of the tokens' noise), got {float(diffusion)!r}.")
        self.degree = check_degree(degree)
        self.normalisation = _check_normalisation(normalisation)
        self.noiseless = isinstance(diffusion, (int, float)) and diffusion == 0
        dtype = jnp.result_type(beta, float) if dtype is None else dtype
        beta = jnp.asarray(beta, dtype)
        num_theta, self.num_phi = grid_shape(self.degree)
        P, dP, mP = _tables(self.degree, num_theta)
        self.legendre, self.d_theta, self.d_phi = (jnp.asarray(t, dtype) for t in (P, dP, mP))
        self.weights = jnp.asarray(_nodes(num_theta)[1] / (2 * self.num_phi), dtype)
        self.diffusion = jnp.asarray(diffusion, dtype)
        g = sphere_kernel_coefficients(beta, self.degree).astype(dtype)
        l = jnp.arange(self.degree + 1, dtype=dtype)
        per_degree = FOUR_PI * g / (2 * l + 1)
        self.kernel = jnp.broadcast_to(per_degree, (2, self.degree + 1, self.degree + 1))
        self.velocity_scale = jnp.exp(beta) / beta if self.normalisation == "mean" else 1 / beta

    @property
    def grid_shape(self) -> tuple[int, int]:
        """:math:`(N_\\theta, N_\\varphi)` of the field's grid."""
        return self.legendre.shape[-1], self.num_phi

    def density_on_grid(self, y: Float[Array, " H"]) -> Float[Array, "N P"]:
        r""":math:`\rho` on the field's grid."""
        a, b = padded(y, self.degree)
        return synthesis(a, b, self.legendre, self.num_phi)

    def velocity(self, y: Float[Array, " H"]) -> tuple[Float[Array, "N P"], Float[Array, "N P"]]:
        r"""The components :math:`(v_\theta, v_\varphi)` of :math:`v[\rho]` on the field's grid."""
        return self._velocity(*padded(y, self.degree))

    def _velocity(self, a, b):
        ka, kb = self.kernel[0] * a, self.kernel[1] * b
        u_theta = synthesis(ka, kb, self.d_theta, self.num_phi)
        u_phi = synthesis(kb, -ka, self.d_phi, self.num_phi)
        if self.normalisation == "mean":
            return self.velocity_scale * u_theta, self.velocity_scale * u_phi
        scale = self.velocity_scale / synthesis(ka, kb, self.legendre, self.num_phi)
        return scale * u_theta, scale * u_phi

    def divergence_speed(self, y: Float[Array, " H"]) -> Float[Array, "N P"]:
        r""":math:`\mathrm{div}\,v[\rho]` on the field's grid (the rate at which the flow compresses or spreads)."""
        a, b = padded(y, self.degree)
        ka, kb = self.kernel[0] * a, self.kernel[1] * b
        lap = -jnp.arange(self.degree + 1, dtype=a.dtype) * jnp.arange(1, self.degree + 2, dtype=a.dtype)
        lap_u = synthesis(lap * ka, lap * kb, self.legendre, self.num_phi)
        if self.normalisation == "mean":
            return self.velocity_scale * lap_u
        u = synthesis(ka, kb, self.legendre, self.num_phi)
        u_theta = synthesis(ka, kb, self.d_theta, self.num_phi)
        u_phi = synthesis(kb, -ka, self.d_phi, self.num_phi)
        return self.velocity_scale * (lap_u / u - (u_theta ** 2 + u_phi ** 2) / u ** 2)

    def nonlinear(self, t, y, args=None):
        r"""The transport :math:`-\mathrm{div}(\rho\, v[\rho])` alone (the field less its diffusion), in weak form."""
        a, b = padded(y, self.degree)
        rho = synthesis(a, b, self.legendre, self.num_phi)
        v_theta, v_phi = self._velocity(a, b)
        orders = self.degree + 1
        g_theta = ring_spectrum(rho * v_theta, orders)
        g_phi = ring_spectrum(rho * v_phi, orders)
        w = self.weights
        da = (jnp.einsum("mlj,j,jm->ml", self.d_theta, w, g_theta.real)
              + jnp.einsum("mlj,j,jm->ml", self.d_phi, w, g_phi.imag))
        db = (jnp.einsum("mlj,j,jm->ml", self.d_phi, w, g_phi.real)
              - jnp.einsum("mlj,j,jm->ml", self.d_theta, w, g_theta.imag))
        return flat(da, db, self.degree)

    def _diffusion_rates(self, dtype):
        l = jnp.asarray(degrees(self.degree), dtype)
        return -self.diffusion.astype(dtype) * l * (l + 1)  # the eigenvalues -D l(l+1) of D Laplace

    def linear_flow(self, tau, y):
        r""":math:`e^{\tau D\Delta} a`: the diffusion's exact flow over a time :math:`\tau \ge 0` (degree l decays by
        :math:`e^{-\tau D l(l+1)}`), for integrating-factor (Lawson) Runge-Kutta steps."""
        return y * jnp.exp(tau * self._diffusion_rates(y.dtype))

    def vector_field(self, t, y, args=None):
        transport = self.nonlinear(t, y, args)
        if self.noiseless:
            return transport
        return transport + self._diffusion_rates(y.dtype) * y
