r"""Attention on the circle in O(n K): the kernel is a convolution, and its Fourier series is short.

On the circle (d = 2) write the tokens as :math:`z_j = e^{i\theta_j}`. When
:math:`\beta Q^T K = \begin{pmatrix} p & -q \\ q & p \end{pmatrix}` is a scaled rotation
(Q = K = I: p = beta, q = 0), the scores depend on the angle differences only,

.. math::  s_{ij} = \beta\langle Q x_i, K x_j\rangle = p\cos\varphi_{ij} + q\sin\varphi_{ij}
           = a\cos(\varphi_{ij} - \alpha), \qquad \varphi_{ij} = \theta_i - \theta_j,\quad
           a = \sqrt{p^2 + q^2},\ \alpha = \operatorname{atan2}(q, p).

With the max-subtracted kernel :math:`f(\varphi) = e^{a\cos(\varphi - \alpha) - a}` (so
:math:`0 < f \le 1`) and its Fourier coefficients
:math:`c_m = e^{-im\alpha} g_m`, :math:`g_m = e^{-a} I_m(a)` (modified Bessel functions;
:math:`g_m > 0`, :math:`\sum_m g_m = 1`), the moments :math:`S_m = \sum_j \bar z_j^m` give

.. math::  D_i = \sum_j f(\varphi_{ij}) = \sum_m c_m z_i^m S_m, \qquad
           N_i = \sum_j f(\varphi_{ij})\, z_j = \sum_m c_m z_i^m S_{m-1},

and :math:`\sum_j P_{ij} z_j = N_i / D_i` (softmax) or :math:`e^a N_i / n` (``"mean"``,
:math:`P_{ij} = e^{s_{ij}}/n`). The sums run over :math:`|m| \le K`; the moments cost O(n K),
the evaluation at every token (three polynomials of degree K in :math:`z_i`, Clenshaw's recurrence)
O(n K), instead of the O(n^2) of the direct sum.

**Truncation bound.** For every K,

.. math::  T_K = \sum_{|m| > K} g_m \le \min\Big(
           2 e^{-a} \frac{(a/2)^{K+1}}{(K+1)!}\, \frac{e^{a^2/(4(K+2))}}{1 - a/(2(K+2))},\;
           2 e^{-(K+1)t + a(\cosh t - 1)}\Big), \quad t = \operatorname{asinh}\frac{K+1}{a}

(the first where :math:`a < 2(K+2)`). Proof of the first, from
:math:`I_m(a) = \sum_k (a/2)^{2k+m}/(k!(k+m)!)`: termwise, :math:`(k+m+1)! \ge (m+1)(k+m)!`
gives :math:`I_{m+1} \le \frac{a}{2(m+1)} I_m`, so the tail beyond K is at most
:math:`I_{K+1}/(1 - \frac{a}{2(K+2)})`, and :math:`(k+m)! \ge m!(m+1)^k` gives
:math:`I_m(a) \le \frac{(a/2)^m}{m!} e^{a^2/(4(m+1))}`; the factor 2 counts m < 0
(:math:`g_{-m} = g_m`). Proof of the second (Chernoff): from the generating function
:math:`\sum_m g_m w^m = e^{\frac a2 (w + 1/w) - a}` at :math:`w = e^t`,
:math:`\sum_{m > K} g_m \le \sum_m g_m e^{t(m - K - 1)} = e^{-(K+1)t + a(\cosh t - 1)}` for every
t > 0, and t above minimises it. Both bounds increase with a, so a K chosen for
:math:`a_{max}` holds for every :math:`a \le a_{max}`.

**Coefficients.** :func:`kernel_coefficients` takes an FFT of M samples of f (M a power of two,
:math:`M \ge 2K + 2`): the m-th output is :math:`\sum_l c_{m + lM}`, whose aliased terms have
:math:`|m + lM| \ge M - K > K`, so for :math:`|m| \le K` together they are at most
:math:`T_K` (each :math:`|m'| > K` aliases onto at most one :math:`|m| \le K`). Truncation and
aliasing change the kernel by at most :math:`2T_K` at every angle (relative to its maximum, 1):
:func:`fourier_modes` picks the smallest K with :math:`2T_K` below the dtype's unit roundoff,
so the path is exact to rounding. Traceable and differentiable in (p, q).

**Rounding.** Every term is bounded by :math:`\sum_m g_m |S_m| \le n` (in units of the kernel's
maximum), so the absolute rounding error of D and N is O(n K u), u the unit roundoff. The token
itself adds :math:`f(-\alpha) = e^{-a(1-\cos\alpha)}` to :math:`D_i`, so the result's relative error
is at most about :math:`n K u / D_i \le n K u\, e^{a(1-\cos\alpha)}`: n K u for :math:`\alpha = 0`
(:math:`Q^T K = cI`, c > 0), far less where a token attends to a sizeable part of the cloud
(:math:`D_i \sim n`). Where :math:`a(1-\cos\alpha)` is large (repulsive scores,
:math:`\alpha = \pi`, in a clustered cloud) the error grows by that factor; ``"auto"`` avoids
such weights (:data:`AUTO_MAX_LOSS`).

**Evaluation.** Up to a few thousand tokens, and for derivatives, the sums use tables of the powers
:math:`z_j^m` and matrix products (short programs, fast to compile); above, the moments are a
Chebyshev recurrence over blocks of tokens and the polynomials Clenshaw's recurrence over blocks (both
vectorised loops of XLA:CPU, no (n, K) table in memory; on the circle both take two real operations per
part and degree where a complex product takes three, 1.2x and 1.5x faster than the product recurrence and
Horner's rule at 10^6 float64 tokens on a 2-core AMD EPYC).

**Derivatives** (forward and reverse mode, in the tokens, beta and the weights). The scores depend
on Q, K only through the rotation part of :math:`\beta Q^T K`; the non-rotation part R (zero to
rounding, checked) is dropped from the values but kept to first order in the tangent
(:math:`ds_{ij} = \mathrm{Re}(w z_i z_j)` for :math:`dR`, a sum with
:math:`E_i = \sum_j f_{ij} z_j^2`), so gradients in every direction of Q and K equal those of the
direct sum. Reverse mode keeps O(n K) numbers per evaluation (the power tables).

**Tokens off the circle.** The path computes the attention of the directions
:math:`x_j/\|x_j\|` (it reads only the angles): exact for unit tokens, and for tokens off the
circle the attention of their projections onto it.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .. import _validate as v
from ..errors import InputError

__all__ = ["tail_bound", "fourier_modes", "kernel_coefficients", "rotation_part", "directions", "circle_attention",
           "FourierPlan", "plan", "score_rotations", "concrete_scale", "MAX_MODES", "TOKENS_PER_MODE", "AUTO_MAX_LOSS",
           "UNIT_TOLERANCE", "power_sums"]

#: the most modes the path takes (scores a up to about 3000 in float64); beyond, the kernel is so
#: peaked that the tiled direct sum is the better tool
MAX_MODES = 512
#: ``attention_impl="auto"`` takes the Fourier path when n >= TOKENS_PER_MODE * (K + 1): about where it
#: overtakes the dense direct sum on XLA:CPU (float64, K = 22: even at n = 64, 1.8x faster at n = 256;
#: benchmarks/bench_meanfield.py, crossover rows)
TOKENS_PER_MODE = 4
#: ``"auto"`` takes the Fourier path only where the token itself guarantees :math:`D_i \ge 1/2`,
#: i.e. :math:`a(1 - \cos\alpha) \le \log 2` (module docstring, "Rounding")
AUTO_MAX_LOSS = math.log(2.0)
#: the rotation check: the non-rotation part of :math:`\beta Q^T K` may be this many units of
#: rounding of its entries (:math:`\epsilon\,|\beta|\,\|Q\|_F\|K\|_F`)
_ROTATION_ULPS = 16
#: tokens per block of the moment sums (a block's powers stay in cache; of 8192, 16384, 25000 and 50000 tokens
#: this was the fastest at n = 10^5 .. 10^7 in float64 and at 10^6 in float32 on a 2-core AMD EPYC)
_BLOCK = 25000
#: tokens per block of the evaluation
_EVAL_BLOCK = 65536
#: up to this many tokens the sums run through power tables (:func:`_power_table`): a program that compiles
#: in about half the time of the unrolled chains, which are faster only where the cloud is large
_TABLE_MAX = 4096
#: Clenshaw's recurrence is one unrolled chain up to this many coefficients, beyond it a scan over unrolled
#: pieces of _PIECE (longer unrolled chains compile into slower XLA:CPU code)
_UNROLLED = 48
_PIECE = 32


# -- the truncation bound and the number of modes ----------------------------------------------


def _log_tail_bound(a: float, modes: int) -> float:
    """log of the bound on :math:`T_K = \\sum_{|m|>K} g_m` (module docstring)."""
    if a == 0:
        return -math.inf
    k1 = modes + 1
    t = math.asinh(k1 / a)
    chernoff = math.log(2.0) - k1 * t + a * (math.cosh(t) - 1.0)
    rho = a / (2.0 * (modes + 2))
    if rho >= 1:
        return chernoff
    series = (math.log(2.0) - a + k1 * math.log(a / 2.0) - math.lgamma(k1 + 1) + a * a / (4.0 * (modes + 2))
              - math.log1p(-rho))
    return min(series, chernoff)


def tail_bound(a: float, modes: int) -> float:
    r"""An upper bound on :math:`T_K = \sum_{|m| > K} e^{-a} I_m(a)`, the Fourier tail of the
    max-subtracted kernel :math:`e^{a(\cos\varphi - 1)}` beyond K = ``modes`` (proof in the module
    docstring; increasing in a).

    Example:
        >>> from attnflow.kernels.fourier import tail_bound
        >>> tail_bound(4.0, 22) < 2.0**-54 < tail_bound(4.0, 21)
        True
    """
    a = float(a)
    if not math.isfinite(a) or a < 0:
        raise InputError(f"a must be a finite score scale >= 0, got {a!r}.")
    return math.exp(_log_tail_bound(a, int(modes)))


def _unit_roundoff(dtype) -> float:
    return float(np.finfo(np.dtype(dtype)).eps) / 2


@functools.lru_cache(maxsize=256)
def _modes(a: float, tol: float) -> int | None:
    target = math.log(tol / 2)
    for modes in range(MAX_MODES + 1):
        if _log_tail_bound(a, modes) <= target:
            return modes
    return None


def fourier_modes(a_max: float, dtype="float64", *, tol: float | None = None) -> int:
    r"""The number of Fourier modes K of the kernel :math:`e^{a(\cos\varphi - 1)}`: the smallest K with
    :math:`2\,T_K(a_{max}) \le` ``tol`` (:func:`tail_bound`: truncation and aliasing, relative to the kernel's
    maximum 1), for every score scale :math:`a \le a_{max}`. The default ``tol`` is the unit roundoff of
    ``dtype``: the Fourier path with K modes is then exact to rounding. The one rule for K: the attention's
    Fourier path and the mean field's Fourier energy (:func:`attnflow.meanfield.interaction_energy_fourier`,
    with its own tolerance) ask it.

    Example:
        >>> from attnflow.kernels.fourier import fourier_modes
        >>> [fourier_modes(a) for a in (1.0, 4.0, 16.0, 100.0)], fourier_modes(4.0, "float32")
        ([14, 22, 38, 89], 13)
        >>> fourier_modes(4.0, tol=1e-6)
        12
    """
    a = float(a_max)
    if not math.isfinite(a) or a < 0:
        raise InputError(f"a_max must be a finite bound >= 0 on the score scale beta |c|, got {a_max!r}.")
    name = np.dtype(dtype).name
    if tol is None:
        goal = _unit_roundoff(name)
    else:
        goal = float(tol)
        if not 0 < goal < 1:
            raise InputError(f"tol must be a tolerance in (0, 1) on the kernel's tail (relative to its maximum), "
                             f"got {tol!r}.")
    modes = _modes(a, goal)
    if modes is None:
        if tol is None:
            raise InputError(f"scores up to a = {a:.6g} need more than {MAX_MODES} Fourier modes in {name}; use "
                             "attention_impl='chunked' (the tiled direct sum) for such peaked attention.")
        raise InputError(f"a = {a:.6g} needs more than {MAX_MODES} Fourier modes for a tail below {goal:.3g}.")
    return modes


# -- the kernel's coefficients -------------------------------------------------------------------


def _grid_size(modes: int) -> int:
    """M: the smallest power of two >= 2K + 2."""
    return 1 << max(1, (2 * modes + 1).bit_length())


def kernel_coefficients(p: Float[Array, "*h"], q: Float[Array, "*h"], modes: int, grid: int | None = None
                        ) -> tuple[Float[Array, "*h K1"], Float[Array, "*h K1"]]:
    r"""Real and imaginary parts of :math:`c_m`, m = 0..K, of :math:`f(\varphi) = e^{p\cos\varphi + q\sin\varphi - a}`
    (:math:`a = \sqrt{p^2+q^2}`; :math:`c_{-m} = \bar c_m`), from an FFT of f on a grid of
    M angles (default: the smallest power of two :math:`\ge 2K + 2`): exact to rounding when K =
    :func:`fourier_modes` (module docstring); a larger ``grid`` (static) pushes the aliased tail
    :math:`c_{m \pm M}` further out for any K. Traceable and differentiable in p, q (leading axes: one
    kernel per head).

    Example:
        >>> import jax.numpy as jnp
        >>> from scipy.special import ive
        >>> from attnflow.kernels.fourier import kernel_coefficients
        >>> re, im = kernel_coefficients(jnp.float32(2.0), jnp.float32(0.0), 10)
        >>> bool(jnp.allclose(re, ive(range(11), 2.0), atol=1e-7)), float(jnp.abs(im).max()) < 1e-7
        (True, True)
    """
    M = _grid_size(int(modes)) if grid is None else int(grid)
    if M < 2 * int(modes) + 2:
        raise InputError(f"grid = {M} angles cannot resolve modes 0..{modes}: give at least 2 * modes + 2.")
    p, q = jnp.asarray(p), jnp.asarray(q)
    dtype = jnp.result_type(p, q, float)
    phi = jnp.arange(M, dtype=dtype) * (2 * math.pi / M)
    a = jax.lax.stop_gradient(jnp.sqrt(p * p + q * q))  # the maximum of the scores: subtracted, never differentiated
    f = jnp.exp(p[..., None] * jnp.cos(phi) + q[..., None] * jnp.sin(phi) - a[..., None])
    c = jnp.fft.rfft(f, axis=-1)[..., : modes + 1] / M
    return jnp.real(c).astype(dtype), jnp.imag(c).astype(dtype)


def rotation_part(A: Float[Array, "*h 2 2"]) -> tuple[Float[Array, "*h"], ...]:
    r"""``(p, q, u, v)`` with :math:`A = \begin{pmatrix} p & -q \\ q & p\end{pmatrix} + \begin{pmatrix} u & v \\ v & -u
    \end{pmatrix}`: a scaled rotation plus a scaled reflection R (:math:`\|R\|_2 = \sqrt{u^2+v^2}`). The scores
    :math:`x_i^T A x_j` of unit tokens are a convolution exactly when R = 0, and change by at most
    :math:`\|R\|_2` when R is dropped.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.kernels.fourier import rotation_part
        >>> [round(float(u), 6) for u in rotation_part(jnp.array([[1.0, -2.0], [2.0, 1.0]]))]
        [1.0, 2.0, 0.0, 0.0]
    """
    p = (A[..., 0, 0] + A[..., 1, 1]) / 2
    q = (A[..., 1, 0] - A[..., 0, 1]) / 2
    u = (A[..., 0, 0] - A[..., 1, 1]) / 2
    v = (A[..., 0, 1] + A[..., 1, 0]) / 2
    return p, q, u, v


# -- the O(n K) sums --------------------------------------------------------------------------------


def directions(x: Float[Array, "n 2"]) -> tuple[Float[Array, " n"], Float[Array, " n"]]:
    """(cos, sin) of the tokens' angles: the two columns of :math:`x_j/\\|x_j\\|`.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.kernels.fourier import directions
        >>> [round(float(a[0]), 6) for a in directions(jnp.array([[3.0, 4.0]]))]
        [0.6, 0.8]
    """
    r = jnp.sqrt(x[:, 0] ** 2 + x[:, 1] ** 2)
    return x[:, 0] / r, x[:, 1] / r


def power_sums(c: Float[Array, " n"], s: Float[Array, " n"], count: int) -> tuple[Float[Array, " M"], Float[Array, " M"]]:
    r"""The power sums :math:`S_m = \sum_j \bar z_j^m`, m = 0..count-1, of unit :math:`z_j = c_j + i s_j` (cosines and
    sines of the tokens' angles), as (real, imaginary) parts: the moments of the Fourier path
    (:math:`|S_m| = |\sum_j e^{im\theta_j}|`), in blocks of tokens whose powers stay in cache. O(n count); traceable.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.kernels.fourier import power_sums
        >>> re, im = power_sums(jnp.array([1.0, 0.0]), jnp.array([0.0, 1.0]), 3)   # z = 1, i
        >>> re.tolist(), [abs(a) for a in im.tolist()[::2]], im.tolist()[1]   # S_1 = 1 + conj(i) = 1 - i
        ([2.0, 1.0, 0.0], [0.0, 0.0], -1.0)
    """
    return _moments(c, s, v.check_int("count", count, meaning="the number of power sums"))


def _power_table(z: Array, count: int) -> Array:
    r""":math:`z_j^m`, m = 0..count-1, as a complex (n, count) table: the recurrence
    :math:`z^{m+1} = z^m z` as a scan (a short program that compiles fast; complex exponentials would run
    ~10x slower on XLA:CPU); relative error ~ m u."""
    _, rows = jax.lax.scan(lambda power, _: (power * z, power), jnp.ones_like(z), None, length=count)
    return rows.T


def _derivative_table(table: Array, z: Array) -> Array:
    r""":math:`m z^{m-1} = m z^m \bar z` (unit z) from the table of :math:`z^m`."""
    return table * (jnp.conj(z)[:, None] * jnp.arange(table.shape[1], dtype=table.real.dtype))


@functools.partial(jax.custom_jvp, nondiff_argnums=(2,))
def _table_moments(z: Array, w: Array, count: int) -> Array:
    r""":math:`\sum_j w_j z_j^m`, m = 0..count-1 (complex), from a power table. Its tangent is written out,
    :math:`\sum_j (m z_j^{m-1} w_j\, dz_j + z_j^m\, dw_j)`: two matrix products with the tables, which
    transpose into matrix products (autodiff through the recurrence's scan compiles into a longer program)."""
    return w @ _power_table(z, count)


@_table_moments.defjvp
def _table_moments_jvp(count, primals, tangents):
    z, w = primals
    dz, dw = tangents
    table = _power_table(z, count)
    return w @ table, (w * dz) @ _derivative_table(table, z) + dw @ table


@jax.custom_jvp
def _table_polynomials(z: Array, b: Array) -> Array:
    r""":math:`\sum_m b_{pm} z_i^m` (complex (n, P)) from a power table; tangent written out,
    :math:`\sum_m (db_{pm} z_i^m + b_{pm} m z_i^{m-1} dz_i)` (see :func:`_table_moments`)."""
    return _power_table(z, b.shape[1]) @ b.T


@_table_polynomials.defjvp
def _table_polynomials_jvp(primals, tangents):
    z, b = primals
    dz, db = tangents
    table = _power_table(z, b.shape[1])
    return table @ b.T, table @ db.T + (_derivative_table(table, z) @ b.T) * dz[:, None]


def _split(n: int, most: int, least: int = 1) -> tuple[int, int]:
    """(blocks, size) with blocks * size >= n, size <= most, blocks >= least: a divisor of n when one is near
    (no padding: padding copies the whole cloud), else the fewest blocks."""
    fewest = max(least, -(-n // most))
    for blocks in range(fewest, fewest + 64):
        if n % blocks == 0:
            return blocks, n // blocks
    return fewest, -(-n // fewest)


def _moments(c: Float[Array, " n"], s: Float[Array, " n"], count: int, rolled: bool = False) -> tuple[Array, Array]:
    r""":math:`S_m = \sum_j \bar z_j^m`, m = 0..count-1 (real, imaginary parts), in blocks of tokens whose
    powers (Chebyshev's recurrence :math:`\bar z^{m+1} = 2c\,\bar z^m - \bar z^{m-1}` per block; rounding
    grows at most like :math:`m^2 u` where :math:`\theta \to 0, \pi`, against the product recurrence's
    :math:`m u`: :math:`6 \cdot 10^{-14}` relative at m = 24 in float64) stay in cache. ``rolled``: from
    power tables (:func:`_power_table`), the small program that derivatives (and small clouds) run through."""
    n = c.shape[0]
    rolled = rolled or n <= _TABLE_MAX
    blocks, size = _split(n, _BLOCK)
    pad = blocks * size - n
    # padded tokens weigh 0; without padding no weights are read (an array of ones would be 8 bytes a token)
    parts = (c, s, jnp.ones_like(c)) if pad else (c, s)
    blocked = tuple(jnp.pad(a, (0, pad)).reshape(blocks, size) for a in parts)

    def block(cc, ss, w=None):
        w = jnp.ones_like(cc) if w is None else w
        if rolled:
            total = _table_moments(jax.lax.complex(cc, ss), w.astype(jnp.result_type(cc, 1j)), count)  # conj(S_m)
            return jnp.stack([jnp.real(total), -jnp.imag(total)], axis=-1)
        # Chebyshev's three-term recurrence zbar^{m+1} = 2c zbar^m - zbar^{m-1} (z + zbar = 2c on the circle):
        # two real operations per part and degree against a complex product's three
        two_c = cc + cc
        prev, cur = (w, jnp.zeros_like(w)), (w * cc, -w * ss)
        sums = [jnp.sum(prev[0]), jnp.sum(prev[1]), jnp.sum(cur[0]), jnp.sum(cur[1])]
        for _ in range(2, count):
            prev, cur = cur, (two_c * cur[0] - prev[0], two_c * cur[1] - prev[1])
            sums += [jnp.sum(cur[0]), jnp.sum(cur[1])]
        return jnp.stack(sums[:2 * count]).reshape(count, 2)

    if blocks == 1:
        total = block(*(a[0] for a in blocked))
    else:
        total, _ = jax.lax.scan(lambda acc, blk: (acc + block(*blk), None), jnp.zeros((count, 2), c.dtype), blocked)
    return total[:, 0], total[:, 1]


def _clenshaw(c, s, states, bre, bim):
    r"""Clenshaw's recurrence for P polynomials at once, through the coefficients given (highest degree first):
    :math:`y_k = b_{pk} + 2c\, y_{k+1} - y_{k+2}` (complex y, real 2c: two real operations per part against
    Horner's complex product), each state :math:`(y_{k+1}, y_{k+2})` (real and imaginary parts) carried on.
    On the circle :math:`z^{k+1} = 2c\, z^k - z^{k-1}`, so :math:`\sum_{m \ge 0} b_m z^m = y_0 - \bar z y_1`
    (:func:`_clenshaw_value`); its rounding stays within a few u of the sum of :math:`|b_m|` where the
    coefficients decay, as the kernel's do. XLA:CPU fuses the chains into one vectorised loop."""
    two_c = c + c
    out = []
    for p, (y1r, y1i, y2r, y2i) in enumerate(states):
        for m in range(bre.shape[-1] - 1, -1, -1):
            y1r, y1i, y2r, y2i = bre[p, m] + two_c * y1r - y2r, bim[p, m] + two_c * y1i - y2i, y1r, y1i
        out.append((y1r, y1i, y2r, y2i))
    return out


def _clenshaw_value(c, s, state):
    r""":math:`y_0 - \bar z y_1` from Clenshaw's final state :math:`(y_0, y_1)`, as (real, imaginary)."""
    y0r, y0i, y1r, y1i = state
    return y0r - c * y1r - s * y1i, y0i - c * y1i + s * y1r


def _polynomials(c: Float[Array, " n"], s: Float[Array, " n"], bre: Float[Array, "P K1"], bim: Float[Array, "P K1"],
                 rolled: bool = False) -> list[tuple[Float[Array, " n"], Float[Array, " n"]]]:
    r""":math:`\sum_{m=0}^{K} b_{pm} z^m` at every :math:`z = c + is` on the unit circle, as (real, imaginary) per
    polynomial (O(n K P), Clenshaw's recurrence: :func:`_clenshaw`); degrees beyond :data:`_UNROLLED` run as a
    scan over pieces of :data:`_PIECE`.
    ``rolled``: a power table times the coefficients (one complex matmul), for derivatives: autodiff of the
    long unrolled chains compiles for many seconds, the table's program is a few operations (and runs about
    twice as long)."""
    P, K1 = bre.shape
    if rolled or c.shape[0] <= _TABLE_MAX:
        values = _table_polynomials(jax.lax.complex(c, s), jax.lax.complex(bre, bim))  # (n, P)
        return [(jnp.real(values[:, p]), jnp.imag(values[:, p])) for p in range(P)]
    zero = jnp.zeros(c.shape, jnp.result_type(c, bre))  # the unrolled chain's promotion, also in the scan's carry
    states = [(zero, zero, zero, zero)] * P
    if K1 <= _UNROLLED:
        states = _clenshaw(c, s, states, bre, bim)
    else:
        pieces = -(-K1 // _PIECE)
        pad = pieces * _PIECE - K1
        # zero coefficients above degree K, cut into pieces, the highest degrees first; the recurrence's state
        # passes from piece to piece
        split = lambda b: jnp.pad(b, ((0, 0), (0, pad))).reshape(P, pieces, _PIECE).transpose(1, 0, 2)[::-1]
        states, _ = jax.lax.scan(lambda st, b: (_clenshaw(c, s, st, *b), None), states, (split(bre), split(bim)))
    return [_clenshaw_value(c, s, state) for state in states]


def _in_blocks(fn, c, s):
    """``fn(c, s) -> tuple of arrays`` over blocks of tokens in a ``lax.map``: the first (..., n, 2) (the means,
    the token axis second to last), the others (..., n); always at least two blocks: the loop boundary keeps XLA
    from fusing the Clenshaw chains into each of their consumers, which recomputes them (~10x the work at
    n = 10^6, and compiles for minutes under ``vmap``)."""
    n = c.shape[0]
    blocks, size = _split(n, _EVAL_BLOCK, least=2)
    pad = blocks * size - n
    # padded tokens sit at angle 0 (finite everywhere) and are cut off below
    cb = jnp.pad(c, (0, pad), constant_values=1).reshape(blocks, size)
    sb = jnp.pad(s, (0, pad)).reshape(blocks, size)
    out = jax.lax.map(lambda blk: fn(*blk), (cb, sb))

    def joined(o, trailing):  # (blocks, ..., size, *trailing) -> (..., n, *trailing)
        lead = o.shape[1:o.ndim - 1 - trailing]
        o = jnp.moveaxis(o, 0, len(lead)).reshape(lead + (blocks * size,) + o.shape[o.ndim - trailing:])
        return o[..., :n, :] if trailing else o[..., :n]

    return tuple(joined(o, int(i == 0)) for i, o in enumerate(out))


def _kernel_sums(c, s, cre, cim, S, shifts: tuple[int, ...], finish, rolled: bool = False):
    r"""``finish(sums, cb, sb)`` over blocks of tokens, where ``sums[k]`` is (re, im) of
    :math:`\sum_j f^h(\theta_i - \theta_j)\, z_j^k = \sum_{|m| \le K} c^h_m z_i^m S_{m-k}` for each k of ``shifts``
    (arrays (h, block); :math:`S_{-l} = \bar S_l`). Each sum is two polynomials,
    :math:`\sum_{m \ge 0} c_m S_{m-k} z^m + \overline{\sum_{m \ge 1} c_m S_{m+k} z^m}`; for k = 0 (real
    sums: D) one, :math:`\mathrm{Re}(c_0 S_0 + 2\sum_{m\ge1} c_m S_m z^m)`. ``finish`` returns a tuple whose first
    array is (h, block, 2) and the others (..., block) (:func:`_in_blocks`)."""
    Sre, Sim = S
    h, K1 = cre.shape
    m = np.arange(K1)

    def S_at(j):  # S_j for an index array j (negative: conjugates)
        return Sre[np.abs(j)], jnp.where(jnp.asarray(j) < 0, -1, 1) * Sim[np.abs(j)]

    cmul = lambda ar, ai, br, bi: (ar * br - ai * bi, ar * bi + ai * br)
    positive = (m > 0).astype(c.dtype)
    polys = []
    for k in shifts:
        if k == 0:
            dre, dim = cmul(cre, cim, *S_at(m))
            polys.append((dre * (1 + positive), dim * (1 + positive)))
        else:
            polys.append(cmul(cre, cim, *S_at(m - k)))
            polys.append(cmul(cre * positive, cim * positive, *S_at(m + k)))
    bre = jnp.concatenate([b[0] for b in polys])  # (P h, K+1), the polynomials in order, each for every head
    bim = jnp.concatenate([b[1] for b in polys])

    def block(cb, sb):
        chains = iter(_polynomials(cb, sb, bre, bim, rolled))
        take = lambda: [next(chains) for _ in range(h)]
        sums = {}
        for k in shifts:
            first = take()
            if k == 0:
                sums[k] = (jnp.stack([re for re, _ in first]), None)
            else:
                second = take()
                sums[k] = (jnp.stack([a[0] + b[0] for a, b in zip(first, second)]),
                           jnp.stack([a[1] - b[1] for a, b in zip(first, second)]))
        return finish(sums, cb, sb)

    # the power tables are materialised (no fusion across degrees): blocks only bound their memory
    n = c.shape[0]
    return block(c, s) if (rolled and n <= _EVAL_BLOCK) or n <= _TABLE_MAX else _in_blocks(block, c, s)


def _mean_scale(p, q, n: int):
    """e^a / n: the sums carry e^{-a} (max subtracted), "mean" attention is e^{s_ij}/n."""
    return jnp.exp(jax.lax.stop_gradient(jnp.sqrt(p * p + q * q))) / n


def _circle_sums(c, s, p, q, modes: int, normalisation: str, rolled: bool = False, with_E: bool = False):
    r""":math:`m_i = \sum_j P_{ij} z_j = N_i / D_i` (softmax; ``"mean"``: :math:`e^a N_i/n`) for every token and
    every (p, q) of the leading axis h (one head each), as (h, n, 2): moments once, then per head the
    polynomials of N (and D). ``with_E`` also returns :math:`E_i/D_i` (softmax) or :math:`(e^a/n)(E_i, D_i)`
    ("mean") with :math:`E_i = \sum_j f_{ij} z_j^2`, for the tangent of :func:`_means`, from the same pass."""
    n = c.shape[0]
    S = _moments(c, s, modes + 2 + with_E, rolled)  # S_0 .. S_{K+1} (S_{K+2})
    cre, cim = kernel_coefficients(p, q, modes)  # (h, K+1)
    shifts = (1, 0, 2) if with_E else (1, 0)
    # each block returns one complex array per sum: XLA then computes every Clenshaw chain once (two real
    # outputs sharing chains became two fusions that both ran all the chains)
    as_complex = lambda part: jax.lax.complex(*part)
    if normalisation == "softmax":
        def sums_of(sums):
            return tuple(as_complex(sums[k]) / sums[0][0] for k in shifts if k)  # N / D (and E / D)
    else:
        scale = _mean_scale(p, q, n)[:, None]
        shifts = (1, 2, 0) if with_E else (1,)

        def sums_of(sums):  # (e^a / n) times N (and E, D)
            return tuple((as_complex(sums[k]) if k else sums[k][0]) * scale for k in shifts)

    def finish(sums, cb, sb):
        # the means leave the block as (h, block, 2), split from the complex N / D inside it: splitting the whole
        # (h, n) complex array afterwards was a pass over the cloud (16 MB at 10^6 float64 tokens): the means of
        # 10^6 float64 tokens take 15-16 ms instead of 24-26 (an optimization barrier on the complex array, tried
        # to keep the chains from being run once per part, made it 100 ms)
        out = sums_of(sums)
        return (jnp.stack([jnp.real(out[0]), jnp.imag(out[0])], axis=-1),) + out[1:]

    out = _kernel_sums(c, s, cre, cim, S, shifts, finish, rolled)
    return (out[0], out[1:]) if with_E else out[0]


def _circle_means(c, s, p, q, modes: int, normalisation: str) -> Float[Array, "h n 2"]:
    """:func:`_circle_sums`: the attention means only, on the fast (unrolled) path."""
    return _circle_sums(c, s, p, q, modes, normalisation)


@functools.partial(jax.custom_jvp, nondiff_argnums=(6, 7))
def _means(c, s, p, q, u, v, modes: int, normalisation: str) -> Float[Array, "h n 2"]:
    r""":func:`_circle_means` for :math:`\beta Q^T K = \begin{pmatrix} p+u & v-q \\ q+v & p-u\end{pmatrix}` whose
    non-rotation part (u, v) is zero to rounding (it is dropped); its derivatives are exact to first order
    (:func:`_means_jvp`), so gradients with respect to Q and K are those of the direct sum."""
    return _circle_means(c, s, p, q, modes, normalisation)


@_means.defjvp
def _means_jvp(modes, normalisation, primals, tangents):
    r"""Tangent of the rotation part by autodiff, plus that of the non-rotation part R = [[u, v], [v, -u]]:
    :math:`ds_{ij} = x_i^T dR\, x_j = \mathrm{Re}(w z_i z_j)`, :math:`w = du - i\,dv` (a sum over
    :math:`\theta_i + \theta_j`, not a convolution, but its tangent is), so with
    :math:`E_i = \sum_j f_{ij} z_j^2`:
    :math:`dm_i = \sum_j P_{ij} ds_{ij}(z_j - m_i) = \frac{w z_i E_i + \bar w \bar z_i D_i}{2 D_i}
    - m_i \mathrm{Re}(w z_i m_i)` (softmax), :math:`\frac{e^a}{n}\frac{w z_i E_i + \bar w \bar z_i D_i}{2}`
    ("mean"). Derivatives run the sums through power tables (small programs, see :func:`_polynomials`), one
    pass for both parts."""
    c, s, p, q, u, v = primals
    dc, ds, dp, dq, du, dv = tangents
    sums = lambda c, s, p, q: _circle_sums(c, s, p, q, modes, normalisation, rolled=True, with_E=True)
    (out, parts), (dout, _) = jax.jvp(sums, (c, s, p, q), (dc, ds, dp, dq))
    parts = [jax.lax.stop_gradient(a) for a in parts]  # residuals of the linear tangent below
    z = jax.lax.complex(c, s)[None]  # (1, n)
    w = jax.lax.complex(du, -dv)[:, None]  # (h, 1)
    if normalisation == "softmax":
        E, m = parts[0], jax.lax.complex(out[..., 0], out[..., 1])  # E / D, N / D
        dm = (w * z * E + jnp.conj(w * z)) / 2 - m * jnp.real(w * z * m)
    else:
        E, D = parts  # times e^a / n
        dm = (w * z * E + jnp.conj(w * z) * D) / 2
    return out, dout + jnp.stack([jnp.real(dm), jnp.imag(dm)], axis=-1)


def circle_attention(
    x: Float[Array, "n 2"] | Float[Array, " n"],
    a: float | Float[Array, ""],
    alpha: float | Float[Array, ""] = 0.0,
    *,
    modes: int | None = None,
    normalisation: str = "softmax",
) -> Float[Array, "n 2"]:
    r"""Attention of tokens on the unit circle in O(n K): :math:`\sum_j P_{ij} x_j` with
    :math:`P_{ij} = \mathrm{softmax}_j(a\cos(\theta_i - \theta_j - \alpha))` (``"mean"``:
    :math:`e^{a\cos(\cdot)}/n`).

    ``x``: tokens (n, 2) (their directions are used) or angles (n,). ``a >= 0``, ``alpha``: the
    scale and shift of the scores (:math:`\beta Q^T K = a R(\alpha)`). ``modes``: K (static); by
    default :func:`fourier_modes` of a concrete ``a`` in the tokens' dtype (give it when a is traced,
    e.g. under ``vmap`` over a, as the modes of an upper bound of a). Exact to rounding (module
    docstring); traceable and differentiable in x, a and alpha.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from attnflow import softmax
        >>> from attnflow.kernels.fourier import circle_attention
        >>> th = jax.random.uniform(jax.random.key(0), (300,)) * 6.283
        >>> x = jnp.stack([jnp.cos(th), jnp.sin(th)], axis=1)
        >>> direct = softmax(3.0 * x @ x.T) @ x
        >>> float(jnp.abs(circle_attention(x, 3.0) - direct).max()) < 1e-5
        True
    """
    if normalisation not in ("softmax", "mean"):
        raise InputError(f"normalisation must be 'softmax' or 'mean', got {normalisation!r}.")
    shape = v.check_array("x", x, "tokens (n, 2) on the unit circle, or their angles (n,)", ranks=(1, 2))
    if len(shape) == 2 and shape[1] != 2:
        raise InputError(f"x must be tokens (n, 2) on the circle or angles (n,), got shape {shape}.")
    if not shape[0]:
        raise InputError("x must hold at least one token.")
    x = v.as_float(x)
    v.check_real("a", a, "the scale of the scores, a finite real scalar >= 0")
    v.check_real("alpha", alpha, "the shift of the scores, a finite real scalar")
    if modes is None:
        if v.is_traced(a):
            raise InputError("a is traced (jit/vmap/grad), so the number of Fourier modes cannot be chosen from it; "
                             "pass modes=fourier_modes(a_max, dtype) for an upper bound a_max of a.")
        modes = fourier_modes(float(a), x.dtype)
    modes = v.check_int("modes", modes, minimum=0, meaning="the number K of Fourier modes")
    if v.is_concrete(a) and float(a) < 0:
        raise InputError(f"a must be >= 0 (flip alpha by pi for negative scores), got {float(a)!r}.")
    c, s = (jnp.cos(x), jnp.sin(x)) if x.ndim == 1 else directions(x)
    a, alpha = jnp.asarray(a, x.dtype), jnp.asarray(alpha, x.dtype)
    p, q = a * jnp.cos(alpha), a * jnp.sin(alpha)
    return _circle_means(c, s, p[None], q[None], modes, normalisation)[0]


# -- the attention flows' plan ------------------------------------------------------------------------


@dataclass(frozen=True)
class FourierPlan:
    """How an attention flow takes the Fourier path (static): the score scale ``bound`` its modes are
    chosen for (:func:`fourier_modes` of it, in the state's dtype), and whether it was chosen by
    ``"auto"`` (then only above the crossover :data:`TOKENS_PER_MODE`)."""

    bound: float
    auto: bool

    def modes(self, dtype) -> int:
        """K for states of ``dtype``."""
        return fourier_modes(self.bound, dtype)

    def applies(self, n: int, dtype) -> bool:
        """Whether a field evaluation with n tokens takes the Fourier path."""
        return not self.auto or n >= TOKENS_PER_MODE * (self.modes(dtype) + 1)


def score_rotations(Q: Float[Array, "*h m 2"], K: Float[Array, "*h m 2"], beta: Float[Array, "*h"], dtype, xp=jnp
                    ) -> tuple[Array, Array, Array, Array, Array]:
    r"""``(p, q, u, v, tol)`` of :func:`rotation_part` of :math:`\beta Q^T K` for every leading index (heads, a
    batch; flattened to (h,)), and the rounding tolerance of the reflection's norm :math:`\sqrt{u^2+v^2}`,
    :math:`16\,\epsilon\,|\beta|\,\|Q\|_F\|K\|_F` (the rounding scale of forming the product). ``xp``: the
    array module (``numpy`` for concrete weights on the host)."""
    Q, K = xp.asarray(Q), xp.asarray(K)
    lead = np.broadcast_shapes(Q.shape[:-2], np.shape(beta))
    beta = xp.broadcast_to(xp.asarray(beta, Q.dtype), lead)
    A = xp.einsum("...mi,...mj->...ij", Q, K) * beta[..., None, None]
    p, q, u, v = rotation_part(A.reshape(-1, 2, 2))
    scale = xp.abs(beta) * xp.sqrt(xp.sum(Q * Q, axis=(-2, -1)) * xp.sum(K * K, axis=(-2, -1)))
    return p, q, u, v, (_ROTATION_ULPS * float(np.finfo(np.dtype(dtype)).eps) * scale).reshape(-1)


def concrete_scale(Q, K, beta, dtype, owner: str) -> tuple[float, float]:
    r"""For concrete weights (any leading axes): the largest score scale :math:`a = |\beta c|` and the largest
    :math:`a(1-\cos\alpha)`; an :class:`InputError` naming the first index whose :math:`\beta Q^T K` is
    not a scaled rotation (to rounding)."""
    arrays = (np.asarray(a, np.float64) for a in (Q, K, beta))
    p, q, u, v, tol = score_rotations(*arrays, dtype, xp=np)
    a, r = np.hypot(p, q), np.hypot(u, v)
    bad = np.flatnonzero(~(r <= tol))
    if bad.size:
        i = int(bad[0])
        where = f" (index {i} of the flattened heads / batch)" if r.size > 1 else ""
        raise InputError(
            f"{owner}(attention_impl='fourier') needs beta Q^T K to be a scaled rotation [[p, -q], [q, p]] (then the "
            f"scores of tokens on the circle are a convolution), but it has a non-rotation part of norm {r[i]:.3g}"
            f"{where} against a rotation part of norm {a[i]:.3g}; use attention_impl='chunked' or 'dense' for "
            "these weights.")
    return float(a.max()), float(np.max(a - p))


def plan(w, attention_impl: str, *, mask=None, normalisation: str = "softmax", max_score=None,
         unit_tokens: bool = False, owner: str, relative: bool = False, keeps_circle: bool | None = None,
         tokens=None) -> FourierPlan | None:
    r"""Whether the Fourier path applies, and how: every rule of the path, in one place.

    The attention flows (their constructors), :func:`attnflow.fields.build_field` (through them) and
    :func:`attnflow.simulate` (before it builds a field) all ask this function. The rules:

    * ``fourier_max_score`` (``max_score``) bounds the score scale :math:`a = |\beta c|` of
      :math:`\beta Q^T K = c R(\alpha)` and sets the number of modes. It is accepted only where the path
      can be taken: ``attention_impl="fourier"``, or ``"auto"`` on unit tokens (``unit_tokens``:
      :func:`~attnflow.dynamics.sphere_flow`); anywhere else it would do nothing, and is an
      :class:`InputError`.
    * ``"fourier"`` (explicit) applies in the raw picture (``relative`` False) to one set of weights for
      every layer, on the circle (d = 2), without a mask or query/key biases, with a scaled rotation
      :math:`\beta Q^T K` (every member of a batch); where the caller says that the integrator keeps the
      states on the circle or not (``keeps_circle``) it must (the layer stepper with ``sphere_shift``),
      and concrete ``tokens`` (the start) must lie on the unit circle to :data:`UNIT_TOLERANCE`. Where one
      rule fails it is an :class:`InputError` sentence. Traced weights need ``max_score``.
    * ``"auto"`` takes the path only on unit tokens, where every rule above holds for concrete weights
      and :math:`a(1-\cos\alpha) \le` :data:`AUTO_MAX_LOSS` (rounding, module docstring), and only above
      the crossover :data:`TOKENS_PER_MODE` (:meth:`FourierPlan.applies`); otherwise it returns None.

    ``w`` is an :class:`~attnflow.AttentionWeights` (or any object with its ``Q, K, beta, q_bias, k_bias,
    axes, d, dtype``), with any leading batch axes on Q, K and beta. Returns the :class:`FourierPlan` (its
    ``bound``: the largest a of the weights, or ``max_score``), or None where the path is not taken.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow import AttentionWeights
        >>> from attnflow.kernels.fourier import plan
        >>> w = AttentionWeights(jnp.eye(2), jnp.eye(2), jnp.eye(2), beta=3.0)
        >>> plan(w, "fourier", owner="AttentionFlow").bound, plan(w, "auto", owner="AttentionFlow")
        (3.0, None)
        >>> plan(w, "auto", unit_tokens=True, owner="sphere_flow")
        FourierPlan(bound=3.0, auto=True)
    """
    explicit = attention_impl == "fourier"
    can_take = explicit or (attention_impl == "auto" and unit_tokens)
    if max_score is not None:
        if not can_take:
            raise InputError(
                f"fourier_max_score sets the Fourier path's number of modes, which only attention_impl='fourier' (or "
                f"'auto' on unit tokens, sphere_flow) can take, got attention_impl={attention_impl!r}"
                f"{'' if attention_impl != 'auto' else ' for tokens off the sphere'}; drop fourier_max_score or set "
                "attention_impl='fourier'.")
        v.check_real("fourier_max_score", max_score, "an upper bound of the score scale |beta| |c|, a finite "
                     "real scalar >= 0", positive=False)
        if v.is_traced(max_score) or float(max_score) < 0:
            raise InputError(f"fourier_max_score must be a concrete number >= 0 (it fixes the number of Fourier "
                             f"modes), got {max_score!r}.")
        max_score = float(max_score)
    if not can_take:
        return None
    reason = _inapplicable(w, mask, owner, relative, keeps_circle, tokens)
    if reason is not None:
        if explicit:
            raise InputError(f"attention_impl='fourier' does not apply here: {reason}.")
        return None
    if v.is_traced(w.Q, w.K, w.beta):
        if not explicit:
            return None  # "auto" never guesses for weights it cannot check
        if max_score is None:
            raise InputError(
                f"{owner}(attention_impl='fourier') got traced weights (jit/vmap/grad), so it cannot choose its "
                "number of Fourier modes from them; pass fourier_max_score=, an upper bound of the score scale "
                "a = |beta| |c| for beta Q^T K = c R(alpha) (checked at run time).")
        return FourierPlan(max_score, auto=False)
    try:
        a_max, loss = concrete_scale(w.Q, w.K, w.beta, w.dtype, owner)
    except InputError:
        if explicit:
            raise
        return None
    if max_score is not None and a_max > max_score * (1 + 1e-12):
        raise InputError(f"fourier_max_score = {max_score:.6g} is below the score scale a = |beta| |c| = {a_max:.6g} "
                         "of these weights; raise it (it only sets the number of Fourier modes).")
    if not explicit and loss > AUTO_MAX_LOSS:
        return None
    bound = a_max if max_score is None else max_score
    fourier_modes(bound, w.dtype)  # refuses scales that need too many modes, before any tracing
    return FourierPlan(bound, auto=not explicit)


#: how far from the unit circle the start may be for the Fourier path (float32 rounding of a normalised x0)
UNIT_TOLERANCE = 1e-6


def _inapplicable(w, mask, owner: str, relative: bool, keeps_circle: bool | None, tokens) -> str | None:
    """Why the Fourier path cannot apply to these weights and run (None where it can); :func:`plan`'s rules."""
    if relative:
        return (f"{owner} computes scores of the rescaled tokens e^(tV) z, which leave the unit circle; use the raw "
                "picture (AttentionFlow, sphere_flow)")
    if "layer" in w.axes:
        return ("it takes one set of weights for every layer, these have a 'layer' axis; use "
                "attention_impl='chunked' (or 'auto')")
    if w.d != 2:
        return f"the Fourier path is for tokens on the circle (d = 2), these weights act on d = {w.d}"
    if mask is not None:
        return "a mask breaks the convolution structure of the scores; drop the mask or use 'chunked'"
    if w.q_bias is not None or w.k_bias is not None:
        return "query/key biases break the convolution structure of the scores; use 'chunked' or 'dense'"
    if keeps_circle is False:
        return ("it attends with tokens on the unit circle, where simulate keeps them with the layer stepper and "
                "shift='sphere' (method='euler', or EulerStepper(..., shift=sphere_shift)); for the ODE flow on the "
                "circle pass the field sphere_flow(..., attention_impl='fourier')")
    if tokens is not None and not v.is_traced(tokens):
        off = float(np.max(np.abs(np.linalg.norm(np.asarray(tokens, np.float64), axis=-1) - 1)))
        if off > UNIT_TOLERANCE:
            return (f"x0 must lie on the unit circle (|x_i| = 1 to {UNIT_TOLERANCE:g}), but a token has "
                    f"|x_i| - 1 = {off:.3g}; normalise it (attnflow.dynamics.normalise)")
    return None


def checked_scores(w, plan: FourierPlan, owner: str) -> tuple[Array, Array, Array, Array]:
    r"""(p, q, u, v) per head of the weights (:func:`score_rotations`), with run-time checks attached
    (``equinox.error_if``, inside jit too): :math:`\beta Q^T K` a scaled rotation (u, v zero to rounding), and
    its scale at most ``plan.bound``."""
    p, q, u, v, tol = score_rotations(w.Q, w.K, w.beta, w.dtype)
    a = jax.lax.stop_gradient(jnp.sqrt(p * p + q * q))
    r = jax.lax.stop_gradient(jnp.sqrt(u * u + v * v))
    slack = 1 + 8 * jnp.finfo(w.dtype).eps
    p = eqx.error_if(p, jnp.any(r > tol),
                     f"{owner}(attention_impl='fourier'): beta Q^T K is not a scaled rotation [[p, -q], [q, p]]; use "
                     "attention_impl='chunked' or 'dense' for these weights.")
    p = eqx.error_if(p, jnp.any(a > plan.bound * slack),
                     f"{owner}(attention_impl='fourier'): the score scale a = |beta| |c| exceeds fourier_max_score = "
                     f"{plan.bound:.6g}, for which the number of Fourier modes was chosen; raise fourier_max_score.")
    return p, q, u, v


def field_means(x: Float[Array, "n 2"], w, plan: FourierPlan, normalisation: str, owner: str
                ) -> Float[Array, "h n 2"]:
    r""":math:`\sum_j P^h_{ij}\, x_j/\|x_j\|` for every head h of the weights ``w``: the attention of the
    directions, exact to rounding for unit tokens; O(n K) (one set of moments for every head)."""
    c, s = directions(x)
    p, q, u, v_ = checked_scores(w, plan, owner)
    return _means(c, s, p, q, u, v_, plan.modes(jnp.result_type(x, w.dtype)), normalisation)
