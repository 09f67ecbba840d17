"""Every per-system draw lives in attnflow.ensembles: the clouds and the heads the phase job and the sweeps use."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from attnflow.ensembles import draw_clouds, draw_heads, draw_systems, head_seeds, system_seeds, token_key


def test_draw_clouds_is_the_token_key_normal_draw():
    for dtype in (jnp.float32, jnp.float64):
        with jax.enable_x64(dtype == jnp.float64):
            x = draw_clouds(11, 6, 3, dtype)
            ref = jax.random.normal(token_key(11), (6, 3), dtype) / jnp.sqrt(jnp.asarray(3, dtype))
            assert x.dtype == dtype and bool((x == ref).all())
            many = draw_clouds(11, 6, 3, dtype, clouds=4, on_sphere=True)
            assert many.shape == (4, 6, 3)
            assert bool((many[0] == ref / jnp.linalg.norm(ref, axis=-1, keepdims=True)).all())  # the first cloud
            assert bool(jnp.allclose(jnp.linalg.norm(many, axis=-1), 1.0, atol=1e-6))


def test_draw_clouds_vmaps_over_seeds():
    seeds = jnp.asarray(system_seeds(0, "g", 0, 5), jnp.uint32)
    batched = jax.jit(jax.vmap(lambda s: draw_clouds(s, 4, 2, jnp.float32, on_sphere=True)))(seeds)
    for b in range(5):  # the same draw (compiled apart: equal to rounding)
        np.testing.assert_allclose(batched[b], draw_clouds(seeds[b], 4, 2, jnp.float32, on_sphere=True), rtol=1e-6)


def test_draw_heads_stacks_the_systems_draws():
    with jax.enable_x64(True):
        s = system_seeds(3, "grp", 2, 7)
        one = draw_heads(s, "goe", "spd", 4)
        assert all(bool((a == b).all()) for a, b in zip(one, draw_systems(s, "goe", "spd", 4)))
        h = head_seeds(s, 3, "grp", 2, 7, 3)
        Q, K, V = draw_heads(h, "goe", "spd", 4)
        assert V.shape == (5, 3, 4, 4)
        for j in range(3):
            Qj, Kj, Vj = draw_systems(h[:, j], "goe", "spd", 4)
            assert bool((V[:, j] == Vj).all()) and bool((K[:, j] == Kj).all()) and bool((Q[:, j] == Qj).all())


def test_head_seeds_are_pure_functions_of_the_index():
    a = head_seeds(system_seeds(0, "g", 0, 6), 0, "g", 0, 6, 2)
    b = head_seeds(system_seeds(0, "g", 4, 6), 0, "g", 4, 6, 2)
    assert np.array_equal(a[4:], b) and np.array_equal(a[:, 1], system_seeds(0, "g|head=1", 0, 6))
