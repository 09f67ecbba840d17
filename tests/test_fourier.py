"""The Fourier path on the circle (attention_impl="fourier") against the direct O(n^2) sum.

Tolerances follow the rounding analysis of attnflow/kernels/fourier.py: the kernel's series is exact to
the unit roundoff (truncation and aliasing below it), and the sums carry an absolute rounding
error of about n K u relative to the largest output, u = eps/2, times e^{a(1 - cos alpha)} (the
token's own weight in its denominator is at least e^{-a(1 - cos alpha)}). Each comparison allows
that bound, relative to the largest value compared; the observed errors are 100-1000x smaller.
"""

from __future__ import annotations

import functools
import math
import sys
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attnflow
from attnflow import AttentionFlow, AttentionWeights, InputError
from attnflow.kernels import fourier
from attnflow.dynamics import normalise, sphere_flow
from attnflow.integrate import EulerStepper, sphere_shift

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import baselines  # noqa: E402

pytestmark = pytest.mark.usefixtures("x64")  # float64 references; float32 runs pass explicit dtypes


def rot(angle):
    return np.array([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]])


def cloud(seed, n, dtype=jnp.float64):
    """n random angles and their unit tokens (fixed seed)."""
    th = np.random.default_rng(seed).uniform(0, 2 * np.pi, n)
    return jnp.asarray(th, dtype), jnp.stack([jnp.cos(jnp.asarray(th, dtype)), jnp.sin(jnp.asarray(th, dtype))], 1)


# scores beta x_i^T Q^T K x_j with Q^T K = 1.2 R(-0.25): a = 2.4, alpha = -0.25, a (1 - cos alpha) = 0.074
BETA, Q0, K0 = 2.0, 1.2 * rot(0.2), rot(-0.05)
ALPHA_LOSS = math.exp(2.4 * (1 - math.cos(0.25)))
#: every Fourier field of the tests takes its modes for this bound of a, so that fields of one dtype,
#: normalisation and size share one compiled program (the weights are traced arguments of `evaluate`)
BOUND = 3.0
N = 400  # tokens: above the crossover of "auto" (4 (K + 1) = 84 at K = 20)


def rounding_tol(n, dtype, loss=ALPHA_LOSS):
    """The rounding bound n K u e^{a(1 - cos alpha)} (relative to the largest value; K the modes of BOUND),
    times 4 for the few roundings of the evaluation (Clenshaw's chain, the division by D)."""
    u = float(jnp.finfo(dtype).eps) / 2
    return 4 * n * (fourier.fourier_modes(BOUND, dtype) + 1) * u * loss


def circle_flow(Q, K, V, beta=BETA, impl="fourier", **kw):
    return sphere_flow(Q, K, V, beta, attention_impl=impl, fourier_max_score=BOUND if impl == "fourier" else None,
                       **kw)


evaluate = eqx.filter_jit(lambda field, x: field(0.0, x))


def rel_err(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    assert np.isfinite(a).all() and np.isfinite(b).all(), "non-finite values are not compared"
    return float(np.abs(a - b).max() / np.abs(b).max())


# -- the bound and the coefficients ------------------------------------------------------------------


def test_tail_bound_holds_against_bessel_coefficients():
    from scipy.special import ive  # e^{-a} I_m(a) to double precision (relative)

    m = np.arange(4000)
    for a in (0.3, 1.0, 4.0, 16.0, 60.0, 250.0):
        g = ive(m, a)
        assert abs(g[0] + 2 * g[1:].sum() - 1) < 1e-13  # the coefficients sum to g(0) = 1: the reference is whole
        K64 = fourier.fourier_modes(a, "float64")
        for K in range(max(0, K64 - 12), K64 + 3):
            true_tail = 2 * g[K + 1:].sum()
            # the bound exceeds the tail by >= 1e-5 relative here, far above ive's ~1e-15 relative error
            assert true_tail <= fourier.tail_bound(a, K), (a, K)
        for dtype in ("float64", "float32"):
            K = fourier.fourier_modes(a, dtype)
            u = float(np.finfo(dtype).eps) / 2
            assert 2 * fourier.tail_bound(a, K) <= u < 2 * fourier.tail_bound(a, K - 1)  # the smallest such K
            assert 2 * (2 * g[K + 1:].sum()) <= u  # and the true truncation + aliasing is below rounding


def test_coefficients_are_bessel_functions_to_rounding():
    from scipy.special import ive

    a, alpha = 40.0, -2.5  # K = 73 modes on M = 256 samples: aliasing is in play
    K = fourier.fourier_modes(a)
    re, im = jax.jit(fourier.kernel_coefficients, static_argnums=2)(a * math.cos(alpha), a * math.sin(alpha), K)
    ref = ive(np.arange(K + 1), a) * np.exp(-1j * np.arange(K + 1) * alpha)  # c_m = g_m e^{-i m alpha}
    # aliasing adds at most the tail (<= u), the FFT of M samples rounds to a few u
    assert np.abs(np.asarray(re) + 1j * np.asarray(im) - ref).max() < 8 * np.finfo(np.float64).eps


# -- one field evaluation against the direct sum ------------------------------------------------------


@pytest.mark.parametrize("normalisation", ["softmax", "mean"])
@pytest.mark.parametrize("dtype", [jnp.float64, jnp.float32])
def test_field_matches_direct_sum(dtype, normalisation):
    """A random cloud and random values V."""
    _, x = cloud(1, N, dtype)
    V = np.random.default_rng(2).normal(size=(2, 2))
    Q, K, V = (jnp.asarray(a, dtype) for a in (Q0, K0, V))
    fast = evaluate(circle_flow(Q, K, V, normalisation=normalisation), x)
    direct = evaluate(circle_flow(Q, K, V, impl="dense", normalisation=normalisation), x)
    assert fast.dtype == dtype
    assert rel_err(fast, direct) < rounding_tol(N, dtype)


def test_tokens_off_the_circle_attend_with_their_directions():
    """The path reads the angles only, and the tangent projection ignores the radii: the field at r_i x_i
    is the direct field at x_i."""
    _, x = cloud(3, N)
    radii = jnp.asarray(np.random.default_rng(4).uniform(0.5, 2.0, (N, 1)))
    fast = evaluate(circle_flow(Q0, K0, np.eye(2)), radii * x)
    assert rel_err(fast, evaluate(circle_flow(Q0, K0, np.eye(2), impl="dense"), x)) < rounding_tol(N, jnp.float64)


def test_two_heads_match_direct_sum():
    _, x = cloud(5, N)
    rng = np.random.default_rng(6)
    w = AttentionWeights(np.stack([Q0, 0.5 * rot(1.0)]), np.stack([K0, rot(1.1)]), rng.normal(size=(2, 2, 2)),
                         np.array([BETA, 3.0]), v_bias=rng.normal(size=(2, 2)), axes=("head",))
    fast = evaluate(AttentionFlow(w, attention_impl="fourier"), x)
    direct = evaluate(AttentionFlow(w, attention_impl="dense"), x)
    loss = max(ALPHA_LOSS, math.exp(1.5 * (1 - math.cos(0.1))))  # the second head: a = 1.5, alpha = 0.1
    assert rel_err(fast, direct) < rounding_tol(N, jnp.float64, loss)
    assert not np.allclose(direct, evaluate(AttentionFlow(w.head(0), attention_impl="dense"), x))  # both heads count


def test_circle_attention_of_angles():
    th, x = cloud(7, N)
    fast = jax.jit(lambda th: fourier.circle_attention(th, 3.0, 0.1, modes=fourier.fourier_modes(BOUND)))(th)
    direct = attnflow.softmax(3.0 * jnp.cos(th[:, None] - th[None, :] - 0.1)) @ x
    assert rel_err(fast, direct) < rounding_tol(N, jnp.float64, math.exp(3.0 * (1 - math.cos(0.1))))


@pytest.fixture
def small_power_tables(monkeypatch):
    """The power tables' limit lowered to 1024 tokens, so that a cloud of about 4100 tokens takes the paths a cloud
    of over 8192 tokens takes by default (a fifth of the direct sum's work; the bounds are linear in n): the moments
    without tables, and two evaluation blocks, each above the tables' size, through the unrolled Clenshaw chains.
    Returns the check that a cloud of n tokens does."""
    monkeypatch.setattr(fourier, "_TABLE_MAX", 1024)

    def check(n: int):
        blocks, size = fourier._split(n, fourier._EVAL_BLOCK, least=2)
        assert blocks == 2 and size > fourier._TABLE_MAX, (blocks, size)

    return check


def test_large_cloud_matches_tiled_direct_sum(monkeypatch, small_power_tables):
    """Above the power-table size: the unrolled Clenshaw chains over blocks of tokens and the blocked moments
    (power tables up to 1024 tokens and moment blocks of at most 2048 tokens here: 4099 is prime, so three
    blocks of 1367, the last padded by two tokens; two evaluation blocks of 2050), against the tiled direct sum."""
    monkeypatch.setattr(fourier, "_BLOCK", 2048)
    n = 4099
    assert fourier._split(n, fourier._BLOCK) == (3, 1367)
    small_power_tables(n)
    _, x = cloud(17, n)
    fast = evaluate(circle_flow(Q0, K0, np.eye(2)), x)
    assert rel_err(fast, evaluate(circle_flow(Q0, K0, np.eye(2), impl="chunked"), x)) < rounding_tol(n, jnp.float64)


@pytest.mark.parametrize("normalisation", ["softmax", "mean"])
def test_two_heads_of_a_large_cloud_match_tiled_direct_sum(normalisation, small_power_tables):
    """Two heads above the power-table size (power tables up to 1024 tokens here; 4099 tokens: two evaluation
    blocks of 2050, the second padded): each head's means leave the blocks as (head, block, 2) and are joined
    per head, for both normalisations."""
    n = 4099
    small_power_tables(n)
    _, x = cloud(19, n)
    rng = np.random.default_rng(20)
    w = AttentionWeights(np.stack([Q0, 0.5 * rot(1.0)]), np.stack([K0, rot(1.1)]), rng.normal(size=(2, 2, 2)),
                         np.array([BETA, 3.0]), axes=("head",))
    fast = evaluate(AttentionFlow(w, attention_impl="fourier", normalisation=normalisation), x)
    direct = evaluate(AttentionFlow(w, attention_impl="chunked", normalisation=normalisation), x)
    loss = max(ALPHA_LOSS, math.exp(1.5 * (1 - math.cos(0.1))))  # the second head: a = 1.5, alpha = 0.1
    assert rel_err(fast, direct) < rounding_tol(n, jnp.float64, loss)
    one = evaluate(AttentionFlow(w.head(1), attention_impl="chunked", normalisation=normalisation), x)
    assert rel_err(fast, one) > 1e-3  # both heads count


@pytest.mark.parametrize("dtype", [jnp.float64, jnp.float32])
def test_long_recurrences_in_pieces_match_tiled_direct_sum(dtype, small_power_tables):
    """beta = 32 needs 51 modes in float64 (33 in float32): in float64 the Clenshaw chains run past
    the unrolled length as a scan over pieces (the state handed from piece to piece), in float32 as one
    unrolled chain; both against the tiled direct sum, with the bound of rounding_tol at that K."""
    n, beta = 4100, 32.0  # two blocks of 2050 tokens: above the power-table size
    small_power_tables(n)
    _, x = cloud(23, n, dtype)
    eye = np.eye(2, dtype=dtype)
    field = lambda impl: sphere_flow(eye, eye, eye, beta, attention_impl=impl,
                                     fourier_max_score=beta if impl == "fourier" else None)
    modes = fourier.fourier_modes(beta, dtype)
    assert (modes + 1 > fourier._UNROLLED) == (dtype == jnp.float64)
    err = rel_err(evaluate(field("fourier"), x), evaluate(field("chunked"), x))
    assert err < 4 * n * (modes + 1) * float(jnp.finfo(dtype).eps) / 2


# -- derivatives ---------------------------------------------------------------------------------------


def test_field_gradients_match_direct_sum():
    """Reverse mode of one evaluation with normalisation="mean", with respect to the angles, Q, K (every
    direction, not only rotations), V and beta (softmax: through a whole solve below)."""
    th, _ = cloud(8, N)
    rng = np.random.default_rng(9)
    probe, V = jnp.asarray(rng.normal(size=(N, 2))), jnp.asarray(rng.normal(size=(2, 2)))

    @functools.partial(jax.jit, static_argnums=0)
    def gradient(impl, *args):
        def loss(th, Q, K, V, beta):
            x = jnp.stack([jnp.cos(th), jnp.sin(th)], 1)
            return jnp.sum(circle_flow(Q, K, V, beta, impl, normalisation="mean")(0.0, x) * probe)
        return jax.grad(loss, argnums=range(5))(*args)

    fast, direct = (gradient(impl, th, jnp.asarray(Q0), jnp.asarray(K0), V, BETA) for impl in ("fourier", "dense"))
    for f, d in zip(fast, direct):
        assert np.abs(np.asarray(d)).max() > 1e-3  # a gradient that is there
        assert rel_err(f, d) < rounding_tol(N, jnp.float64)


# -- whole solves --------------------------------------------------------------------------------------


def test_euler_solve_and_its_gradient_match_direct_sum():
    """Values and the reverse-mode gradient through every layer (softmax), with respect to the initial
    angles, beta and Q (every direction)."""
    layers = 12
    th0, x0 = cloud(10, N)
    stepper = EulerStepper(dt=0.25, num_layers=layers, shift=sphere_shift)
    probe = jnp.asarray(np.random.default_rng(11).normal(size=(N, 2)))
    V = jnp.asarray(np.eye(2) + 0.2 * rot(0.5))

    @functools.partial(jax.jit, static_argnums=0)
    def solve_and_grad(impl, *args):
        def final(th0, beta, Q):
            x0 = jnp.stack([jnp.cos(th0), jnp.sin(th0)], 1)
            return stepper.solve(circle_flow(Q, jnp.eye(2), V, beta, impl), x0).ys[-1]

        end, vjp = jax.vjp(final, *args)
        return (end,) + vjp(probe)

    args = (th0, 2.5, jnp.asarray(rot(0.1)))  # a = 2.5
    (end_f, *grad_f), (end_d, *grad_d) = (solve_and_grad(impl, *args) for impl in ("fourier", "dense"))
    assert np.abs(np.asarray(end_d - x0)).max() > 0.1  # the tokens moved
    # each layer adds the field's rounding bound; the clustering flow contracts differences
    tol = layers * rounding_tol(N, jnp.float64, math.exp(2.5 * (1 - math.cos(0.1))))
    assert rel_err(end_f, end_d) < tol
    for f, d in zip(grad_f, grad_d):
        assert np.abs(np.asarray(d)).max() > 1e-3  # a gradient that is there
        assert rel_err(f, d) < tol


def test_simulate_fourier_with_a_batch_of_beta():
    n = 150
    _, x0 = cloud(12, n)
    betas = jnp.array([0.5, 2.0, 6.0])  # traced inside simulate's vmap: its bound is read on the host
    run = lambda impl: attnflow.simulate(jnp.stack([x0] * 3), jnp.eye(2), jnp.eye(2), jnp.eye(2), t1=2.0, dt=0.25,
                                         method="euler", shift="sphere", beta=betas, batch=("x0", "beta"),
                                         dtype="float64", attention_impl=impl, save_every=8)
    fast, direct = run("fourier"), run("dense")
    u, K = 2.0**-53, fourier.fourier_modes(6.0)
    assert rel_err(fast.states, direct.states) < 8 * 4 * n * (K + 1) * u  # 8 layers of the field's bound, a = 6


def test_torch_sphere_baseline_matches_attnflow():
    pytest.importorskip("torch")
    _, x0 = cloud(13, 40)
    V = jnp.asarray(np.eye(2) + 0.3 * np.random.default_rng(14).normal(size=(2, 2)))
    ref = EulerStepper(dt=0.2, num_layers=10, shift=sphere_shift).solve(circle_flow(Q0, K0, V, impl="dense"), x0)
    out = baselines.torch_sphere_euler(np.asarray(x0), Q0, K0, np.asarray(V), dt=0.2, num_steps=10, beta=BETA,
                                       block=16)
    assert np.abs(np.asarray(ref.ys[-1]) - np.asarray(x0)).max() > 0.05  # the tokens moved
    # both are direct sums in float64: ten layers of summation rounding, ~40 terms each
    assert rel_err(out, ref.ys[-1]) < 10 * 40 * 2.0**-52


# -- where it applies -----------------------------------------------------------------------------------


def test_refused_where_it_does_not_apply():
    I2, I3 = jnp.eye(2), jnp.eye(3)
    with pytest.raises(InputError, match="d = 3"):
        sphere_flow(I3, I3, I3, attention_impl="fourier")
    with pytest.raises(InputError, match="mask"):
        sphere_flow(I2, I2, I2, attention_impl="fourier", mask="causal")
    with pytest.raises(InputError, match="scaled rotation"):
        sphere_flow(jnp.array([[1.0, 0.0], [0.0, 2.0]]), I2, I2, attention_impl="fourier")
    with pytest.raises(InputError, match="rescaled"):
        attnflow.RescaledFlow(I2, I2, I2, attention_impl="fourier")
    with pytest.raises(InputError, match="bias"):
        AttentionFlow(AttentionWeights(I2, I2, I2, q_bias=jnp.ones(2)), attention_impl="fourier")
    with pytest.raises(InputError, match="below the score scale"):
        sphere_flow(I2, I2, I2, 3.0, attention_impl="fourier", fourier_max_score=2.0)
    with pytest.raises(InputError, match="fourier_max_score"):  # traced weights and no bound
        jax.jit(lambda beta: sphere_flow(I2, I2, I2, beta, attention_impl="fourier")(0.0, jnp.eye(2)))(1.0)
    with pytest.raises(InputError, match="circle"):
        attnflow.attend(I2, I2, I2, impl="fourier")
    x0 = normalise(jnp.ones((4, 2)) + jnp.arange(8.0).reshape(4, 2))
    with pytest.raises(InputError, match="shift='sphere'"):
        attnflow.simulate(x0, I2, I2, I2, t1=1.0, attention_impl="fourier")
    with pytest.raises(InputError, match="unit circle"):
        attnflow.simulate(2 * x0, I2, I2, I2, t1=1.0, dt=0.5, method="euler", shift="sphere", attention_impl="fourier")
    with pytest.raises(InputError, match="scaled rotation"):  # a batch member that is not a rotation
        attnflow.simulate(jnp.stack([x0, x0]), jnp.stack([I2, jnp.diag(jnp.array([1.0, 2.0]))]), I2, I2, t1=1.0,
                          dt=0.5, method="euler", shift="sphere", attention_impl="fourier", batch=("x0", "Q"))


def test_traced_weights_are_checked_at_run_time():
    """Weights that change after the field is built (here: traced arguments of the compiled evaluation)."""
    _, x = cloud(15, N)
    field = circle_flow(jnp.asarray(Q0), jnp.asarray(K0), jnp.eye(2))
    with_weights = lambda Q, beta: eqx.tree_at(lambda f: (f.inner.weights.Q, f.inner.weights.beta), field,
                                                (jnp.asarray(Q), jnp.asarray(beta)))
    assert np.isfinite(np.asarray(evaluate(with_weights(rot(0.3), 2.5), x))).all()  # below the bound: it runs
    with pytest.raises(Exception, match="not a scaled rotation"):
        jax.block_until_ready(evaluate(with_weights(np.diag([1.0, 0.5]), 2.5), x))
    with pytest.raises(Exception, match="exceeds fourier_max_score"):
        jax.block_until_ready(evaluate(with_weights(rot(0.3), 3.5), x))


def test_auto_takes_fourier_only_where_it_is_exact_and_faster():
    I2 = jnp.eye(2)
    _, x = cloud(16, N)
    auto = sphere_flow(I2, I2, I2, BOUND)
    assert auto.inner.fourier is not None
    assert auto.inner._takes_fourier(x) and not auto.inner._takes_fourier(x[:50])  # above the crossover only
    direct = evaluate(circle_flow(I2, I2, I2, BOUND, impl="dense"), x)
    assert rel_err(evaluate(auto, x), direct) < rounding_tol(N, jnp.float64, 1.0)
    never = {
        "tokens not kept on the circle": AttentionFlow(I2, I2, I2, 4.0),
        "d = 3": sphere_flow(jnp.eye(3), jnp.eye(3), jnp.eye(3), 4.0).inner,
        "a mask": sphere_flow(I2, I2, I2, 4.0, mask="causal").inner,
        "not a rotation": sphere_flow(jnp.diag(jnp.array([1.0, 2.0])), I2, I2).inner,
        "repulsive scores (alpha = pi)": sphere_flow(-I2, I2, I2, 4.0).inner,
        "a query bias": sphere_flow(AttentionWeights(I2, I2, I2, q_bias=jnp.ones(2))).inner,
    }
    for why, flow in never.items():
        assert flow.fourier is None, why
    plans = []
    jax.jit(lambda beta: plans.append(sphere_flow(I2, I2, I2, beta).inner.fourier) or beta)(4.0)
    assert plans == [None]  # traced weights: "auto" cannot check them
