"""Extensions: multi-head, feed-forward, layer-varying weights, normalisation, causal mask.

Each module is compared with a reference written the slow, obvious way (Python loops over
tokens, keys, heads and layers, NumPy float64), and each degenerate setting (one head, W = I
with sigma = identity, epsilon = 0, mask off) must give the base flow back to rounding error.

Tolerances: field evaluations on O(1) inputs are compared at 1e-12 (float64 rounding of sums of
a few dozen O(1) terms is ~1e-15; 1e-12 leaves room for exp of scores up to ~10); ODE
comparisons at the solver's tolerance scale (rtol 1e-10 -> 1e-7 over the horizon).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg
import scipy.special

import attnflow as af
from attnflow import AttentionFlow, AttentionWeights, DiscreteRescaledFlow, InputError, RescaledFlow, attend
from attnflow.dynamics import (
    FeedForward,
    LayeredFlow,
    LayerInterpolation,
    PreNorm,
    TimeVaryingFlow,
    TransformerBlock,
    Wrapped,
    normalise,
    perturbed_layers,
    section12_2_flow,
    sphere_flow,
)
from attnflow.integrate import EulerStepper, solve_ode, sphere_shift

pytestmark = pytest.mark.usefixtures("x64")  # compared with float64 references at float64 tolerances

TOL = 1e-12


# ----------------------------------------------------------------------------------------------
# slow references
def ref_weights(x, Q, K, beta=1.0, causal=False, mean=False):
    """P_ij = exp(beta <Q x_i, K x_j>) / (sum_l ... or n), by loops."""
    n = x.shape[0]
    P = np.zeros((n, n))
    for i in range(n):
        keys = range(i + 1) if causal else range(n)
        s = {j: beta * float((Q @ x[i]) @ (K @ x[j])) for j in keys}
        top = max(s.values())
        denom = n * math.exp(-top) if mean else sum(math.exp(s[j] - top) for j in keys)
        for j in keys:
            P[i, j] = math.exp(s[j] - top) / denom
    return P


def ref_attention_field(x, heads, causal=False, mean=False):
    """sum_h sum_j P^h_ij V_h x_j with heads = [(Q, K, V, beta)], loops over h, i, j."""
    out = np.zeros_like(x)
    for Q, K, V, beta in heads:
        P = ref_weights(x, Q, K, beta, causal, mean)
        for i in range(x.shape[0]):
            for j in range(x.shape[0]):
                out[i] += P[i, j] * (V @ x[j])
    return out


def ref_rescaled_field(t, z, Q, K, V):
    """sum_j P_ij V (z_j - z_i), P from x = e^{tV} z (loops)."""
    x = z @ scipy.linalg.expm(t * V).T
    P = ref_weights(x, Q, K)
    out = np.zeros_like(z)
    for i in range(z.shape[0]):
        for j in range(z.shape[0]):
            out[i] += P[i, j] * (V @ (z[j] - z[i]))
    return out


def gelu(u):
    return 0.5 * u * (1 + scipy.special.erf(u / math.sqrt(2)))


SIGMA = {"relu": lambda u: np.maximum(u, 0), "tanh": np.tanh, "gelu": gelu, "identity": lambda u: u}


def triple(rng, d, scale=0.7):
    return scale * rng.normal(size=(d, d)), scale * rng.normal(size=(d, d)), rng.normal(size=(d, d)) / math.sqrt(d)


# ----------------------------------------------------------------------------------------------
# multi-head
def test_multihead_field_and_layer_match_loops(rng):
    n, d, H = 6, 3, 3
    x = rng.normal(size=(n, d))
    heads = [triple(rng, d) + (float(b),) for b in (0.5, 1.0, 2.0)]
    w = AttentionWeights(*(np.stack([h[i] for h in heads]) for i in range(3)), np.array([h[3] for h in heads]),
                         axes=("head",))
    assert w.num_heads == H
    f = AttentionFlow(w)
    np.testing.assert_allclose(f(0.0, x), ref_attention_field(x, heads), atol=TOL, rtol=0)
    # discrete: three Euler layers by hand
    y = x.copy()
    for _ in range(3):
        y = y + 0.5 * ref_attention_field(y, heads)
    traj = EulerStepper(0.5, 3).solve(f, jnp.asarray(x))
    np.testing.assert_allclose(traj.ys[-1], y, atol=1e-11, rtol=0)
    P = f.attention(0.0, x)
    assert P.shape == (H, n, n)
    for h in range(H):
        np.testing.assert_allclose(P[h], ref_weights(x, *heads[h][:2], heads[h][3]), atol=TOL, rtol=0)


def test_one_head_is_the_base_flow(rng):
    x = rng.normal(size=(5, 2))
    Q, K, V = triple(rng, 2)
    one = AttentionWeights.stack([AttentionWeights(Q, K, V)], axis="head")
    for cls in (AttentionFlow, RescaledFlow):
        np.testing.assert_allclose(cls(one)(0.4, x), cls(Q, K, V)(0.4, x), atol=TOL, rtol=0)
    a = EulerStepper(0.5, 4).solve(DiscreteRescaledFlow(one), jnp.asarray(x)).ys
    b = EulerStepper(0.5, 4).solve(DiscreteRescaledFlow(Q, K, V), jnp.asarray(x)).ys
    np.testing.assert_allclose(a, b, atol=TOL, rtol=0)


def _commuting_heads(rng, d, H):
    """V_h = polynomials of one matrix A (they commute with each other and with their sum), not all equal."""
    A = rng.normal(size=(d, d)) / math.sqrt(d)
    return [np.eye(d) + c * A + e * A @ A for c, e in rng.normal(size=(H, 2)) * 0.5]


@pytest.mark.parametrize("equal", [True, False])
def test_multihead_rescaled_exists_for_a_common_V(rng, equal):
    n, d, H = 5, 2, 3
    x0 = rng.normal(size=(n, d))
    Vs = [np.eye(d) + 0.3 * rng.normal(size=(d, d))] * H if equal else _commuting_heads(rng, d, H)
    w = AttentionWeights(np.stack([triple(rng, d)[0] for _ in range(H)]), np.stack([triple(rng, d)[1] for _ in range(H)]),
                         np.stack(Vs), axes=("head",))
    S = sum(Vs)
    # the rescaled field at (t, z) is e^{-tS}(raw field at x = e^{tS} z) - S z
    t, z = 0.7, rng.normal(size=(n, d))
    x = z @ scipy.linalg.expm(t * S).T
    heads = [(w.Q[h], w.K[h], w.V[h], 1.0) for h in range(H)]
    want = ref_attention_field(np.asarray(x), [tuple(np.asarray(a) for a in hd[:3]) + (1.0,) for hd in heads])
    want = want @ scipy.linalg.expm(-t * S).T - z @ S.T
    np.testing.assert_allclose(RescaledFlow(w)(t, z), want, atol=1e-11, rtol=0)
    # discrete: Remark 3.4 identity with R = I + dt S, to rounding error
    raw = EulerStepper(0.25, 8).solve(AttentionFlow(w), jnp.asarray(x0)).ys
    resc = EulerStepper(0.25, 8).solve(DiscreteRescaledFlow(w), jnp.asarray(x0)).ys
    R = np.eye(d) + 0.25 * S
    for k in range(9):
        np.testing.assert_allclose(np.asarray(resc[k]) @ np.linalg.matrix_power(R, k).T, raw[k], atol=1e-10, rtol=0)


def test_multihead_rescaled_refused_without_a_common_V(rng):
    d = 3
    Qs, Ks, _ = zip(*(triple(rng, d) for _ in range(2)))
    Vs = [rng.normal(size=(d, d)) for _ in range(2)]  # generic: do not commute with their sum
    w = AttentionWeights(np.stack(Qs), np.stack(Ks), np.stack(Vs), axes=("head",))
    for cls in (RescaledFlow, DiscreteRescaledFlow):
        with pytest.raises(InputError, match="commutes with S"):
            cls(w)
    with pytest.raises(InputError, match="commutes with S"):
        af.simulate(rng.normal(size=(4, d)), w, t1=1.0, picture="rescaled")


# ----------------------------------------------------------------------------------------------
# feed-forward
@pytest.mark.parametrize("act", ["relu", "tanh", "gelu", "identity"])
def test_section12_2_matches_loops(rng, act):
    n, d = 6, 2
    Q, K, V = triple(rng, d)
    W, b = rng.normal(size=(d, d)), 0.3 * rng.normal(size=d)
    z = rng.normal(size=(n, d))
    f = section12_2_flow(Q, K, V, W=W, activation=act, bias=b)
    t = 0.6
    u = ref_rescaled_field(t, z, Q, K, V)
    want = np.stack([W @ SIGMA[act](u[i] + b) for i in range(n)])
    np.testing.assert_allclose(f(t, z), want, atol=TOL, rtol=0)
    np.testing.assert_allclose(f.tokens(t, z), z @ scipy.linalg.expm(t * V).T, atol=TOL, rtol=0)


def test_section12_2_degenerate_is_rescaled_flow(rng):
    """W = I, sigma = identity, no bias: the base rescaled flow, along a whole solve."""
    Q, K, V = triple(rng, 2)
    z0 = jnp.asarray(rng.normal(size=(6, 2)))
    z = rng.normal(size=(6, 2))
    wrapped = section12_2_flow(Q, K, V, W=np.eye(2), activation="identity")
    np.testing.assert_allclose(wrapped(0.8, z), RescaledFlow(Q, K, V)(0.8, z), atol=TOL, rtol=0)
    np.testing.assert_allclose(wrapped(0.8, z), ref_rescaled_field(0.8, z, Q, K, V), atol=TOL, rtol=0)
    base = EulerStepper(0.1, 20).solve(RescaledFlow(Q, K, V), z0).ys
    np.testing.assert_allclose(EulerStepper(0.1, 20).solve(wrapped, z0).ys, base, atol=TOL, rtol=0)


def test_transformer_block_is_sequential_attention_then_mlp(rng):
    n, d, h, dt = 5, 3, 7, 1.0
    Q, K, V = triple(rng, d, 0.5)
    W1, b1, W2, b2 = rng.normal(size=(h, d)), rng.normal(size=h), 0.3 * rng.normal(size=(d, h)), rng.normal(size=d)
    x = rng.normal(size=(n, d))
    block = TransformerBlock(AttentionFlow(Q, K, V), FeedForward(W1, W2, b1, b2, activation="gelu"))
    y = x.copy()
    for _ in range(3):  # x = x + attn(x); x = x + mlp(x)
        y = y + dt * ref_attention_field(y, [(Q, K, V, 1.0)])
        y = y + dt * np.stack([W2 @ gelu(W1 @ y[i] + b1) + b2 for i in range(n)])
    got = EulerStepper(dt, 3).solve(block, jnp.asarray(x)).ys[-1]
    np.testing.assert_allclose(got, y, atol=1e-11, rtol=0)
    # off the grid the block is the parallel sum attention + MLP
    par = AttentionFlow(Q, K, V) + FeedForward(W1, W2, b1, b2, activation="gelu")
    np.testing.assert_allclose(block(0.0, x), par(0.0, x), atol=TOL, rtol=0)


def test_feedforward_bad_inputs():
    with pytest.raises(InputError, match="activation must be one of"):
        Wrapped(AttentionFlow(np.eye(2), np.eye(2), np.eye(2)), activation="swish")
    with pytest.raises(InputError, match="W2 must have shape"):
        FeedForward(np.ones((4, 2)), np.ones((4, 2)))


# ----------------------------------------------------------------------------------------------
# layer-varying weights
def test_layered_stepper_matches_loops_and_epsilon_zero(rng):
    n, d, L, dt = 5, 2, 4, 0.5
    Q, K, V = triple(rng, d)
    base = AttentionWeights(Q, K, V, 1.5)
    x0 = rng.normal(size=(n, d))
    stack = perturbed_layers(base, L, 0.4, jax.random.key(3))
    for name in ("Q", "K", "V"):  # relative Frobenius size exactly epsilon
        X, Xl = np.asarray(getattr(base, name)), np.asarray(getattr(stack, name))
        np.testing.assert_allclose(np.linalg.norm(Xl - X, axis=(1, 2)) / np.linalg.norm(X), 0.4, atol=TOL)
    y = x0.copy()
    for k in range(L):
        y = y + dt * ref_attention_field(y, [(np.asarray(stack.Q[k]), np.asarray(stack.K[k]), np.asarray(stack.V[k]),
                                              1.5)])
    got = EulerStepper(dt, L, t0=0.3).solve(LayeredFlow(stack), jnp.asarray(x0)).ys[-1]
    np.testing.assert_allclose(got, y, atol=1e-11, rtol=0)
    sim = af.simulate(x0, stack, t1=L * dt, method="euler", dt=dt, dtype="float64")
    np.testing.assert_allclose(sim.states[-1], y, atol=1e-11, rtol=0)
    # epsilon = 0: every layer is the shared triple
    shared = perturbed_layers(base, L, 0.0, jax.random.key(3))
    a = EulerStepper(dt, L).solve(LayeredFlow(shared), jnp.asarray(x0)).ys
    b = EulerStepper(dt, L).solve(AttentionFlow(base), jnp.asarray(x0)).ys
    np.testing.assert_allclose(a, b, atol=TOL, rtol=0)
    with pytest.raises(InputError, match="holds only|hold only"):
        EulerStepper(dt, L + 1).solve(LayeredFlow(stack), jnp.asarray(x0))


def test_time_varying_flow_interpolates_layers(rng):
    d, L = 2, 3
    ws = [AttentionWeights(*triple(rng, d)) for _ in range(L)]
    stack = AttentionWeights.stack(ws, axis="layer")
    interp = LayerInterpolation(stack, dt=0.5, t0=1.0)
    for layer in range(L):  # the nodes are the layer weights
        np.testing.assert_allclose(interp(1.0 + 0.5 * layer).V, ws[layer].V, atol=TOL, rtol=0)
    mid = interp(1.25)
    np.testing.assert_allclose(mid.Q, 0.5 * (ws[0].Q + ws[1].Q), atol=TOL, rtol=0)
    x = rng.normal(size=(4, d))
    want = ref_attention_field(x, [(np.asarray(mid.Q), np.asarray(mid.K), np.asarray(mid.V), 1.0)])
    np.testing.assert_allclose(TimeVaryingFlow(interp)(1.25, x), want, atol=TOL, rtol=0)
    # equal layers (epsilon = 0): the ODE solution is the base flow's
    same = perturbed_layers(ws[0], L, 0.0, jax.random.key(0))
    x0 = jnp.asarray(x)
    a = solve_ode(TimeVaryingFlow(LayerInterpolation(same)), x0, t0=0.0, t1=2.0, rtol=1e-10, atol=1e-12).ys
    b = solve_ode(AttentionFlow(ws[0]), x0, t0=0.0, t1=2.0, rtol=1e-10, atol=1e-12).ys
    np.testing.assert_allclose(a, b, atol=TOL, rtol=0)


# ----------------------------------------------------------------------------------------------
# normalisation
def test_sphere_flow_matches_projected_loops(rng):
    n, d = 6, 3
    Q, K, V = triple(rng, d)
    x = normalise(jnp.asarray(rng.normal(size=(n, d))))
    u = ref_attention_field(np.asarray(x), [(Q, K, V, 2.0)])
    want = np.stack([u[i] - (u[i] @ x[i]) * np.asarray(x[i]) for i in range(n)])
    np.testing.assert_allclose(sphere_flow(Q, K, V, 2.0)(0.0, x), want, atol=TOL, rtol=0)


def test_projected_stepper_stays_on_the_sphere(rng):
    n, d = 16, 3
    Q, K, V = triple(rng, d, 1.0)
    x0 = normalise(jnp.asarray(rng.normal(size=(n, d))))
    f = sphere_flow(Q, K, V, 4.0)
    on = EulerStepper(0.1, 100, shift=sphere_shift).solve(f, x0).ys
    assert float(jnp.abs(jnp.linalg.norm(on, axis=-1) - 1).max()) < 1e-14
    # the plain step leaves the sphere at second order (this is why the shift exists)
    off = EulerStepper(0.1, 100).solve(f, x0).ys
    assert float(jnp.abs(jnp.linalg.norm(off, axis=-1) - 1).max()) > 1e-4
    # the continuous tangent flow keeps norms to the solver's tolerance
    ode = solve_ode(f, x0, t0=0.0, t1=5.0, rtol=1e-10, atol=1e-12).ys
    assert float(jnp.abs(jnp.linalg.norm(ode, axis=-1) - 1).max()) < 1e-8
    sim = af.simulate(x0, dynamics=f, t1=10.0, method="euler", dt=0.1, shift="sphere", dtype="float64")
    np.testing.assert_allclose(sim.states, on, atol=TOL, rtol=0)


def test_prenorm_reads_normalised_tokens(rng):
    n, d = 5, 3
    Q, K, V = triple(rng, d)
    x = 3.0 * rng.normal(size=(n, d))
    xn = x / np.linalg.norm(x, axis=1, keepdims=True)
    f = PreNorm(AttentionFlow(Q, K, V))
    np.testing.assert_allclose(f(0.0, x), ref_attention_field(xn, [(Q, K, V, 1.0)]), atol=TOL, rtol=0)
    # on the sphere pre-LN and the raw flow agree (N is the identity there)
    np.testing.assert_allclose(f(0.0, xn), AttentionFlow(Q, K, V)(0.0, xn), atol=TOL, rtol=0)
    # residual on the raw stream: one layer adds the attention of N(x) to x itself
    step = EulerStepper(1.0, 1).solve(f, jnp.asarray(x)).ys[-1]
    np.testing.assert_allclose(step, x + ref_attention_field(xn, [(Q, K, V, 1.0)]), atol=TOL, rtol=0)


@pytest.mark.parametrize("mask", [None, "causal"])
def test_unnormalised_attention_all_paths(rng, mask):
    n, d = 13, 3
    Q, K, V = triple(rng, d, 0.4)  # scores O(1), so e^{s}/n is O(1) and 1e-12 is rounding scale
    x = rng.normal(size=(n, d))
    want = ref_attention_field(x, [(Q, K, V, 1.0)], causal=mask == "causal", mean=True)
    for impl in ("dense", "chunked"):
        f = AttentionFlow(Q, K, V, attention_impl=impl, mask=mask, normalisation="mean")
        np.testing.assert_allclose(f(0.0, x), want, atol=TOL, rtol=0)
    P = AttentionFlow(Q, K, V, mask=mask, normalisation="mean").attention(0.0, x)
    np.testing.assert_allclose(P, ref_weights(x, Q, K, causal=mask == "causal", mean=True), atol=TOL, rtol=0)
    # the tiled path's custom VJP (log-sum-exp cotangent) against the dense path
    q, k, v = (jnp.asarray(0.5 * rng.normal(size=(n, r))) for r in (3, 3, 2))
    loss = lambda impl: lambda q, k, v: jnp.sum(jnp.sin(attend(q, k, v, impl=impl, chunk_size=4, mask=mask,
                                                                normalisation="mean")))
    g_dense = jax.grad(loss("dense"), argnums=(0, 1, 2))(q, k, v)
    g_tiled = jax.grad(loss("chunked"), argnums=(0, 1, 2))(q, k, v)
    for a, b in zip(g_tiled, g_dense):
        np.testing.assert_allclose(a, b, atol=TOL, rtol=0)


def test_usa_on_sphere_is_energy_gradient(rng):
    """Q = K = V = I, mean normalisation: the projected field is the sphere gradient of
    E = 1/(2 beta n^2) sum_ij exp(beta <x_i, x_j>), scaled by n (dx_i/dt = n grad_i E)."""
    n, d, beta = 7, 3, 1.5
    x = normalise(jnp.asarray(rng.normal(size=(n, d))))
    I = jnp.eye(d)
    E = lambda x: jnp.sum(jnp.exp(beta * x @ x.T)) / (2 * beta * n**2)
    g = jax.grad(E)(x)
    riem = g - jnp.sum(g * x, axis=1, keepdims=True) * x
    np.testing.assert_allclose(sphere_flow(I, I, I, beta, normalisation="mean")(0.0, x), n * riem, atol=TOL, rtol=0)


# ----------------------------------------------------------------------------------------------
# causal mask
def test_causal_tiled_equals_dense_and_loops(rng):
    n, d = 11, 3
    Q, K, V = triple(rng, d)
    x = rng.normal(size=(n, d))
    want = ref_attention_field(x, [(Q, K, V, 1.0)], causal=True)
    q, k, v = x @ Q.T, x @ K.T, x @ V.T
    dense = attend(jnp.asarray(q), jnp.asarray(k), jnp.asarray(v), impl="dense", mask="causal")
    tiled = attend(jnp.asarray(q), jnp.asarray(k), jnp.asarray(v), impl="chunked", chunk_size=4, mask="causal")
    np.testing.assert_allclose(dense, want, atol=TOL, rtol=0)
    np.testing.assert_allclose(tiled, want, atol=TOL, rtol=0)
    f = AttentionFlow(Q, K, V, mask="causal", attention_impl="chunked")
    np.testing.assert_allclose(f(0.0, x), want, atol=TOL, rtol=0)
    # mask off: the base flow
    np.testing.assert_allclose(AttentionFlow(Q, K, V, mask=None)(0.0, x), ref_attention_field(x, [(Q, K, V, 1.0)]),
                               atol=TOL, rtol=0)
    grads = [jax.grad(lambda q: jnp.sum(attend(q, jnp.asarray(k), jnp.asarray(v), impl=impl, chunk_size=4,
                                                mask="causal") ** 2))(jnp.asarray(q)) for impl in ("dense", "chunked")]
    np.testing.assert_allclose(grads[1], grads[0], atol=TOL, rtol=0)


def test_causal_rescaled_first_token_is_fixed(rng):
    """Causal, V = I: token 1 attends only to itself, so z_1 never moves (the fixed point all
    other tokens are attracted to)."""
    x0 = rng.normal(size=(6, 2))
    sim = af.simulate(x0, np.eye(2), np.eye(2), np.eye(2), t1=3.0, picture="rescaled", mask="causal",
                      dtype="float64", num_saves=4)
    np.testing.assert_allclose(sim.states[:, 0], np.broadcast_to(x0[0], (4, 2)), atol=TOL, rtol=0)


# ----------------------------------------------------------------------------------------------
# simulate hooks
def test_simulate_dynamics_hook(rng):
    x0 = rng.normal(size=(2, 5, 2))
    Q, K, V = triple(rng, 2)
    f = section12_2_flow(Q, K, V, activation="tanh")
    sim = af.simulate(x0, dynamics=f, t1=1.0, method="euler", dt=0.25, batch="x0", dtype="float64")
    for b in range(2):
        direct = EulerStepper(0.25, 4).solve(f, jnp.asarray(x0[b]))
        np.testing.assert_allclose(sim.states[b], direct.ys, atol=TOL, rtol=0)
        np.testing.assert_allclose(sim.tokens[b], jax.vmap(f.tokens)(direct.ts, direct.ys), atol=TOL, rtol=0)
    with pytest.raises(InputError, match="omit Q, K, V"):
        af.simulate(x0[0], Q, dynamics=f, t1=1.0)
    with pytest.raises(InputError, match="V needs a leading batch axis"):  # a batch is named, never guessed
        af.simulate(x0, dynamics=f, t1=1.0, batch=("x0", "V"))
    with pytest.raises(InputError, match="shift= applies to the Euler"):
        af.simulate(x0[0], dynamics=f, t1=1.0, shift="sphere")
    with pytest.raises(InputError, match="set mask and attention_impl on the field"):
        af.simulate(x0[0], dynamics=f, t1=1.0, mask="causal")
    with pytest.raises(InputError, match="needs a field with an attention matrix"):
        af.simulate(x0[0], dynamics=FeedForward(np.ones((3, 2)), np.ones((2, 3))), t1=1.0, return_attention=True)


# ----------------------------------------------------------------------------------------------
# the report job
def test_extensions_job_writes_a_report(tmp_path):
    from attnflow.cli.main import main

    out = tmp_path / "ext"
    assert main(["extensions", "--out", str(out), "--quick", "--study", "albert", "--no-progress"]) == 0
    import json

    summary = json.loads((out / "summary.json").read_text())
    checks = summary["studies"]["albert"]["checks"]
    identity = [c for c in checks if c["name"] == "epsilon = 0 reproduces shared weights"][0]
    assert identity["passed"] is True
    assert (out / "report.md").read_text().startswith("# attnflow extensions")
    assert (out / "albert_agreement.png").stat().st_size > 0
    bad = tmp_path / "bad.toml"
    bad.write_text("[albert]\nepsilons = [-0.5]\n")
    with pytest.raises(InputError, match="albert.epsilons"):
        from attnflow.report._extensions import run_extensions

        run_extensions(tmp_path / "ext2", config=bad, studies=["albert"], progress=False)


def test_gradients_through_extensions_match_finite_differences(rng):
    """Reverse-mode derivatives through per-layer weights (in epsilon) and the sphere stepper (in beta)."""
    x0 = jnp.asarray(rng.normal(size=(5, 2)))
    Q, K, V = triple(rng, 2)
    base = AttentionWeights(Q, K, V)

    def layered(eps):
        return jnp.sum(jnp.sin(EulerStepper(0.5, 4).solve(LayeredFlow(perturbed_layers(base, 4, eps, jax.random.key(2))),
                                                          x0).ys[-1]))

    def sphere(beta):
        f = sphere_flow(Q, K, V, beta)
        return jnp.sum(jnp.sin(EulerStepper(0.2, 6, shift=sphere_shift).solve(f, normalise(x0)).ys[-1]))

    h = 1e-6  # central differences: error ~ h^2 |f'''| + eps/h ~ 1e-10
    for fn, at in ((layered, 0.3), (sphere, 2.0)):
        value_and_grad = jax.jit(jax.value_and_grad(fn))  # one compile: the differences reuse it
        at = jnp.asarray(at)
        fd = (value_and_grad(at + h)[0] - value_and_grad(at - h)[0]) / (2 * h)
        assert abs(float(value_and_grad(at)[1]) - float(fd)) < 1e-7
