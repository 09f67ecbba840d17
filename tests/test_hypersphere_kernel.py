"""The path on S^(d-1), d >= 3 (attnflow.kernels.hypersphere, O(n H)), against the direct O(n^2) sum, SciPy's
Gegenbauer polynomials and Bessel functions, and the S^2 module it generalises; and the attention flows that take it.

Tolerances follow the rounding analysis of attnflow/kernels/hypersphere.py: the kernel's series is exact to the unit
roundoff u (its tail below u), every harmonic term of D_i and N_i is bounded, and the evaluation sums H of them (H the
number of harmonics of degree <= L), so the attention means carry an error of at most a few H u relative to the
largest output in these spread clouds; the comparisons allow 2 H u (as the S^2 tests allow 2 (L+1)^2 u, its H).
The observed errors are about (L+1) u, hundreds of times smaller.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.special

from attnflow import AttentionFlow, AttentionWeights, InputError, simulate
from attnflow.dynamics import IdentitySphereFlow, normalise, sphere_flow
from attnflow.integrate import EulerStepper, sphere_shift
from attnflow.kernels import attend
from attnflow.kernels import hypersphere as HS
from attnflow.kernels.hypersphere import (
    harmonic_count,
    harmonic_total,
    hypersphere_attention,
    hypersphere_degree,
    hypersphere_harmonics,
    hypersphere_kernel_coefficients,
    hypersphere_sums,
    hypersphere_tail_bound,
)
from attnflow.kernels.sphere import (
    TOKENS_PER_HARMONIC,
    HarmonicPlan,
    harmonic_plan,
    sphere_attention,
    sphere_degree,
    sphere_kernel_coefficients,
)

pytestmark = pytest.mark.usefixtures("x64")


def cloud(seed: int, n: int, d: int, dtype=jnp.float64) -> jax.Array:
    """n tokens uniform on S^(d-1) (fixed seed)."""
    return normalise(jax.random.normal(jax.random.key(seed), (n, d), jnp.float64)).astype(dtype)


def direct(x, beta, normalisation="softmax"):
    u = x / jnp.linalg.norm(x, axis=1, keepdims=True)
    return attend(beta * u, u, u, impl="dense", normalisation=normalisation)


def scale(beta: float, d: int, dtype) -> float:
    """2 H u: the evaluation's H bounded terms (module docstring, "Rounding")."""
    return 2 * harmonic_total(d, hypersphere_degree(beta, d, dtype)) * float(jnp.finfo(dtype).eps) / 2


def rel_err(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    assert np.isfinite(a).all() and np.isfinite(b).all(), "non-finite values are not compared"
    return float(np.abs(a - b).max() / np.abs(b).max())


def test_counts_of_harmonics_are_the_dimensions_of_the_polynomial_spaces():
    for d in (3, 4, 5, 7):
        for L in (0, 1, 2, 9):
            _, degrees = hypersphere_harmonics(cloud(0, 2, d), L)
            assert [int(np.sum(degrees == l)) for l in range(L + 1)] == [harmonic_count(d, l) for l in range(L + 1)]
            assert degrees.size == harmonic_total(d, L)
            # dim of the polynomials of degree <= L in d variables, modulo |x|^2 - 1: C(L+d, d) - C(L-2+d, d)
            assert harmonic_total(d, L) == math.comb(L + d, d) - (math.comb(L - 2 + d, d) if L >= 2 else 0)
    assert [harmonic_count(3, l) for l in range(5)] == [1, 3, 5, 7, 9]
    assert [harmonic_count(4, l) for l in range(5)] == [1, 4, 9, 16, 25]


@pytest.mark.parametrize("d", [3, 4, 5, 7])
def test_addition_theorem_against_scipy_gegenbauer(d):
    """sum_{h in l} Y_h(x) Y_h(y) = dim H_l C_l^lam(t) / C_l^lam(1): true only for an orthonormal basis of H_l (the
    reproducing kernel of any other basis is not zonal), so this checks degree, orthogonality and normalisation."""
    L, lam = 8, (d - 2) / 2
    x = cloud(d, 60, d)
    Y, degrees = hypersphere_harmonics(x, L)
    t = np.clip(np.asarray(x @ x.T), -1, 1)
    for l in range(L + 1):
        block = np.asarray(Y[:, degrees == l])
        gegenbauer = scipy.special.eval_gegenbauer
        exact = harmonic_count(d, l) * gegenbauer(l, lam, t) / gegenbauer(l, lam, 1.0)
        # the sum of dim H_l products of harmonics bounded by sqrt(dim H_l): rounding of order dim H_l L u
        assert np.abs(block @ block.T - exact).max() <= 50 * harmonic_count(d, l) * (L + 1) * 2.0**-53


@pytest.mark.parametrize("d", [4, 6])
def test_coefficients_against_scipy_bessel(d):
    """g_l = e^-b Gamma(lam) (b/2)^-lam (l + lam) I_{l+lam}(b) C_l^lam(1), lam = (d-2)/2."""
    lam = (d - 2) / 2
    for beta in (0.3, 4.0, 30.0):
        L = 40
        g = np.asarray(hypersphere_kernel_coefficients(beta, L, d))
        l = np.arange(L + 1)
        log_c1 = scipy.special.gammaln(l + 2 * lam) - scipy.special.gammaln(2 * lam) - scipy.special.gammaln(l + 1)
        exact = (scipy.special.ive(l + lam, beta) * (l + lam) * np.exp(log_c1 + scipy.special.gammaln(lam)
                                                                     - lam * np.log(beta / 2)))
        keep = exact > 1e-250
        np.testing.assert_allclose(g[keep], exact[keep], rtol=1e-12)
        assert np.all(g > 0) and g.sum() <= 1 + 1e-15


def test_on_s2_it_is_the_s2_module():
    """The general construction at d = 3 against attnflow.kernels.sphere (its own recurrence and closed-form g_0)."""
    for beta in (0.5, 4.0, 64.0):
        L = sphere_degree(beta)
        assert hypersphere_degree(beta, 3) == L
        np.testing.assert_allclose(hypersphere_kernel_coefficients(beta, L, 3), sphere_kernel_coefficients(beta, L),
                                   rtol=1e-13)
    for beta in (0.1, 1.0, 4.0, 16.0, 64.0):
        assert hypersphere_degree(beta, 3, "float32") == sphere_degree(beta, "float32")
    x = cloud(1, 300, 3)
    for norm in ("softmax", "mean"):
        assert rel_err(hypersphere_attention(x, 4.0, normalisation=norm),
                       sphere_attention(x, 4.0, normalisation=norm)) <= scale(4.0, 3, jnp.float64)


def test_tail_bound_holds_and_the_degree_is_the_smallest():
    for d in (4, 5, 8):
        lam = (d - 2) / 2
        for beta in (1.0, 4.0, 20.0):
            L = hypersphere_degree(beta, d)
            l = np.arange(0, 400)
            log_c1 = scipy.special.gammaln(l + 2 * lam) - scipy.special.gammaln(2 * lam) - scipy.special.gammaln(l + 1)
            g = scipy.special.ive(l + lam, beta) * (l + lam) * np.exp(log_c1 + scipy.special.gammaln(lam)
                                                                      - lam * np.log(beta / 2))
            for degree in (L - 1, L):
                true_tail = g[degree + 1:].sum()
                bound = hypersphere_tail_bound(beta, degree, d)
                assert true_tail <= bound <= true_tail * (1 + 1e-6)
            assert hypersphere_tail_bound(beta, L, d) <= 2.0**-53 < hypersphere_tail_bound(beta, L - 1, d)
    # a higher dimension needs at least the degree of a lower one (the kernel's series decays more slowly)
    degrees = [hypersphere_degree(16.0, d) for d in (3, 4, 5, 8)]
    assert degrees == sorted(degrees)


@pytest.mark.parametrize("d", [4, 5])
@pytest.mark.parametrize("normalisation", ["softmax", "mean"])
def test_attention_equals_the_direct_sum(d, normalisation):
    x = cloud(10 + d, 250, d)
    for beta in (1.0, 6.0):
        fast = hypersphere_attention(x, beta, normalisation=normalisation)
        assert rel_err(fast, direct(x, beta, normalisation)) <= scale(beta, d, jnp.float64)
    x32 = cloud(20 + d, 250, d, jnp.float32)
    fast = hypersphere_attention(x32, 4.0, normalisation=normalisation)
    assert fast.dtype == jnp.float32
    assert rel_err(fast, direct(x32.astype(jnp.float64), 4.0, normalisation)) <= scale(4.0, d, jnp.float32)


def test_blocks_and_padding_change_nothing():
    """Many blocks, the last one padded (n = 1003 in 16 blocks of 63), equal one block and the direct sums."""
    x = cloud(3, 1003, 4)
    L = hypersphere_degree(3.0, 4)
    D1, N1 = hypersphere_sums(x, 3.0, L)
    assert HS._block_size(1003, harmonic_total(4, L)) == 1003
    assert HS._block_size(1003, harmonic_total(4, L), 64) == 63
    D2, N2 = hypersphere_sums(x, 3.0, L, _block=64)
    assert rel_err(D2, D1) <= 1e-14 and rel_err(N2, N1) <= 1e-14
    E = jnp.exp(3.0 * (x @ x.T - 1))
    assert rel_err(D2, E.sum(1)) <= scale(3.0, 4, jnp.float64) and rel_err(N2, E @ x) <= scale(3.0, 4, jnp.float64)


def test_gradients_in_tokens_and_beta_forward_and_reverse_equal_the_direct_sum():
    """Reverse mode in the tokens and in beta, forward mode in the tokens, of the harmonic path against the direct
    sum's (each derivative one jitted program: op by op, the path's recurrences compile primitive by primitive),
    and beta's derivative against central differences of the path itself."""
    d, beta = 4, 3.0
    x = cloud(30, 120, d)
    L = hypersphere_degree(3.5, d)  # a degree for beta up to 3.5: beta is traced under grad
    weights = jax.random.normal(jax.random.key(31), (120, d))

    def loss(x, b, fast):
        out = hypersphere_attention(x, b, degree=L) if fast else direct(x, b)
        return jnp.sum(out * weights)

    def along_sphere(g):  # the path reads directions: its derivative along x_i itself is 0 by construction
        return g - jnp.sum(g * x, axis=1, keepdims=True) * x

    tangent = along_sphere(jax.random.normal(jax.random.key(32), x.shape))

    @functools.partial(jax.jit, static_argnums=2)
    def derivatives(x, b, fast):
        grad_x, grad_b = jax.grad(loss, (0, 1))(x, b, fast)
        return along_sphere(grad_x), grad_b, jax.jvp(lambda y: loss(y, b, fast), (x,), (tangent,))[1]

    path = derivatives(x, beta, True)
    for fast, slow in zip(path, derivatives(x, beta, False)):
        assert rel_err(fast, slow) <= 10 * scale(3.5, d, jnp.float64)
    # and beta's derivative against central differences of the path itself (step 1e-5: error ~ 1e-10)
    h = 1e-5
    value = jax.jit(loss, static_argnums=2)
    fd = (value(x, beta + h, True) - value(x, beta - h, True)) / (2 * h)
    assert abs(float(path[1]) - float(fd)) <= 1e-7 * abs(float(fd))


def test_flows_take_the_path_on_s3_with_any_value_matrix_and_heads():
    d = 4
    I = np.eye(d)
    x = cloud(40, 200, d)
    V = I + 0.3 * jax.random.normal(jax.random.key(41), (d, d))
    for norm in ("softmax", "mean"):
        fast = sphere_flow(I, I, V, 4.0, attention_impl="harmonic", normalisation=norm)(0.0, x)
        slow = sphere_flow(I, I, V, 4.0, attention_impl="dense", normalisation=norm)(0.0, x)
        assert rel_err(fast, slow) <= scale(4.0, d, jnp.float64)
        a = IdentitySphereFlow(4.0, normalisation=norm, attention_impl="harmonic").vector_field_with_aux(0.0, x, None)
        b = IdentitySphereFlow(4.0, normalisation=norm, attention_impl="dense").vector_field_with_aux(0.0, x, None)
        assert rel_err(a[0], b[0]) <= scale(4.0, d, jnp.float64) and rel_err(a[1], b[1]) <= scale(4.0, d, jnp.float64)
    # two heads with scaled identities beta Q_h^T K_h = c_h I (c = 2, 4.5) and a value bias
    Q = np.stack([I, 1.5 * I])
    w = AttentionWeights(Q, Q, np.stack([V, V.T]), beta=2.0, v_bias=0.1 * np.ones((2, d)), axes=("head",))
    fast = AttentionFlow(w, attention_impl="harmonic")
    assert fast.harmonic.bound == pytest.approx(4.5)
    assert rel_err(fast(0.0, x), AttentionFlow(w, attention_impl="dense")(0.0, x)) <= scale(4.5, d, jnp.float64)


def test_layers_and_simulate_on_s3_stay_on_the_direct_sum_s_path():
    d = 4
    I = np.eye(d)
    x0 = cloud(50, 160, d)
    V = I + 0.3 * jax.random.normal(jax.random.key(51), (d, d))
    stepper = EulerStepper(dt=0.1, num_layers=10, shift=sphere_shift)
    fast = stepper.solve(sphere_flow(I, I, V, 3.0, attention_impl="harmonic"), x0).ys
    slow = stepper.solve(sphere_flow(I, I, V, 3.0, attention_impl="dense"), x0).ys
    assert float(jnp.abs(fast - slow).max()) <= 10 * scale(3.0, d, jnp.float64)
    kw = dict(beta=2.0, method="euler", dt=0.1, t1=0.3, shift="sphere", dtype="float64")
    fast = simulate(x0, I, I, V, attention_impl="harmonic", **kw).tokens
    slow = simulate(x0, I, I, V, attention_impl="dense", **kw).tokens
    assert float(jnp.abs(fast - slow).max()) <= 5 * scale(2.0, d, jnp.float64)


def test_auto_takes_the_path_on_s3_above_four_times_the_harmonics_only():
    d = 4
    I = np.eye(d)
    plan = harmonic_plan(AttentionWeights(I, I, I, beta=4.0), "auto", unit_tokens=True, owner="sphere_flow")
    assert plan == HarmonicPlan(4.0, auto=True)
    crossover = TOKENS_PER_HARMONIC * harmonic_total(d, hypersphere_degree(4.0, d))
    assert crossover == 4 * 4900
    assert not plan.applies(crossover - 1, d, jnp.float64) and plan.applies(crossover, d, jnp.float64)
    # on S^2 the rule is the one it was: 4 (L + 1)^2
    assert plan.applies(4 * 23**2, 3, jnp.float64) and not plan.applies(4 * 23**2 - 1, 3, jnp.float64)
    # a degree above MAX_DEGREE: "auto" does not take the path, explicit refuses in one sentence
    peaked = HarmonicPlan(2000.0, auto=True)
    assert not peaked.applies(10**9, 8, jnp.float64)
    # nor more than MAX_HARMONICS harmonics, however many tokens (S^5 at beta = 200: about 5e7)
    assert not HarmonicPlan(200.0, auto=True).applies(10**12, 6, jnp.float64)
    with pytest.raises(InputError, match="degree above"):
        HarmonicPlan(2000.0, auto=False).degree(jnp.float64, 8)


def test_bad_input_is_refused_in_one_sentence():
    x = cloud(0, 10, 4)
    cases = [
        (lambda: hypersphere_attention(jnp.ones((5, 2)), 1.0), "d >= 3"),
        (lambda: hypersphere_attention(x, -1.0), ">= 0"),
        (lambda: hypersphere_attention(x, 1.0, normalisation="max"), "normalisation"),
        (lambda: jax.jit(lambda b: hypersphere_attention(x, b))(1.0), "traced"),
        (lambda: hypersphere_degree(1.0, 2), "d must"),
        (lambda: hypersphere_degree(5000.0, 4), "degree above"),
        (lambda: hypersphere_degree(1.0, 4, "int32"), "floating dtype"),
        (lambda: hypersphere_attention(cloud(0, 10, 6), 200.0), "harmonics, more than"),
        (lambda: sphere_flow(np.eye(6), np.eye(6), np.eye(6), 200.0, attention_impl="harmonic"),
         "harmonics, more than"),
        (lambda: AttentionFlow(np.eye(2), np.eye(2), np.eye(2), attention_impl="harmonic"), "d >= 3"),
        (lambda: IdentitySphereFlow(1.0, attention_impl="harmonic")(0.0, jnp.ones((4, 2))), "d = 2"),
    ]
    for call, words in cases:
        with pytest.raises(InputError, match=words) as err:
            call()
        assert str(err.value).count(". ") <= 2, str(err.value)
