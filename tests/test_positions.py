"""Positions in the attention kernel: the ALiBi bias and rotary positions, dense against tiled, against
NumPy float64 references written here from the formulas, and against finite differences."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attnflow as af
from attnflow.errors import InputError
from attnflow.kernels import Positions, alibi_bias, alibi_slopes, as_positions, attend, chunked_attend, rotate
from attnflow.fields import build_field

N, R, E = 70, 4, 3  # 70 tokens: not a multiple of the tiles below, so the last tile is padded
TILES = (16, (16, 24))  # square tiles, and query / key tiles of different sizes (their offsets differ)


def _qkv(dtype, seed=0, n=N, n_k=None):
    kq, kk, kv = jax.random.split(jax.random.key(seed), 3)
    n_k = n if n_k is None else n_k
    return (jax.random.normal(kq, (n, R), dtype), jax.random.normal(kk, (n_k, R), dtype),
            jax.random.normal(kv, (n_k, E), dtype))


# -- NumPy float64 references, from the formulas only ------------------------------------------------------------

def np_bias(n_q, n_k, slope):
    return np.array([[-slope * abs(i - j) / n_k for j in range(n_k)] for i in range(n_q)])


def np_rotate(x, base, offset=0.0):
    x = np.asarray(x, np.float64)
    out = np.empty_like(x)
    r = x.shape[1]
    for i in range(x.shape[0]):
        for k in range(r // 2):
            angle = (offset + i) * base ** (-2.0 * k / r)
            c, s = np.cos(angle), np.sin(angle)
            out[i, 2 * k] = c * x[i, 2 * k] - s * x[i, 2 * k + 1]
            out[i, 2 * k + 1] = s * x[i, 2 * k] + c * x[i, 2 * k + 1]
    return out


def np_attend(q, k, v, mask=None, slope=None, rotary=None, normalisation="softmax"):
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    if rotary is not None:
        q, k = np_rotate(q, rotary), np_rotate(k, rotary)
    s = q @ k.T + (0 if slope is None else np_bias(q.shape[0], k.shape[0], slope))
    ok = np.ones_like(s, bool) if mask is None else np.tril(np.ones_like(s, bool))
    s = np.where(ok, s, -np.inf)
    e = np.exp(s - s.max(axis=1, keepdims=True))
    if normalisation == "mean":
        return (e * np.exp(s.max(axis=1, keepdims=True)) / k.shape[0]) @ v
    return (e / e.sum(axis=1, keepdims=True)) @ v


# -- the bias and the rotation themselves ---------------------------------------------------------------------------

def test_alibi_bias_equals_brute_force_numpy():
    for n_q, n_k, slope in ((5, 5, 1.0), (7, 3, 0.25), (3, 9, 4.0)):
        np.testing.assert_allclose(np.asarray(alibi_bias(n_q, n_k, slope, jnp.float32)), np_bias(n_q, n_k, slope),
                                   rtol=1e-6, atol=1e-7)


def test_rotation_equals_numpy_and_position_zero_is_no_rotation(x64_here):
    x = np.random.default_rng(1).normal(size=(9, 6))
    for base, offset in ((10000.0, 0.0), (3.0, 2.5), (1.5, -4.0)):
        np.testing.assert_allclose(np.asarray(rotate(jnp.asarray(x), base, offset)), np_rotate(x, base, offset),
                                   rtol=1e-13, atol=1e-13)
    # position 0: every angle is zero, the row is unchanged; later rows are rotated
    y = np.asarray(rotate(jnp.asarray(x), 3.0))
    np.testing.assert_array_equal(y[0], x[0])
    assert np.abs(y[1:] - x[1:]).max() > 0.1
    np.testing.assert_allclose(np.linalg.norm(y, axis=1), np.linalg.norm(x, axis=1), rtol=1e-13)


def test_rotary_scores_depend_on_relative_positions_only(x64_here):
    q, k, _ = _qkv(jnp.float64, seed=3, n=12)
    base = 5.0
    scores = lambda offset: np.asarray(rotate(q, base, offset) @ rotate(k, base, offset).T)
    s0 = scores(0.0)
    for shift in (1.0, 7.0, -3.25, 1000.0):
        np.testing.assert_allclose(scores(shift), s0, rtol=1e-10, atol=1e-10)
    # and they are q_i^T R((j - i) theta) k_j: the relative rotation, written out
    qn, kn = np.asarray(q), np.asarray(k)
    for i, j in ((0, 0), (2, 7), (9, 4), (11, 0)):
        rel = np_rotate(kn[j:j + 1], base, offset=j - i)[0]
        np.testing.assert_allclose(s0[i, j], qn[i] @ rel, rtol=1e-12, atol=1e-12)
    assert np.abs(s0 - np.asarray(q @ k.T)).max() > 0.1  # the rotation does something


# -- attend: references, dense == tiled -------------------------------------------------------------------------

CASES = [({"alibi": 0.0}, None), ({"alibi": 1.3}, None), ({"alibi": 2.0}, "causal"), ({"rotary": 7.0}, None),
         ({"rotary": 10000.0}, "causal"), ({"alibi": 0.7, "rotary": 3.0}, "causal")]


@pytest.mark.parametrize("spec, mask", CASES)
@pytest.mark.parametrize("normalisation", ("softmax", "mean"))
def test_attend_with_positions_equals_numpy(x64_here, spec, mask, normalisation):
    q, k, v = _qkv(jnp.float64, seed=5)
    want = np_attend(q, k, v, mask, spec.get("alibi"), spec.get("rotary"), normalisation)
    for impl, tiles in (("dense", (None,)), ("chunked", TILES)):
        for tile in tiles:
            got = attend(q, k, v, impl=impl, chunk_size=tile, mask=mask, positions=spec, normalisation=normalisation)
            np.testing.assert_allclose(np.asarray(got), want, rtol=1e-11, atol=1e-12, err_msg=f"{impl} {tile}")


def test_alibi_with_more_keys_than_queries_divides_by_the_keys(x64_here):
    q, k, v = _qkv(jnp.float64, seed=6, n=20, n_k=45)
    want = np_attend(q, k, v, None, 1.7)
    for impl in ("dense", "chunked"):
        got = attend(q, k, v, impl=impl, chunk_size=(8, 16), positions=Positions(alibi=1.7))
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-11, atol=1e-12)


@pytest.mark.parametrize("dtype, tol", ((jnp.float32, 2e-5), (jnp.float64, 1e-12)))
@pytest.mark.parametrize("spec, mask", CASES)
def test_tiled_equals_dense_values_and_gradients(dtype, tol, spec, mask):
    with jax.enable_x64(dtype == jnp.float64):
        q, k, v = _qkv(dtype, seed=7)
        slope = None if "alibi" not in spec else jnp.asarray(spec["alibi"], dtype)

        def loss(q, k, v, slope, impl, tile):
            pos = Positions(alibi=slope, rotary=spec.get("rotary"))
            out = attend(q, k, v, impl=impl, chunk_size=tile, mask=mask, positions=pos)
            return jnp.sum(jnp.sin(out)), out

        grad = jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3), has_aux=True), static_argnums=(4, 5))
        g_dense, o_dense = grad(q, k, v, slope, "dense", None)
        for tile in TILES:
            g_tiled, o_tiled = grad(q, k, v, slope, "chunked", tile)
            np.testing.assert_allclose(o_tiled, o_dense, rtol=tol, atol=tol)
            for a, b in zip(g_tiled, g_dense):
                if b is not None:
                    np.testing.assert_allclose(a, b, rtol=tol, atol=tol * (1 + float(jnp.abs(b).max())))


def _central(f, x, h=1e-6):
    x = np.asarray(x, np.float64)
    g = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[idx] = h
        g[idx] = (f(x + e) - f(x - e)) / (2 * h)
    return g


@pytest.mark.parametrize("impl", ("dense", "chunked"))
def test_gradients_match_central_differences(x64_here, impl):
    q, k, v = _qkv(jnp.float64, seed=8, n=13)
    w = jnp.asarray(np.random.default_rng(2).normal(size=(13, E)))

    def loss(q, k, v, slope):
        out = attend(q, k, v, impl=impl, chunk_size=(4, 6), mask="causal",
                     positions=Positions(alibi=slope, rotary=5.0))
        return jnp.sum(w * out)

    slope = 1.4
    g = jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3)))(q, k, v, slope)
    loss = jax.jit(loss)  # the same function, compiled once for the many evaluations below
    as_float = lambda f: (lambda a: float(f(a)))
    np.testing.assert_allclose(g[0], _central(as_float(lambda a: loss(a, k, v, slope)), q), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(g[1], _central(as_float(lambda a: loss(q, a, v, slope)), k), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(g[2], _central(as_float(lambda a: loss(q, k, a, slope)), v), rtol=1e-6, atol=1e-8)
    d_slope = (loss(q, k, v, slope + 1e-6) - loss(q, k, v, slope - 1e-6)) / 2e-6
    np.testing.assert_allclose(float(g[3]), float(d_slope), rtol=1e-6)
    assert abs(float(g[3])) > 1e-3  # the slope matters here


def test_jit_and_vmap_over_the_slope():
    q, k, v = _qkv(jnp.float32, seed=9)
    slopes = jnp.array([0.0, 0.5, 3.0])
    f = jax.jit(jax.vmap(lambda s: chunked_attend(q, k, v, chunk_size=16, mask="causal",
                                                  positions=Positions(alibi=s, rotary=100.0))))
    batch = f(slopes)
    for s, out in zip(slopes, batch):
        one = attend(q, k, v, impl="dense", mask="causal", positions=Positions(alibi=float(s), rotary=100.0))
        np.testing.assert_allclose(out, one, rtol=2e-5, atol=2e-5)


def test_tiled_bias_is_built_per_tile():
    """No intermediate of the tiled path (forward and backward) holds n x n numbers."""
    n = 2048
    q, k, v = (jnp.zeros((n, 2)),) * 3

    def loss(q, slope):
        return chunked_attend(q, k, v, chunk_size=128, mask="causal", positions=Positions(alibi=slope)).sum()

    jaxpr = jax.make_jaxpr(jax.grad(loss, argnums=(0, 1)))(q, 1.0)

    def sizes(jx):
        for eqn in jx.eqns:
            for var in eqn.outvars:
                yield int(np.prod(getattr(var.aval, "shape", ())))
            for p in eqn.params.values():
                for sub in (p if isinstance(p, (tuple, list)) else (p,)):
                    inner = getattr(sub, "jaxpr", None)
                    if inner is not None:
                        yield from sizes(getattr(inner, "jaxpr", inner))

    assert max(sizes(jaxpr.jaxpr)) < n * n // 4


def test_no_positions_is_the_plain_kernel():
    q, k, v = _qkv(jnp.float32, seed=10)
    for impl in ("dense", "chunked"):
        plain = attend(q, k, v, impl=impl, chunk_size=16, mask="causal")
        for spec in (None, Positions(), {}):
            np.testing.assert_array_equal(attend(q, k, v, impl=impl, chunk_size=16, mask="causal", positions=spec),
                                          plain)


# -- the attention fields ----------------------------------------------------------------------------------------------

def test_field_with_positions_equals_its_formula(x64_here):
    """dx_i/dt = sum_j softmax_j(beta <R_i Q x_i, R_j K x_j> - lambda (i - j)/n) V x_j over j <= i, with Q != K
    (rotary rotates Q x and K x, not (Q^T K)^T x and x)."""
    rng = np.random.default_rng(4)
    n, d, beta, slope, base = 11, 3, 0.8, 1.5, 9.0  # m = 4 rows > d: without rotary the field would use A = Q^T K
    x, Q, K, V = rng.normal(size=(n, d)), rng.normal(size=(4, d)), rng.normal(size=(4, d)), rng.normal(size=(d, d))
    pos = Positions(alibi=slope, rotary=base)
    s = beta * np_rotate(x @ Q.T, base) @ np_rotate(x @ K.T, base).T + np_bias(n, n, slope)
    s = np.where(np.tril(np.ones((n, n), bool)), s, -np.inf)
    P = np.exp(s - s.max(axis=1, keepdims=True))
    P /= P.sum(axis=1, keepdims=True)
    for impl in ("dense", "chunked"):
        f = af.AttentionFlow(Q, K, V, beta, mask="causal", positions=pos, attention_impl=impl)
        np.testing.assert_allclose(np.asarray(f(0.0, jnp.asarray(x))), P @ x @ V.T, rtol=1e-11, atol=1e-12)
        np.testing.assert_allclose(np.asarray(f.attention(0.0, jnp.asarray(x))), P, rtol=1e-11, atol=1e-13)


def test_positions_reach_every_attention_field_and_simulate():
    I = jnp.eye(2)
    x0 = jax.random.normal(jax.random.key(0), (12, 2))
    pos = Positions(alibi=2.0)
    ref = np.asarray(af.AttentionFlow(I, I, I, mask="causal", positions=pos)(0.0, x0))
    assert np.abs(ref - np.asarray(af.AttentionFlow(I, I, I, mask="causal")(0.0, x0))).max() > 1e-3
    for name, kw in (("causal", {}), ("attention", {"mask": "causal"})):
        f = build_field(name, I, I, I, positions=pos, picture="raw", **kw)
        np.testing.assert_allclose(np.asarray(f(0.0, x0)), ref, rtol=1e-6, atol=1e-6)
    for name, kw in (("feedforward", {"picture": "raw", "activation": "tanh"}), ("sphere", {}), ("prenorm", {}),
                     ("mean", {}), ("attention", {"picture": "rescaled", "stepper": "ode"})):
        with_pos = build_field(name, I, I, I, positions=pos, **kw)(0.0, x0)
        assert np.abs(np.asarray(with_pos) - np.asarray(build_field(name, I, I, I, **kw)(0.0, x0))).max() > 1e-4, name
    layered = build_field("layered", I, I, I, positions=pos, num_layers=3, epsilon=0.0, key=jax.random.key(1))
    assert layered.positions is not None
    sim = af.simulate(x0, I, I, I, t1=0.5, method="euler", dt=0.1, mask="causal", positions=pos)
    direct = af.simulate(x0, af.AttentionFlow(I, I, I, mask="causal", positions=pos), t1=0.5, method="euler", dt=0.1)
    np.testing.assert_allclose(np.asarray(sim.states), np.asarray(direct.states), rtol=1e-6, atol=1e-6)


def _heads(rng, H=3, m=4, d=3):
    Q, K, V = rng.normal(size=(H, m, d)), rng.normal(size=(H, m, d)), rng.normal(size=(H, d, d)) / np.sqrt(d)
    return Q, K, V, af.AttentionWeights(Q, K, V, 0.7, axes=("head",))


@pytest.mark.parametrize("mask", [None, "causal"])
def test_one_alibi_slope_per_head_equals_the_sum_of_one_head_fields_each_with_its_slope(x64_here, mask):
    """Heads with slopes (lambda_1, .., lambda_H): sum_h sum_j softmax_j(beta <Q_h x_i, K_h x_j> - lambda_h |i - j|/n)
    V_h x_j, each head against the NumPy formula (dense and tiled paths, the attention matrices too)."""
    rng = np.random.default_rng(11)
    Q, K, V, w = _heads(rng)
    n = 13
    x = rng.normal(size=(n, 3))
    slopes = np.array([0.3, 2.5, 9.0])
    P = []
    for h in range(3):
        s = 0.7 * (x @ Q[h].T) @ (x @ K[h].T).T + np_bias(n, n, slopes[h])
        s = np.where(np.tril(np.ones((n, n), bool)) if mask else True, s, -np.inf)
        e = np.exp(s - s.max(axis=1, keepdims=True))
        P.append(e / e.sum(axis=1, keepdims=True))
    expected = sum(P[h] @ x @ V[h].T for h in range(3))
    for impl in ("dense", "chunked"):
        f = af.AttentionFlow(w, attention_impl=impl, mask=mask, positions=Positions(alibi=slopes.tolist()))
        np.testing.assert_allclose(np.asarray(f(0.0, jnp.asarray(x))), expected, rtol=1e-11, atol=1e-12)
        np.testing.assert_allclose(np.asarray(f.attention(0.0, jnp.asarray(x))), np.stack(P), rtol=1e-11, atol=1e-13)
    # one scalar slope still reaches every head alike
    same = af.AttentionFlow(w, positions=Positions(alibi=2.5))(0.0, jnp.asarray(x))
    alike = af.AttentionFlow(w, positions=Positions(alibi=[2.5] * 3))(0.0, jnp.asarray(x))
    np.testing.assert_array_equal(np.asarray(same), np.asarray(alike))


def test_per_head_slopes_take_gradients_and_run_through_simulate(x64_here):
    """d/d lambda_h of a loss of the simulated tokens (each slope its own derivative) against central differences
    of the same simulation, on the tiled path, and the geometric slopes of ALiBi."""
    rng = np.random.default_rng(12)
    _, _, _, w = _heads(rng)
    x0 = jnp.asarray(rng.normal(size=(10, 3)))

    def loss(slopes):
        f = af.AttentionFlow(w, attention_impl="chunked", mask="causal", positions=Positions(alibi=slopes))
        return jnp.sum(af.simulate(x0, f, t1=0.5, method="euler", dt=0.1, dtype="float64").states[-1] ** 2)

    slopes = jnp.array([0.5, 1.5, 4.0])
    grad = np.asarray(jax.grad(loss)(slopes))
    h = 1e-6
    fd = [(loss(slopes.at[k].add(h)) - loss(slopes.at[k].add(-h))) / (2 * h) for k in range(3)]
    np.testing.assert_allclose(grad, np.asarray(fd), rtol=1e-6, atol=1e-9)
    assert np.all(np.abs(grad) > 1e-4) and len(set(np.round(grad, 6))) == 3  # each head's slope matters alone
    m = alibi_slopes(8)
    np.testing.assert_allclose(m[1:] / m[:-1], 2.0 ** -1) and np.testing.assert_allclose(m[[0, -1]], [0.5, 2.0 ** -8])


# -- refusals ----------------------------------------------------------------------------------------------------------

I2, I3 = jnp.eye(2), jnp.eye(3)
_q, _k, _v = jnp.zeros((4, 3)), jnp.zeros((4, 3)), jnp.zeros((4, 1))


@pytest.mark.parametrize("call, message", [
    (lambda: Positions(alibi=-1.0), "alibi must be a finite real scalar >= 0"),
    (lambda: Positions(alibi=float("nan")), "alibi must be a finite real scalar >= 0"),
    (lambda: Positions(alibi=float("inf")), "alibi must be a finite real scalar >= 0"),
    (lambda: Positions(alibi=jnp.ones((2, 2))), "alibi must be a finite real scalar >= 0 or a vector of one per head"),
    (lambda: Positions(alibi=[1.0, -0.5]), "alibi must be a finite real scalar >= 0 or a vector of one per head"),
    (lambda: Positions(alibi=jnp.zeros(0)), "alibi must be a finite real scalar >= 0 or a vector of one per head"),
    (lambda: attend(_q, _k, _v, positions=Positions(alibi=[1.0, 2.0])), "attend computes one head"),
    (lambda: af.AttentionFlow(I2, I2, I2, positions=Positions(alibi=[1.0, 2.0])),
     "positions give 2 ALiBi slopes (one per head), but the weights have 1 head(s)"),
    (lambda: af.AttentionFlow(af.AttentionWeights(jnp.stack([I2] * 3), jnp.stack([I2] * 3), jnp.stack([I2] * 3),
                                                  axes=("head",)), positions=Positions(alibi=[1.0, 2.0])),
     "positions give 2 ALiBi slopes (one per head), but the weights have 3 head(s)"),
    (lambda: Positions(rotary=0.0), "rotary must be a finite number > 0"),
    (lambda: as_positions("sinusoidal"), "got the unknown kind 'sinusoidal'"),
    (lambda: as_positions({"alibi": 1.0, "slopes": 2}), "got the unknown kind 'slopes'"),
    (lambda: attend(_q, _k, _v, positions="rotary"), "the query/key width must be even, got width 3"),
    (lambda: attend(_q, _k, _v, impl="fused", positions="alibi"), "impl='fused' takes no ALiBi bias"),
    (lambda: af.AttentionFlow(I3, I3, I3, positions="rotary"), "Q and K need an even number of rows, got 3"),
    (lambda: af.AttentionFlow(I2, I2, I2, attention_impl="fourier", positions="alibi"),
     "attention_impl='fourier' needs scores that depend on the tokens only"),
    (lambda: build_field("continuity", I2, I2, I2, num_points=16, positions="alibi"),
     "field 'continuity' takes no positions"),
    (lambda: af.simulate(jnp.ones((3, 2)), af.AttentionFlow(I2, I2, I2), t1=1.0, positions="alibi"),
     "with dynamics= set positions on the field itself"),
])
def test_bad_positions_are_refused_in_one_sentence(call, message):
    with pytest.raises(InputError) as e:
        call()
    text = str(e.value)
    assert message in text and text.endswith(".") and text.count(". ") == 0, text


# -- the lost-in-the-middle model (benchmarks/positions_lost_in_middle.py) -----------------------------------------------

def test_lost_in_the_middle_model_and_its_critical_time(x64_here):
    from benchmarks import positions_lost_in_middle as lim

    # the causal ALiBi particle velocity through attend equals the model's sum, written out
    n, beta, lam = 9, 1.3, 2.0
    theta = np.random.default_rng(5).uniform(0, 2 * np.pi, n)
    want = np.zeros(n)
    for j in range(1, n):
        w = np.exp(-lam / n * (j - np.arange(j)))
        diff = theta[j] - theta[:j]
        want[j] = np.sum(w / w.sum() * -beta * np.sin(diff) * np.exp(beta * np.cos(diff)))
    np.testing.assert_allclose(np.asarray(lim.particle_velocity(jnp.asarray(theta), beta, lam)), want, rtol=1e-12,
                               atol=1e-13)
    # the closed form's critical times, and the first-order equation of 64 tokens: U-shaped at t = 1 (interior
    # minimum near s = 0.27), its end slope changing sign near t_crit
    assert round(lim.t_crit(1.0), 4) == 2.4575 and round(lim.t_crit(2.0), 4) == 0.6007
    s = np.arange(1, 64) / 64
    at_1, at_2_3, at_2_6 = lim.profile_discrete(64, [1.0, 2.3, 2.6])
    assert 0.2 < s[np.argmin(at_1)] < 0.35 and at_1[0] > at_1.min() and at_1[-1] > at_1.min()
    assert at_2_3[-1] > at_2_3[-2] and at_2_6[-1] < at_2_6[-2]  # the n = 64 sign change is at 2.41
