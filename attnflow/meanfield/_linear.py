r"""Linear instability of the uniform measure: growth rates, the most unstable mode, and their measurement.

**Circle.** Perturb the uniform density, :math:`\rho = \frac1{2\pi}(1 + \varepsilon\cos k\theta)`.
Then :math:`K*\rho = I_0(\beta) + \varepsilon I_k(\beta)\cos k\theta` (:math:`K = e^{\beta\cos\psi}`,
:mod:`~attnflow.meanfield._pde`), so to first order in :math:`\varepsilon`

.. math::  v = \frac1\beta\,\partial_\theta(K*\rho) = -\frac{\varepsilon k I_k}{\beta}\sin k\theta \ \text{(mean)},\qquad
           v = \frac1\beta\,\partial_\theta\log(K*\rho) = -\frac{\varepsilon k I_k}{\beta I_0}\sin k\theta\ \text{(softmax)},

and :math:`\partial_t\rho = -\partial_\theta(\rho v) = -\frac1{2\pi}\partial_\theta v + O(\varepsilon^2)`
gives :math:`\dot\varepsilon = \lambda_k\varepsilon` with

.. math::  \lambda_k^{\text{mean}} = \frac{k^2 I_k(\beta)}{\beta}, \qquad
           \lambda_k^{\text{softmax}} = \frac{k^2 I_k(\beta)}{\beta\, I_0(\beta)} .

Every mode k >= 1 grows; the fastest, :math:`k^*(\beta) = \arg\max_k k^2 I_k(\beta)` (the same for
both normalisations), predicts the number of clusters that first form from a near-uniform start;
with :math:`I_k(\beta)\approx I_0(\beta)e^{-k^2/(2\beta)}` for large :math:`\beta`,
:math:`k^*\approx\sqrt{2\beta}`. For n equally spaced particles the same computation with sums in
place of integrals gives :math:`\lambda_k` up to the aliased terms :math:`I_{pn\pm k}`, p >= 1
(exponentially small in n). The layer map (Euler with step dt, renormalised onto the circle) has
the growth factor :math:`1 + dt\,\lambda_k` per layer: the renormalisation changes an angle at
third order in the displacement.

**Sphere** :math:`S^{d-1}` (cf. Bruno, Pasqualotto and Agazzi, *Emergence of meta-stable clustering
in mean-field transformer models*, 2024, where the same Funk--Hecke computation selects the
unstable harmonics). With :math:`\rho = 1 + \varepsilon Y_l` against the uniform probability
:math:`\sigma` and :math:`Y_l` a spherical harmonic of degree l, the Funk--Hecke formula gives
:math:`K*\rho = \hat K_0 + \varepsilon\hat K_l Y_l` with

.. math::  \hat K_l(\beta) = \frac{\int_{-1}^1 e^{\beta t}\, G_l(t)\,(1-t^2)^{(d-3)/2}\,dt}{\int_{-1}^1 (1-t^2)^{(d-3)/2}\,dt}
           = \Gamma(\tfrac d2)\big(\tfrac 2\beta\big)^{d/2-1} I_{l+d/2-1}(\beta),

(:math:`G_l` the Gegenbauer polynomial normalised by :math:`G_l(1) = 1`), the velocity is
:math:`\nabla(K*\rho)/\beta` (mean) or :math:`\nabla\log(K*\rho)/\beta` (softmax), and
:math:`-\Delta Y_l = l(l+d-2)Y_l`, so

.. math::  \lambda_l^{\text{mean}} = \frac{l(l+d-2)\hat K_l(\beta)}{\beta}, \qquad
           \lambda_l^{\text{softmax}} = \frac{l(l+d-2)\hat K_l(\beta)}{\beta\,\hat K_0(\beta)},

which is the circle's formula for d = 2. :math:`\hat K_l` is computed from the downward recurrence of
:math:`I_\nu` and the normalisation :math:`\sum_l N_l \hat K_l = e^\beta` (:func:`sphere_kernel_modes`;
traceable in beta).

**Measurement** (:func:`fit_growth_rates`): the least-squares slope of :math:`\log|\hat\mu_k(t)|`
against t over the linear window, with a Student-t interval. The window is joint: it ends for every
mode when the largest amplitude first exceeds a bound, because once the fastest mode is
nonlinear it drives every other mode through the quadratic term :math:`\rho v`, so a slow mode
that is still small is no longer growing at its own linear rate.
"""

from __future__ import annotations

import functools
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from .. import _validate as v
from .._x64 import keeps_float64
from ..errors import InputError
from ._kernel import kernel_modes
from ._pde import NORMALISATIONS, circle_grid

__all__ = ["growth_rates", "FastestMode", "most_unstable_mode", "sphere_kernel_modes", "sphere_growth_rates",
           "noisy_growth_rates", "critical_noise", "tricritical_beta",
           "perturbed_uniform_angles", "perturbed_uniform_density", "fit_growth_rates"]

#: the depth of :func:`sphere_kernel_modes`' recurrence is fixed when beta is traced: for beta up to this bound
#: (the default of its ``beta_max``); a traced beta above the bound gives NaN
SPHERE_BETA_MAX = 1024.0


def _check(beta, normalisation):
    v.check_beta("beta", beta, "the inverse temperature", scalar=True)
    return v.check_choice("normalisation", normalisation, NORMALISATIONS, "how attention weights are normalised")


@keeps_float64
def growth_rates(beta, num_modes: int = 32, normalisation: str = "softmax") -> Float[Array, " K"]:
    r"""Linear growth rates :math:`\lambda_k` of the modes k = 0..num_modes of the uniform measure on the circle.

    :math:`\lambda_k = k^2 I_k(\beta)/\beta` (mean) or :math:`k^2 I_k(\beta)/(\beta I_0(\beta))`
    (softmax); :math:`\lambda_0 = 0` (mass). Traceable in beta.

    Example:
        >>> from attnflow.meanfield import growth_rates
        >>> from scipy.special import iv
        >>> lam = growth_rates(2.0, 3)
        >>> round(float(lam[2]), 5), round(float(4 * iv(2, 2.0) / (2.0 * iv(0, 2.0))), 5)
        (0.60445, 0.60445)
    """
    normalisation = _check(beta, normalisation)
    return _growth_rates(beta, v.check_int("num_modes", num_modes, meaning="the highest mode"), normalisation)


@functools.partial(jax.jit, static_argnames=("num_modes", "normalisation"))
def _growth_rates(beta, num_modes: int, normalisation: str):
    scaled = kernel_modes(beta, num_modes)
    beta = jnp.asarray(beta, scaled.dtype)
    k = jnp.arange(num_modes + 1, dtype=scaled.dtype)
    factor = jnp.exp(beta) if normalisation == "mean" else 1 / scaled[0]
    return k * k * scaled * factor / beta


class FastestMode(eqx.Module):
    r"""The fastest-growing mode of the uniform measure and its margin over the runner-up.

    ``int(mode)`` is :attr:`k`, so the result reads as the mode where a number is wanted.

    Attributes:
        k: :math:`k^* = \arg\max_k \lambda_k` (int32).
        runner_up: the second-fastest mode.
        margin: the relative gap :math:`(\lambda_{k^*} - \lambda_{\text{runner-up}})/\lambda_{k^*}` (the same
            for both normalisations, whose rates differ by a factor independent of k): near 0 two modes
            grow alike and a finite-time measurement may pick either.
    """

    k: Int[Array, ""]
    runner_up: Int[Array, ""]
    margin: Float[Array, ""]

    def __int__(self) -> int:
        return int(self.k)

    def __index__(self) -> int:
        return int(self.k)


@keeps_float64
def most_unstable_mode(beta, num_modes: int = 64) -> FastestMode:
    r"""The fastest-growing mode :math:`k^* = \arg\max_{1\le k\le K} k^2 I_k(\beta)` (both normalisations),
    with the runner-up and the relative margin between their rates (:class:`FastestMode`).

    K = ``num_modes`` (>= 2) must exceed :math:`k^*` (about :math:`\sqrt{2\beta}`); traceable in beta.

    Example:
        >>> from attnflow.meanfield import most_unstable_mode
        >>> [int(most_unstable_mode(b)) for b in (1.0, 4.0, 16.0, 64.0)]
        [1, 3, 6, 11]
        >>> fast = most_unstable_mode(6.0)               # modes 3 and 4 grow within 2% of each other
        >>> int(fast.k), int(fast.runner_up), round(float(fast.margin), 3)
        (3, 4, 0.019)
    """
    _check(beta, "softmax")
    return _fastest(beta, v.check_int("num_modes", num_modes, minimum=2, meaning="the highest mode searched"))


@functools.partial(jax.jit, static_argnames=("num_modes",))
def _fastest(beta, num_modes: int):
    rates = _growth_rates(beta, num_modes, "softmax")[1:]
    order = jnp.argsort(-rates)
    top, second = rates[order[0]], rates[order[1]]
    return FastestMode(k=(order[0] + 1).astype(jnp.int32), runner_up=(order[1] + 1).astype(jnp.int32),
                       margin=(top - second) / top)


def _recurrence_depth(beta_bound: float, d: int, max_degree: int) -> int:
    r"""Start order N of :func:`sphere_kernel_modes`' downward recurrence: beyond it the normalising sum's
    terms :math:`N_l \hat K_l e^{-\beta} \lesssim N_l\, e^{-l^2/(2\beta)}` are below :math:`e^{-40}`
    (:math:`N_l \le (l+2)^{d-1}` the number of harmonics of degree l), and 16 orders above ``max_degree``."""
    depth = max_degree + 16
    for _ in range(4):  # a fixed point of N = sqrt(2 beta (40 + (d - 1) log(N + 2))) (+ the margins)
        tail = math.sqrt(2.0 * beta_bound * (40.0 + (d - 1) * math.log(depth + 2)))
        depth = max(depth, max_degree + 16 + math.ceil(tail))
    return depth


def _harmonic_ratios(d: int, depth: int) -> np.ndarray:
    r""":math:`q_l = N_l / N_{l-1}` for l = 1..depth, :math:`N_l = \frac{(2l+d-2)\,(l+d-3)!}{l!\,(d-2)!}` the
    dimension of the degree-l spherical harmonics on :math:`S^{d-1}` (:math:`N_0 = 1`, :math:`N_1 = d`;
    d = 2: :math:`N_l = 2`)."""
    l = np.arange(1, depth + 1, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):  # l = 1 (and d = 2's 0/0) replaced below
        q = (2 * l + d - 2) / (2 * l + d - 4) * (l + d - 3) / l
    q[0] = d
    if d == 2:
        q[1:] = 1.0
    return q


def sphere_kernel_modes(beta, d: int, max_degree: int, *, beta_max: float | None = None) -> Float[Array, " L"]:
    r"""Funk--Hecke eigenvalues :math:`k_l = \hat K_l(\beta) e^{-\beta}` of :math:`e^{\beta\langle x,y\rangle}` on
    :math:`S^{d-1}`, l = 0..max_degree (module docstring), against the uniform probability measure.

    :math:`k_l \propto I_{l+\lambda}(\beta)`, :math:`\lambda = d/2 - 1` (d = 2: :math:`I_l(\beta)e^{-\beta}`;
    d = 3: the modified spherical Bessel functions :math:`i_l(\beta)e^{-\beta}`). Computed without quadrature
    and without cancellation: the ratios :math:`r_l = k_l/k_{l-1}` from the downward recurrence
    :math:`r_l = 1/(2(l+\lambda)/\beta + r_{l+1})` (that of :math:`I_\nu`, stable downwards, all terms
    positive), started at a depth N where the modes have decayed below :math:`e^{-40}`, and :math:`k_0` from
    Funk--Hecke at :math:`\langle x, y\rangle = 1`: :math:`\sum_l N_l k_l = 1` (:math:`N_l` harmonics of
    degree l), summed in the same pass; :math:`k_l = k_0 r_1 \cdots r_l`. Every mode, however small against
    :math:`k_0`, has a relative error of a few units of rounding (float64: below :math:`4\cdot10^{-15}` against
    mpmath for d = 2..8, l <= 48, beta from 1e-3 to 1024; tests/test_phase_numerics_edges.py) until it
    underflows. Traceable in beta (gradients included): a traced beta uses the depth of ``beta_max``
    (default :data:`SPHERE_BETA_MAX`), and gives NaN above it.

    Example:
        >>> import jax, math
        >>> from attnflow.meanfield._linear import sphere_kernel_modes
        >>> with jax.enable_x64(True):
        ...     k = sphere_kernel_modes(2.0, 3, 1)       # i_0 = sinh(b)/b, i_1 = cosh(b)/b - sinh(b)/b^2
        >>> [round(float(a) * math.exp(2.0), 10) for a in k]
        [1.8134302039, 0.9743827436]
    """
    d = v.check_int("d", d, minimum=2, meaning="the dimension of the ambient space of the sphere S^{d-1}")
    max_degree = v.check_int("max_degree", max_degree, minimum=0, meaning="the highest harmonic degree")
    v.check_beta("beta", beta, "the inverse temperature", scalar=True)
    if beta_max is not None:
        beta_max = v.check_number("beta_max", beta_max, "an upper bound of a traced beta", low=0)
    if v.is_concrete(beta):
        # the depth of the next power of two of beta: a few compilations cover every beta
        bound = 2.0 ** math.ceil(math.log2(max(float(beta), 1.0)))
    else:
        bound = SPHERE_BETA_MAX if beta_max is None else beta_max
    dtype = jnp.result_type(beta, float)
    return _sphere_kernel_modes(jnp.asarray(beta, dtype), d, max_degree, _recurrence_depth(bound, d, max_degree),
                                float(bound))


@functools.partial(jax.jit, static_argnames=("d", "max_degree", "depth", "bound"))
def _sphere_kernel_modes(beta, d: int, max_degree: int, depth: int, bound: float):
    dtype = beta.dtype
    lam = (d - 2) / 2
    orders = jnp.arange(depth, 0, -1, dtype=dtype)  # l = N, ..., 1
    q = jnp.asarray(_harmonic_ratios(d, depth)[::-1], dtype)  # q_l = N_l / N_{l-1} in the same order

    def down(carry, lq):
        # carry: r_{l+1} and A = r_{l+1} q_{l+1} S_{l+1}, where S_l = sum_{j >= l} (N_j / N_l) k_j / k_l = 1 + A
        r_next, A = carry
        l, q_l = lq
        r = 1.0 / (2.0 * (l + lam) / beta + r_next)
        return (r, r * q_l * (1.0 + A)), r

    zero = jnp.zeros((), dtype)
    (_, A), ratios = jax.lax.scan(down, (zero, zero), (orders, q))
    k0 = 1.0 / (1.0 + A)  # S_0 = sum_l N_l k_l / k_0 = 1 / k_0
    r = ratios[::-1][:max_degree]  # r_1..r_max_degree
    modes = k0 * jnp.concatenate([jnp.ones((1,), dtype), jnp.cumprod(r)])
    return jnp.where(beta <= bound, modes, jnp.nan)


def sphere_growth_rates(beta, d: int, max_degree: int = 16, normalisation: str = "softmax") -> Float[Array, " L"]:
    r"""Linear growth rates :math:`\lambda_l` of the degree-l harmonics of the uniform measure on :math:`S^{d-1}`.

    :math:`\lambda_l = l(l+d-2)\hat K_l/\beta` (mean) or :math:`l(l+d-2)\hat K_l/(\beta\hat K_0)` (softmax);
    equal to :func:`growth_rates` for d = 2.

    Example:
        >>> from attnflow.meanfield import growth_rates, sphere_growth_rates
        >>> round(float(sphere_growth_rates(3.0, 2, 4)[3]), 5) == round(float(growth_rates(3.0, 4)[3]), 5)
        True
    """
    normalisation = _check(beta, normalisation)
    scaled = sphere_kernel_modes(beta, d, max_degree)
    beta = jnp.asarray(beta, scaled.dtype)
    l = jnp.arange(max_degree + 1, dtype=scaled.dtype)
    factor = jnp.exp(beta) if normalisation == "mean" else 1 / scaled[0]
    return l * (l + d - 2) * scaled * factor / beta


def noisy_growth_rates(beta, d: int, sigma, max_degree: int = 16, normalisation: str = "softmax"
                       ) -> Float[Array, " L"]:
    r"""Linear growth rates of the degree-l harmonics of the uniform measure on :math:`S^{d-1}` for tokens with
    independent noise of strength :math:`\sigma` (the McKean-Vlasov equation
    :math:`\partial_t\rho = \frac{\sigma^2}2\Delta\rho - \nabla\cdot(\rho v[\rho])`):

    .. math::  \lambda_l(\sigma) = l(l+d-2)\Big(\frac{c\hat K_l}{\beta} - \frac{\sigma^2}{2}\Big),

    :func:`sphere_growth_rates` less the heat kernel's :math:`l(l+d-2)\sigma^2/2` (c = 1 for the mean
    normalisation, :math:`1/\hat K_0` for softmax).

    Example:
        >>> from attnflow.meanfield import noisy_growth_rates, sphere_growth_rates
        >>> a, b = noisy_growth_rates(3.0, 2, 0.5, 3), sphere_growth_rates(3.0, 2, 3)
        >>> [round(float(x - y), 6) for x, y in zip(a, b)]          # -k^2 sigma^2 / 2 on the circle
        [0.0, -0.125, -0.5, -1.125]
    """
    v.check_real("sigma", sigma, "the noise strength, >= 0")
    if v.is_concrete(sigma) and float(sigma) < 0:
        raise InputError(f"sigma must be >= 0 (the noise strength), got {float(sigma)!r}.")
    rates = sphere_growth_rates(beta, d, max_degree, normalisation)
    l = jnp.arange(max_degree + 1, dtype=rates.dtype)
    return rates - l * (l + d - 2) * jnp.asarray(sigma, rates.dtype) ** 2 / 2


def critical_noise(beta, d: int, normalisation: str = "softmax"):
    r"""The noise strength :math:`\sigma_c` at which the uniform measure on :math:`S^{d-1}` loses its linear
    stability (its first harmonic, the slowest to be damped, stops decaying):
    :math:`\sigma_c^2/2 = c\hat K_1/\beta`; on the circle :math:`I_1(\beta)/(\beta I_0(\beta))` (softmax) or
    :math:`I_1(\beta)/\beta` (the mean normalisation's :math:`P_{ij} = e^{\beta\langle x_i, x_j\rangle}/n`).
    Below :math:`\sigma_c` the uniform state is unstable.

    Example:
        >>> from scipy.special import iv
        >>> from attnflow.meanfield import critical_noise
        >>> s = float(critical_noise(2.0, 2))
        >>> round(s ** 2 / 2, 5), round(float(iv(1, 2.0) / (2.0 * iv(0, 2.0))), 5)
        (0.34889, 0.34889)
    """
    rate = sphere_growth_rates(beta, d, 1, normalisation)[1]
    return jnp.sqrt(2 * rate / (d - 1))


def tricritical_beta(d: int) -> float:
    r""":math:`\beta^*(d)`, the root of :math:`I_{d/2+1}(\beta)/I_{d/2}(\beta) = 1/d`: Mun and Rosenzweig find the
    noisy transition continuous for :math:`\beta < \beta^*` and discontinuous above it (with a range where the
    uniform and a clustered state are both stable). The ratio is :math:`\hat K_2/\hat K_1`
    (:func:`sphere_kernel_modes`), increasing in beta from 0 to 1: solved by bisection in float64.

    Example:
        >>> from attnflow.meanfield import tricritical_beta
        >>> round(tricritical_beta(2), 4), round(tricritical_beta(3), 4)
        (2.4469, 1.8162)
    """
    d = v.check_int("d", d, minimum=2, meaning="the dimension of the ambient space of the sphere S^{d-1}")

    def excess(beta: float) -> float:
        with jax.enable_x64(True):
            k = sphere_kernel_modes(jnp.asarray(beta, jnp.float64), d, 2)
            return float(k[2] / k[1]) - 1.0 / d

    lo, hi = 1e-3, 1.0
    while excess(hi) < 0:
        hi *= 2
    for _ in range(60):  # bisection to the float64 resolution of the bracket
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if excess(mid) < 0 else (lo, mid)
    return (lo + hi) / 2


@keeps_float64
def perturbed_uniform_angles(n: int, k: int, eps, phase=0.0, dtype=None) -> Float[Array, " n"]:
    r"""n equally spaced angles displaced so that their measure is :math:`\frac1{2\pi}(1 + \varepsilon\cos k(\theta - \text{phase}))`
    to first order: :math:`\theta_j = \phi_j - \frac{\varepsilon}{k}\sin k(\phi_j - \text{phase})`,
    :math:`\phi_j = 2\pi(j + 1/2)/n` (then :math:`|\hat\mu_k| = \varepsilon/2 + O(\varepsilon^2)`).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.meanfield import fourier_coefficients
        >>> from attnflow.meanfield._linear import perturbed_uniform_angles
        >>> th = perturbed_uniform_angles(64, 3, 1e-3)
        >>> round(float(jnp.abs(fourier_coefficients(th, 3)[3])), 6)
        0.0005
    """
    n = v.check_int("n", n, meaning="the number of particles")
    k = v.check_int("k", k, meaning="the perturbed mode")
    v.check_real("eps", eps, "the relative amplitude of the density perturbation")
    dtype = jnp.result_type(float) if dtype is None else dtype
    phi = (2 * math.pi / n) * (jnp.arange(n, dtype=dtype) + 0.5)
    return phi - (jnp.asarray(eps, dtype) / k) * jnp.sin(k * (phi - phase))


@keeps_float64
def perturbed_uniform_density(num_points: int, k: int, eps, phase=0.0, dtype=None) -> Float[Array, " G"]:
    r""":math:`\frac1{2\pi}(1 + \varepsilon\cos k(\theta_g - \text{phase}))` on :func:`~attnflow.meanfield.circle_grid`.

    Example:
        >>> from attnflow.meanfield import perturbed_uniform_density
        >>> [round(float(r), 4) for r in perturbed_uniform_density(4, 1, 0.5)]
        [0.2387, 0.1592, 0.0796, 0.1592]
    """
    k = v.check_int("k", k, meaning="the perturbed mode")
    v.check_real("eps", eps, "the relative amplitude of the density perturbation")
    theta = circle_grid(num_points, dtype)
    return (1 + jnp.asarray(eps, theta.dtype) * jnp.cos(k * (theta - phase))) / (2 * math.pi)


def fit_growth_rates(ts, amplitudes, *, max_amplitude: float, start: float | None = None,
                     confidence: float = 0.95, window: str = "joint") -> dict:
    r"""Growth rate of each mode: the least-squares slope of :math:`\log|a_k(t)|` over the linear window.

    ``amplitudes`` (T, K): :math:`|a_k(t)|` at the times ``ts`` (T,) (complex values are taken in
    modulus). The window runs from ``start`` (default ``ts[0]``) up to, not including, the first
    time at which the largest :math:`|a_k|` exceeds ``max_amplitude`` (``window="joint"``, the
    default: the end of the linear regime for every mode, since the modes that are already
    nonlinear drive the others), or at which mode k's own :math:`|a_k|` does (``window="own"``,
    which fits slow modes over a stretch where the fast ones are already nonlinear); zero or
    non-finite amplitudes are left out. Host-side (numpy / scipy).

    Returns a dict of arrays (K,): ``rate``, ``lo``, ``hi`` (the Student-t interval at
    ``confidence``; NaN with fewer than 3 points), ``points`` (the window's length), ``stderr``
    (:func:`attnflow.stats.fit_slope` of :math:`\log|a_k|` against t).

    Example:
        >>> import numpy as np
        >>> from attnflow.meanfield import fit_growth_rates
        >>> ts = np.linspace(0, 5, 11)
        >>> fit = fit_growth_rates(ts, 1e-6 * np.exp(np.outer(ts, [0.5, 2.0])), max_amplitude=1e-3)
        >>> np.round(fit["rate"], 6).tolist(), fit["points"].tolist()
        ([0.5, 2.0], [7, 7])
        >>> fit_growth_rates(ts, 1e-6 * np.exp(np.outer(ts, [0.5, 2.0])), max_amplitude=1e-3, window="own")["points"].tolist()
        [11, 7]
    """
    from ..stats import fit_slope

    ts = np.asarray(ts, float)
    amps = np.abs(np.asarray(amplitudes))
    if amps.ndim == 1:
        amps = amps[:, None]
    if ts.ndim != 1 or amps.ndim != 2 or amps.shape[0] != ts.shape[0]:
        raise InputError(f"amplitudes must be (T, K) with T = len(ts) = {ts.shape}, got shape {amps.shape}.")
    v.check_positive("max_amplitude", max_amplitude, "the amplitude that ends the linear window")
    v.check_number("confidence", confidence, "the level of the interval", low=0, high=1)
    window = v.check_choice("window", window, ("joint", "own"), "where the linear window of a mode ends")
    first = ts[0] if start is None else float(start)
    out = {key: np.full(amps.shape[1], np.nan) for key in ("rate", "lo", "hi", "stderr")}
    out["points"] = np.zeros(amps.shape[1], int)
    joint = np.nonzero(np.any(amps > max_amplitude, axis=1))[0]  # NaN compares False: never ends a window
    for k in range(amps.shape[1]):
        a = amps[:, k]
        over = joint if window == "joint" else np.nonzero(a > max_amplitude)[0]
        end = over[0] if over.size else len(ts)
        use = (np.arange(len(ts)) < end) & (ts >= first) & np.isfinite(a) & (a > 0)
        count = int(use.sum())
        out["points"][k] = count
        if count < 2:
            continue
        fit = fit_slope(ts[use], np.log(a[use]), confidence)  # lo, hi, stderr: NaN with two points
        out["rate"][k], out["lo"][k], out["hi"][k], out["stderr"][k] = (fit[key] for key in ("slope", "lo", "hi", "stderr"))
    return out
