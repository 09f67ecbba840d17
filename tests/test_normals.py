"""The noise's normal draws and the layer stepper's fence around them.

Known answers: Random123's Threefry-2x32 test vectors; ``jax.random.normal`` itself, bit for bit, for random keys
and shapes (jit, vmap over keys, keys from ``fold_in``), and its own stream wherever the written-out rounds do not
apply (other generators, the older non-partitionable threefry stream); one noisy layer on the circle against the
same layer written out by hand from ``jax.random.normal``; the fence returns ``fn()`` and its derivatives.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnflow.dynamics import AbstractDynamics
from attnflow.integrate import EulerMaruyamaStepper, TokenNoise, sphere_shift
from attnflow.integrate._noise import computed_once, layer_increment, layer_increment_sampler
from attnflow._normals import normal_sampler, standard_normal, threefry2x32

SHAPES = [(1,), (7,), (1000, 1), (33, 3), (4, 5, 6), (2, 1, 9)]


class Still(AbstractDynamics):
    """The zero field: the noise alone moves the tokens."""

    def vector_field(self, t, y, args=None):
        return jnp.zeros_like(y)


@pytest.mark.parametrize("key, counter, expected", [
    ((0, 0), (0, 0), (0x6B200159, 0x99BA4EFE)),
    ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
    ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0)),
])
def test_threefry_gives_random123_s_known_answers(key, counter, expected):
    words = threefry2x32(*(jnp.uint32(w) for w in key + counter))
    assert tuple(int(w) for w in words) == expected


@pytest.mark.parametrize("shape", SHAPES)
def test_standard_normal_is_jax_s_normal_bit_for_bit(shape):
    seeds = np.random.default_rng(11).integers(0, 2 ** 31, size=3)
    for seed in seeds:
        key = jax.random.fold_in(jax.random.key(int(seed)), int(seed) % 97)
        ours = jax.jit(lambda k: standard_normal(k, shape))(key)
        assert ours.dtype == jnp.float32 and ours.shape == shape
        np.testing.assert_array_equal(np.asarray(ours), np.asarray(jax.random.normal(key, shape, jnp.float32)))


def test_standard_normal_vmapped_over_keys_is_each_key_s_normal():
    keys = jax.random.split(jax.random.key(5), 6)
    ours = jax.jit(jax.vmap(lambda k: standard_normal(k, (50, 2))))(keys)
    theirs = jnp.stack([jax.random.normal(k, (50, 2), jnp.float32) for k in keys])
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))


def test_other_streams_are_jax_s_own():
    rbg = jax.random.key(3, impl="rbg")
    np.testing.assert_array_equal(np.asarray(standard_normal(rbg, (9, 2))),
                                  np.asarray(jax.random.normal(rbg, (9, 2), jnp.float32)))
    key = jax.random.key(4)
    with jax.threefry_partitionable(False):
        np.testing.assert_array_equal(np.asarray(standard_normal(key, (9, 2))),
                                      np.asarray(jax.random.normal(key, (9, 2), jnp.float32)))
    assert standard_normal(key, (0, 3)).shape == (0, 3)


def test_the_sampler_reads_the_same_stream_for_raw_and_typed_keys():
    typed = TokenNoise(1.0, jax.random.key(8))
    raw = TokenNoise(1.0, jax.random.PRNGKey(8))
    for k in (0, 5):
        a = layer_increment(typed, k, 0.25, (20, 3), jnp.float32)
        np.testing.assert_array_equal(np.asarray(a), np.asarray(layer_increment(raw, k, 0.25, (20, 3), jnp.float32)))
        np.testing.assert_array_equal(np.asarray(a), np.asarray(layer_increment_sampler(typed, k, 0.25, (20, 3),
                                                                                          jnp.float32)()))
        reference = 0.5 * jax.random.normal(jax.random.fold_in(jax.random.key(8), k), (20, 3), jnp.float32)
        np.testing.assert_array_equal(np.asarray(a), np.asarray(reference))
    sample = normal_sampler(jax.random.key(8))
    assert sample((3,)).shape == (3,)


def test_the_fence_returns_fn_and_its_derivatives():
    x = jax.random.normal(jax.random.key(1), (64, 2))

    def f(x):
        return jnp.sin(x) * jnp.sum(x ** 2, axis=-1, keepdims=True)

    def fenced(x, k):
        return computed_once(lambda: f(x), k)

    np.testing.assert_array_equal(np.asarray(jax.jit(fenced)(x, 3)), np.asarray(jax.jit(f)(x)))
    g = jax.grad(lambda x: jnp.sum(fenced(x, 3) ** 2))(x)
    np.testing.assert_allclose(np.asarray(g), np.asarray(jax.grad(lambda x: jnp.sum(f(x) ** 2))(x)), rtol=1e-6)
    xs = jnp.stack([x, 2 * x])
    for index in (jnp.int32(1), jnp.arange(2)):  # an unbatched and a batched predicate
        out = jax.vmap(fenced)(xs, jnp.broadcast_to(index, (2,)))
        np.testing.assert_allclose(np.asarray(out), np.asarray(jax.vmap(f)(xs)), rtol=1e-6)


def test_a_noisy_layer_on_the_circle_is_the_layer_written_out_from_jax_s_normals(x64_here):
    """One layer of the stepper (the fenced draw, the per-token factor, the rotation) against the layer by hand:
    y' = (y + sigma sqrt(dt) z (-y_2, y_1)/|y|) / |...|, z = jax.random.normal(fold_in(key, k), (n, 1)),
    on tokens off the unit circle (so the 1/|y| is exercised), in float64. Tolerance: one float32 ulp of the
    largest draw (|z| < 8: 2^-20) times sigma sqrt(dt): XLA may round the inverse error function fused into the
    layer differently from ``jax.random.normal``'s own program (it does at the suite's optimisation level 0);
    a wrong draw, factor or direction moves tokens by about sigma sqrt(dt) = 0.14."""
    n, sigma, dt = 257, 0.7, 0.04
    y0 = jax.random.normal(jax.random.key(2), (n, 2), jnp.float64) * 1.5
    key = jax.random.key(9)
    stepper = EulerMaruyamaStepper(dt, 2, noise=TokenNoise(sigma, key, sphere=True), shift=sphere_shift)
    ys = jax.jit(lambda y: stepper.solve(Still(), y).ys)(y0)
    y = y0
    for k in range(2):
        z = jax.random.normal(jax.random.fold_in(key, k), (n, 1), jnp.float32).astype(jnp.float64)
        step = y + sigma * np.sqrt(dt) * z * jnp.stack([-y[:, 1], y[:, 0]], axis=1) / jnp.linalg.norm(
            y, axis=1, keepdims=True)
        y = step / jnp.linalg.norm(step, axis=1, keepdims=True)
        np.testing.assert_allclose(np.asarray(ys[k + 1]), np.asarray(y), rtol=0, atol=sigma * np.sqrt(dt) * 2.0 ** -20)
        y = ys[k + 1]  # the next layer from the stepper's tokens, so that rounding does not accumulate


@pytest.mark.parametrize("d, sphere", [(2, True), (3, True), (3, False)])
def test_token_noise_acts_as_its_formula(d, sphere, x64_here):
    y = jax.random.normal(jax.random.key(3), (40, d), jnp.float64) * 2.0
    noise = TokenNoise(0.3, jax.random.key(0), sphere=sphere)
    dW = jax.random.normal(jax.random.key(4), noise.control_shape(y.shape), jnp.float64)
    got = noise.act(y, dW)
    if not sphere:
        expected = 0.3 * dW
    elif d == 2:
        expected = 0.3 * dW * jnp.stack([-y[:, 1], y[:, 0]], axis=1) / jnp.linalg.norm(y, axis=1, keepdims=True)
    else:
        w = 0.3 * dW
        expected = w - jnp.sum(w * y, axis=1, keepdims=True) / jnp.sum(y * y, axis=1, keepdims=True) * y
    np.testing.assert_allclose(np.asarray(got), np.asarray(expected), rtol=1e-13, atol=1e-15)


def test_a_noise_model_that_defines_only_act_is_stepped_with_it():
    """A user's noise model written against ``act`` alone (the whole change in one function) runs in the layer
    stepper: its act is the fenced coefficient, finished as it is."""
    from attnflow.integrate._noise import AbstractNoise

    class Doubled(AbstractNoise):
        def control_shape(self, y_shape):
            return tuple(y_shape)

        def operand(self, field, t, y):
            return y

        def act(self, operand, dW):
            return 2.0 * self.sigma * dW

    y0 = jax.random.normal(jax.random.key(1), (16, 2))
    key = jax.random.key(6)
    ys = EulerMaruyamaStepper(0.01, 1, noise=Doubled(0.5, key)).solve(Still(), y0).ys
    expected = y0 + 2.0 * 0.5 * 0.1 * jax.random.normal(jax.random.fold_in(key, 0), (16, 2), jnp.float32)
    np.testing.assert_allclose(np.asarray(ys[1]), np.asarray(expected), rtol=0, atol=1e-6)
    with pytest.raises(NotImplementedError, match="neither act nor coefficient"):
        AbstractNoise(0.5, key).act(y0, y0)


def test_off_the_cpu_the_draw_is_jax_s_own_and_unfenced(monkeypatch):
    """Where the backend is not the CPU, the increments come from JAX's own ``fold_in`` and normals (the same
    numbers) and the fence is ``fn()`` itself (no conditional in the program)."""
    noise = TokenNoise(1.0, jax.random.key(8))
    cpu = layer_increment(noise, 3, 0.25, (20, 3), jnp.float32)
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    np.testing.assert_array_equal(np.asarray(layer_increment(noise, 3, 0.25, (20, 3), jnp.float32)), np.asarray(cpu))
    program = jax.jit(lambda k: computed_once(lambda: jnp.arange(3.0) * k, k)).lower(2).as_text()
    assert "case" not in program and "cond" not in program


@pytest.mark.parametrize("shape", [(1,), (7,), (33, 3), (2, 5, 4)])
def test_float64_draws_are_jax_s_float64_normal_bit_for_bit(shape, x64_here):
    for seed in np.random.default_rng(12).integers(0, 2 ** 31, size=3):
        key = jax.random.fold_in(jax.random.key(int(seed)), 5)
        ours = jax.jit(lambda k: standard_normal(k, shape, jnp.float64))(key)
        assert ours.dtype == jnp.float64
        np.testing.assert_array_equal(np.asarray(ours), np.asarray(jax.random.normal(key, shape, jnp.float64)))
    folded = normal_sampler(jax.random.key(3), 11)(shape, jnp.float64)
    np.testing.assert_array_equal(np.asarray(folded), np.asarray(jax.random.normal(
        jax.random.fold_in(jax.random.key(3), 11), shape, jnp.float64)))


def test_start_clouds_are_jax_s_normals_of_the_token_key():
    """``draw_clouds`` draws ``jax.random.normal(token_key(seed), ...)`` (written out, the same numbers) in both
    precisions, for seeds up to 2^40, one cloud or several, on the sphere or not, vmapped over seeds."""
    from attnflow.dynamics import normalise
    from attnflow.ensembles import draw_clouds, token_key

    def reference(seed, dtype, clouds=None, on_sphere=False):
        shape = (9, 3) if clouds is None else (clouds, 9, 3)
        x0 = jax.random.normal(token_key(seed), shape, dtype) / jnp.sqrt(jnp.asarray(3, dtype))
        return normalise(x0) if on_sphere else x0

    for x64, dtypes in ((False, (jnp.float32,)), (True, (jnp.float32, jnp.float64))):
        with jax.enable_x64(x64):
            for dtype in dtypes:
                seeds = (0, 7, 2 ** 31 + 3, 2 ** 32 - 1) + ((2 ** 40 + 5,) if x64 else ())
                for seed in seeds:
                    for options in ({}, {"clouds": 3}, {"on_sphere": True}):
                        got = draw_clouds(seed, 9, 3, dtype, **options)
                        assert got.dtype == dtype
                        np.testing.assert_array_equal(np.asarray(got), np.asarray(reference(seed, dtype, **options)))
                batch = jnp.arange(20, dtype=jnp.uint32) * 7919
                got = jax.jit(jax.vmap(lambda s: draw_clouds(s, 9, 3, dtype, on_sphere=True)))(batch)
                want = jax.jit(jax.vmap(lambda s: reference(s, dtype, on_sphere=True)))(batch)  # both compiled
                np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
