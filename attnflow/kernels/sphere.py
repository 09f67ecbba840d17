r"""Attention on the sphere S^2 in O(n L^2): the kernel is zonal, and its Legendre series is short.

Tokens :math:`x_j` on the unit sphere :math:`S^2 \subset \mathbb R^3` attend with the scores
:math:`s_{ij} = \beta\langle x_i, x_j\rangle` (:math:`Q^TK = \beta I`, :math:`\beta \ge 0`). With the
max-subtracted kernel :math:`f(t) = e^{\beta(t-1)}` (:math:`0 < f \le 1`, largest at t = 1) every token needs

.. math::  D_i = \sum_j f(\langle x_i, x_j\rangle), \qquad N_i = \sum_j f(\langle x_i, x_j\rangle)\, x_j,

and :math:`\sum_j P_{ij} x_j = N_i / D_i` (softmax) or :math:`e^\beta N_i / n` (``"mean"``,
:math:`P_{ij} = e^{s_{ij}}/n`). A value matrix acts afterwards, :math:`\sum_j P_{ij} V x_j = V \sum_j P_{ij} x_j`:
it never enters the kernel.

**Funk-Hecke.** :math:`e^{\beta t} = \sum_l (2l+1)\, i_l(\beta)\, P_l(t)` (:math:`i_l` the modified spherical
Bessel functions of the first kind), so :math:`f(t) = \sum_l g_l P_l(t)` with
:math:`g_l = e^{-\beta}(2l+1)\, i_l(\beta) > 0` and :math:`\sum_l g_l = f(1) = 1`. The real harmonics
:math:`Y_h`, h = (l, m, cos or sin), :math:`0 \le m \le l`, are normalised by the addition theorem
:math:`\sum_{m} [Y^c_{lm}(x)Y^c_{lm}(y) + Y^s_{lm}(x)Y^s_{lm}(y)] = (2l+1)\, P_l(\langle x, y\rangle)` (mean square
1 over the sphere: :math:`\sqrt{4\pi}` times the orthonormal ones), so, truncated at degree L,

.. math::  D_i \approx \sum_{l \le L} \frac{g_l}{2l+1} \sum_{h \in l} Y_h(x_i)\, S_h, \quad S_h = \sum_j Y_h(x_j),
           \qquad N_i \approx \sum_{l \le L} \frac{g_l}{2l+1} \sum_{h \in l} Y_h(x_i) \sum_j Y_h(x_j)\, x_j :

:math:`(L+1)^2` harmonics, O(n L^2) for the moments and O(n L^2) for the values, instead of O(n^2).

**The harmonics, in Cartesian coordinates.** :math:`Y^c_{lm} + i Y^s_{lm} = \bar q_l^m(z)\,(x + iy)^m` with
:math:`\bar q_l^m = \bar P_l^m(z) / (1 - z^2)^{m/2}` a polynomial of degree l - m (:math:`\bar P_l^m` the fully
normalised associated Legendre functions, no Condon-Shortley phase): on the sphere
:math:`(x+iy)^m = \sin^m\theta\, e^{im\varphi}`, so every harmonic is a polynomial in (x, y, z): no angle, no
``atan2``, no division by :math:`\sin\theta`, smooth at the poles, and so are its derivatives. The standard
stable recurrence of the normalised Legendre functions, :math:`\bar q_m^m = c_m` (:math:`c_0 = 1`,
:math:`c_1 = \sqrt 3`, :math:`c_m = c_{m-1}\sqrt{(2m+1)/(2m)}`) and, for fixed m,

.. math::  \bar q_l^m = a_{lm}\, z\, \bar q_{l-1}^m - b_{lm}\, \bar q_{l-2}^m, \quad
           a_{lm} = \sqrt{\frac{(2l-1)(2l+1)}{(l-m)(l+m)}}, \quad
           b_{lm} = \sqrt{\frac{(2l+1)(l+m-1)(l-m-1)}{(l-m)(l+m)(2l-3)}},

runs on the harmonics themselves (the factor :math:`(x+iy)^m` is fixed along it), one diagonal k = l - m at a
time; the powers :math:`(x+iy)^m` come by doubling. Every harmonic is bounded:
:math:`\sum_{h \in l} Y_h(x)^2 = 2l + 1`.

**Coefficients.** :math:`g_0 = (1 - e^{-2\beta})/(2\beta)` and :math:`g_l = g_0 (2l+1)\, r_1 \cdots r_l` with
the ratios :math:`r_l = i_l/i_{l-1} \in (0, 1)`. From :math:`i_{l-1} - i_{l+1} = (2l+1)\, i_l / \beta`,
:math:`r_l = \beta/(2l + 1 + \beta r_{l+1})`, computed downwards from :math:`r_{N+1} = 0` (Miller's method). An
error :math:`\epsilon` in :math:`r_{l+1}` changes :math:`r_l` by the relative amount :math:`r_l r_{l+1}\epsilon`,
less than :math:`\epsilon`: the start is forgotten like :math:`\prod_k r_k r_{k+1}`, below rounding well before
l = L for N = 2L + 40 (and N at least L + 40 beyond the next power of two of a concrete beta), and each step
adds a few units of rounding, all positive terms. Measured: every :math:`g_l`, :math:`l \le L`, within
:math:`10^{-15}` relative of 40-digit values (mpmath) for :math:`\beta \le 256` (L = 138); scipy's
``spherical_in`` is the less accurate of the two there (:math:`4\cdot10^{-14}`). Traceable and differentiable
in beta (:func:`sphere_kernel_coefficients`).

**Truncation bound.** The coefficients are exact (no aliasing: no quadrature), and :math:`|P_l| \le 1`, so the
truncated kernel differs from f by at most :math:`T_L = \sum_{l > L} g_l` at every angle (relative to its
maximum 1). :func:`sphere_tail_bound` is a proven upper bound:

* *Continued fraction.* :math:`\varphi_l(r) = \beta/(2l+1+\beta r)` decreases in :math:`r \ge 0` and
  :math:`r_l = \varphi_l(r_{l+1})`. From :math:`R_E = 0 \le r_E` and :math:`R_l = \varphi_l(R_{l+1})`,
  induction gives :math:`R_l \ge r_l` where E - l is odd (and :math:`\le` where it is even): two downward sweeps
  (E and E + 1) give upper bounds :math:`\hat r_l \ge r_l`, hence
  :math:`g_l \le \hat g_l = g_0 (2l+1)\,\hat r_1 \cdots \hat r_l`. Beyond some M: termwise in the series
  :math:`i_l(\beta) = \frac{\beta^l}{(2l+1)!!}\sum_k \frac{(\beta^2/2)^k}{k!\,(2l+3)(2l+5)\cdots(2l+2k+1)}` the
  k-th term of :math:`i_{l+1}` is at most :math:`\beta/(2l+3)` times that of :math:`i_l`, so
  :math:`g_{l+1}/g_l \le \beta/(2l+1) \le \rho = \beta/(2M+3) < 1` for l > M (M >= beta/2 + 40), and
  :math:`T_L \le \sum_{l=L+1}^{M} \hat g_l + \hat g_{M+1}/(1 - \rho)`, evaluated in logarithms, plus a relative margin of :math:`10^{-9}` for its own rounding. It exceeds the true
  tail by that margin only (tests: against 40-digit sums for beta from 0.01 to 256), so :func:`sphere_degree`
  is the smallest degree whose *true* tail is below the tolerance.
* *Chernoff*, where M would exceed 2 x 10^5 terms (beta above about 4 x 10^5): for :math:`t = \cosh s > 1`,
  :math:`\sum_l g_l P_l(t) = e^{\beta(t-1)}` (the expansion of an entire function converges everywhere),
  :math:`P_l(t)` increases with l (:math:`(l+1)P_{l+1} = (2l+1)tP_l - lP_{l-1}` gives
  :math:`(l+1)(P_{l+1} - P_l) \ge l(P_l - P_{l-1}) \ge 0`) and :math:`g_l > 0`, so
  :math:`T_L \le \sum_{l>L} g_l P_l(t) / P_{L+1}(t) \le e^{\beta(\cosh s - 1)} / P_{L+1}(\cosh s)` for every
  s > 0; taken at :math:`s = \operatorname{asinh}((L+1)/\beta)`.

The tail increases with beta (:math:`g_{l+1}/g_l = \frac{2l+3}{2l+1}\, I_{l+3/2}(\beta)/I_{l+1/2}(\beta)` increases
with beta, a classical property of Bessel-function ratios, so the distribution :math:`(g_l)` increases in
likelihood ratio; the tests check it on a grid): a degree chosen for :math:`\beta_{max}` holds for every smaller
beta. For orientation, the series bound :math:`i_l(\beta) \le \frac{\beta^l}{(2l+1)!!} e^{\beta^2/(2(2l+3))}`
shows the two regimes, L of order :math:`\log(1/u)/\log(L/\beta)` for small beta and
:math:`L \approx \sqrt{2\beta\log(1/u)}` (the kernel's angular width :math:`\beta^{-1/2}`) for large beta.
Degrees at the unit roundoff: float64 L = 14, 22, 38, 71, 138 for beta = 1, 4, 16, 64, 256; float32 L = 8,
13, 24, 47.

**Rounding.** Every term is bounded: by Cauchy-Schwarz and the addition theorem,
:math:`\sum_{h \in l}|Y_h(x_i)||Y_h(x_j)| \le 2l+1`, so
:math:`\sum_h \frac{g_l}{2l+1}|Y_h(x_i)|\sum_j|Y_h(x_j)| \le \sum_l g_l\, n = n`: in units of the kernel's
maximum, the terms of :math:`D_i` and of each component of :math:`N_i` add up to at most n in absolute value.
Their rounding errors: the harmonics carry relative errors O(L u) (the recurrence; measured
:math:`\le 10^{-14}` at L = 30), the moments are sums of n terms (a block of B tokens, then n/B blocks), the
values sums of :math:`(L+1)^2` terms, so
:math:`|\delta D_i|, |\delta N_i| \lesssim ((L+1)^2 + B + n/B + cL)\, u\, n`: absolute error O(n L^2 u), u the unit roundoff (the truncation adds at most :math:`n T_L \le n u`). The
token itself contributes f(1) = 1, so :math:`D_i \ge 1` and the error of :math:`N_i/D_i` (whose entries are at
most 1) is at most :math:`2|\delta|/D_i`: :math:`n L^2 u` for an isolated token, about :math:`L^2 u\, n/D_i` with
:math:`n/D_i \approx 2\beta` in a spread cloud. These are worst cases; the observed errors against the direct
sum are about (L+1) u relative to the largest output (float64 and float32, tests/test_sphere_kernel.py).

**Programs.** Up to :data:`_ROLLED_MAX` tokens (2048), one ``lax.scan`` over the diagonals k = l - m, on
(L+1, n) arrays (zero where m > L - k): a short program, fast to compile (with the tests' XLA flags, L = 22:
0.3 s, its gradient 1.2 s). Above, an unrolled program over blocks of at most :data:`_BLOCK` tokens (4096;
the fewest blocks, of equal size): per diagonal one small array operation (materialised,
``optimization_barrier``, so that XLA computes each harmonic once) and one small matrix product; the moments
accumulate in a ``lax.scan`` over the blocks (the last block padded with tokens of weight 0 at the north
pole), the values come from a ``lax.map`` over the same blocks, each block's harmonics computed again: no
(n, L^2) table is ever held. Reverse mode recomputes each block's harmonics too (``jax.checkpoint``):
O(n + L^2 B) memory.

**Derivatives.** Forward and reverse mode through the recurrence, in the tokens and in beta (autodiff of
polynomials: exact, smooth everywhere). Measured against the direct sum's gradients: 1e-15 relative (float64).

**Tokens off the sphere.** The path reads the directions :math:`x_j/\|x_j\|` (like the circle's path,
:mod:`attnflow.kernels.fourier`): exact for unit tokens; for any other the attention of its projection onto the
sphere (a zero token gives NaN). Its derivatives are those of :math:`x \mapsto \mathrm{attention}(x/\|x\|)`:
at unit tokens the direct sum's derivatives along every tangent direction; the radial one, which would move a
token off the sphere, is zero.

**Speed** (float64, beta = 4, L = 22; one layer = :func:`sphere_attention`, an Euler step and the
renormalisation, one jit-compiled program; benchmarks/bench_sphere_path.py; AMD EPYC, 2 cores, shared, load
average 1.2): n = 10^5: 0.074 s (median 0.081 s); n = 10^6: 0.81 s (median 0.83 s, 1.24 layers/s); compile
2.1 s. The tiled direct sum (:func:`~attnflow.kernels.chunked_attend`) takes 19.1 s at n = 10^5 (257 x the
sphere path), about 1900 s at n = 10^6 by its O(n^2) (2400 x). Machine rates in the same run: float64 matmul
79 Gflop/s (2048 x 2048), exp 1.2 x 10^9/s. Under a load average of 2-4 (other jobs on the two cores) the
10^6 layer took 1.2-2 s. Where the time goes (n = 10^6, the passes timed apart): XLA:CPU runs the elementwise
recurrence on one core, 0.23 s per pass (0.43 ns per harmonic value, two passes); the moments' products (per
block 46 of (r, 4096) by (4096, 4)) add 0.09 s, the values' products (46 of (4, r) by (r, 4096): short
contractions) and their sums 0.33 s; the same flops at the matmul rate would take 0.11 s. The attention alone
at n = 10^6 in blocks of 1024, 2048, 4096, 8192 and 16384 tokens: 1.18, 1.03, 0.93-0.98, 0.92-1.01 and 1.10 s;
the cosine and sine rows in one array, fewer and larger products (concatenated diagonals), products written
as reductions, and the rolled program (3-4 x) were all slower.

**Libraries** (weighed on float64 accuracy, speed, compile time; measured where they install, same machine,
L = 22, n = 102400, load average 1.3). sphericart-jax 2.0.4 ships binaries for one jax version each
(0.6.2-0.10.1; none for the jax 0.10.2 here, where it does not import): in a throwaway environment with jax
0.10.1 its table takes 0.18 s (the whole (n, 529) table, 430 MB), or 0.052 s in blocks of 1024 inside a scan
with the moment product (0.070 s in blocks of 4096), against 0.034 s for this module's moments pass; compile
0.1-0.2 s (one library call); addition-theorem error 4e-13 (this module: the same on the same check). It
would pin jax, and its table must still be contracted in XLA. e3nn-jax 0.21.0 builds each degree from sympy
polynomials: 2.8 s for the table, 4.3 s to compile and run once (error 4e-13). s2fft 1.5.0 transforms between
harmonic coefficients and samples on fixed sampling grids; it has no evaluation at scattered points (the
moments of point masses would need a non-uniform spherical transform, which it does not provide). Hence the
recurrence here: no dependency, faster than both that install, compiled in about 2 s.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .. import _validate as v
from ..errors import InputError
from .hypersphere import (
    MAX_DEGREE,
    MAX_HARMONICS,
    _check_scale,
    _depth,
    _powers,
    _tail_goal,
    attention_inputs,
    check_harmonics,
    harmonic_total,
    hypersphere_degree,
    hypersphere_sums,
    means_from_sums,
)

__all__ = ["MAX_DEGREE", "sphere_attention", "sphere_degree", "sphere_harmonics", "sphere_kernel_coefficients",
           "sphere_tail_bound", "TOKENS_PER_HARMONIC", "HarmonicPlan", "identity_scales", "harmonic_plan",
           "head_means", "harmonic_sums", "degree_energies"]

#: tokens per block of the blocked path at most (4096 measured fastest: module docstring, "Speed")
_BLOCK = 4096
#: up to this many tokens the sums run through the rolled program (:func:`_rolled`), fast to compile
_ROLLED_MAX = 2048
#: beyond this many terms the continued-fraction bound is replaced by the Chernoff bound alone
_CF_TERMS = 200_000
#: relative margin added to the computed bound for its own rounding (a few hundred operations)
_BOUND_MARGIN = 1e-9


# -- the truncation bound and the degree ------------------------------------------------------------


def _ratio_upper_bounds(b: float, top: int, beyond: int = 41) -> np.ndarray:
    r"""Upper bounds :math:`\hat r_l \ge r_l = i_l(b)/i_{l-1}(b)`, l = 1..top (index l; entry 0 unused): the
    backward recurrence :math:`R_l = b/(2l+1 + b R_{l+1})` from :math:`R_E = 0`, kept where E - l is odd
    (two sweeps, E = top + ``beyond`` and E + 1)."""
    out = np.zeros(top + 1)
    start = top + beyond
    for end in (start, start + 1):
        r = 0.0
        for l in range(end - 1, 0, -1):
            r = b / (2 * l + 1 + b * r)
            if l <= top and (end - l) % 2 == 1:
                out[l] = r
    return out


def _log_chernoff(b: float, degree: int) -> float:
    r"""log of :math:`e^{b(\cosh s - 1)} / P_{L+1}(\cosh s)` at :math:`s = \operatorname{asinh}((L + 1)/b)`
    (module docstring), with :math:`P_{L+1}` from the three-term recurrence, rescaled as it grows."""
    s = math.asinh((degree + 1) / b)
    t = math.cosh(s)
    p_prev, p, log_scale = 1.0, t, 0.0
    for l in range(1, degree + 1):  # p = P_l(t) e^{-log_scale}, p_prev = P_{l-1}(t) e^{-log_scale}
        p_prev, p = p, ((2 * l + 1) * t * p - l * p_prev) / (l + 1)
        if p > 1e100:
            p_prev, p, log_scale = p_prev / p, 1.0, log_scale + math.log(p)
    return 2.0 * b * math.sinh(s / 2) ** 2 - (math.log(p) + log_scale)


@functools.lru_cache(maxsize=256)
def _log_tail_bounds(b: float, top: int) -> tuple[float, ...]:
    r"""log of the bound on :math:`T_L = \sum_{l > L} g_l`, L = 0..top (module docstring): the
    continued-fraction bound (the smaller) where it is cheap, else the Chernoff bound; plus the margin."""
    if b == 0:
        return (-math.inf,) * (top + 1)
    far = max(top + 1, math.ceil(b / 2)) + 40  # M: beyond it the ratios g_{l+1}/g_l <= b/(2M+3) < 1
    if far > _CF_TERMS:
        return tuple(min(0.0, _log_chernoff(b, L) + _BOUND_MARGIN) for L in range(top + 1))
    r_hat = _ratio_upper_bounds(b, far + 1)
    l = np.arange(far + 2)
    with np.errstate(divide="ignore"):
        log_g = math.log(-math.expm1(-2 * b) / (2 * b)) + np.log(2 * l + 1) + np.concatenate(
            [[0.0], np.cumsum(np.log(r_hat[1:]))])
    acc = log_g[far + 1] - math.log1p(-b / (2 * far + 3))  # the geometric tail beyond M
    tails = np.empty(far + 1)
    for j in range(far, 0, -1):  # tails[L] = log sum_{l > L} (bound of g_l)
        acc = np.logaddexp(acc, log_g[j])
        tails[j - 1] = acc
    return tuple(min(0.0, float(t) + _BOUND_MARGIN) for t in tails[: top + 1])


def sphere_tail_bound(beta: float, degree: int) -> float:
    r"""A proven upper bound on :math:`T_L = \sum_{l > L} g_l`, the tail of the kernel
    :math:`e^{\beta(t - 1)} = \sum_l g_l P_l(t)` beyond degree L = ``degree`` (module docstring: the
    continued-fraction bound, within 1e-9 of the true tail; the Chernoff bound for beta above about 4 x 10^5).
    The truncated kernel differs from the kernel by at most :math:`T_L` at every angle (:math:`|P_l| \le 1`).

    Example:
        >>> from attnflow.kernels.sphere import sphere_tail_bound
        >>> sphere_tail_bound(4.0, 22) < 2.0**-53 < sphere_tail_bound(4.0, 21)
        True
    """
    b = _check_scale("beta", beta, "the score scale of the kernel exp(beta (t - 1))")
    degree = v.check_int("degree", degree, minimum=0, meaning="the highest harmonic degree kept")
    return math.exp(_log_tail_bounds(b, degree)[degree])


def sphere_degree(beta_max: float, dtype="float64", *, tol: float | None = None) -> int:
    r"""The degree L of the sphere path: the smallest L with :func:`sphere_tail_bound` ``(beta_max, L)`` <=
    ``tol`` (default: the unit roundoff of ``dtype``, so the path is exact to rounding), for every
    :math:`\beta \le \beta_{max}` (the bound increases with beta).

    Example:
        >>> from attnflow.kernels.sphere import sphere_degree
        >>> [sphere_degree(b) for b in (1.0, 4.0, 16.0, 64.0)], [sphere_degree(b, "float32") for b in (1.0, 4.0)]
        ([14, 22, 38, 71], [8, 13])
        >>> sphere_degree(4.0, tol=1e-6)
        12
    """
    b = _check_scale("beta_max", beta_max, "an upper bound of the score scale beta")
    goal = _tail_goal(dtype, tol)
    bounds = _log_tail_bounds(b, MAX_DEGREE)
    target = math.log(goal)
    for degree, bound in enumerate(bounds):
        if bound <= target:
            return degree
    raise InputError(f"beta = {b:.6g} needs a degree above {MAX_DEGREE} for a kernel tail below {goal:.3g}; use "
                     "attnflow.kernels.chunked_attend (the tiled direct sum) for such peaked attention.")


# -- the kernel's coefficients ----------------------------------------------------------------------------


@functools.partial(jax.jit, static_argnames=("degree", "depth"))
def _coefficients(beta: Array, degree: int, depth: int) -> Array:
    dtype = beta.dtype
    orders = jnp.arange(depth, 0, -1, dtype=dtype)  # l = N .. 1

    def down(r_next, l):  # r_l = b / (2l + 1 + b r_{l+1})
        r = beta / (2 * l + 1 + beta * r_next)
        return r, r

    _, ratios = jax.lax.scan(down, jnp.zeros((), dtype), orders)
    r = ratios[::-1][:degree]  # r_1 .. r_L
    small = beta < 1e-4
    safe = jnp.where(small, 1.0, beta)
    g0 = jnp.where(small, 1 - beta + beta * beta * (2 / 3) - beta**3 / 3, -jnp.expm1(-2 * safe) / (2 * safe))
    l = jnp.arange(degree + 1, dtype=dtype)
    return g0 * (2 * l + 1) * jnp.concatenate([jnp.ones((1,), dtype), jnp.cumprod(r)])


def sphere_kernel_coefficients(beta: float | Float[Array, ""], degree: int) -> Float[Array, " L1"]:
    r"""The Legendre coefficients :math:`g_l = e^{-\beta}(2l+1)\, i_l(\beta)`, l = 0..L, of the max-subtracted
    kernel :math:`f(t) = e^{\beta(t-1)} = \sum_l g_l P_l(t)` (:math:`g_l > 0`, :math:`\sum_l g_l = 1`).

    :math:`g_0 = (1 - e^{-2\beta})/(2\beta)` and :math:`g_l = g_0 (2l+1) r_1 \cdots r_l` with the ratios
    :math:`r_l = i_l/i_{l-1}` from the backward recurrence :math:`r_l = \beta/(2l + 1 + \beta r_{l+1})`
    (stable downwards, every term positive), started at :math:`r_{N+1} = 0` far enough out (N = 2L + 40, and
    at least L + 40 beyond the next power of two of a concrete beta) that its start is forgotten to rounding:
    each coefficient has a relative error of a few units of rounding (module docstring). A traced beta takes the
    start of the largest beta whose :func:`sphere_degree` (float32 or float64) is at most L, so it is exact for
    every such beta; traceable and differentiable in beta (>= 0).

    Example:
        >>> import math
        >>> from attnflow.kernels.sphere import sphere_kernel_coefficients
        >>> g = sphere_kernel_coefficients(2.0, 1)  # i_0(b) = sinh(b)/b, i_1(b) = cosh(b)/b - sinh(b)/b^2
        >>> [round(float(a), 6) for a in g]
        [0.245421, 0.395605]
        >>> i0, i1 = math.sinh(2) / 2, math.cosh(2) / 2 - math.sinh(2) / 4
        >>> round(math.exp(-2) * i0, 6), round(3 * math.exp(-2) * i1, 6)
        (0.245421, 0.395605)
    """
    degree = v.check_int("degree", degree, minimum=0, meaning="the highest harmonic degree kept")
    v.check_real("beta", beta, "the score scale of the kernel exp(beta (t - 1)), >= 0")
    if v.is_concrete(beta) and float(beta) < 0:
        raise InputError(f"beta must be >= 0 (the score scale of the kernel exp(beta (t - 1))), got {float(beta)!r}.")
    beta = jnp.asarray(beta, jnp.result_type(beta, float))
    return _coefficients(beta, degree, _depth(degree, beta))


# -- the real spherical harmonics ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Recurrence:
    r"""Constants of the harmonics' recurrence up to degree L, by diagonal k = l - m (module docstring):
    ``c[m]`` the start :math:`\bar q_m^m`; ``a[k][m]``, ``b[k][m]`` (m = 0..L-k) the coefficients of
    :math:`\bar q_{m+k}^m = a\, z\, \bar q_{m+k-1}^m - b\, \bar q_{m+k-2}^m`; ``A``, ``B`` the same as (L, L+1)
    arrays for k = 1..L, zero for m > L - k; ``degree`` (L+1, L+1) the degree m + k of harmonic (k, m) and
    ``valid`` where it is <= L."""

    c: np.ndarray
    a: tuple
    b: tuple
    A: np.ndarray
    B: np.ndarray
    degree: np.ndarray
    valid: np.ndarray


@functools.lru_cache(maxsize=64)
def _recurrence(degree: int) -> _Recurrence:
    L, M = degree, degree + 1
    c = np.ones(M)
    for m in range(1, M):  # c_1 = sqrt(3), c_m = c_{m-1} sqrt((2m+1)/(2m))
        c[m] = c[m - 1] * math.sqrt((2 * m + 1) / (2 * m)) * (math.sqrt(2) if m == 1 else 1.0)
    a, b = [np.zeros(0)], [np.zeros(0), np.zeros(0)]
    A, B = np.zeros((L, M)), np.zeros((L, M))
    for k in range(1, M):
        m = np.arange(M - k)
        l = m + k
        a.append(np.sqrt((2 * l - 1) * (2 * l + 1) / (k * (2 * m + k))))
        A[k - 1, : M - k] = a[k]
        if k >= 2:
            b.append(np.sqrt((2 * l + 1) * (2 * m + k - 1) * (k - 1) / (k * (2 * m + k) * (2 * l - 3))))
            B[k - 1, : M - k] = b[k]
    degrees = np.arange(M)[None, :] + np.arange(M)[:, None]
    return _Recurrence(c, tuple(a), tuple(b), A, B, degrees, degrees <= L)


def _diagonals(x3: Array, degree: int) -> list[tuple[Array, Array]]:
    r"""The real harmonics of degree <= L at unit vectors x3 = (X, Y, Z) (3, B), unrolled by diagonal k = l - m:
    ``(cos_k, sin_k)`` of shapes (L+1-k, B) and (L-k, B), the rows :math:`Y^c_{m+k,m}` (m = 0..L-k) and
    :math:`Y^s_{m+k,m}` (m = 1..L-k). The fast program for large clouds: each step a small array operation,
    materialised (``optimization_barrier``) so that XLA computes each harmonic once."""
    rec = _recurrence(degree)
    const = lambda arr: jnp.asarray(arr, x3.dtype)[:, None]
    re, im = _powers(x3[0], x3[1], degree)
    Z = x3[2]
    out: list[tuple[Array, Array]] = []
    for k in range(degree + 1):
        r = degree + 1 - k
        if k == 0:
            dc, ds = const(rec.c) * re, const(rec.c[1:]) * im[1:]
        else:
            ak = const(rec.a[k])
            dc, ds = ak * Z * out[-1][0][:r], ak[1:] * Z * out[-1][1][: r - 1]
            if k >= 2:
                bk = const(rec.b[k])
                dc, ds = dc - bk * out[-2][0][:r], ds - bk[1:] * out[-2][1][: r - 1]
        out.append(jax.lax.optimization_barrier((dc, ds)))
    return out


def _harmonics(x3: Array, degree: int) -> Array:
    r"""Every real harmonic of degree <= L at unit vectors x3 (3, B): (L+1, 2, L+1, B), entry [k, 0, m] =
    :math:`Y^c_{m+k,m}`, [k, 1, m] = :math:`Y^s_{m+k,m}`, zero where m + k > L (and for the sine with m = 0).
    For checks; the sums never hold this table for more than one block."""
    M = degree + 1
    pad = lambda a, front: jnp.pad(a, ((front, M - front - a.shape[0]), (0, 0)))
    return jnp.stack([jnp.stack([pad(dc, 0), pad(ds, 1)]) for dc, ds in _diagonals(x3, degree)])


@functools.lru_cache(maxsize=64)
def _flat_order(degree: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For column c = l^2 + l + m (m = -l..l) of :func:`sphere_harmonics`: its (k = l - |m|, cos 0 / sin 1, |m|) in
    the layout of :func:`_harmonics`."""
    l = np.concatenate([np.full(2 * d + 1, d) for d in range(degree + 1)])
    m = np.concatenate([np.arange(-d, d + 1) for d in range(degree + 1)])
    return l - np.abs(m), (m < 0).astype(int), np.abs(m)


def sphere_harmonics(x: Float[Array, "n 3"], degree: int) -> Float[Array, "n H"]:
    r"""The real harmonics of degree <= L at the directions of x (n, 3): (n, (L+1)^2), column
    :math:`l^2 + l + m` for m = -l..l holding :math:`Y^c_{l,m}` (m >= 0) or :math:`Y^s_{l,|m|}` (m < 0).

    Normalised to mean square 1 over the sphere (:math:`\sqrt{4\pi}` times the orthonormal ones; the addition
    theorem :math:`\sum_m Y_{lm}(x)Y_{lm}(y) = (2l+1)P_l(\langle x, y\rangle)`), with
    :math:`Y^c_{lm} + iY^s_{lm} = \bar P_l^m(\cos\theta)e^{im\varphi}`: the polynomials in (x, y, z) of the
    recurrence above (module docstring), evaluated at :math:`x/\|x\|`. Traceable and differentiable (along the
    sphere, derivatives of the polynomials: exact at the poles too). O(n L^2) memory: for checks, quadrature
    tables and small clouds.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.kernels.sphere import sphere_harmonics
        >>> Y = sphere_harmonics(jnp.array([[0.0, 0.6, 0.8]]), 1)     # 1, sqrt(3) (y, z, x)
        >>> [round(float(a), 5) for a in Y[0]]
        [1.0, 1.03923, 1.38564, 0.0]
    """
    degree = v.check_int("degree", degree, minimum=0, meaning="the highest harmonic degree kept")
    shape = v.check_array("x", x, "points (n, 3) of the sphere S^2", ranks=(2,))
    if shape[1] != 3:
        raise InputError(f"x must be points (n, 3) of the sphere S^2, got shape {shape}.")
    return _harmonic_table(v.as_float(x), degree)


@functools.partial(jax.jit, static_argnames=("degree",))
def _harmonic_table(x: Array, degree: int) -> Array:
    """:func:`sphere_harmonics` through the rolled program (:func:`_rolled`: one loop body, fast to compile)."""
    x3 = (x / jnp.sqrt(jnp.sum(x * x, axis=1, keepdims=True))).T
    none = jnp.zeros((degree + 1, 0), x3.dtype)
    cos, sin = _rolled(x3, degree, lambda _, cn, sn: (cn, sn), (none[0], none[1:]))  # (k, m, n) each
    k, kind, m = _flat_order(degree)
    size = degree + 1
    table = jnp.stack([cos, sin], axis=1).reshape(2 * size * size, -1)  # rows (k, kind, m)
    # int32 positions through take: NumPy int64 indices fail when float64 mode is switched on after a first trace
    return jnp.take(table, jnp.asarray((k * 2 + kind) * size + m, jnp.int32), axis=0).T


# -- the O(n L^2) sums ----------------------------------------------------------------------------------------


def _weights(x3: Array, w: Array) -> Array:
    """(B, 4): the weights :math:`w_j (1, x_j)` of the moments."""
    return jnp.stack([w, w * x3[0], w * x3[1], w * x3[2]], axis=1)


def _unrolled_moments(x3: Array, w: Array, degree: int) -> Array:
    r""":math:`\sum_j w_j Y_h(x_j) (1, x_j)` over the tokens of x3 (3, B) with weights w (B,), as (L+1, 2, L+1, 4)
    in the layout of :func:`_harmonics`, by :func:`_diagonals` (one small matrix product per diagonal)."""
    W = _weights(x3, w)
    M = degree + 1
    pad = lambda a, front: jnp.pad(a, ((front, M - front - a.shape[0]), (0, 0)))
    return jnp.stack([jnp.stack([pad(dc @ W, 0), pad(ds @ W, 1)]) for dc, ds in _diagonals(x3, degree)])


def _unrolled_values(x3: Array, C: Array, degree: int) -> Array:
    r""":math:`\sum_h C_h Y_h(x_i)` at the tokens of x3 (3, B), C (L+1, 2, L+1, 4) in the layout of
    :func:`_harmonics`: (4, B), by :func:`_diagonals`."""
    total = None
    for k, (dc, ds) in enumerate(_diagonals(x3, degree)):
        r = degree + 1 - k
        term = C[k, 0, :r].T @ dc
        if r > 1:
            term = term + C[k, 1, 1:r].T @ ds
        total = term if total is None else total + term
    return total


def _rolled(x3: Array, degree: int, step_fn, init):
    r"""The harmonics of x3 (3, B) by diagonal as a ``lax.scan`` over k = 1..L (arrays (L+1, B) of the cosine and
    sine rows, zero for m > L - k): ``step_fn(k_inputs, cos_k, sin_k)`` is called on every diagonal (k = 0
    included, with ``init`` the inputs of k = 0) and its outputs stacked. The small program (one loop body, fast to
    compile) that small clouds run through; it computes zeros where the unrolled program skips them."""
    rec = _recurrence(degree)
    const = lambda arr: jnp.asarray(arr, x3.dtype)
    re, im = _powers(x3[0], x3[1], degree)
    c0 = const(rec.c)[:, None]
    first = (c0 * re, c0 * im)
    Z = x3[2]

    def step(carry, inputs):
        (c1, s1), (c2, s2) = carry
        a, b, extra = inputs
        az, b = a[:, None] * Z, b[:, None]
        cn, sn = az * c1 - b * c2, az * s1 - b * s2
        return ((cn, sn), (c1, s1)), step_fn(extra, cn, sn)

    zero = jnp.zeros_like(first[0])
    _, rest = jax.lax.scan(step, (first, (zero, zero)), (const(rec.A), const(rec.B), init[1]))
    return jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a[None], b]), step_fn(init[0], *first), rest)


def _rolled_moments(x3: Array, w: Array, degree: int) -> Array:
    """:func:`_unrolled_moments` through :func:`_rolled`."""
    W = _weights(x3, w)
    none = jnp.zeros((degree + 1, 0), x3.dtype)
    return _rolled(x3, degree, lambda _, cn, sn: jnp.stack([cn @ W, sn @ W]), (none[0], none[1:]))


def _rolled_values(x3: Array, C: Array, degree: int) -> Array:
    """:func:`_unrolled_values` through :func:`_rolled`."""
    terms = _rolled(x3, degree, lambda Ck, cn, sn: Ck[0].T @ cn + Ck[1].T @ sn, (C[0], C[1:]))
    return jnp.sum(terms, axis=0)


def _sums(x3: Array, degree: int, coef: Array, block: int | None) -> Array:
    r"""(D, N) of every token, (4, n): the moments :math:`S_h = \sum_j Y_h(x_j)(1, x_j)`, then
    :math:`\sum_h c_h Y_h(x_i) S_h` at every token. ``block`` None: the rolled program on all tokens at once
    (small clouds). Else the unrolled program over blocks of ``block`` tokens: a scan over the blocks for the
    moments (the last block padded with tokens of weight 0) and a map over the same blocks for the values,
    each block's harmonics computed again (never an (n, L^2) table; reverse mode recomputes them as well,
    ``jax.checkpoint``)."""
    n = x3.shape[1]
    if block is None:
        S = _rolled_moments(x3, jnp.ones_like(x3[0]), degree)
        return _rolled_values(x3, coef * S, degree)
    S, xb = _blocked_moments(x3, jnp.ones_like(x3[0]), degree, block)
    values = jax.checkpoint(functools.partial(_unrolled_values, degree=degree), prevent_cse=False)
    C = coef * S
    out = jax.lax.map(lambda xx: values(xx, C), xb)  # (blocks, 4, block)
    return out.transpose(1, 0, 2).reshape(4, xb.shape[0] * xb.shape[2])[:, :n]


def _blocked_moments(x3: Array, w: Array, degree: int, block: int) -> tuple[Array, Array]:
    """The moments of :func:`_unrolled_moments` summed over blocks of at most ``block`` tokens (a scan; the last
    block padded with tokens of weight 0 at the north pole, finite everywhere), and the blocks (blocks, 3, B)."""
    n = x3.shape[1]
    blocks = -(-n // block)
    block = -(-n // blocks)  # the fewest blocks of at most ``block`` tokens, as equal as can be
    pad = blocks * block - n
    xp = jnp.concatenate([x3, jnp.zeros((3, pad), x3.dtype).at[2].set(1)], axis=1) if pad else x3
    wp = jnp.concatenate([w, jnp.zeros((pad,), w.dtype)]) if pad else w
    xb = xp.reshape(3, blocks, block).transpose(1, 0, 2)
    wb = wp.reshape(blocks, block)
    moments = jax.checkpoint(functools.partial(_unrolled_moments, degree=degree), prevent_cse=False)
    shape = (degree + 1, 2, degree + 1, 4)
    S, _ = jax.lax.scan(lambda acc, blk: (acc + moments(*blk), None), jnp.zeros(shape, x3.dtype), (xb, wb))
    return S, xb


def degree_energies(x: Float[Array, "n 3"], degree: int, weights: Float[Array, " n"] | None = None
                    ) -> Float[Array, " L1"]:
    r"""The energy of each degree l = 0..L of the measure :math:`\mu = \sum_j w_j \delta_{\hat x_j}` on S^2
    (default weights 1/n): :math:`E_l = \sum_{m} \big(\int Y_{lm}\, d\mu\big)^2` over the real harmonics of
    degree l, orthonormal for the uniform probability on the sphere (:func:`sphere_harmonics`), so
    :math:`E_l = \sum_{i,j} w_i w_j (2l+1) P_l(\langle \hat x_i, \hat x_j\rangle)`: 0 for l >= 1 under the
    uniform measure, 2l + 1 for a point mass, about (2l+1)/n for n independent uniform tokens. O(n L^2) time in
    blocks of 4096 tokens, O(L^2) memory; traceable.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from attnflow.kernels.sphere import degree_energies
        >>> [round(float(e), 4) for e in degree_energies(jnp.array([[0.0, 0.0, 1.0], [0.0, 0.0, -1.0]]), 3)]
        [1.0, 0.0, 5.0, 0.0]
    """
    degree = v.check_int("degree", degree, minimum=0, meaning="the highest harmonic degree L")
    shape = v.check_array("x", x, "tokens (n, 3) on the sphere S^2", ranks=(2,))
    if shape[1] != 3 or not shape[0]:
        raise InputError(f"x must be tokens (n, 3) on the sphere S^2, at least one, got shape {shape}.")
    x = v.as_float(x)
    if weights is None:
        weights = jnp.full((shape[0],), 1.0 / shape[0], x.dtype)
    elif v.check_array("weights", weights, "one weight per token (n,)", ranks=(1,)) != (shape[0],):
        raise InputError(f"weights must hold one weight per token, shape ({shape[0]},), got {jnp.shape(weights)}.")
    return _degree_energies(x, jnp.asarray(weights, x.dtype), degree)


@functools.partial(jax.jit, static_argnames=("degree",))
def _degree_energies(x: Array, w: Array, degree: int) -> Array:
    x3 = (x / jnp.sqrt(jnp.sum(x * x, axis=1, keepdims=True))).T
    S, _ = _blocked_moments(x3, w, degree, min(_BLOCK, x.shape[0]))
    rec = _recurrence(degree)
    squares = jnp.sum(S[..., 0] ** 2, axis=1)  # (k, m): cos^2 + sin^2 of harmonic (k, m), degree k + m
    per_degree = jnp.zeros((degree + 1,), x.dtype).at[np.minimum(rec.degree, degree)].add(
        jnp.where(rec.valid, squares, 0))
    return per_degree


def _default_block(n: int) -> int | None:
    """None (the rolled program on all tokens) up to :data:`_ROLLED_MAX` tokens, else blocks of :data:`_BLOCK`."""
    return None if n <= _ROLLED_MAX else _BLOCK


@functools.partial(jax.jit, static_argnames=("degree", "block", "depth"))
def _sphere_sums(x: Array, beta: Array, degree: int, block: int | None, depth: int) -> tuple[Array, Array]:
    r"""(D (n,), N (n, 3)) of the directions of ``x`` (module docstring): D is the row sums of the max-shifted
    exponentials :math:`\sum_j e^{\beta(\langle x_i, x_j\rangle - 1)}`, N the same sums weighted by x_j."""
    x3 = (x / jnp.sqrt(jnp.sum(x * x, axis=1, keepdims=True))).T  # the directions, (3, n)
    g = _coefficients(beta, degree, depth)
    rec = _recurrence(degree)
    per_degree = g / (2 * jnp.arange(degree + 1, dtype=x.dtype) + 1)  # g_l / (2l + 1)
    coef = jnp.where(rec.valid, per_degree[np.minimum(rec.degree, degree)], 0)[:, None, :, None]
    sums = _sums(x3, degree, coef, block)
    return sums[0], sums[1:].T


def _sphere_means(x: Array, beta: Array, degree: int, normalisation: str, block: int | None, depth: int) -> Array:
    return means_from_sums(*_sphere_sums(x, beta, degree, block, depth), beta, normalisation)


def sphere_attention(
    x: Float[Array, "n 3"],
    beta: float | Float[Array, ""],
    *,
    degree: int | None = None,
    normalisation: str = "softmax",
    _block: int | None = None,
) -> Float[Array, "n 3"]:
    r"""Attention of tokens on the unit sphere :math:`S^2` in O(n L^2): :math:`\sum_j P_{ij} x_j` with
    :math:`P_{ij} = \mathrm{softmax}_j(\beta\langle x_i, x_j\rangle)` (``"mean"``:
    :math:`e^{\beta\langle x_i, x_j\rangle}/n`), through the Legendre series of the kernel truncated at degree L (module docstring).

    ``x``: tokens (n, 3); their directions :math:`x_j/\|x_j\|` are used (exact for unit tokens; for others the
    attention of their projections onto the sphere). ``beta >= 0``: the score scale (:math:`Q^TK = \beta I`).
    ``degree``: L (static); by default :func:`sphere_degree` of a concrete ``beta`` in the tokens' dtype, so the
    result is exact to rounding (give it when beta is traced, e.g. under ``jit``, ``grad`` or ``vmap`` over beta,
    as the degree of an upper bound of beta). ``normalisation``: ``"softmax"`` or ``"mean"``. Traceable and
    differentiable in x and beta (forward and reverse mode). Up to 2048 tokens one short program (fast to
    compile); above, blocks of at most 4096 tokens, O(n L^2) work and O(n + L^2) memory. ``_block`` (private, for
    tests and benchmarks): take the blocked program with blocks of this many tokens whatever n.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from attnflow.kernels import attend
        >>> from attnflow.kernels.sphere import sphere_attention
        >>> x = jax.random.normal(jax.random.key(0), (400, 3))
        >>> x = x / jnp.linalg.norm(x, axis=1, keepdims=True)
        >>> direct = attend(4.0 * x, x, x, impl="dense")
        >>> float(jnp.abs(sphere_attention(x, 4.0) - direct).max()) < 1e-5
        True
        >>> float(jnp.abs(sphere_attention(3 * x, 4.0, normalisation="mean")
        ...               - attend(4.0 * x, x, x, impl="dense", normalisation="mean")).max()) < 1e-5
        True
    """
    x, degree = attention_inputs(x, beta, normalisation, degree, sphere="S^2 (d = 3)", fits=lambda d: d == 3,
                                 degree_of=lambda b, d, dtype: sphere_degree(b, dtype),
                                 degree_hint="sphere_degree(beta_max, dtype)")
    if _block is not None:
        _block = v.check_int("_block", _block, meaning="tokens per block of the blocked path")
    n = x.shape[0]
    block = _block if _block is not None else _default_block(n)
    return _sphere_means(x, jnp.asarray(beta, x.dtype), degree, normalisation, block, _depth(degree, beta))


# -- the attention flows' plan ------------------------------------------------------------------------

#: ``attention_impl="auto"`` takes the sphere path when n >= TOKENS_PER_HARMONIC * H, H the number of harmonics
#: of degree <= L ((L + 1)^2 on S^2): measured on a 2-core AMD EPYC (float64 and float32, beta = 1, 4, 16), the S^2
#: path is 1.1-1.9x faster than the dense sum from about 2-4 (L + 1)^2 tokens, 6-75x from 8-40 (L + 1)^2, and
#: slower below; on S^3 and S^4 (:mod:`attnflow.kernels.hypersphere`, beta = 4) 15x at 20 H and 1.7x at 3 H
#: against the tiled sum (benchmarks/NOTES.md)
TOKENS_PER_HARMONIC = 4


@dataclass(frozen=True)
class HarmonicPlan:
    """How an attention flow takes the sphere path (static): the score scale ``bound`` its degree is chosen for
    (:func:`sphere_degree` of it on S^2, :func:`~attnflow.kernels.hypersphere.hypersphere_degree` on S^(d-1), in
    the state's dtype), and whether ``"auto"`` chose it (then only above the crossover
    :data:`TOKENS_PER_HARMONIC`)."""

    bound: float
    auto: bool

    def degree(self, dtype, d: int = 3) -> int:
        """L for states of ``dtype`` on S^(d-1)."""
        return sphere_degree(self.bound, dtype) if d == 3 else hypersphere_degree(self.bound, d, dtype)

    def applies(self, n: int, d: int, dtype) -> bool:
        """Whether a field evaluation with n tokens in R^d takes the sphere path (``"auto"``: not where the
        degree would exceed :data:`MAX_DEGREE`; explicit: that refusal is raised)."""
        if d < 3:
            return False
        if not self.auto:
            return True
        try:
            degree = self.degree(dtype, d)
        except InputError:
            return False
        count = harmonic_total(d, degree)
        return count <= MAX_HARMONICS and n >= TOKENS_PER_HARMONIC * count


def identity_scales(Q, K, beta) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r"""For concrete weights (any leading axes, flattened to (h,)): the scale :math:`c = \mathrm{tr}(A)/3` of
    :math:`A = \beta Q^T K`, the norm of its part off the scaled identity :math:`\|A - cI\|_F`, and the rounding
    tolerance of that norm, :math:`16\,\epsilon\,|\beta|\,\|Q\|_F\|K\|_F` (in float64: the caller's weights in their
    own dtype are checked at their own rounding by the caller).

    Example:
        >>> import numpy as np
        >>> from attnflow.kernels.sphere import identity_scales
        >>> c, off, tol = identity_scales(np.eye(3), 2 * np.eye(3), 1.5)
        >>> float(c[0]), float(off[0])
        (3.0, 0.0)
    """
    Q, K = np.asarray(Q, np.float64), np.asarray(K, np.float64)
    lead = np.broadcast_shapes(Q.shape[:-2], np.shape(beta))
    b = np.broadcast_to(np.asarray(beta, np.float64), lead)
    A = (np.einsum("...mi,...mj->...ij", Q, K) * b[..., None, None]).reshape(-1, Q.shape[-1], K.shape[-1])
    c = np.trace(A, axis1=-2, axis2=-1) / A.shape[-1]
    off = np.sqrt(np.sum((A - c[:, None, None] * np.eye(A.shape[-1])) ** 2, axis=(-2, -1)))
    scale = (np.abs(b) * np.sqrt(np.sum(Q * Q, axis=(-2, -1)) * np.sum(K * K, axis=(-2, -1)))).reshape(-1)
    return c, off, scale


def harmonic_plan(w, attention_impl: str, *, mask=None, unit_tokens: bool = False, owner: str,
                  relative: bool = False) -> HarmonicPlan | None:
    r"""Whether the sphere path (``attention_impl="harmonic"``) applies, and how: every rule in one place.

    * ``"harmonic"`` (explicit) applies in the raw picture to one set of concrete weights for every layer, in
      d = 3, without a mask or query/key biases (a value bias is fine), with :math:`\beta Q^T K = c\,I` and
      :math:`c \ge 0` for every head and member of a batch (to 16 units of rounding of the product). Where a rule
      fails it is an :class:`InputError` sentence. The path attends with the tokens' directions (exact for unit
      tokens: :func:`~attnflow.dynamics.sphere_flow`, the layer stepper with ``sphere_shift``).
    * ``"auto"`` takes it only for unit tokens (``unit_tokens``), where every rule above holds, and only above
      the crossover :data:`TOKENS_PER_HARMONIC` (:meth:`HarmonicPlan.applies`); otherwise None.

    Traced weights (inside jit / vmap / grad) are refused by ``"harmonic"`` (the degree is chosen from the
    concrete scale) and never taken by ``"auto"``: build the field outside the transformation.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow import AttentionWeights
        >>> from attnflow.kernels.sphere import harmonic_plan
        >>> w = AttentionWeights(jnp.eye(3), jnp.eye(3), jnp.eye(3), beta=4.0)
        >>> harmonic_plan(w, "harmonic", owner="AttentionFlow"), harmonic_plan(w, "auto", owner="AttentionFlow")
        (HarmonicPlan(bound=4.0, auto=False), None)
        >>> harmonic_plan(w, "auto", unit_tokens=True, owner="sphere_flow")
        HarmonicPlan(bound=4.0, auto=True)
    """
    explicit = attention_impl == "harmonic"
    if not (explicit or (attention_impl == "auto" and unit_tokens)):
        return None
    reason = None
    if relative:
        reason = (f"{owner} computes scores of the rescaled tokens e^(tV) z, which leave the sphere; use the raw "
                  "picture (AttentionFlow, sphere_flow)")
    elif "layer" in w.axes:
        reason = "it takes one set of weights for every layer, these have a 'layer' axis"
    elif w.d < 3:
        reason = (f"the sphere path is for tokens on S^(d-1) with d >= 3 (the circle has the Fourier path, "
                  f"attention_impl='fourier'), these weights act on d = {w.d}")
    elif mask is not None:
        reason = "a mask breaks the zonal structure of the scores; drop the mask or use 'chunked'"
    elif w.q_bias is not None or w.k_bias is not None:
        reason = "query/key biases break the zonal structure of the scores; use 'chunked' or 'dense'"
    elif v.is_traced(w.Q, w.K, w.beta):
        reason = (f"{owner} got traced weights (jit/vmap/grad), and the degree is chosen from their concrete score "
                  "scale; build the field outside the transformation (a batch over tokens or V only is fine)")
    if reason is None:
        c, off, scale = identity_scales(w.Q, w.K, w.beta)
        tol = 16 * float(np.finfo(np.dtype(w.dtype)).eps) * scale
        bad = np.flatnonzero(~(off <= tol) | ~(c >= 0))
        if bad.size:
            i = int(bad[0])
            where = f" (index {i} of the flattened heads / batch)" if c.size > 1 else ""
            reason = (f"it needs beta Q^T K = c I with c >= 0 (then the scores of unit tokens are c <x_i, x_j>), but "
                      f"it has c = {c[i]:.3g} and a part off the identity of norm {off[i]:.3g}{where}")
    if reason is not None:
        if explicit:
            raise InputError(f"attention_impl='harmonic' does not apply here: {reason}.")
        return None
    bound = float(c.max())
    try:
        degree = HarmonicPlan(bound, auto=False).degree(w.dtype, w.d)
        if w.d > 3:
            check_harmonics(w.d, degree)
    except InputError:
        if explicit:
            raise
        return None
    return HarmonicPlan(bound, auto=not explicit)


def head_means(x: Float[Array, "n d"], scales: Float[Array, " h"], plan: HarmonicPlan, normalisation: str
               ) -> Float[Array, "h n d"]:
    r""":math:`\sum_j P^h_{ij}\hat x_j` for every head h of score scale :math:`c_h` (the attention flows' sphere
    path): :func:`sphere_attention` of the directions at the plan's degree, one head at a time (on S^(d-1), d > 3,
    the sums of :func:`attnflow.kernels.hypersphere.hypersphere_sums`).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from attnflow.kernels.sphere import HarmonicPlan, head_means, sphere_attention
        >>> x = jax.random.normal(jax.random.key(0), (50, 3))
        >>> out = head_means(x, jnp.array([1.0, 2.0]), HarmonicPlan(2.0, auto=False), "softmax")
        >>> out.shape, bool(jnp.allclose(out[1], sphere_attention(x, 2.0), atol=1e-6))
        ((2, 50, 3), True)
    """
    n, d = x.shape
    degree = plan.degree(x.dtype, d)
    if d == 3:
        depth = _depth(degree, plan.bound)
        block = _default_block(n)
        means = lambda c: _sphere_means(x, c, degree, normalisation, block, depth)
    else:
        def means(c):
            return means_from_sums(*hypersphere_sums(x, c, degree, bound=plan.bound), c, normalisation)
    return jax.lax.map(means, jnp.asarray(scales, x.dtype).reshape(-1))


def harmonic_sums(x: Float[Array, "n d"], beta, plan: HarmonicPlan) -> tuple[Float[Array, " n"], Float[Array, "n d"]]:
    r"""(D, N) of one score scale ``beta`` at the plan's degree: the row sums of the max-shifted exponentials
    :math:`D_i = \sum_j e^{\beta(\langle\hat x_i, \hat x_j\rangle - 1)}` and
    :math:`N_i = \sum_j e^{\beta(\langle\hat x_i, \hat x_j\rangle - 1)}\hat x_j` (the identity sphere's field and its row sums).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from attnflow.kernels.sphere import HarmonicPlan, harmonic_sums
        >>> x = jax.random.normal(jax.random.key(0), (50, 3))
        >>> x = x / jnp.linalg.norm(x, axis=1, keepdims=True)
        >>> D, N = harmonic_sums(x, 3.0, HarmonicPlan(3.0, auto=False))
        >>> bool(jnp.allclose(D, jnp.exp(3.0 * (x @ x.T - 1)).sum(1), rtol=1e-5))
        True
    """
    degree = plan.degree(x.dtype, x.shape[1])
    if x.shape[1] != 3:
        return hypersphere_sums(x, beta, degree, bound=plan.bound)
    block = _default_block(x.shape[0])
    return _sphere_sums(x, jnp.asarray(beta, x.dtype), degree, block, _depth(degree, plan.bound))
