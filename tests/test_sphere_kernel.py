"""The sphere path (attnflow.kernels.sphere, O(n L^2)) against the direct O(n^2) sum; its coefficients against
mpmath and scipy; its tail bound against the true tail.

Tolerances follow the rounding analysis of attnflow/kernels/sphere.py: the kernel's series is exact to the unit
roundoff u (its tail below u by the proven bound), every harmonic term of D_i and N_i is bounded, and the
evaluation sums (L+1)^2 of them, so the attention means carry an error of at most a few (L+1)^2 u relative to
the largest output where D_i is of the order of n (the worst case, an isolated token with D_i = 1, adds a
factor n / D_i that these spread clouds do not have). The comparisons allow 2 (L+1)^2 u; the observed errors
are about (L+1) u, 10-100x smaller.
"""

from __future__ import annotations

import itertools
import math

import jax
import jax.numpy as jnp
import mpmath
import numpy as np
import pytest
import scipy.special

from attnflow import InputError
from attnflow.kernels import attend
from attnflow.kernels import sphere as S
from attnflow.kernels.sphere import (
    sphere_attention,
    sphere_degree,
    sphere_kernel_coefficients,
    sphere_tail_bound,
)

pytestmark = pytest.mark.usefixtures("x64")  # float64 references; float32 runs pass explicit dtypes

BETAS = (0.5, 4.0, 16.0)


def cloud(seed: int, n: int, dtype=jnp.float64) -> jax.Array:
    """n tokens uniform on S^2 (fixed seed)."""
    x = jax.random.normal(jax.random.key(seed), (n, 3), jnp.float64)
    return (x / jnp.linalg.norm(x, axis=1, keepdims=True)).astype(dtype)


def direct(x, beta, normalisation="softmax"):
    """The direct sum of the attention of the directions x_j / |x_j| (dense, float64 in float64)."""
    u = x / jnp.linalg.norm(x, axis=1, keepdims=True)
    return attend(beta * u, u, u, impl="dense", normalisation=normalisation)


def tol(beta: float, dtype) -> float:
    """2 (L+1)^2 u: the evaluation's (L+1)^2 bounded terms (module docstring of the kernel, "Rounding")."""
    u = float(jnp.finfo(dtype).eps) / 2
    return 2 * (sphere_degree(beta, dtype) + 1) ** 2 * u


def rel_err(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    assert np.isfinite(a).all() and np.isfinite(b).all(), "non-finite values are not compared"
    return float(np.abs(a - b).max() / np.abs(b).max())


DIGITS = 40  # mpmath's working precision here (mpmath.workdps: its global setting is left alone)


def g_mp(l: int, beta) -> mpmath.mpf:
    """g_l = e^{-beta} (2l+1) i_l(beta), i_l(b) = sqrt(pi / (2b)) I_{l+1/2}(b), to 40 digits."""
    with mpmath.workdps(max(DIGITS, mpmath.mp.dps)):  # never below a caller's precision (mpmath.diff raises it)
        b = mpmath.mpf(beta)
        return (2 * l + 1) * mpmath.sqrt(mpmath.pi / (2 * b)) * mpmath.besseli(l + mpmath.mpf(1) / 2, b) * mpmath.exp(-b)


_TERMS: dict[float, list] = {}


def true_tail(beta: float, degree: int) -> float:
    """sum_{l > L} g_l to 25 digits (terms summed until they stop counting; the terms are kept per beta)."""
    terms = _TERMS.setdefault(beta, [])
    with mpmath.workdps(DIGITS):
        total, l = mpmath.mpf(0), degree + 1
        while True:
            while len(terms) <= l:
                terms.append(g_mp(len(terms), beta))
            total += terms[l]
            if terms[l] < total * mpmath.mpf(10) ** -25:
                return float(total)
            l += 1


# -- the coefficients, the bound, the degree ---------------------------------------------------------------


@pytest.mark.parametrize("beta", [0.5, 4.0, 16.0, 64.0])
def test_coefficients_match_mpmath_and_sum_to_one(beta):
    """g_l against 40-digit values to 4e-15 relative (a few units of rounding: the ratios' recurrence is
    stable), at every l <= L; scipy's spherical_in agrees to 1e-14 where it is accurate itself (beta <= 16);
    sum_l g_l = 1 to the tail and rounding."""
    L = sphere_degree(beta)
    g = np.asarray(sphere_kernel_coefficients(beta, L))
    assert g.dtype == np.float64 and g.shape == (L + 1,)
    true_tail(beta, L)  # keeps the terms g_0 .. g_{L+1} and beyond
    ref = np.array([float(t) for t in _TERMS[beta][: L + 1]])
    assert np.max(np.abs(g / ref - 1)) < 4e-15
    if beta <= 16:
        l = np.arange(L + 1)
        np.testing.assert_allclose(g, np.exp(-beta) * (2 * l + 1) * scipy.special.spherical_in(l, beta), rtol=1e-14)
    assert abs(g.sum() - 1) < 2 * sphere_tail_bound(beta, L) + (L + 1) * 2.0**-53


def test_coefficients_derivative_in_beta():
    """d g_l / d beta by autodiff (through the backward recurrence) against mpmath's derivative (1e-13) and a
    central difference of a weighted sum (step 1e-5: truncation ~1e-10, rounding ~1e-11)."""
    beta, L = 4.0, 22
    jac = np.asarray(jax.jacfwd(lambda b: sphere_kernel_coefficients(b, L))(jnp.float64(beta)))
    with mpmath.workdps(DIGITS):
        ref = np.array([float(mpmath.diff(lambda b, l=l: g_mp(l, b), beta)) for l in range(L + 1)])
    assert np.max(np.abs(jac - ref)) < 1e-13 * np.max(np.abs(ref))
    w = np.cos(np.arange(L + 1))
    f = lambda b: float(np.dot(w, np.asarray(sphere_kernel_coefficients(b, L))))
    h = 1e-5
    fd = (f(beta + h) - f(beta - h)) / (2 * h)
    assert abs(np.dot(w, jac) - fd) < 1e-8 * max(1.0, abs(fd))


def test_coefficients_traced_beta_under_jit_and_vmap():
    """A traced beta (default start of the recurrence, 2 L + 40) gives the same coefficients as a concrete one."""
    L = sphere_degree(16.0, "float32")  # the smallest degree of the betas below: the hardest start
    betas = jnp.array([0.5, 4.0, 16.0])
    traced = jax.jit(jax.vmap(lambda b: sphere_kernel_coefficients(b, L)))(betas)
    for b, row in zip([0.5, 4.0, 16.0], traced):
        np.testing.assert_allclose(row, sphere_kernel_coefficients(b, L), rtol=1e-14, atol=0)


@pytest.mark.parametrize("beta", [0.01, 0.5, 4.0, 16.0, 64.0, 256.0])
def test_tail_bound_holds_and_is_tight(beta):
    """The proven bound is above the true tail (40-digit sums) and within 1e-8 of it (continued-fraction
    bound, margin 1e-9); the Chernoff bound (used for huge beta) is above it too."""
    for L in (0, 3, 10, 22, 40, 80):
        true, bound = true_tail(beta, L), sphere_tail_bound(beta, L)
        assert true <= bound <= true * (1 + 1e-8), (L, true, bound)
        assert math.exp(S._log_chernoff(beta, L)) >= true


def test_continued_fraction_sweeps_bound_the_ratios_from_above():
    """The sweeps behind the bound give upper bounds of r_l = i_l / i_{l-1} (40-digit values) however close to
    their start (there the truncated continued fraction is far from r_l: a lower bound would show)."""
    beta, top = 16.0, 30
    true_tail(beta, top)  # keeps g_0 .. g_31
    g = _TERMS[beta]
    with mpmath.workdps(DIGITS):
        r = [float(g[l] / g[l - 1] * (2 * l - 1) / (2 * l + 1)) for l in range(1, top + 1)]
    for beyond in (1, 2, 3, 41):
        bounds = S._ratio_upper_bounds(beta, top, beyond)
        assert all(bounds[l] >= r[l - 1] * (1 - 1e-15) for l in range(1, top + 1)), beyond
        if beyond < 41:
            assert bounds[top] > r[top - 1] * (1 + 1e-6)  # near the start: strictly above


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_degree_is_the_smallest_with_a_tail_below_the_unit_roundoff(dtype):
    """sphere_degree: the true tail at L is below the unit roundoff, at L - 1 above it (the bound is tight);
    the degrees of the module's table; one degree serves every smaller beta (the tail increases with beta)."""
    u = float(np.finfo(dtype).eps) / 2
    degrees = [sphere_degree(b, dtype) for b in (1.0, 4.0, 16.0, 64.0)]
    assert degrees == ([14, 22, 38, 71] if dtype == "float64" else [8, 13, 24, 47])
    for beta, L in zip((1.0, 4.0, 16.0, 64.0), degrees):
        assert true_tail(beta, L) <= u < true_tail(beta, L - 1) * (1 + 1e-8)
    grid = np.linspace(0.0, 16.0, 65)
    bounds = [sphere_tail_bound(b, 38) for b in grid]
    assert all(a <= b for a, b in itertools.pairwise(bounds))
    assert sphere_degree(0.0) == 0 and sphere_degree(4.0, tol=1e-6) == 12


def test_bad_input_is_refused_in_one_sentence():
    x = cloud(0, 5)
    calls = [lambda: sphere_degree(float("nan")), lambda: sphere_degree(float("inf")), lambda: sphere_degree(-1.0),
             lambda: sphere_degree(4.0, "int32"), lambda: sphere_degree(4.0, tol=2.0),
             lambda: sphere_degree(1e4), lambda: sphere_tail_bound(-1.0, 3), lambda: sphere_tail_bound(1.0, -1),
             lambda: sphere_kernel_coefficients(-1.0, 3), lambda: sphere_attention(x, -1.0),
             lambda: sphere_attention(x, float("nan"), degree=3), lambda: sphere_attention(x[:, :2], 1.0),
             lambda: sphere_attention(x, 1.0, normalisation="sum"),
             lambda: jax.jit(lambda b: sphere_attention(x, b))(1.0)]
    for call in calls:
        with pytest.raises(InputError) as err:
            call()
        message = str(err.value)
        assert message.endswith(".") and ". " not in message.rstrip("."), message


# -- the harmonics -----------------------------------------------------------------------------------------


def test_harmonics_satisfy_the_addition_theorem_and_are_finite_at_the_poles():
    """sum_m Y_lm(x) Y_lm(y) = (2l+1) P_l(<x, y>) for every l <= 30, with the poles among the points (no value
    is NaN there). Tolerance (2l+1) (1e-13 + l (l+1) 4u): the recurrence's rounding (it grows like l^2 u at
    worst), plus the reference's own, P_l at an inner product rounded by ~4u (|P_l'| <= l (l+1) / 2)."""
    L = 30
    x = jnp.concatenate([cloud(3, 60), jnp.array([[0.0, 0.0, 1.0], [0.0, 0.0, -1.0]])])
    table = np.asarray(jax.jit(S._harmonics, static_argnums=1)(x.T, L))  # (L+1, 2, L+1, n)
    assert np.isfinite(table).all()
    degree = S._recurrence(L).degree
    t = np.clip(np.asarray(x @ x.T), -1, 1)
    for l in range(L + 1):
        rows = table[np.broadcast_to((degree == l)[:, None, :], table.shape[:3])]
        err = np.abs(rows.T @ rows - (2 * l + 1) * scipy.special.eval_legendre(l, t)).max()
        assert err < (2 * l + 1) * (1e-13 + l * (l + 1) * 2.0**-51), (l, err)


# -- the attention against the direct sum ------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [jnp.float64, jnp.float32])
@pytest.mark.parametrize("normalisation", ["softmax", "mean"])
def test_attention_matches_the_direct_sum(normalisation, dtype):
    """n = 300 tokens, beta in {0.5, 4, 16}, the degree of the dtype: against the float64 direct sum within
    2 (L+1)^2 u (module docstring of this file); float32 in, float32 out."""
    x = cloud(1, 300)
    for beta in BETAS:
        out = sphere_attention(x.astype(dtype), beta, normalisation=normalisation)
        assert out.dtype == dtype and out.shape == (300, 3)
        assert rel_err(out, direct(x, beta, normalisation)) < tol(beta, dtype), beta


def test_blocked_path_equals_the_rolled_path():
    """n = 700 in blocks of at most 256 (three blocks of 234, the last padded with 2 tokens of weight 0): the
    unrolled blocked program against the rolled one (both float64) and the direct sum, both normalisations."""
    x = cloud(2, 700)
    for normalisation in ("softmax", "mean"):
        rolled = sphere_attention(x, 4.0, normalisation=normalisation)
        blocked = sphere_attention(x, 4.0, normalisation=normalisation, _block=256)
        assert rel_err(blocked, rolled) < tol(4.0, jnp.float64)
        assert rel_err(blocked, direct(x, 4.0, normalisation)) < tol(4.0, jnp.float64)
    assert S._ROLLED_MAX < 4096  # a larger cloud takes the blocked program by default
    big = cloud(4, 4096)
    assert rel_err(sphere_attention(big, 4.0), sphere_attention(big, 4.0, _block=1024)) < tol(4.0, jnp.float64)


def test_traced_beta_needs_a_degree_and_then_matches():
    x = cloud(5, 200)
    out = jax.jit(lambda b: sphere_attention(x, b, degree=sphere_degree(16.0)))(jnp.float64(4.0))
    assert rel_err(out, direct(x, 4.0)) < tol(16.0, jnp.float64)


def test_tokens_off_the_sphere_attend_as_their_directions():
    """Tokens scaled by radii in [0.5, 2]: the attention of their directions x/|x|."""
    x = cloud(6, 200)
    r = jax.random.uniform(jax.random.key(7), (200, 1), jnp.float64, 0.5, 2.0)
    out = sphere_attention(r * x, 4.0)
    assert rel_err(out, sphere_attention(x, 4.0)) < 1e-14
    assert rel_err(out, direct(r * x, 4.0)) < tol(4.0, jnp.float64)


# -- derivatives -------------------------------------------------------------------------------------------


def _loss(attention):
    probe = jnp.cos(jnp.arange(600.0).reshape(200, 3))
    return lambda x, b: jnp.sum(jnp.sin(attention(x, b) + probe))


@pytest.mark.parametrize("normalisation", ["softmax", "mean"])
def test_gradients_match_the_direct_sum_and_finite_differences(normalisation):
    """Reverse mode with respect to the tokens (the north pole among them) and beta: equal to the direct sum's
    (of the directions) to 1e-12 relative; the tokens' forward mode along tangent vectors equals the raw direct
    sum's (no normalisation: on the sphere they agree in every tangent direction); both against central
    differences (step 1e-5: truncation ~1e-10 relative, rounding ~1e-11)."""
    L = sphere_degree(4.0)
    x = cloud(8, 200).at[0].set(jnp.array([0.0, 0.0, 1.0]))
    fast = _loss(lambda x, b: sphere_attention(x, b, degree=L, normalisation=normalisation))
    slow = _loss(lambda x, b: direct(x, b, normalisation))
    gf, gd = jax.grad(fast, argnums=(0, 1))(x, 4.0), jax.grad(slow, argnums=(0, 1))(x, 4.0)
    assert np.isfinite(np.asarray(gf[0])).all()
    assert rel_err(gf[0], gd[0]) < 1e-12 and abs(float(gf[1] - gd[1])) < 1e-12 * abs(float(gd[1]))
    tangent = jax.random.normal(jax.random.key(9), x.shape, jnp.float64)
    tangent = tangent - jnp.sum(tangent * x, axis=1, keepdims=True) * x
    raw = _loss(lambda x, b: attend(b * x, x, x, impl="dense", normalisation=normalisation))
    _, jf = jax.jvp(lambda x: fast(x, 4.0), (x,), (tangent,))
    _, jr = jax.jvp(lambda x: raw(x, 4.0), (x,), (tangent,))
    assert abs(float(jf - jr)) < 1e-12 * abs(float(jr))
    h = 1e-5
    fd = (float(fast(x, 4.0 + h)) - float(fast(x, 4.0 - h))) / (2 * h)
    assert abs(float(gf[1]) - fd) < 1e-8 * max(1.0, abs(fd))
    fd = (float(fast(x + h * tangent, 4.0)) - float(fast(x - h * tangent, 4.0))) / (2 * h)
    assert abs(float(jf) - fd) < 1e-7 * max(1.0, abs(fd))


def test_gradient_through_the_blocked_path():
    """Reverse mode through the blocked program (scan and map over checkpointed blocks) equals the rolled one's."""
    x = cloud(10, 200)
    loss = lambda block: _loss(lambda x, b: sphere_attention(x, b, degree=13, _block=block))
    (gx_r, gb_r), (gx_b, gb_b) = (jax.grad(loss(block), argnums=(0, 1))(x, 4.0) for block in (None, 96))
    assert rel_err(gx_b, gx_r) < 1e-13 and abs(float(gb_b - gb_r)) < 1e-13 * abs(float(gb_r))
