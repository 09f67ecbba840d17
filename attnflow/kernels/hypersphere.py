r"""Attention on the sphere :math:`S^{d-1}`, d >= 3, in O(n H): the Gegenbauer series of the zonal kernel.

The same path as :mod:`attnflow.kernels.sphere` (S^2), for every dimension: tokens :math:`x_j` on the unit sphere
of :math:`\mathbb R^d` attend with the scores :math:`\beta\langle x_i, x_j\rangle` (:math:`Q^TK = \beta I`,
:math:`\beta \ge 0`); with the max-subtracted kernel :math:`f(t) = e^{\beta(t-1)}` every token needs
:math:`D_i = \sum_j f(\langle x_i, x_j\rangle)` and :math:`N_i = \sum_j f(\langle x_i, x_j\rangle)\,x_j`, and
:math:`\sum_j P_{ij}x_j = N_i/D_i` (softmax) or :math:`e^\beta N_i/n` (``"mean"``). A value matrix acts afterwards.

**Funk-Hecke in dimension d.** With :math:`\lambda = (d-2)/2` and the Gegenbauer polynomials
:math:`C_l^\lambda`, :math:`e^{\beta t} = \Gamma(\lambda)(\beta/2)^{-\lambda}\sum_l (l+\lambda)
I_{l+\lambda}(\beta)\, C_l^\lambda(t)`, so with :math:`P_l = C_l^\lambda / C_l^\lambda(1)` (:math:`P_l(1) = 1`,
:math:`|P_l| \le 1`)

.. math::  f(t) = \sum_l g_l\, P_l(t), \qquad g_l \propto (l + \lambda)\, I_{l+\lambda}(\beta)\,
           \frac{(2\lambda)_l}{l!} > 0, \qquad \sum_l g_l = f(1) = 1.

The ratios :math:`r_\nu = I_\nu / I_{\nu-1} = \beta/(2\nu + \beta r_{\nu+1})` come from the backward recurrence
started far out (Miller's method, as on S^2); :math:`g_{l}/g_{l-1} = \frac{l+\lambda}{l-1+\lambda}\,
r_{l+\lambda}\,\frac{l+2\lambda-1}{l}`, and :math:`g_0` is fixed by :math:`\sum_l g_l = 1` (every term positive: no
Bessel function is evaluated, and the coefficients are traceable and differentiable in beta). For d = 3
(:math:`\lambda = 1/2`) these are :func:`attnflow.kernels.sphere.sphere_kernel_coefficients` (tested to rounding).

**Truncation.** :math:`|P_l| \le 1`, so truncating at degree L changes f by at most
:math:`T_L = \sum_{l > L} g_l` at every angle. :func:`hypersphere_tail_bound` sums the computed coefficients up to
a depth M > 2 beta + 40 and bounds the rest geometrically: from :math:`r_\nu \le \beta/(2\nu)`,
:math:`g_{l+1}/g_l \le \beta\,\frac{l+2\lambda}{2(l+\lambda)(l+1)} \le \frac{\beta}{l+1} \le \frac12` beyond M.
Degrees at the unit roundoff grow slowly with d (float64, beta = 4: L = 22 for d = 3, 23 for d = 4, 24 for
d = 8; beta = 16: 38, 39, 41).

**The harmonics (Gelfand-Tsetlin), as polynomials.** A basis of the harmonics of degree l on :math:`S^{d-1}`
follows a chain :math:`l = m_d \ge m_{d-1} \ge \dots \ge m_2 \ge 0`:

.. math::  Y(x) = \prod_{k=3}^{d} \rho_k^{\,j_k}\, p^{(\nu_k)}_{j_k}\!\big(x_k / \rho_k\big)\cdot
           \sqrt2\,\{\mathrm{Re},\mathrm{Im}\}(x_1 + i x_2)^{m_2}, \qquad
           j_k = m_k - m_{k-1},\quad \nu_k = m_{k-1} + \tfrac{k-2}{2},

with :math:`\rho_k^2 = x_1^2 + \dots + x_k^2` and :math:`p^{(\nu)}_j` the Gegenbauer polynomials orthonormal for the
weight :math:`(1-t^2)^{\nu - 1/2}` relative to :math:`(1-t^2)^{(k-3)/2}` (the law of :math:`x_k` on
:math:`S^{k-1}`). Each factor :math:`h_j = \rho^j p_j(x/\rho)` is a polynomial in :math:`(x_k, \rho_k^2)` by the
homogeneous three-term recurrence

.. math::  h_{j+1} = \big(x_k\, h_j - \alpha_j\,\rho_k^2\, h_{j-1}\big) / \alpha_{j+1}, \qquad
           \alpha_j^2 = \frac{j\,(j + 2\nu - 1)}{4\,(j+\nu)(j+\nu-1)},

so every harmonic is a polynomial in the coordinates: no angle, no division, smooth everywhere, and so are its
derivatives. Normalised to mean square 1 over the sphere (the factor of level k has mean square 1 against the
level below, by the recurrence's start :math:`h_0 = (E[(1-x_k^2)^{m}])^{-1/2}` on :math:`S^{k-1}`), so the
addition theorem reads :math:`\sum_{h \in l} Y_h(x)Y_h(y) = \dim H_l\; P_l(\langle x, y\rangle)`, with
:math:`\dim H_l = \binom{l+d-1}{d-1} - \binom{l+d-3}{d-1}` (tests: against SciPy's Gegenbauer polynomials, which
also checks orthonormality: the reproducing kernel of a non-orthonormal basis is not zonal). For d = 3 this is
the basis of :mod:`attnflow.kernels.sphere`. Each level is built from the one below, one diagonal j at a time:
(L + 1)(d - 2) small array operations, whatever the number of harmonics.

**Sums and cost.** :math:`D_i \approx \sum_{l \le L}\frac{g_l}{\dim H_l}\sum_{h\in l} Y_h(x_i)\,S_h`,
:math:`S_h = \sum_j Y_h(x_j)(1, x_j)`: :math:`H = \sum_{l \le L}\dim H_l` harmonics (:math:`(L+1)^2` on S^2,
:math:`(L+1)(L+2)(2L+3)/6` on S^3, :math:`O(L^{d-1})`), O(n H d) for the moments and as much for the values,
against O(n^2 d) for the direct sum: the path pays where n is much larger than H. The tokens go in blocks of
at most :data:`BLOCK_ENTRIES` / H (a table of H harmonics by B tokens at a time, never (n, H)); the moments
accumulate in a ``lax.scan`` over the blocks, the values come from a ``lax.map`` over them, each block's
harmonics computed again (and again in reverse mode: ``jax.checkpoint``).

**Rounding.** As on S^2: :math:`\sum_{h\in l}|Y_h(x)||Y_h(y)| \le \dim H_l` (Cauchy-Schwarz and the addition
theorem), so the terms of :math:`D_i` and of each component of :math:`N_i` add up to at most n in absolute value,
and :math:`D_i \ge 1` (the token itself): absolute errors O(n H u) at worst; observed about L u relative to the
largest output (tests). The intermediate factors :math:`h_j` grow near the poles of their level (like
:math:`p_j(1)`) while the products stay bounded: the path is for the degrees :func:`hypersphere_degree` gives
(float32 up to beta of a few tens).

**Tokens off the sphere** are read through their directions :math:`x_j/\|x_j\|`, as on S^2 and the circle.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .. import _validate as v
from ..errors import InputError

__all__ = ["BLOCK_ENTRIES", "MAX_DEGREE", "MAX_HARMONICS", "check_harmonics", "harmonic_count", "harmonic_total",
           "hypersphere_attention", "hypersphere_degree",
           "hypersphere_harmonics", "hypersphere_kernel_coefficients", "hypersphere_sums", "hypersphere_tail_bound",
           "attention_inputs", "means_from_sums"]

#: the highest degree :func:`hypersphere_degree` and :func:`attnflow.kernels.sphere.sphere_degree` give (S^2,
#: float64: beta up to about 870); beyond it the kernel is so peaked that the tiled direct sum
#: (:func:`attnflow.kernels.chunked_attend`) is the better tool
MAX_DEGREE = 256
#: the most harmonics a path evaluates (a block of 64 tokens then holds 512 MiB in float64); beyond, the direct sum
#: is the cheaper tool by far (it pays from n of a few H on)
MAX_HARMONICS = 1 << 20
#: harmonic values held at once per block (H harmonics x B tokens): 2^22 (32 MiB in float64)
BLOCK_ENTRIES = 1 << 22
#: rows of harmonics at least per product of the top level (its last diagonals are grouped: products with a
#: dimension of 1 or a few rows are slow, and XLA:CPU's YNNPACK kernels crashed on such a product's gradient)
_GROUP_ROWS = 64
#: relative margin on the computed tail for its own rounding (sums of a few hundred positive terms)
_BOUND_MARGIN = 1e-9


def _check_dimension(d) -> int:
    return v.check_int("d", d, minimum=3, meaning="the dimension of the space R^d whose unit sphere S^(d-1) the "
                       "tokens live on (3 for S^2)")


def harmonic_count(d: int, degree: int) -> int:
    r"""The number of spherical harmonics of degree l on :math:`S^{d-1}`,
    :math:`\dim H_l = \binom{l+d-1}{d-1} - \binom{l+d-3}{d-1}` (2l + 1 on S^2, :math:`(l+1)^2` on S^3).

    Example:
        >>> from attnflow.kernels.hypersphere import harmonic_count
        >>> [harmonic_count(3, l) for l in range(4)], [harmonic_count(4, l) for l in range(4)]
        ([1, 3, 5, 7], [1, 4, 9, 16])
    """
    d = _check_dimension(d)
    degree = v.check_int("degree", degree, minimum=0, meaning="a harmonic degree l")
    return math.comb(degree + d - 1, d - 1) - (math.comb(degree + d - 3, d - 1) if degree >= 2 else 0)


def harmonic_total(d: int, degree: int) -> int:
    r"""The number H of spherical harmonics of degree <= L on :math:`S^{d-1}`,
    :math:`inom{L+d-1}{d-1} + inom{L+d-2}{d-1}` (the dimension of the polynomials of degree <= L restricted to
    the sphere): :math:`(L+1)^2` on S^2, :math:`(L+1)(L+2)(2L+3)/6` on S^3.

    Example:
        >>> from attnflow.kernels.hypersphere import harmonic_count, harmonic_total
        >>> harmonic_total(3, 22), harmonic_total(4, 23), sum(harmonic_count(4, l) for l in range(24))
        (529, 4900, 4900)
    """
    d = _check_dimension(d)
    degree = v.check_int("degree", degree, minimum=0, meaning="the highest harmonic degree L")
    return math.comb(degree + d - 1, d - 1) + math.comb(degree + d - 2, d - 1)


def check_harmonics(d: int, degree: int) -> int:
    """H, the harmonics of degree <= L on S^(d-1), refused in one sentence above :data:`MAX_HARMONICS`.

    Example:
        >>> from attnflow.kernels.hypersphere import check_harmonics
        >>> check_harmonics(4, 23)
        4900
    """
    count = harmonic_total(d, degree)
    if count > MAX_HARMONICS:
        raise InputError(f"the harmonic path on S^{d - 1} at degree {degree} needs {count} harmonics, more than "
                         f"{MAX_HARMONICS}; use attention_impl='chunked' (attnflow.kernels.chunked_attend, the tiled "
                         "direct sum), cheaper for every n this many harmonics could serve.")
    return count


def _powers(X: Array, Y: Array, degree: int) -> tuple[Array, Array]:
    r""":math:`\mathrm{Re}\,(X + iY)^m` and :math:`\mathrm{Im}\,(X + iY)^m`, m = 0..L, as two (L+1, B) arrays: by
    doubling, the powers c..2c-1 as the powers 0..c-1 times :math:`w^c` (a few array operations, where a chain of
    L products compiles into L small programs; each power is a product of at most :math:`2\log_2 L` factors)."""
    re, im = jnp.ones_like(X)[None], jnp.zeros_like(X)[None]
    pc, ps = X, Y  # w^c for c = the number of powers so far
    while re.shape[0] < degree + 1:
        re, im = jnp.concatenate([re, re * pc - im * ps]), jnp.concatenate([im, re * ps + im * pc])
        pc, ps = pc * pc - ps * ps, 2 * pc * ps
    return re[: degree + 1], im[: degree + 1]


# -- the kernel's coefficients and the degree -------------------------------------------------------------


def _host_log_coefficients(beta: float, lam: float, top: int) -> np.ndarray:
    """log g_l, l = 0..top, in float64 on the host (Miller ratios from far beyond ``top``; normalised by the sum)."""
    depth = top + 200 + int(2 * beta)
    nu = lam + np.arange(1, depth + 1)
    r = np.zeros(depth)
    nxt = 0.0
    for i in range(depth - 1, -1, -1):  # r_nu = b / (2 nu + b r_{nu+1})
        nxt = beta / (2 * nu[i] + beta * nxt)
        r[i] = nxt
    l = np.arange(1, depth + 1, dtype=np.float64)
    with np.errstate(divide="ignore"):
        steps = np.log((l + lam) / (l - 1 + lam)) + np.log(r) + np.log((l + 2 * lam - 1) / l)
    logs = np.concatenate([[0.0], np.cumsum(steps)])
    top_log = np.max(logs)
    logs = logs - (top_log + np.log(np.sum(np.exp(logs - top_log))))
    return logs[: top + 1], logs[top + 1:]


def hypersphere_tail_bound(beta: float, degree: int, d: int) -> float:
    r"""An upper bound on :math:`T_L = \sum_{l > L} g_l`, the tail of :math:`e^{\beta(t-1)} = \sum_l g_l P_l(t)`
    on :math:`S^{d-1}` beyond degree L = ``degree`` (module docstring: the computed coefficients to a depth beyond
    2 beta + 40, then a geometric bound of ratio 1/2, plus a relative margin of 1e-9 for rounding).

    Example:
        >>> from attnflow.kernels.hypersphere import hypersphere_tail_bound
        >>> hypersphere_tail_bound(4.0, 23, 4) < 2.0**-53 < hypersphere_tail_bound(4.0, 22, 4)
        True
    """
    d = _check_dimension(d)
    b = _check_scale("beta", beta, "the score scale of the kernel exp(beta (t - 1))")
    degree = v.check_int("degree", degree, minimum=0, meaning="the highest harmonic degree kept")
    return float(np.exp(_log_tails(b, (d - 2) / 2, degree)[degree]))


@functools.lru_cache(maxsize=256)
def _log_tails(b: float, lam: float, top: int) -> np.ndarray:
    """log T_L for L = 0..top (a float64 array)."""
    head, rest = _host_log_coefficients(b, lam, top)
    g = np.exp(np.concatenate([head, rest]))
    # beyond the computed depth M (M > 2 b + 40): g_{l+1} / g_l <= b / (l + 1) <= 1/2, so the rest <= g_M
    remainder = g[-1]
    tails = np.cumsum((np.concatenate([g, [remainder]]))[::-1])[::-1]  # tails[L] = sum_{l >= L} g_l (+ the rest)
    with np.errstate(divide="ignore"):
        return np.log(tails[1: top + 2] * (1 + _BOUND_MARGIN))


def _check_scale(name: str, value, meaning: str) -> float:
    if isinstance(value, (str, bytes, bool)) or value is None or v.is_traced(value) or np.ndim(value) != 0:
        raise InputError(f"{name} must be a concrete real number >= 0 ({meaning}), got {value!r}.")
    b = float(value)
    if not math.isfinite(b) or b < 0:
        raise InputError(f"{name} must be a finite real number >= 0 ({meaning}), got {value!r}.")
    return b


def _tail_goal(dtype, tol: float | None) -> float:
    """The tail a degree must reach: ``tol``, or the unit roundoff of ``dtype`` (checked)."""
    try:
        kind = jnp.dtype(dtype)
    except TypeError:
        kind = None
    if kind is None or not jnp.issubdtype(kind, jnp.floating):
        raise InputError(f"dtype must be a floating dtype such as 'float32' or 'float64', got {dtype!r}.")
    goal = float(jnp.finfo(kind).eps) / 2 if tol is None else float(tol)
    if not 0 < goal < 1:
        raise InputError(f"tol must be a tolerance in (0, 1) on the kernel's tail (relative to its maximum 1), "
                         f"got {tol!r}.")
    return goal


def hypersphere_degree(beta_max: float, d: int, dtype="float64", *, tol: float | None = None) -> int:
    r"""The degree L of the path on :math:`S^{d-1}`: the smallest L with :func:`hypersphere_tail_bound` <= ``tol``
    (default: the unit roundoff of ``dtype``: exact to rounding) for every :math:`\beta \le \beta_{max}` (the tail
    grows with beta). For d = 3 it is :func:`attnflow.kernels.sphere.sphere_degree` (tested on a grid of beta).

    Example:
        >>> from attnflow.kernels.hypersphere import hypersphere_degree
        >>> [hypersphere_degree(4.0, d) for d in (3, 4, 8)], hypersphere_degree(4.0, 4, "float32")
        ([22, 23, 24], 14)
    """
    d = _check_dimension(d)
    b = _check_scale("beta_max", beta_max, "an upper bound of the score scale beta")
    goal = _tail_goal(dtype, tol)
    tails = _log_tails(b, (d - 2) / 2, MAX_DEGREE)
    below = np.flatnonzero(tails <= math.log(goal))
    if not below.size:
        raise InputError(f"beta = {b:.6g} needs a degree above {MAX_DEGREE} on S^{d - 1} for a kernel tail below "
                         f"{goal:.3g}; use attnflow.kernels.chunked_attend (the tiled direct sum) for such peaked "
                         "attention.")
    return int(below[0])


def _depth(degree: int, beta) -> int:
    """Start of the backward recurrence: 2 L + 40, and for a concrete beta at least L + 40 beyond the next power of
    two of beta (a few starts, so a few compilations, cover every beta)."""
    depth = 2 * degree + 40
    if v.is_concrete(beta) and np.ndim(beta) == 0 and math.isfinite(float(beta)) and float(beta) > 1:
        depth = max(depth, 2 ** math.ceil(math.log2(float(beta))) + degree + 40)
    return depth


@functools.partial(jax.jit, static_argnames=("degree", "depth", "d"))
def _coefficients(beta: Array, degree: int, depth: int, d: int) -> Array:
    dtype = beta.dtype
    lam = (d - 2) / 2
    nu = lam + jnp.arange(depth, 0, -1, dtype=dtype)  # nu = lam + N .. lam + 1

    def down(r_next, n):  # r_nu = b / (2 nu + b r_{nu+1})
        r = beta / (2 * n + beta * r_next)
        return r, r

    _, ratios = jax.lax.scan(down, jnp.zeros((), dtype), nu)
    r = ratios[::-1]  # r_{lam+1} .. r_{lam+N}
    l = jnp.arange(1, depth + 1, dtype=dtype)
    steps = (l + lam) / (l - 1 + lam) * r * (l + 2 * lam - 1) / l
    u = jnp.concatenate([jnp.ones((1,), dtype), jnp.cumprod(steps)])  # g_l / g_0, all positive
    return u[: degree + 1] / jnp.sum(u)


def hypersphere_kernel_coefficients(beta: float | Float[Array, ""], degree: int, d: int) -> Float[Array, " L1"]:
    r"""The coefficients :math:`g_l`, l = 0..L, of :math:`e^{\beta(t-1)} = \sum_l g_l P_l(t)` on :math:`S^{d-1}`
    (:math:`P_l` the Gegenbauer polynomial of index (d-2)/2 with :math:`P_l(1) = 1`; :math:`g_l > 0`,
    :math:`\sum_l g_l = 1`): the module docstring's ratios, normalised by their sum. Traceable and differentiable
    in beta (a traced beta takes the recurrence start of degree L alone: exact for every beta whose degree is at
    most L).

    Example:
        >>> import math
        >>> from attnflow.kernels.hypersphere import hypersphere_kernel_coefficients
        >>> g = hypersphere_kernel_coefficients(2.0, 1, 4)   # S^3: g_l = e^-b (2/b) (l+1)^2 I_{l+1}(b)
        >>> i1, i2 = 1.590636854637329, 0.688948447698738     # I_1(2), I_2(2)
        >>> [round(float(a), 6) for a in g], [round(k * k * i * math.exp(-2), 6) for k, i in ((1, i1), (2, i2))]
        ([0.215269, 0.372956], [0.215269, 0.372956])
    """
    d = _check_dimension(d)
    degree = v.check_int("degree", degree, minimum=0, meaning="the highest harmonic degree kept")
    v.check_real("beta", beta, "the score scale of the kernel exp(beta (t - 1)), >= 0")
    if v.is_concrete(beta) and float(beta) < 0:
        raise InputError(f"beta must be >= 0 (the score scale of the kernel exp(beta (t - 1))), got {float(beta)!r}.")
    beta = jnp.asarray(beta, jnp.result_type(beta, float))
    return _coefficients(beta, degree, _depth(degree, beta), d)


# -- the harmonics ------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=64)
def _plan(d: int, degree: int) -> tuple:
    """Static layout of the harmonics of degree <= L on S^(d-1), level by level (k = 3..d): per level the
    recurrence constants ``(c0, A, B)`` ((L+1,) start per lower degree m; (L, L+1) ``1/alpha_j`` and
    ``alpha_{j-1}/alpha_j`` for j = 1..L) and, per diagonal j, the rows of the level below it multiplies; the
    degrees of the rows of every level (sorted at the levels below the top, in building order at the top)."""
    L = degree
    deg = np.concatenate([[0], np.repeat(np.arange(1, L + 1), 2)])  # level 2: 1, (cos, sin) x m
    levels = []
    for k in range(3, d + 1):
        m = np.arange(L + 1, dtype=np.float64)
        a_low = (k - 3) / 2  # the law of x_k on S^(k-1): (1 - t^2)^a_low
        a = m + a_low  # the weight of the factor: (1 - t^2)^(m + a_low)
        log_int = lambda s: 0.5 * math.log(math.pi) + np.vectorize(math.lgamma)(s + 1) - \
            np.vectorize(math.lgamma)(s + 1.5)
        c0 = np.exp(0.5 * (log_int(np.full_like(m, a_low)) - log_int(a)))  # (E[(1 - x_k^2)^m])^(-1/2)
        nu = m + (k - 2) / 2
        alpha = np.zeros((L + 2, L + 1))
        for j in range(1, L + 2):
            alpha[j] = np.sqrt(j * (j + 2 * nu - 1) / (4 * (j + nu) * (j + nu - 1)))
        A = 1 / alpha[1: L + 1]  # rows j = 1..L
        B = alpha[0: L] / alpha[1: L + 1]
        rows, new_deg = [], []
        for j in range(L + 1):
            keep = np.flatnonzero(deg + j <= L)
            rows.append(keep)
            new_deg.append(deg[keep] + j)
        new_deg = np.concatenate(new_deg)
        order = np.argsort(new_deg, kind="stable") if k < d else np.arange(new_deg.size)
        levels.append((c0, A, B, deg.copy(), tuple(rows), order))
        deg = new_deg[order]
    return tuple(levels), deg


@functools.lru_cache(maxsize=64)
def _groups(d: int, degree: int) -> tuple[tuple[int, ...], np.ndarray]:
    """The top level's diagonals in consecutive groups of at least :data:`_GROUP_ROWS` rows (the last diagonals hold
    1, 3, 5, ... rows on S^2, 1, 4, 9, ... on S^3): the last diagonal of each group, and the groups' first rows."""
    sizes = [r.size for r in _plan(d, degree)[0][-1][4]]
    ends, rows = [len(sizes) - 1], 0
    for j in range(len(sizes) - 1, 0, -1):  # from the smallest diagonal back: a group starts at j once full
        rows += sizes[j]
        if rows >= _GROUP_ROWS:
            ends.append(j - 1)
            rows = 0
    ends = sorted(ends)
    firsts = np.cumsum([0] + [sum(sizes[a + 1: b + 1]) for a, b in zip([-1] + ends[:-1], ends)])
    return tuple(ends), firsts


def _table(u: Array, degree: int, consume=None):
    r"""Every harmonic of degree <= L at unit vectors u (d, B): (H, B), rows in the order of :func:`_plan`'s
    degrees (module docstring: level by level, one diagonal j at a time). With ``consume``: the top level's
    rows are never put together; ``consume(rows)`` is called on each diagonal's block of rows (in order) and
    the list of its results returned (a block's moments or values are taken while it is in cache)."""
    d = u.shape[0]
    levels, _ = _plan(d, degree)
    const = lambda arr: jnp.asarray(arr, u.dtype)
    re, im = _powers(u[0], u[1], degree)
    root2 = math.sqrt(2.0)
    T = jnp.concatenate([jnp.ones_like(u[:1]), (root2 * jnp.stack([re[1:], im[1:]], axis=1)).reshape(-1, u.shape[1])])
    rho2 = u[0] * u[0] + u[1] * u[1]
    for k, (c0, A, B, deg, rows, order) in zip(range(3, d + 1), levels):
        x = u[k - 1]
        rho2 = rho2 + x * x
        h_prev, h = None, const(c0)[:, None] * jnp.ones_like(x)[None]  # h_0 for every lower degree m
        blocks, done = [], []
        top = k == d and consume is not None
        ends = _groups(d, degree)[0] if top else ()
        for j in range(degree + 1):
            if j:
                live = degree + 1 - j  # lower degrees m <= L - j
                nxt = const(A[j - 1, :live])[:, None] * x * h[:live]
                if j >= 2:
                    nxt = nxt - const(B[j - 1, :live])[:, None] * rho2 * h_prev[:live]
                h_prev, h = h, jax.lax.optimization_barrier(nxt)
            keep = rows[j]
            blocks.append(jnp.take(h, jnp.asarray(deg[keep], jnp.int32), axis=0) * T[: keep.size])
            if top and j in ends:  # a group of diagonals complete: consumed together
                done.append(consume(jnp.concatenate(blocks) if len(blocks) > 1 else blocks[0]))
                blocks = []
        if top:
            return done
        T = jnp.concatenate(blocks)
        if k < d:
            T = jnp.take(T, jnp.asarray(order, jnp.int32), axis=0)
    return T if consume is None else [consume(T)]


def _directions(x: Array) -> Array:
    return (x / jnp.sqrt(jnp.sum(x * x, axis=1, keepdims=True))).T


def hypersphere_harmonics(x: Float[Array, "n d"], degree: int) -> tuple[Float[Array, "n H"], np.ndarray]:
    r"""The real harmonics of degree <= L at the directions of x (n, d), d >= 3, and the degree of each column:
    ``(table (n, H), degrees (H,))``, normalised to mean square 1 over :math:`S^{d-1}` (the addition theorem
    :math:`\sum_{h \in l} Y_h(x)Y_h(y) = \dim H_l\,P_l(\langle x, y\rangle)`; module docstring). Traceable and
    differentiable. O(n H) memory: for checks and small clouds.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.kernels.hypersphere import hypersphere_harmonics
        >>> Y, deg = hypersphere_harmonics(jnp.array([[0.0, 0.6, 0.0, 0.8]]), 1)  # degree 1: 2 x (x1, x2, x3, x4)
        >>> deg.tolist(), sorted(round(abs(float(a)), 6) for a in Y[0])
        ([0, 1, 1, 1, 1], [0.0, 0.0, 1.0, 1.2, 1.6])
    """
    degree = v.check_int("degree", degree, minimum=0, meaning="the highest harmonic degree kept")
    shape = v.check_array("x", x, "points (n, d) of the sphere S^(d-1), d >= 3", ranks=(2,))
    if shape[1] < 3:
        raise InputError(f"x must be points (n, d) of the sphere S^(d-1) with d >= 3 (the circle has "
                         f"attnflow.kernels.fourier), got shape {shape}.")
    check_harmonics(shape[1], degree)
    _, degrees = _plan(shape[1], degree)
    return _harmonic_table(v.as_float(x), degree), degrees.copy()


@functools.partial(jax.jit, static_argnames=("degree",))
def _harmonic_table(x: Array, degree: int) -> Array:
    return _table(_directions(x), degree).T


# -- the sums ---------------------------------------------------------------------------------------------------


def _block_size(n: int, count: int, most: int | None = None) -> int:
    """Tokens per block: at most ``most`` (default BLOCK_ENTRIES / H, at least 64), the fewest blocks of equal
    size."""
    most = max(64, BLOCK_ENTRIES // max(count, 1)) if most is None else most
    blocks = -(-n // most)
    return -(-n // blocks)


def _sums(u: Array, coef: Array, degree: int, block: int | None = None) -> Array:
    r"""(d + 1, n): :math:`\sum_h c_h Y_h(x_i) S_h` with :math:`S_h = \sum_j Y_h(x_j)(1, x_j)`, over blocks of
    ``block`` tokens at most (default :func:`_block_size`)."""
    d, n = u.shape
    block = _block_size(n, coef.shape[0], block)
    blocks = -(-n // block)
    pad = blocks * block - n
    pole = jnp.zeros((d, pad), u.dtype).at[d - 1].set(1)  # padding tokens of weight 0, finite everywhere
    up = jnp.concatenate([u, pole], axis=1) if pad else u
    wp = jnp.concatenate([jnp.ones((n,), u.dtype), jnp.zeros((pad,), u.dtype)]) if pad else jnp.ones((n,), u.dtype)
    ub = up.reshape(d, blocks, block).transpose(1, 0, 2)
    wb = wp.reshape(blocks, block)

    firsts = _groups(d, degree)[1]  # the first row of each group of the top level's diagonals

    def moments(ux, w):
        W = jnp.concatenate([w[None], w[None] * ux]).T  # (B, d + 1)
        return jnp.concatenate(_table(ux, degree, lambda rows: rows @ W))

    def values(ux, parts):
        pieces = iter(parts)
        return sum(_table(ux, degree, lambda rows: next(pieces).T @ rows))  # (d + 1, B)

    moments = jax.checkpoint(moments, prevent_cse=False)
    values = jax.checkpoint(values, prevent_cse=False)
    S, _ = jax.lax.scan(lambda acc, blk: (acc + moments(*blk), None), jnp.zeros((coef.shape[0], d + 1), u.dtype),
                        (ub, wb))
    # column by column: the gradient in coef is then a sum of d + 1 products, where coef[:, None] * S gives a
    # row reduction that XLA:CPU (jaxlib 0.10.2) hands to a YNNPACK dot kernel which crashed on it (H = 3311, d = 4)
    C = jnp.stack([coef * S[:, k] for k in range(d + 1)], axis=1)
    parts = tuple(C[a:b] for a, b in zip(firsts[:-1], firsts[1:]))  # per group of the top level's diagonals
    out = jax.lax.map(lambda ux: values(ux, parts), ub)  # (blocks, d + 1, B)
    return out.transpose(1, 0, 2).reshape(d + 1, blocks * block)[:, :n]


@functools.partial(jax.jit, static_argnames=("degree", "depth", "block"))
def _hypersphere_sums(x: Array, beta: Array, degree: int, depth: int, block: int | None = None
                      ) -> tuple[Array, Array]:
    d = x.shape[1]
    u = _directions(x)
    g = _coefficients(beta, degree, depth, d)
    _, degrees = _plan(d, degree)
    dims = np.array([harmonic_count(d, l) for l in range(degree + 1)], np.float64)
    coef = (g / jnp.asarray(dims, x.dtype))[jnp.asarray(degrees, jnp.int32)]
    sums = _sums(u, coef, degree, block)
    return sums[0], sums[1:].T


def hypersphere_sums(x: Float[Array, "n d"], beta, degree: int, *, bound: float | None = None,
                     _block: int | None = None) -> tuple[Float[Array, " n"], Float[Array, "n d"]]:
    r"""(D, N) at degree L: the row sums :math:`D_i = \sum_j e^{\beta(\langle\hat x_i, \hat x_j\rangle - 1)}` and
    :math:`N_i = \sum_j e^{\beta(\langle\hat x_i, \hat x_j\rangle - 1)}\hat x_j` of the directions of x (n, d),
    d >= 3, in O(n H d) (module docstring). Traceable and differentiable in x and beta. ``bound``: a concrete upper
    bound of a traced beta (the recurrence's start is chosen from it; default beta itself, or the degree alone).
    ``_block`` (private, for tests and benchmarks): tokens per block instead of :data:`BLOCK_ENTRIES` / H.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from attnflow.kernels.hypersphere import hypersphere_degree, hypersphere_sums
        >>> x = jax.random.normal(jax.random.key(0), (60, 4))
        >>> x = x / jnp.linalg.norm(x, axis=1, keepdims=True)
        >>> D, N = hypersphere_sums(x, 3.0, hypersphere_degree(3.0, 4, "float32"))
        >>> bool(jnp.allclose(D, jnp.exp(3.0 * (x @ x.T - 1)).sum(1), rtol=1e-5))
        True
    """
    degree = v.check_int("degree", degree, minimum=0, meaning="the highest harmonic degree kept")
    x = v.as_float(x)
    if x.ndim != 2 or x.shape[1] < 3:
        raise InputError(f"x must be tokens (n, d) on the sphere S^(d-1) with d >= 3, got shape {x.shape}.")
    check_harmonics(x.shape[1], degree)
    if _block is not None:
        _block = v.check_int("_block", _block, meaning="tokens per block")
    return _hypersphere_sums(x, jnp.asarray(beta, x.dtype), degree, _depth(degree, beta if bound is None else bound),
                             _block)


def hypersphere_attention(
    x: Float[Array, "n d"],
    beta: float | Float[Array, ""],
    *,
    degree: int | None = None,
    normalisation: str = "softmax",
) -> Float[Array, "n d"]:
    r"""Attention of tokens on the unit sphere :math:`S^{d-1}` (d >= 3) in O(n H d): :math:`\sum_j P_{ij}x_j` with
    :math:`P_{ij} = \mathrm{softmax}_j(\beta\langle x_i, x_j\rangle)` (``"mean"``:
    :math:`e^{\beta\langle x_i, x_j\rangle}/n`), through the Gegenbauer series of the kernel truncated at degree L.

    ``x``: tokens (n, d); their directions are used. ``beta >= 0``. ``degree``: L (static); by default
    :func:`hypersphere_degree` of a concrete beta in the tokens' dtype (exact to rounding; give it when beta is
    traced). Traceable and differentiable in x and beta. For d = 3 :func:`attnflow.kernels.sphere.sphere_attention`
    is the tuned form of the same sums.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from attnflow.kernels import attend
        >>> from attnflow.kernels.hypersphere import hypersphere_attention
        >>> x = jax.random.normal(jax.random.key(0), (300, 5))
        >>> x = x / jnp.linalg.norm(x, axis=1, keepdims=True)
        >>> float(jnp.abs(hypersphere_attention(x, 4.0) - attend(4.0 * x, x, x, impl="dense")).max()) < 1e-5
        True
    """
    x, degree = attention_inputs(x, beta, normalisation, degree, sphere="S^(d-1) with d >= 3 (the circle has "
                                 "attnflow.kernels.fourier)", fits=lambda d: d >= 3, degree_of=hypersphere_degree,
                                 degree_hint="hypersphere_degree(beta_max, d, dtype)")
    return means_from_sums(*hypersphere_sums(x, beta, degree), jnp.asarray(beta, x.dtype), normalisation)


def means_from_sums(D: Float[Array, " n"], N: Float[Array, "n d"], beta, normalisation: str) -> Float[Array, "n d"]:
    r"""The attention means from the max-shifted sums of the harmonic paths: :math:`N_i / D_i` (softmax) or
    :math:`e^\beta N_i / n` (``"mean"``, :math:`P_{ij} = e^{\beta\langle x_i, x_j\rangle}/n`).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.kernels.hypersphere import means_from_sums
        >>> D, N = jnp.array([2.0]), jnp.array([[1.0, 0.0, 0.0]])
        >>> means_from_sums(D, N, 0.0, "softmax").tolist(), means_from_sums(D, N, 0.0, "mean").tolist()
        ([[0.5, 0.0, 0.0]], [[1.0, 0.0, 0.0]])
    """
    if normalisation == "softmax":
        return N / D[:, None]
    return N * (jnp.exp(beta) / N.shape[0])


def attention_inputs(x, beta, normalisation: str, degree, *, sphere: str, fits, degree_of, degree_hint: str
                     ) -> tuple[Array, int]:
    """The checks of the harmonic paths' attention (this module's and :func:`attnflow.kernels.sphere.sphere_attention`):
    the normalisation, tokens (n, d) with ``fits(d)`` on ``sphere``, at least one, beta >= 0, and the degree (given,
    or ``degree_of(beta, d, dtype)`` of a concrete beta; ``degree_hint`` names it for a traced beta). Returns the
    tokens as floats and the degree.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.kernels.hypersphere import attention_inputs, hypersphere_degree
        >>> x, L = attention_inputs(jnp.ones((2, 4)), 4.0, "softmax", None, sphere="S^3", fits=lambda d: d == 4,
        ...                         degree_of=hypersphere_degree, degree_hint="...")
        >>> x.shape, L                                           # float32 tokens: the float32 degree
        ((2, 4), 14)
    """
    if normalisation not in ("softmax", "mean"):
        raise InputError(f"normalisation must be 'softmax' or 'mean', got {normalisation!r}.")
    shape = v.check_array("x", x, f"tokens (n, d) on the unit sphere {sphere}", ranks=(2,))
    if not fits(shape[1]):
        raise InputError(f"x must be tokens (n, d) on the sphere {sphere}, got shape {shape}.")
    if not shape[0]:
        raise InputError("x must hold at least one token.")
    x = v.as_float(x)
    v.check_real("beta", beta, "the score scale: scores beta <x_i, x_j>, a finite real scalar >= 0")
    if v.is_concrete(beta) and float(beta) < 0:
        raise InputError(f"beta must be >= 0 (scores beta <x_i, x_j>), got {float(beta)!r}.")
    if degree is None:
        if v.is_traced(beta):
            raise InputError(f"beta is traced (jit/vmap/grad), so the degree cannot be chosen from it; pass "
                             f"degree={degree_hint} for an upper bound beta_max of beta.")
        degree = degree_of(float(beta), shape[1], x.dtype)
    return x, v.check_int("degree", degree, minimum=0, meaning="the highest harmonic degree L kept")
