"""The core's contracts: weights type, composable fields, a stepper that owns dt,
traceable checks, no global state, validation at every public entry."""

import subprocess
import sys
import textwrap
import time

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import softmax as sp_softmax

import attnflow as af
from attnflow import InputError
from attnflow.integrate import EulerStepper, solve_euler, solve_ode, sphere_shift

pytestmark = pytest.mark.usefixtures("x64")  # compared with float64 references at float64 tolerances


def _problem(rng, n=5, d=3, m=None, scale=0.5):
    m = d if m is None else m
    return (rng.normal(size=(n, d)), scale * rng.normal(size=(m, d)), scale * rng.normal(size=(m, d)),
            rng.normal(size=(d, d)) / np.sqrt(d))


# --- the t0 bug: the rescaled picture starts at t0, not at 0 ------------------------------
@pytest.mark.parametrize("t0", [1.0, -0.7])
def test_rescaled_run_from_t0_gives_the_raw_tokens(rng, t0):
    x0, Q, K, V = _problem(rng)
    kw = dict(t0=t0, t1=t0 + 1.5, num_saves=4, dtype="float64", rtol=1e-11, atol=1e-12)
    raw = af.simulate(x0, Q, K, V, **kw)
    res = af.simulate(x0, Q, K, V, picture="rescaled", **kw)
    np.testing.assert_allclose(np.asarray(res.tokens), np.asarray(raw.tokens), rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(np.asarray(res.states[0]), x0, atol=1e-14)  # z(t0) = x(t0)


# --- dt lives in one place ------------------------------------------------------------------
def test_discrete_rescaled_field_takes_dt_from_the_stepper_only(rng):
    x0, Q, K, V = _problem(rng)
    with pytest.raises(TypeError):
        af.DiscreteRescaledFlow(Q, K, V, dt=0.5)  # the mismatch cannot be expressed
    with pytest.raises(InputError, match="defined on the layer grid only"):
        af.DiscreteRescaledFlow(Q, K, V)(0.0, jnp.asarray(x0))
    # 16 layers of dt = 0.25: past the old max_layers wrap-around, z[k] = R^{-k} x[k] exactly
    dt, L = 0.25, 16
    stepper = EulerStepper(dt, L)
    z = np.asarray(stepper.solve(af.DiscreteRescaledFlow(Q, K, V), jnp.asarray(x0)).ys)
    x = np.asarray(stepper.solve(af.AttentionFlow(Q, K, V), jnp.asarray(x0)).ys)
    R = np.eye(3) + dt * V
    for k in (1, 8, 16):
        np.testing.assert_allclose(z[k] @ np.linalg.matrix_power(R, k).T, x[k], rtol=1e-11, atol=1e-11)


def test_stepper_shift_keeps_tokens_on_the_sphere(rng):
    x0, Q, K, V = _problem(rng, n=7)
    x0 = x0 / np.linalg.norm(x0, axis=1, keepdims=True)
    traj = EulerStepper(0.1, 100, shift=sphere_shift).solve(af.AttentionFlow(Q, K, V), jnp.asarray(x0))
    norms = np.linalg.norm(np.asarray(traj.ys), axis=-1)
    assert np.abs(norms - 1).max() < 1e-13
    flat = EulerStepper(0.1, 100).solve(af.AttentionFlow(Q, K, V), jnp.asarray(x0))
    assert np.abs(np.linalg.norm(np.asarray(flat.ys), axis=-1) - 1).max() > 1e-2  # the hook matters


# --- fields compose; the weights type ---------------------------------------------------------
def test_sum_of_fields_and_multihead_equal_the_sum_of_heads(rng):
    x0, *_ = _problem(rng, n=6)
    heads = [af.AttentionWeights(*_problem(rng, n=6)[1:]) for _ in range(3)]
    y = jnp.asarray(x0)
    singles = [af.AttentionFlow(w) for w in heads]
    total = singles[0] + singles[1] + singles[2]
    stacked = af.AttentionFlow(af.AttentionWeights.stack(heads, axis="head"))
    expected = sum(np.asarray(f(0.0, y)) for f in singles)
    np.testing.assert_allclose(np.asarray(total(0.0, y)), expected, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(np.asarray(stacked(0.0, y)), expected, rtol=1e-13, atol=1e-13)
    assert stacked.attention(0.0, y).shape == (3, 6, 6)


def test_biases_enter_scores_and_values_like_a_real_layer(rng):
    x, Q, K, V = _problem(rng, n=6, d=3, m=4)
    bq, bk, c = rng.normal(size=4), rng.normal(size=4), rng.normal(size=3)
    w = af.AttentionWeights(Q, K, V, 0.7, q_bias=bq, k_bias=bk, v_bias=c)
    S = 0.7 * (x @ Q.T + bq) @ (x @ K.T + bk).T
    P = sp_softmax(S, axis=1)
    expected = P @ (x @ V.T + c)
    np.testing.assert_allclose(np.asarray(af.AttentionFlow(w)(0.0, jnp.asarray(x))), expected, rtol=1e-12)
    # the rescaled pictures carry the bias exactly: x = e^{tV} z and x[k] = R^k z[k]
    raw = af.simulate(x, w, t1=1.0, num_saves=3, dtype="float64", rtol=1e-11, atol=1e-12)
    res = af.simulate(x, w, t1=1.0, num_saves=3, dtype="float64", rtol=1e-11, atol=1e-12, picture="rescaled")
    np.testing.assert_allclose(np.asarray(res.tokens), np.asarray(raw.tokens), rtol=1e-8, atol=1e-8)
    kw = dict(t1=2.0, method="euler", dt=0.25, dtype="float64")
    raw = af.simulate(x, w, **kw)
    res = af.simulate(x, w, picture="rescaled", **kw)
    np.testing.assert_allclose(np.asarray(res.tokens), np.asarray(raw.tokens), rtol=1e-11, atol=1e-11)


def test_a_stack_of_weights_is_never_silently_a_batch(rng):
    x0, Q, K, V = _problem(rng)
    Vs = np.stack([V, V, V])
    with pytest.raises(InputError, match=r"V must be a \(d, d\) matrix, got shape \(3, 3, 3\).*batch="):
        af.simulate(x0, Q, K, Vs, t1=1.0)
    with pytest.raises(InputError, match="x0 must be tokens"):
        af.simulate(np.stack([x0, x0]), Q, K, V, t1=1.0)
    with pytest.raises(InputError, match=r"V must have rank 2 .*axes=\('head',\)"):
        af.AttentionWeights(Q, K, Vs)  # a stack needs named axes
    heads = af.AttentionWeights(np.stack([Q] * 3), np.stack([K] * 3), Vs, axes=("head",))
    sim = af.simulate(x0, heads, t1=1.0, num_saves=2, dtype="float64")
    assert sim.states.shape == (2,) + x0.shape  # one system with three heads
    single = af.simulate(x0, Q, K, 3 * V, t1=1.0, num_saves=2, dtype="float64")
    np.testing.assert_allclose(np.asarray(sim.states), np.asarray(single.states), rtol=1e-7)  # 3 equal heads
    layers = af.AttentionWeights.stack([heads.head(0)] * 2, axis="layer")
    with pytest.raises(InputError, match="'layer' axis"):  # per-layer weights: raw picture only
        af.simulate(x0, layers, t1=1.0, picture="rescaled")
    # a layer stack is one system with per-layer weights, never a batch
    assert af.simulate(x0, layers, t1=1.0, num_saves=2).states.shape == (2,) + x0.shape


# --- a good JAX citizen -------------------------------------------------------------------------
def test_import_changes_no_global_config_and_float64_still_works(tmp_path):
    script = tmp_path / "x64.py"
    script.write_text(textwrap.dedent("""
        import numpy as np, jax
        import attnflow as af
        assert not jax.config.jax_enable_x64, "import attnflow enabled x64"
        import sys; sys.path.insert(0, %r)
        from reference import ref_solve
        rng = np.random.default_rng(3)
        x0 = rng.normal(size=(5, 2)); Q, K = 0.5 * rng.normal(size=(2, 2, 2)); V = rng.normal(size=(2, 2))
        ts = np.linspace(0, 2, 5)
        sim = af.simulate(x0, Q, K, V, t1=2.0, ts=ts, dtype="float64", rtol=1e-11, atol=1e-12)
        assert sim.states.dtype == np.float64, sim.states.dtype
        err = np.abs(np.asarray(sim.states) - ref_solve(x0, Q, K, V, ts)).max()
        assert err < 1e-9, err
        assert not jax.config.jax_enable_x64, "simulate left x64 on"
        print("ok", err)
    """ % str(__import__("pathlib").Path(__file__).parent)))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.startswith("ok"), r.stderr[-3000:]


def test_jit_vmap_grad_over_simulate_with_default_checks(rng):
    x0, Q, K, V = (jnp.asarray(a) for a in _problem(rng))

    def loss(V, method):
        kw = dict(method="euler", dt=0.25) if method == "euler" else dict(num_saves=2)
        sim = af.simulate(x0, Q, K, V, t1=1.0, picture="rescaled", dtype="float64", **kw)
        return jnp.sum(sim.states[-1] ** 2)

    for method in ("euler", "tsit5"):
        g = jax.jit(jax.grad(lambda V: loss(V, method)))(V)
        eps = 1e-6
        E = jnp.zeros_like(V).at[1, 2].set(1.0)
        fd = (loss(V + eps * E, method) - loss(V - eps * E, method)) / (2 * eps)
        assert abs(float(g[1, 2]) - float(fd)) <= 1e-6 * max(1.0, abs(float(fd)))
        batched = jax.vmap(lambda V: loss(V, method))(jnp.stack([V, 0.5 * V]))
        np.testing.assert_allclose(np.asarray(batched), [float(loss(V, method)), float(loss(0.5 * V, method))],
                                   rtol=1e-10)


def test_backsolve_and_forward_mode_adjoints_through_simulate(rng):
    x0, Q, K, V = (jnp.asarray(a) for a in _problem(rng, n=4, d=2))

    def loss(V, adjoint):
        sim = af.simulate(x0, Q, K, V, t1=1.0, num_saves=2, dtype="float64", rtol=1e-10, atol=1e-12,
                          adjoint=adjoint, attention_impl="dense")
        return jnp.sum(jnp.sin(sim.states[-1]))

    g_ref = jax.grad(lambda V: loss(V, None))(V)
    g_back = jax.grad(lambda V: loss(V, diffrax.BacksolveAdjoint()))(V)
    np.testing.assert_allclose(np.asarray(g_back), np.asarray(g_ref), rtol=1e-6, atol=1e-7)
    E = jnp.asarray(rng.normal(size=V.shape))
    _, jvp = jax.jvp(lambda V: loss(V, diffrax.ForwardMode()), (V,), (E,))
    np.testing.assert_allclose(float(jvp), float(jnp.sum(g_ref * E)), rtol=1e-7)


def test_failures_are_reported_inside_jit_and_in_result(rng):
    x0 = rng.normal(size=(6, 2))
    I2 = np.eye(2)
    sim = af.simulate(x0, I2, I2, 2 * I2, t1=100.0, method="euler", dt=1.0, throw=False)
    assert int(sim.result) == 2 and 30 <= float(sim.t_nonfinite) <= 90
    f = jax.jit(lambda V: af.simulate(jnp.asarray(x0, jnp.float32), I2, I2, V, t1=100.0, method="euler",
                                      dt=1.0).states)
    with pytest.raises(Exception, match="non-finite"):
        jax.block_until_ready(f(2 * jnp.eye(2, dtype=jnp.float32)))
    assert np.isfinite(np.asarray(f(0.01 * jnp.eye(2, dtype=jnp.float32)))).all()


def test_nan_parameter_under_jit_fails_fast_instead_of_spinning_to_max_steps(rng):
    x0, Q, K, V = (jnp.asarray(a) for a in _problem(rng))
    run = jax.jit(lambda V: af.simulate(x0, Q, K, V, t1=2.0, num_saves=3, throw=False, dtype="float64"))
    jax.block_until_ready(run(V))
    start = time.perf_counter()
    sim = jax.block_until_ready(run(V.at[0, 0].set(jnp.nan)))
    elapsed = time.perf_counter() - start
    assert int(sim.result) == 2 and float(sim.t_nonfinite) == 0.0
    assert int(sim.num_steps) < 50, "the solver kept rejecting steps"
    assert elapsed < 5.0


# --- every lower-level entry validates ------------------------------------------------------------
@pytest.mark.parametrize(
    "call,pattern",
    [
        (lambda: af.AttentionFlow(np.eye(2), np.eye(2), np.ones((2, 3))), r"V must be square"),
        (lambda: af.RescaledFlow(np.ones((3, 2)), np.ones((2, 2)), np.eye(2)), r"Q and K must have the same shape"),
        (lambda: af.AttentionFlow(np.eye(3), np.eye(3), np.eye(2)), r"Q and K must have shape \(m, 2\)"),
        (lambda: af.AttentionFlow(np.eye(2), np.eye(2), np.eye(2), mask="future"), r"mask must be None, 'causal'"),
        (lambda: af.AttentionFlow(np.eye(2), np.eye(2), np.eye(2), attention_impl="fast"), r"attention_impl must be"),
        (lambda: af.AttentionFlow(np.eye(2), np.eye(2), np.array([[np.nan, 0], [0, 1]])), r"V contains 1 non-finite"),
        (lambda: af.AttentionWeights(np.eye(2), np.eye(2), np.eye(2), axes=("batch",)), r"axes must be a tuple drawn"),
        (lambda: af.AttentionWeights(np.eye(2), np.eye(2), np.eye(2), q_bias=np.ones(3)), r"q_bias must have shape \(2,\)"),
        (lambda: EulerStepper(-0.1, 4), r"dt must be > 0"),
        (lambda: EulerStepper(0.1, 0), r"num_layers must be a positive int"),
        (lambda: EulerStepper(0.1, 6, save_every=4), r"save_every must be a positive divisor"),
        (lambda: solve_euler(af.AttentionFlow(np.eye(2), np.eye(2), np.eye(2)), np.ones((3, 2)), dt=0.0,
                             num_steps=2), r"dt must be > 0"),
        (lambda: solve_ode(af.AttentionFlow(np.eye(2), np.eye(2), np.eye(2)), np.ones((3, 2)), t0=1.0, t1=0.0),
         r"t1 must be >= t0"),
        (lambda: solve_ode(af.AttentionFlow(np.eye(2), np.eye(2), np.eye(2)), np.ones((3, 2)), t0=0.0, t1=1.0,
                           dt0=-1.0), r"dt0 must be > 0"),
        (lambda: solve_ode(af.AttentionFlow(np.eye(2), np.eye(2), np.eye(2)), "tokens", t0=0.0, t1=1.0),
         r"y0 must be an array"),
        (lambda: solve_ode(lambda t, y, a: y, np.ones((3, 2)), t0=0.0, t1=1.0), r"dynamics must be an attnflow"),
        (lambda: af.attend(jnp.ones((2, 1)), jnp.ones((2, 1)), jnp.ones((2, 1)), mask="anti"), r"mask must be"),
    ],
)
def test_lower_level_bad_input_raises_one_clear_error(call, pattern):
    with pytest.raises(InputError, match=pattern) as info:
        call()
    assert "\n" not in str(info.value)


# --- masks ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mask_kind", ["causal", "array"])
def test_masked_attention_tiled_equals_dense_with_gradients(rng, mask_kind):
    q, k, v = (jnp.asarray(rng.normal(size=(45, 3))) for _ in range(3))
    mask = "causal" if mask_kind == "causal" else jnp.asarray(rng.random((45, 45)) < 0.5).at[7].set(False)
    S = np.asarray(q @ k.T)
    M = np.tril(np.ones((45, 45), bool)) if mask_kind == "causal" else np.asarray(mask)
    P = np.where(M, np.exp(S - np.where(M, S, -np.inf).max(1, keepdims=True, initial=-np.inf)), 0.0)
    P = P / np.where(P.sum(1, keepdims=True) > 0, P.sum(1, keepdims=True), 1)
    expected = P @ np.asarray(v)
    for impl, kw in (("dense", {}), ("chunked", {"chunk_size": 8})):
        out = af.attend(q, k, v, impl=impl, mask=mask, **kw)
        np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-12, atol=1e-12)
    loss = lambda impl: (lambda q, k, v: jnp.sum(jnp.cos(af.attend(q, k, v, impl=impl, mask=mask, chunk_size=8))))
    gd = jax.jit(jax.grad(loss("dense"), argnums=(0, 1, 2)))(q, k, v)
    gc = jax.jit(jax.grad(loss("chunked"), argnums=(0, 1, 2)))(q, k, v)
    for a, b in zip(gd, gc):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-11, atol=1e-12)
        assert np.isfinite(np.asarray(b)).all()


def test_euler_checkpointing_same_gradient_sublinear_memory(rng):
    x0, Q, K, V = (jnp.asarray(a) for a in _problem(rng, n=8, d=3))

    def grad_fn(L, checkpoint):  # compiled once: the gradient's values and its memory come from one program
        loss = lambda V: jnp.sum(solve_euler(af.AttentionFlow(Q, K, V), x0, dt=0.01, num_steps=L, save_every=L,
                                             checkpoint=checkpoint).ys[-1] ** 2)
        return jax.jit(jax.grad(loss)).lower(V).compile()

    g_all, g_ck = grad_fn(400, None), grad_fn(400, "auto")
    np.testing.assert_allclose(np.asarray(g_ck(V)), np.asarray(g_all(V)), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(grad_fn(10, 3)(V)), np.asarray(grad_fn(10, None)(V)), rtol=1e-12)
    temp = lambda compiled: compiled.memory_analysis().temp_size_in_bytes
    # stored layers: L without checkpointing, ~2 sqrt(L) with it
    assert temp(g_ck) * 4 < temp(g_all)
    assert temp(grad_fn(1600, "auto")) < 3 * temp(g_ck)  # 4x the layers, ~2x the memory


def test_euler_unrolled_derivatives_equal_rolled(rng, monkeypatch):
    """Checkpointed segments run unrolled (only for n >= 256 on CPU by default; forced here
    on a tiny system): gradient and Hessian-vector product (forward over reverse) equal the stored-layers ones, with a
    boolean mask passed through jit and a segment length that does not divide the layers."""
    import attnflow.integrate._euler as euler

    monkeypatch.setattr(euler, "UNROLL_MIN_RESIDUAL_BYTES", 0)
    x0, Q, K, V = (jnp.asarray(a) for a in _problem(rng, n=8, d=3))
    mask = jnp.asarray(rng.random((8, 8)) < 0.7).at[:, 0].set(True)
    dV = jnp.asarray(rng.normal(size=V.shape))

    def loss(checkpoint):
        return lambda V, mask: jnp.sum(jnp.sin(solve_euler(af.AttentionFlow(Q, K, V, mask=mask), x0, dt=0.02,
                                                           num_steps=70, save_every=70, checkpoint=checkpoint).ys[-1]))

    for fn in (jax.grad, lambda f: (lambda V, m: jax.jvp(lambda V: jax.grad(f)(V, m), (V,), (dV,))[1])):
        rolled, unrolled = jax.jit(fn(loss(None))), jax.jit(fn(loss(9)))
        np.testing.assert_allclose(np.asarray(unrolled(V, mask)), np.asarray(rolled(V, mask)), rtol=1e-11, atol=1e-13)
