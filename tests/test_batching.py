"""One jitted call over a batch equals the corresponding unbatched calls."""

import numpy as np
import pytest

import attnflow as af

pytestmark = pytest.mark.usefixtures("x64")  # compared with float64 references at float64 tolerances


def _weights(rng, B=None, d=2, m=2):
    lead = () if B is None else (B,)
    return (rng.normal(size=lead + (m, d)), rng.normal(size=lead + (m, d)), rng.normal(size=lead + (d, d)))


@pytest.mark.parametrize("method,kw", [("tsit5", {}), ("euler", {"dt": 0.1}), ("dopri5", {"dt": 0.05})])
def test_batched_initial_conditions(rng, method, kw):
    B, n, d = 3, 6, 2
    x0 = rng.normal(size=(B, n, d))
    Q, K, V = _weights(rng)
    common = dict(t1=1.0, method=method, dtype="float64", num_saves=5, return_attention=True, **kw)
    batched = af.simulate(x0, Q, K, V, batch="x0", **common)
    assert batched.states.shape[0] == B and batched.attention.shape[0] == B
    for b in range(B):
        single = af.simulate(x0[b], Q, K, V, **common)
        np.testing.assert_allclose(np.asarray(batched.states[b]), np.asarray(single.states), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(np.asarray(batched.attention[b]), np.asarray(single.attention), rtol=1e-12, atol=1e-12)


def test_batched_weights_and_states(rng):
    B, n, d, m = 4, 5, 3, 4
    x0 = rng.normal(size=(B, n, d))
    Q, K, V = _weights(rng, B, d, m)
    beta = np.array([0.5, 1.0, 1.5, 2.0])
    common = dict(t1=1.5, dtype="float64", num_saves=3, picture="rescaled")
    batched = af.simulate(x0, Q, K, V, beta=beta, batch=("all", "beta"), **common)
    for b in range(B):
        single = af.simulate(x0[b], Q[b], K[b], V[b], beta=beta[b], **common)
        np.testing.assert_allclose(np.asarray(batched.states[b]), np.asarray(single.states), rtol=1e-12, atol=1e-12)


def test_batched_weights_shared_initial_state(rng):
    B, n, d = 3, 5, 2
    x0 = rng.normal(size=(n, d))
    Q, K, V = _weights(rng, B, d)
    batched = af.simulate(x0, Q, K, V, t1=2.0, method="euler", dt=0.5, dtype="float64", batch=("Q", "K", "V"))
    assert batched.states.shape == (B, 5, n, d)
    for b in range(B):
        single = af.simulate(x0, Q[b], K[b], V[b], t1=2.0, method="euler", dt=0.5, dtype="float64")
        np.testing.assert_allclose(np.asarray(batched.states[b]), np.asarray(single.states), rtol=1e-12, atol=1e-12)


def test_folded_batch_equals_vmap(rng):
    B, n, d = 3, 6, 2
    x0 = rng.normal(size=(B, n, d))
    Q, K, V = _weights(rng)
    for method, kw, tol in (("euler", {"dt": 0.1}, 1e-12), ("tsit5", {}, 1e-6)):
        common = dict(t1=1.0, method=method, dtype="float64", num_saves=3, **kw)
        if method == "euler":
            common.pop("num_saves")
        folded = af.simulate(x0, Q, K, V, batch_mode="fold", batch="x0", **common)
        mapped = af.simulate(x0, Q, K, V, batch="x0", **common)
        assert folded.states.shape == mapped.states.shape
        np.testing.assert_allclose(np.asarray(folded.states), np.asarray(mapped.states), rtol=tol, atol=tol)


def test_dtype_of_result_is_the_dtype_asked_for(rng):
    x0 = rng.normal(size=(2, 4, 2))
    Q, K, V = _weights(rng)
    for dtype, np_dtype in (("float32", np.float32), ("float64", np.float64)):
        for method, kw in (("tsit5", {}), ("euler", {"dt": 0.25})):
            sim = af.simulate(x0, Q, K, V, t1=1.0, method=method, dtype=dtype, return_attention=True,
                              picture="rescaled", num_saves=3, batch="x0", **kw)
            assert sim.states.dtype == np_dtype and sim.tokens.dtype == np_dtype
            assert sim.attention.dtype == np_dtype and sim.ts.dtype == np_dtype


def test_save_fn_saves_observables_instead_of_states(rng):
    x0 = rng.normal(size=(3, 7, 2))
    Q, K, V = _weights(rng)

    def spread(t, y, args):
        return {"radius": np.sqrt(2.0) * 0 + ((y - y.mean(0)) ** 2).sum(-1).max(), "mean": y.mean(0)}

    sim = af.simulate(x0, Q, K, V, t1=1.0, dtype="float64", num_saves=4, save_fn=spread, batch="x0")
    full = af.simulate(x0, Q, K, V, t1=1.0, dtype="float64", num_saves=4, batch="x0")
    assert sim.tokens is None and sim.states["radius"].shape == (3, 4)
    y = np.asarray(full.states)
    expected = ((y - y.mean(2, keepdims=True)) ** 2).sum(-1).max(-1)
    np.testing.assert_allclose(np.asarray(sim.states["radius"]), expected, rtol=1e-10)


def test_batched_weights_rescaled_ode_on_cpu_map_equals_vmap_and_does_not_hang(rng, monkeypatch, tmp_path):
    """Batched V in the rescaled picture with a multi-stage solver: on CPU the batch runs as a
    lax.map (the stages' independent batched e^{tV} LAPACK calls deadlocked XLA:CPU's pool on
    2 cores at B = 32, n = 32, d = 64, every run); the results equal the vmap's to float64 rounding (bit
    for bit under XLA:CPU's default code generator; the loop and the batch are separately compiled
    programs, and the suite's faster compile options round their sums differently, by up to 1e-12)."""
    import subprocess
    import sys
    import textwrap

    import attnflow._simulation as sim_mod

    B, n, d = 4, 6, 3
    x0, (Q, K, V) = rng.normal(size=(B, n, d)), _weights(rng, B, d, d)
    kw = dict(t1=2.0, picture="rescaled", method="tsit5", dtype="float64", num_saves=4, return_attention=True,
              batch="all")
    looped = af.simulate(x0, Q, K, V, **kw)
    monkeypatch.setattr(sim_mod, "lapack_needs_loop", lambda: False)
    vmapped = af.simulate(x0, Q, K, V, **kw)
    np.testing.assert_allclose(np.asarray(looped.tokens), np.asarray(vmapped.tokens), rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(np.asarray(looped.attention), np.asarray(vmapped.attention), rtol=1e-11, atol=1e-12)
    np.testing.assert_array_equal(np.asarray(looped.num_steps), np.asarray(vmapped.num_steps))
    script = tmp_path / "hang.py"
    script.write_text(textwrap.dedent("""
        import numpy as np, attnflow as af
        rng = np.random.default_rng(0)
        B, n, d = 32, 32, 64
        V = rng.standard_normal((B, d, d)) / np.sqrt(d)
        Q = np.broadcast_to(np.eye(d), (B, d, d))
        x0 = rng.standard_normal((B, n, d)) / np.sqrt(d)
        s = af.simulate(x0, Q, Q, V, t1=1.0, picture="rescaled", method="tsit5", dtype="float64", batch="all")
        print("finite", bool(np.isfinite(np.asarray(s.tokens)).all()))
        import jax.numpy as jnp  # Euler + an SVD in save_fn: hung 1 run in 3 before the loop
        s = af.simulate(x0, Q, Q, V, t1=1.0, dt=0.1, picture="rescaled", method="euler", dtype="float64",
                        save_fn=lambda t, y, args: jnp.linalg.svd(y, compute_uv=False), batch="all")
        print("svd finite", bool(np.isfinite(np.asarray(s.states)).all()))
    """))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=180,
                       env=dict(__import__("os").environ, JAX_PLATFORMS="cpu"))
    assert r.returncode == 0 and "finite True" in r.stdout and "svd finite True" in r.stdout, r.stderr[-2000:]


def test_cache_sized_groups_equal_the_whole_batch_vmap(rng, monkeypatch):
    """On CPU a batch runs in groups of systems (lax.map over vmapped groups); forced here to
    groups of 2 over B = 5 (a remainder group of 1): same states as one system at a time, for
    batched tokens (adaptive Tsit5) and batched weights (Euler), and the same gradient as vmap."""
    import jax
    import jax.numpy as jnp

    from attnflow import _batching, _cache

    B, n, d = 5, 6, 2
    monkeypatch.setattr(_cache, "GROUP_BYTES", 2 * n * n * 8)  # two float64 score matrices
    assert _batching.group_size(B, n, itemsize=8) == (2 if jax.default_backend() == "cpu" else B)
    x0 = rng.normal(size=(B, n, d))
    Q, K, V = _weights(rng, B, d)
    for batch, args, kw in ((("x0",), (x0, Q[0], K[0], V[0]), dict(method="tsit5")),
                            (("all",), (x0, Q, K, V), dict(method="euler", dt=0.25))):
        got = af.simulate(*args, t1=1.0, dtype="float64", num_saves=3, batch=batch, **kw)
        for b in range(B):
            one = af.simulate(*(a[b] if (batch == ("all",) or i == 0) else a for i, a in enumerate(args)),
                              t1=1.0, dtype="float64", num_saves=3, **kw)
            np.testing.assert_allclose(np.asarray(got.states[b]), np.asarray(one.states), rtol=1e-12, atol=1e-12)

    flow = af.AttentionFlow(jnp.asarray(Q[0]), jnp.asarray(K[0]), jnp.asarray(V[0]))
    run = lambda x: af.solve_euler(flow, x, dt=0.1, num_steps=8, save_every=8).ys[-1]
    loss = lambda f: lambda x: jnp.sum(f(run)(x) ** 2)
    x = jnp.asarray(x0)
    np.testing.assert_allclose(np.asarray(jax.grad(loss(af.vmap_systems))(x)), np.asarray(jax.grad(loss(jax.vmap))(x)),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("group", [None, 1])
def test_a_batch_of_one_and_groups_of_one_run_unbatched(group):
    import jax
    import jax.numpy as jnp

    from attnflow import vmap_systems

    # a vmap over one member cost the sphere path 4-6x the plain program on XLA:CPU: fn must see plain tracers
    seen = []

    def fn(x):
        seen.append(type(x).__name__)
        return x * 2.0

    x = jnp.arange(8.0).reshape(1, 4, 2)
    out = jax.jit(vmap_systems(fn, group=group))(x)
    np.testing.assert_array_equal(out, x * 2.0)
    assert seen and not any("Batch" in name for name in seen), seen
    many = jax.jit(vmap_systems(fn, group=1))(jnp.concatenate([x, x + 1.0]))
    np.testing.assert_array_equal(many, jnp.concatenate([x, x + 1.0]) * 2.0)
    assert not any("Batch" in name for name in seen), seen
