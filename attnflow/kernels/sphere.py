r"""PLACEHOLDER"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .. import _validate as v
from ..errors import InputError

__all__ = ["sphere_kernel_coefficients", "sphere_tail_bound", "sphere_degree", "sphere_attention", "MAX_DEGREE"]

#: the highest degree :func:`sphere_degree` gives (float64: scores up to beta of about 500); beyond it the
#: kernel is so peaked that the tiled direct sum (:func:`attnflow.kernels.chunked_attend`) is the better tool
MAX_DEGREE = 256
#: up to this many table entries (tokens times harmonics) the sums run through one table of the harmonics
#: (computed once, used by the moments and the evaluation); above, through blocks of tokens
_TABLE_ENTRIES = 1 << 21
#: tokens per block of the blocked path (a block's recurrence stays in the core's cache)
_BLOCK = 1024
#: beyond this many terms the continued-fraction bound is replaced by the Chernoff bound alone
_CF_TERMS = 200_000
#: relative margin added to the computed bound for its own rounding (a few hundred operations)
_BOUND_MARGIN = 1e-9


# -- the truncation bound and the degree ------------------------------------------------------------


def _ratio_upper_bounds(b: float, top: int) -> np.ndarray:
    r"""Upper bounds :math:`\hat r_l \ge r_l = i_l(b)/i_{l-1}(b)`, l = 1..top (index l; entry 0 unused): the
    backward recurrence :math:`R_l = b/(2l+1 + b R_{l+1})` from :math:`R_E = 0`, kept where E - l is odd
    (two sweeps, E and E + 1)."""
    out = np.zeros(top + 1)
    start = top + 41
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
    return -2.0 * b * math.sinh(s / 2) ** 2 - (math.log(p) + log_scale)


@functools.lru_cache(maxsize=256)
def _log_tail_bounds(b: float, top: int) -> tuple[float, ...]:
    r"""log of the bound on :math:`T_L = \sum_{l > L} g_l`, L = 0..top (module docstring): the
    continued-fraction bound (the smaller) where it is cheap, else the Chernoff bound; plus the margin."""
    if b == 0:
        return (-math.inf,) * (top + 1)
    far = max(top + 1, math.ceil(b / 2)) + 40  # M: beyond it the ratios g_{l+1}/g_l <= b/(2M+3) < 1
    if far > _CF_TERMS:
        return tuple(min(0.0, _log_chernoff(b, L)) + _BOUND_MARGIN for L in range(top + 1))
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
    return tuple(min(0.0, float(t)) + _BOUND_MARGIN for t in tails[: top + 1])


def _check_scale(name: str, value, meaning: str) -> float:
    if isinstance(value, (str, bytes, bool)) or value is None or v.is_traced(value) or np.ndim(value) != 0:
        raise InputError(f"{name} must be a concrete real number >= 0 ({meaning}), got {value!r}.")
    b = float(value)
    if not math.isfinite(b) or b < 0:
        raise InputError(f"{name} must be a finite real number >= 0 ({meaning}), got {value!r}.")
    return b


def sphere_tail_bound(beta: float, degree: int) -> float:
    r"""A proven upper bound on :math:`T_L = \sum_{l > L} g_l`, the tail of the kernel
    :math:`e^{\beta(t - 1)} = \sum_l g_l P_l(t)` beyond degree L = ``degree`` (module docstring: the
    continued-fraction bound; increasing in beta). The truncated kernel differs from the kernel by at most
    :math:`T_L` at every angle (:math:`|P_l| \le 1`).

    Example:
        >>> from attnflow.kernels.sphere import sphere_tail_bound
        >>> sphere_tail_bound(4.0, 22) < 2.0**-53 < sphere_tail_bound(4.0, 21)
        True
    """
    b = _check_scale("beta", beta, "the score scale of the kernel exp(beta (t - 1))")
    degree = v.check_int("degree", degree, minimum=0, meaning="the highest harmonic degree kept")
    return math.exp(_log_tail_bounds(b, degree)[degree])


def _unit_roundoff(dtype) -> float:
    return float(np.finfo(np.dtype(dtype)).eps) / 2


def sphere_degree(beta_max: float, dtype="float64", *, tol: float | None = None) -> int:
    r"""The degree L of the sphere path: the smallest L with :func:`sphere_tail_bound` ``(beta_max, L)`` <=
    ``tol`` (default: the unit roundoff of ``dtype``, so the path is exact to rounding), for every
    :math:`\beta \le \beta_{max}` (the bound increases with beta).

    Example:
        >>> from attnflow.kernels.sphere import sphere_degree
        >>> [sphere_degree(b) for b in (1.0, 4.0, 16.0, 64.0)], [sphere_degree(b, "float32") for b in (1.0, 4.0)]
        ([14, 22, 38, 72], [8, 13])
        >>> sphere_degree(4.0, tol=1e-6)
        11
    """
    b = _check_scale("beta_max", beta_max, "an upper bound of the score scale beta")
    name = np.dtype(dtype).name
    if name not in ("float16", "bfloat16", "float32", "float64"):
        raise InputError(f"dtype must be a floating dtype such as 'float32' or 'float64', got {dtype!r}.")
    goal = _unit_roundoff(name) if tol is None else float(tol)
    if not 0 < goal < 1:
        raise InputError(f"tol must be a tolerance in (0, 1) on the kernel's tail (relative to its maximum 1), "
                         f"got {tol!r}.")
    bounds = _log_tail_bounds(b, MAX_DEGREE)
    target = math.log(goal)
    for degree, bound in enumerate(bounds):
        if bound <= target:
            return degree
    raise InputError(f"beta = {b:.6g} needs a degree above {MAX_DEGREE} for a kernel tail below {goal:.3g}; use "
                     "attnflow.kernels.chunked_attend (the tiled direct sum) for such peaked attention.")


# -- the kernel's coefficients ----------------------------------------------------------------------------


def _depth(degree: int, beta) -> int:
    """Start N of the backward recurrence: 2 L + 40, and at least ceil(beta) + L + 40 for a concrete beta."""
    depth = 2 * degree + 40
    if v.is_concrete(beta) and np.ndim(beta) == 0 and math.isfinite(float(beta)):
        depth = max(depth, math.ceil(float(beta)) + degree + 40)
    return depth


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
    at least :math:`\lceil\beta\rceil` + L + 40 for a concrete beta) that its start is forgotten to rounding:
    each coefficient has a relative error of a few units of rounding per degree (module docstring). Exact for
    every beta whose :func:`sphere_degree` is at most L; traceable and differentiable in beta (>= 0).

    Example:
        >>> import math
        >>> from attnflow.kernels.sphere import sphere_kernel_coefficients
        >>> g = sphere_kernel_coefficients(2.0, 1)  # i_0 = sinh(b)/b, i_1 = cosh(b)/b - sinh(b)/b^2
        >>> [round(float(a), 6) for a in g], round(math.exp(-2) * 3 * (math.cosh(2) / 2 - math.sinh(2) / 4), 6)
        ([0.490842, 0.39563], 0.39563)
    """
    degree = v.check_int("degree", degree, minimum=0, meaning="the highest harmonic degree kept")
    v.check_real("beta", beta, "the score scale of the kernel exp(beta (t - 1)), >= 0")
    if v.is_concrete(beta) and float(beta) < 0:
        raise InputError(f"beta must be >= 0 (the score scale of the kernel exp(beta (t - 1))), got {float(beta)!r}.")
    beta = jnp.asarray(beta, jnp.result_type(beta, float))
    return _coefficients(beta, degree, _depth(degree, beta))


# -- the real spherical harmonics ---------------------------------------------------------------------------


@functools.lru_cache(maxsize=64)
def _recurrence(degree: int):
    r"""Constants of the harmonics' recurrence, by diagonal k = l - m: ``(c, a, b, rows)`` with
    :math:`c_m = \bar q_m^m`, ``a[k][m]``, ``b[k][m]`` the coefficients of :math:`\bar q_{m+k}^m =
    a\, z\, \bar q_{m+k-1}^m - b\, \bar q_{m+k-2}^m`, and ``rows`` the degree l of each harmonic in table
    order (diagonal k = 0..L; in each, the cosine rows m = 0..L-k, then the sine rows m = 1..L-k)."""
    L = degree
    c = np.ones(L + 1)
    for m in range(1, L + 1):
        c[m] = c[m - 1] * math.sqrt((2 * m + 1) / (2 * m)) * (math.sqrt(2) if m == 1 else 1.0)
    a, b = [None], [None, None]
    for k in range(1, L + 1):
        m = np.arange(L + 1 - k)
        l = m + k
        a.append(np.sqrt((2 * l - 1) * (2 * l + 1) / (k * (2 * m + k))))
        if k >= 2:
            b.append(np.sqrt((2 * l + 1) * (2 * m + k - 1) * (k - 1) / (k * (2 * m + k) * (2 * l - 3))))
    rows = np.concatenate([np.concatenate([np.arange(L + 1 - k) + k, np.arange(1, L + 1 - k) + k])
                           for k in range(L + 1)])
    return c, a, b, rows


def _powers(X: Array, Y: Array, degree: int) -> tuple[Array, Array]:
    r""":math:`\mathrm{Re}, \mathrm{Im}\,(X + iY)^m`, m = 0..L (rows), from :math:`w^{m+1} = w^m w`; a barrier every
    8 steps keeps XLA from recomputing the chain in each row."""
    c, s = jnp.ones_like(X), jnp.zeros_like(X)
    re, im = [c], [s]
    for m in range(1, degree + 1):
        c, s = c * X - s * Y, s * X + c * Y
        if m % 8 == 0:
            c, s = jax.lax.optimization_barrier((c, s))
        re.append(c)
        im.append(s)
    return jnp.stack(re), jnp.stack(im)


def _diagonals(X: Array, Y: Array, Z: Array, degree: int) -> list[tuple[Array, Array]]:
    r"""The real harmonics of degree <= L at unit vectors (X, Y, Z) (each of shape (B,)), by diagonal k = l - m:
    ``(cos_k, sin_k)`` of shapes (L+1-k, B), (L-k, B), rows :math:`\bar q_{m+k}^m(Z)\,\mathrm{Re}(X+iY)^m`
    (m = 0..L-k) and :math:`\bar q_{m+k}^m(Z)\,\mathrm{Im}(X+iY)^m` (m = 1..L-k). The recurrence runs on the
    harmonics themselves (the factor in X, Y is the same along a diagonal's recurrence in l)."""
    c, a, b, _ = _recurrence(degree)
    const = lambda arr: jnp.asarray(arr, X.dtype)[:, None]
    re, im = _powers(X, Y, degree)
    out: list[tuple[Array, Array]] = []
    for k in range(degree + 1):
        r = degree + 1 - k
        if k == 0:
            dc, ds = const(c) * re, const(c[1:]) * im[1:]
        else:
            ak = const(a[k])
            dc, ds = ak * Z * out[-1][0][:r], ak[1:] * Z * out[-1][1][: r - 1]
            if k >= 2:
                bk = const(b[k])
                dc, ds = dc - bk * out[-2][0][:r], ds - bk[1:] * out[-2][1][: r - 1]
        out.append(jax.lax.optimization_barrier((dc, ds)))
    return out


def _harmonics(X: Array, Y: Array, Z: Array, degree: int) -> Array:
    """The table ((L+1)^2, B) of :func:`_diagonals` in table order."""
    return jnp.concatenate([part for pair in _diagonals(X, Y, Z, degree) for part in pair])


# -- the O(n L^2) sums ----------------------------------------------------------------------------------------


def _block_moments(xb: Array, wb: Array, degree: int) -> Array:
    r""":math:`\sum_j w_j Y_h(x_j)\,(1, x_j)` over one block of tokens ((3, B), weights (B,)): ((L+1)^2, 4)."""
    W = jnp.stack([wb, wb * xb[0], wb * xb[1], wb * xb[2]], axis=1)
    return jnp.concatenate([part @ W for pair in _diagonals(*xb, degree) for part in pair])


def _block_values(xb: Array, C: Array, degree: int) -> Array:
    r""":math:`\sum_h C_{h\cdot} Y_h(x_i)` at one block of tokens ((3, B)): (4, B)."""
    start, total = 0, None
    for pair in _diagonals(*xb, degree):
        for part in pair:
            rows = part.shape[0]
            if rows:
                term = C[start: start + rows].T @ part
                total = term if total is None else total + term
            start += rows
    return total


def _blocked_sums(x3: Array, degree: int, block: int, coef: Array) -> Array:
    """(D, N) of every token, (4, n), through blocks of ``block`` tokens (the last padded with weight 0)."""
    n = x3.shape[1]
    blocks = -(-n // block)
    pad = blocks * block - n
    # padded tokens sit at the north pole (finite everywhere) with weight 0; their values are cut off
    xp = jnp.concatenate([x3, jnp.zeros((3, pad), x3.dtype).at[2].set(1)], axis=1) if pad else x3
    xb = xp.reshape(3, blocks, block).transpose(1, 0, 2)
    wb = (jnp.arange(blocks * block) < n).astype(x3.dtype).reshape(blocks, block)
    H = (degree + 1) ** 2
    moments = jax.checkpoint(functools.partial(_block_moments, degree=degree), prevent_cse=False)
    S, _ = jax.lax.scan(lambda acc, blk: (acc + moments(*blk), None), jnp.zeros((H, 4), x3.dtype), (xb, wb))
    C = coef[:, None] * S
    values = jax.checkpoint(functools.partial(_block_values, degree=degree), prevent_cse=False)
    out = jax.lax.map(lambda blk: values(blk, C), xb)  # (blocks, 4, block)
    return out.transpose(1, 0, 2).reshape(4, blocks * block)[:, :n]


def _table_sums(x3: Array, degree: int, coef: Array) -> Array:
    """(D, N) of every token, (4, n), through one table of the harmonics."""
    T = _harmonics(x3[0], x3[1], x3[2], degree)
    W = jnp.concatenate([jnp.ones((1, x3.shape[1]), x3.dtype), x3]).T
    return (coef[:, None] * (T @ W)).T @ T


@functools.partial(jax.jit, static_argnames=("degree", "normalisation", "block", "depth"))
def _sphere_means(x: Array, beta: Array, degree: int, normalisation: str, block: int | None, depth: int) -> Array:
    n = x.shape[0]
    x3 = (x / jnp.sqrt(jnp.sum(x * x, axis=1, keepdims=True))).T  # the directions, (3, n)
    g = _coefficients(beta, degree, depth)
    _, _, _, rows = _recurrence(degree)
    coef = (g / (2 * jnp.arange(degree + 1, dtype=x.dtype) + 1))[rows]  # g_l / (2l + 1) per harmonic
    if block is None and n * rows.size <= _TABLE_ENTRIES:
        sums = _table_sums(x3, degree, coef)
    else:
        sums = _blocked_sums(x3, degree, _BLOCK if block is None else block, coef)
    D, N = sums[0], sums[1:]
    if normalisation == "softmax":
        return (N / D).T
    return (N * (jnp.exp(beta) / n)).T


def sphere_attention(
    x: Float[Array, "n 3"],
    beta: float | Float[Array, ""],
    *,
    degree: int | None = None,
    normalisation: str = "softmax",
    _block: int | None = None,
) -> Float[Array, "n 3"]:
    r"""PLACEHOLDER"""
    if normalisation not in ("softmax", "mean"):
        raise InputError(f"normalisation must be 'softmax' or 'mean', got {normalisation!r}.")
    shape = v.check_array("x", x, "tokens (n, 3) on the unit sphere", ranks=(2,))
    if shape[1] != 3:
        raise InputError(f"x must be tokens (n, 3) on the sphere S^2, got shape {shape}.")
    if not shape[0]:
        raise InputError("x must hold at least one token.")
    x = v.as_float(x)
    v.check_real("beta", beta, "the score scale: scores beta <x_i, x_j>, a finite real scalar >= 0")
    if v.is_concrete(beta) and float(beta) < 0:
        raise InputError(f"beta must be >= 0 (scores beta <x_i, x_j>), got {float(beta)!r}.")
    if degree is None:
        if v.is_traced(beta):
            raise InputError("beta is traced (jit/vmap/grad), so the degree cannot be chosen from it; pass "
                             "degree=sphere_degree(beta_max, dtype) for an upper bound beta_max of beta.")
        degree = sphere_degree(float(beta), x.dtype)
    degree = v.check_int("degree", degree, minimum=0, meaning="the highest harmonic degree L kept")
    if _block is not None:
        _block = v.check_int("_block", _block, meaning="tokens per block of the blocked path")
    beta_arr = jnp.asarray(beta, x.dtype)
    return _sphere_means(x, beta_arr, degree, normalisation, _block, _depth(degree, beta))
