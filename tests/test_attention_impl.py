"""The attention implementations (dense, chunked online softmax, fused) agree, and the
chunked path keeps memory O(n d) inside a dynamics step."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attnflow
from attnflow import AttentionFlow, RescaledFlow, attend
from attnflow.kernels import _attention as att
from attnflow.errors import InputError
from attnflow.integrate import solve_euler

pytestmark = pytest.mark.usefixtures("x64")  # compared with float64 references at float64 tolerances


def _qkv(seed, nq, nk, r, e, scale, dtype=jnp.float64):
    kq, kk, kv = jax.random.split(jax.random.key(seed), 3)
    q = scale * jax.random.normal(kq, (nq, r), dtype)
    k = jax.random.normal(kk, (nk, r), dtype)
    v = jax.random.normal(kv, (nk, e), dtype)
    return q, k, v


CASES = [
    # seed, nq, nk, r, e, scale of q (scores reach ~ scale * r), tile
    (0, 300, 300, 8, 8, 1.0, 64),
    (1, 257, 511, 5, 3, 30.0, (100, 37)),  # ragged tiles, nq != nk, r != e
    (2, 200, 200, 16, 16, 400.0, 48),  # scores of size 1e3 - 1e4
    (3, 130, 70, 4, 6, 1e3, (128, 256)),  # tiles larger than n
]


@pytest.mark.parametrize("seed,nq,nk,r,e,scale,tile", CASES)
def test_chunked_equals_dense_float64(seed, nq, nk, r, e, scale, tile):
    q, k, v = _qkv(seed, nq, nk, r, e, scale)
    s_max = float(jnp.abs(q @ k.T).max())
    assert s_max > 5 * scale  # the scores are as large as advertised
    dense = attend(q, k, v, impl="dense")
    chunked = attend(q, k, v, impl="chunked", chunk_size=tile)
    assert chunked.dtype == jnp.float64
    assert jnp.all(jnp.isfinite(chunked))
    np.testing.assert_allclose(chunked, dense, rtol=0, atol=1e-12 * float(jnp.abs(v).max()))


@pytest.mark.parametrize("seed,nq,nk,r,e,scale,tile", CASES[:3])
def test_chunked_gradients_equal_dense(seed, nq, nk, r, e, scale, tile):
    q, k, v = _qkv(seed, nq, nk, r, e, min(scale, 3.0))  # moderate scores: non-trivial P
    w = jax.random.normal(jax.random.key(seed + 100), (nq, e), jnp.float64)

    def loss(impl):
        return lambda q, k, v: jnp.sum(w * jnp.tanh(attend(q, k, v, impl=impl, chunk_size=tile)))

    gd = jax.jit(jax.grad(loss("dense"), argnums=(0, 1, 2)))(q, k, v)
    gc = jax.jit(jax.grad(loss("chunked"), argnums=(0, 1, 2)))(q, k, v)
    for a, b in zip(gd, gc):
        assert float(jnp.abs(a).max()) > 1e-3  # a gradient that says something
        np.testing.assert_allclose(b, a, rtol=0, atol=1e-11 * float(jnp.abs(a).max()))


def test_chunked_float32_stays_float32_and_close():
    q, k, v = _qkv(4, 700, 700, 16, 16, 2.0, jnp.float32)
    out = attend(q, k, v, impl="chunked", chunk_size=128)
    assert out.dtype == jnp.float32
    ref = attend(*(a.astype(jnp.float64) for a in (q, k, v)), impl="dense")
    np.testing.assert_allclose(out, ref, atol=2e-5 * float(jnp.abs(v).max()))


def test_fused_equals_dense_float32():
    q, k, v = _qkv(5, 100, 100, 6, 10, 1.0, jnp.float32)  # r != e: heads padded to one width
    np.testing.assert_allclose(attend(q, k, v, impl="fused"), attend(q, k, v, impl="dense"), atol=2e-5)


def test_vmap_over_batch():
    qs, ks, vs = (jnp.stack([_qkv(i, 150, 150, 4, 4, 5.0)[j] for i in range(4)]) for j in range(3))
    batched = jax.vmap(lambda q, k, v: attend(q, k, v, impl="chunked", chunk_size=40))(qs, ks, vs)
    for b in range(4):
        np.testing.assert_allclose(batched[b], attend(qs[b], ks[b], vs[b], impl="dense"), atol=1e-12 * 5)


def test_automatic_selection_by_size(monkeypatch):
    assert att.select_impl(256, 256) == "dense"
    assert att.select_impl(100_000, 100_000) == "chunked"
    n = 64
    q, k, v = _qkv(7, n, n, 3, 3, 1.0)

    def has_nn_buffer(fn):
        jaxpr = jax.make_jaxpr(fn)(q, k, v)
        return any(
            getattr(var.aval, "shape", ()) == (n, n)
            for eqn in jaxpr.eqns
            for var in eqn.outvars
        ) or f"[{n},{n}]" in str(jaxpr)

    assert has_nn_buffer(lambda q, k, v: attend(q, k, v))  # small: dense
    monkeypatch.setattr(att, "CHUNK_THRESHOLD", 32 * 32)
    monkeypatch.setattr(attnflow.kernels._tiled, "DEFAULT_CHUNK", 16)
    assert not has_nn_buffer(lambda q, k, v: attend(q, k, v))  # above the threshold: tiled
    np.testing.assert_allclose(attend(q, k, v), attend(q, k, v, impl="dense"), atol=1e-13)


def test_bad_impl_is_one_clear_sentence():
    q, k, v = _qkv(8, 4, 4, 2, 2, 1.0)
    with pytest.raises(InputError, match="impl must be one of"):
        attend(q, k, v, impl="flashy")
    with pytest.raises(InputError, match="chunk_size must be"):
        attend(q, k, v, impl="chunked", chunk_size=0)


def test_large_n_dynamics_step_does_not_materialise_n_by_n():
    """n = 8192: a dense step would need an 8192^2 score buffer (268 MB in float32, 4x the bound below)."""
    n, d = 8192, 8
    x = jax.random.normal(jax.random.key(9), (n, d), jnp.float32)
    I = jnp.eye(d, dtype=jnp.float32)
    dyn = AttentionFlow(0.3 * I, 0.3 * I, I)  # impl="auto" picks the chunked path
    step = jax.jit(lambda y: y + 0.1 * dyn.vector_field(0.0, y, None))
    compiled = step.lower(x).compile()
    hlo = compiled.as_text()
    assert f"{n},{n}" not in hlo
    mem = compiled.memory_analysis()
    if mem is not None:
        assert mem.temp_size_in_bytes < 64 * 2**20  # tiles of 512 x 512, not 20000 x 20000
    y1 = compiled(x)
    # the same step on a subsample agrees with the dense path computed independently
    rows = jnp.arange(0, n, 997)
    q, k = x @ (0.3 * I).T, x @ (0.3 * I).T
    ref = x[rows] + 0.1 * (jax.nn.softmax(q[rows] @ k.T, axis=-1) @ x)
    np.testing.assert_allclose(y1[rows], ref, atol=2e-5)


def test_dynamics_gradient_through_euler_chunked_equals_dense():
    """Reverse-mode gradient w.r.t. (Q, K, V) through 3 layers, two tiles per axis."""
    n, d = 600, 3
    x0 = jax.random.normal(jax.random.key(10), (n, d), jnp.float64)
    Q, K, V = (0.5 * jax.random.normal(kk, (d, d), jnp.float64) for kk in jax.random.split(jax.random.key(11), 3))

    def loss(impl):
        def f(Q, K, V):
            dyn = RescaledFlow(Q, K, V, attention_impl=impl)
            traj = solve_euler(dyn, x0, dt=0.2, num_steps=3)
            return jnp.sum(jnp.sin(traj.ys[-1]))

        return f

    gd = eqx.filter_jit(jax.grad(loss("dense"), argnums=(0, 1, 2)))(Q, K, V)
    gc = eqx.filter_jit(jax.grad(loss("chunked"), argnums=(0, 1, 2)))(Q, K, V)
    for a, b in zip(gd, gc):
        assert float(jnp.abs(a).max()) > 1e-3
        np.testing.assert_allclose(b, a, rtol=0, atol=1e-10 * float(jnp.abs(a).max()))
