"""The fused attention kernel (``impl="flash"``, a Pallas kernel; interpret mode on CPU) computes the
dense path's numbers: output, causal mask, unnormalised attention and gradients, at shapes that are not
multiples of its tiles, under jit and vmap, and inside a flow."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnflow import AttentionFlow, InputError, attend
from attnflow.integrate import solve_euler
from attnflow.kernels import FLASH_DEFAULT, FlashConfig, flash_attend, held_scores

SMALL = FlashConfig(block_q=32, block_k=16)  # several tiles at test sizes


def _qkv(n, n2, r, e, dtype, seed=0):
    kq, kk, kv = jax.random.split(jax.random.key(seed), 3)
    return (jax.random.normal(kq, (n, r), dtype), jax.random.normal(kk, (n2, r), dtype),
            jax.random.normal(kv, (n2, e), dtype))


def _dense64(q, k, v, **kw):
    with jax.enable_x64(True):
        return np.asarray(attend(*(jnp.asarray(np.asarray(a), jnp.float64) for a in (q, k, v)), impl="dense", **kw))


# float32: the kernel sums each row's exponentials in another order than the dense path; with scores of
# order 1-5 and n <= 200 the difference is a few float32 ulps of the output's scale (1e-5 leaves 10x room);
# float64 the same at 1e-12
TOL = {"float32": 1e-5, "float64": 1e-12}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", [(70, 45, 5, 3), (64, 64, 16, 16), (33, 130, 20, 7)])
def test_flash_matches_dense_float64(dtype, shape):
    with jax.enable_x64(dtype == "float64"):
        q, k, v = _qkv(*shape, jnp.dtype(dtype), seed=sum(shape))
        out = flash_attend(q, k, v, config=SMALL)
        assert out.dtype == jnp.dtype(dtype) and out.shape == (shape[0], shape[3])
        ref = _dense64(q, k, v)
        assert np.abs(np.asarray(out, np.float64) - ref).max() <= TOL[dtype] * np.abs(ref).max()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_flash_causal_and_mean(dtype):
    with jax.enable_x64(dtype == "float64"):
        q, k, v = _qkv(75, 75, 6, 4, jnp.dtype(dtype), seed=3)
        for kw in ({"mask": "causal"}, {"normalisation": "mean"}, {"mask": "causal", "normalisation": "mean"}):
            out = np.asarray(flash_attend(q, k, v, config=SMALL, **kw), np.float64)
            ref = _dense64(q, k, v, **kw)
            assert np.abs(out - ref).max() <= TOL[dtype] * np.abs(ref).max(), kw
        # causal: row 0 sees key 0 only
        np.testing.assert_allclose(flash_attend(q, k, v, config=SMALL, mask="causal")[0], v[0], rtol=TOL[dtype])


def test_flash_gradient_matches_dense_and_finite_differences():
    with jax.enable_x64(True):
        q, k, v = _qkv(50, 50, 4, 3, jnp.float64, seed=5)
        for mask in (None, "causal"):
            loss = lambda impl: (lambda q, k, v: jnp.sum(jnp.sin(
                attend(q, k, v, impl=impl, mask=mask) if impl == "dense" else flash_attend(q, k, v, mask=mask,
                                                                                          config=SMALL))))
            g = jax.grad(loss("flash"), argnums=(0, 1, 2))(q, k, v)
            g_ref = jax.grad(loss("dense"), argnums=(0, 1, 2))(q, k, v)
            for a, b in zip(g, g_ref):
                np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
        # one directional derivative against central differences (step 1e-5: error ~ h^2 = 1e-10)
        direction = jax.random.normal(jax.random.key(9), v.shape, jnp.float64)
        f = lambda t: loss("flash")(q, k, v + t * direction)
        fd = (f(1e-5) - f(-1e-5)) / 2e-5
        assert abs(float(jnp.vdot(g[2], direction)) - float(fd)) < 1e-7 * max(1.0, abs(float(fd)))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", [(70, 70, 6, 3), (33, 130, 20, 7)])
def test_flash_alibi_bias_matches_dense(dtype, shape):
    """The kernel's ALiBi bias -lambda |i - j| / n2, built from each tile's indices (tiles that do not divide the
    rows, more keys than queries), against the dense path's bias matrix in float64: plain, causal, mean."""
    from attnflow.kernels import Positions

    with jax.enable_x64(dtype == "float64"):
        q, k, v = _qkv(*shape, jnp.dtype(dtype), seed=11)
        pos = Positions(alibi=7.5)  # a bias of up to 7.5 on scores of order 1: it moves the weights
        kinds = ({}, {"normalisation": "mean"}) + (({"mask": "causal"},) if shape[0] == shape[1] else ())
        for kw in kinds:
            out = np.asarray(flash_attend(q, k, v, config=SMALL, positions=pos, **kw), np.float64)
            ref = _dense64(q, k, v, positions=pos, **kw)
            assert np.abs(out - ref).max() <= TOL[dtype] * np.abs(ref).max(), kw
            assert np.abs(ref - _dense64(q, k, v, **kw)).max() > 0.05 * np.abs(ref).max(), kw  # the bias matters
        out = attend(q, k, v, impl="flash", positions={"alibi": 7.5, "rotary": 100.0})  # rotary before the kernel
        ref = _dense64(q, k, v, positions={"alibi": 7.5, "rotary": 100.0})
        assert np.abs(np.asarray(out, np.float64) - ref).max() <= TOL[dtype] * np.abs(ref).max()


def test_flash_alibi_gradient_in_the_slope_and_inputs():
    from attnflow.kernels import Positions

    with jax.enable_x64(True):
        q, k, v = _qkv(50, 50, 4, 3, jnp.float64, seed=13)

        def loss(impl):
            def f(lam, q, k, v):
                pos = Positions(alibi=lam)
                out = (attend(q, k, v, impl="dense", mask="causal", positions=pos) if impl == "dense" else
                       flash_attend(q, k, v, mask="causal", config=SMALL, positions=pos))
                return jnp.sum(jnp.sin(out))
            return f

        lam = jnp.asarray(3.0)
        g = jax.grad(loss("flash"), argnums=(0, 1, 2, 3))(lam, q, k, v)
        g_ref = jax.grad(loss("dense"), argnums=(0, 1, 2, 3))(lam, q, k, v)
        for a, b in zip(g, g_ref):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
        fd = (loss("flash")(lam + 1e-5, q, k, v) - loss("flash")(lam - 1e-5, q, k, v)) / 2e-5
        assert abs(float(g[0]) - float(fd)) < 1e-7 * max(1.0, abs(float(fd))) and abs(float(g[0])) > 1e-3


def test_flash_under_jit_vmap_and_in_a_flow():
    q, k, v = (jnp.stack([a, a[::-1]]) for a in _qkv(40, 40, 8, 8, jnp.float32, seed=7))
    out = jax.jit(jax.vmap(lambda q, k, v: flash_attend(q, k, v, config=SMALL)))(q, k, v)
    ref = jax.vmap(lambda q, k, v: attend(q, k, v, impl="dense"))(q, k, v)
    np.testing.assert_allclose(out, ref, atol=1e-5)
    # the flow with attention_impl="flash" takes the same Euler steps as the dense flow
    d = 4
    x0 = jax.random.normal(jax.random.key(1), (30, d))
    W = [jnp.eye(d) + 0.3 * jax.random.normal(jax.random.key(i), (d, d)) for i in (2, 3, 4)]
    ends = [solve_euler(AttentionFlow(*W, attention_impl=impl), x0, dt=0.05, num_steps=10, save_every=10).ys[-1]
            for impl in ("flash", "dense")]
    np.testing.assert_allclose(ends[0], ends[1], rtol=1e-5, atol=1e-5)


def test_flash_refuses_what_it_cannot_compute():
    q, k, v = _qkv(8, 8, 2, 2, jnp.float32)
    with pytest.raises(InputError, match="boolean mask"):
        attend(q, k, v, impl="flash", mask=jnp.ones((8, 8), bool))
    with pytest.raises(InputError, match="normalisation"):
        flash_attend(q, k, v, normalisation="max")
    with pytest.raises(InputError, match="flash_attend takes an ALiBi slope only"):
        flash_attend(q, k, v, positions="rotary")
    for bad in ({"block_q": 24}, {"block_k": 8}, {"num_warps": 0}, {"precision": "tf32"}):
        with pytest.raises(InputError):
            FlashConfig(**bad)
    assert held_scores(1000, 1000, impl="flash") == (FLASH_DEFAULT.block_q, FLASH_DEFAULT.block_k)


def test_auto_takes_flash_only_where_it_was_measured_faster():
    from attnflow.kernels import GPU_FLASH_THRESHOLD, flash_preferred
    from attnflow.kernels._flash import resolved_precision

    n = int(GPU_FLASH_THRESHOLD**0.5)
    assert flash_preferred(n, n, jnp.float32, "gpu")
    assert not flash_preferred(n - 1, n - 1, jnp.float32, "gpu")
    assert not flash_preferred(n, n, jnp.float32, "cpu")
    with jax.enable_x64(True):
        assert not flash_preferred(n, n, jnp.float64, "gpu")
    # IEEE float32 asked for: the fused kernel would be slower than the dense / tiled paths there
    for setting in ("highest", "float32"):
        with jax.default_matmul_precision(setting):
            assert resolved_precision("auto") == "highest"
            assert not flash_preferred(n, n, jnp.float32, "gpu")
    assert resolved_precision("auto") == "tf32x3" and resolved_precision("highest") == "highest"


def test_auto_takes_flash_for_an_alibi_bias_where_it_is_preferred(monkeypatch):
    """Where the fused kernel is preferred (a GPU, float32, TF32x3: forced here on CPU, where the kernel runs in
    Pallas's interpret mode), "auto" takes it for an ALiBi bias too, and the result is the dense float64 one;
    where it is not, the tiled / dense paths (the kernel is never called)."""
    from attnflow.kernels import _attention as att
    from attnflow.kernels import _flash

    calls = []
    real = _flash.flash_attend
    monkeypatch.setattr(_flash, "flash_attend", lambda *a, **kw: calls.append(kw) or real(*a, **kw))
    q, k, v = _qkv(40, 40, 8, 8, jnp.float32, seed=11)
    pos = {"alibi": 3.0}
    for mask in (None, "causal"):
        plain = attend(q, k, v, impl="auto", mask=mask, positions=pos)
        assert not calls  # on CPU: the kernel is not preferred
        with monkeypatch.context() as preferred:
            preferred.setattr(att, "flash_preferred", lambda *a, **kw: True)
            out = attend(q, k, v, impl="auto", mask=mask, positions=pos)
        assert len(calls) == 1 and calls.pop()["positions"].alibi == 3.0
        ref = _dense64(q, k, v, positions=pos, mask=mask)
        for got in (out, plain):
            np.testing.assert_allclose(np.asarray(got, np.float64), ref, rtol=0, atol=TOL["float32"])
