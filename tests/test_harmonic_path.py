"""The attention flows' sphere path (``attention_impl="harmonic"``, O(n L^2) on S^2) against the direct sum.

Tolerances: the path is exact to rounding (attnflow/kernels/sphere.py: the kernel's tail is below the unit
roundoff u, and the evaluation sums (L+1)^2 bounded terms), so fields are compared at 2 (L+1)^2 u relative to
their largest entry (tests/test_sphere_kernel.py states the same scale; the observed errors are 10-100x
smaller). A wrong value matrix (transposed), a missing head, a wrong bias or the row sums of the other
normalisation are off by O(1).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnflow import AttentionFlow, AttentionWeights, InputError, RescaledFlow, attend, simulate
from attnflow.dynamics import IdentitySphereFlow, normalise, sphere_flow
from attnflow.integrate import EulerStepper, sphere_shift
from attnflow.kernels.sphere import TOKENS_PER_HARMONIC, HarmonicPlan, harmonic_plan, sphere_degree

pytestmark = pytest.mark.usefixtures("x64")
I3 = np.eye(3)  # float64 weights (the runs are float64 unless a test says otherwise)


def cloud(seed: int, n: int, dtype=jnp.float64):
    return normalise(jax.random.normal(jax.random.key(seed), (n, 3), dtype))


def scale(beta: float, dtype) -> float:
    """2 (L+1)^2 u: the rounding scale of the path (module docstring)."""
    return 2 * (sphere_degree(beta, dtype) + 1) ** 2 * float(jnp.finfo(dtype).eps) / 2


def close(a, b, beta, dtype):
    err = float(jnp.abs(a - b).max() / jnp.abs(b).max())
    assert err <= scale(beta, dtype), (err, scale(beta, dtype))


@pytest.mark.parametrize("dtype", [jnp.float64, jnp.float32])
@pytest.mark.parametrize("normalisation", ["softmax", "mean"])
def test_sphere_flow_with_any_value_matrix_equals_the_direct_sum(dtype, normalisation):
    x = cloud(0, 700, dtype)
    V = jax.random.normal(jax.random.key(1), (3, 3), dtype)
    I3 = jnp.eye(3, dtype=dtype)
    for beta in (1.0, 4.0):
        fast = sphere_flow(I3, I3, V, beta, attention_impl="harmonic", normalisation=normalisation)(0.0, x)
        direct = sphere_flow(I3, I3, V, beta, attention_impl="dense", normalisation=normalisation)(0.0, x)
        assert fast.dtype == dtype
        close(fast, direct, beta, dtype)


def test_heads_with_scaled_identities_and_value_biases_equal_the_direct_sum():
    x = cloud(2, 500)
    keys = jax.random.split(jax.random.key(3), 2)
    V = jnp.stack([jax.random.normal(k, (3, 3)) for k in keys])
    w = AttentionWeights(jnp.stack([I3, 2 * I3]), jnp.stack([0.5 * I3, 3 * I3]), V, beta=1.5,
                         v_bias=jnp.array([[0.1, -0.2, 0.3], [0.0, 0.4, -1.0]]), axes=("head",))
    fast = AttentionFlow(w, attention_impl="harmonic")
    assert fast.harmonic.bound == pytest.approx(9.0)  # the largest scale, 1.5 * 2 * 3
    close(fast(0.0, x), AttentionFlow(w, attention_impl="dense")(0.0, x), 9.0, jnp.float64)


@pytest.mark.parametrize("normalisation", ["softmax", "mean"])
def test_identity_sphere_field_and_its_row_sums_equal_the_dense_ones(normalisation):
    x = cloud(4, 600)
    kw = dict(normalisation=normalisation, log_scale=0.7 if normalisation == "mean" else None)
    fast = IdentitySphereFlow(6.0, attention_impl="harmonic", **kw)
    dense = IdentitySphereFlow(6.0, attention_impl="dense", **kw)
    (f, r), (g, s) = fast.vector_field_with_aux(0.0, x, None), dense.vector_field_with_aux(0.0, x, None)
    close(f, g, 6.0, jnp.float64)
    close(r, s, 6.0, jnp.float64)
    close(fast(0.0, x), dense(0.0, x), 6.0, jnp.float64)


def test_gradients_in_values_and_tokens_forward_and_reverse_equal_the_direct_sum():
    x = cloud(5, 300)
    V = jax.random.normal(jax.random.key(6), (3, 3))

    def loss(V, x, impl):
        return jnp.sum(jnp.sin(sphere_flow(I3, I3, V, 3.0, attention_impl=impl)(0.0, x)))

    def along_sphere(g):  # the two extensions off the sphere differ; their derivatives along it agree
        return g - jnp.sum(g * x, axis=-1, keepdims=True) * x

    fast, direct = (jax.grad(loss)(V, x, impl) for impl in ("harmonic", "dense"))
    close(fast, direct, 3.0, jnp.float64)
    fast, direct = (along_sphere(jax.grad(loss, 1)(V, x, impl)) for impl in ("harmonic", "dense"))
    close(fast, direct, 3.0, jnp.float64)
    tangent = along_sphere(jax.random.normal(jax.random.key(7), x.shape))
    fast, direct = (jax.jvp(lambda y: loss(V, y, impl), (x,), (tangent,))[1] for impl in ("harmonic", "dense"))
    assert abs(float(fast - direct)) <= scale(3.0, jnp.float64) * abs(float(direct)) * 10


def test_a_layer_run_on_the_sphere_stays_on_the_direct_sum_s_path():
    x0 = cloud(8, 400)
    V = I3 + 0.3 * jax.random.normal(jax.random.key(9), (3, 3))
    stepper = EulerStepper(dt=0.1, num_layers=30, shift=sphere_shift)
    fast = stepper.solve(sphere_flow(I3, I3, V, 4.0, attention_impl="harmonic"), x0).ys
    direct = stepper.solve(sphere_flow(I3, I3, V, 4.0, attention_impl="dense"), x0).ys
    # 30 layers of a contracting flow: rounding differences grow at most linearly in the layers here
    assert float(jnp.abs(fast - direct).max()) <= 30 * scale(4.0, jnp.float64)


def test_simulate_takes_the_path_for_a_batch_of_value_matrices():
    x = cloud(10, 300)
    V = jax.random.normal(jax.random.key(11), (3, 3, 3))
    kw = dict(beta=2.0, method="euler", dt=0.1, t1=0.5, shift="sphere", batch=("V",), dtype="float64")
    fast = simulate(x, I3, I3, V, attention_impl="harmonic", **kw).tokens
    direct = simulate(x, I3, I3, V, attention_impl="dense", **kw).tokens
    assert fast.shape == (3, 6, 300, 3) and fast.dtype == jnp.float64
    assert float(jnp.abs(fast - direct).max()) <= 5 * scale(2.0, jnp.float64)


def test_auto_takes_the_path_on_unit_tokens_above_the_crossover_only():
    w = AttentionWeights(I3, I3, I3, beta=4.0)
    plan = harmonic_plan(w, "auto", unit_tokens=True, owner="sphere_flow")
    assert plan == HarmonicPlan(4.0, auto=True)
    crossover = TOKENS_PER_HARMONIC * (sphere_degree(4.0, jnp.float64) + 1) ** 2
    assert not plan.applies(crossover - 1, 3, jnp.float64) and plan.applies(crossover, 3, jnp.float64)
    assert not plan.applies(10 ** 6, 2, jnp.float64)
    assert harmonic_plan(w, "auto", owner="AttentionFlow") is None  # tokens off the sphere: never guessed
    assert sphere_flow(I3, I3, I3, 4.0).inner.harmonic == plan
    assert IdentitySphereFlow(4.0).harmonic == plan
    off = AttentionWeights(I3, I3 + 0.01 * jnp.ones((3, 3)), I3, beta=4.0)
    assert harmonic_plan(off, "auto", unit_tokens=True, owner="sphere_flow") is None
    # above the crossover the automatic field is the path's (the same numbers, bit for bit)
    x = cloud(12, crossover)
    assert bool(jnp.all(IdentitySphereFlow(4.0)(0.0, x) == IdentitySphereFlow(4.0, attention_impl="harmonic")(0.0, x)))


def test_where_the_path_does_not_apply_one_sentence_says_why():
    V = jnp.eye(3)
    cases = [
        (lambda: sphere_flow(I3, 2 * I3 + 0.1, V, 1.0, attention_impl="harmonic"), "c I with c >= 0"),
        (lambda: sphere_flow(-I3, I3, V, 1.0, attention_impl="harmonic"), "c = -1"),
        (lambda: AttentionFlow(jnp.eye(2), jnp.eye(2), jnp.eye(2), attention_impl="harmonic"), "d >= 3"),
        (lambda: AttentionFlow(I3, I3, V, attention_impl="harmonic", mask="causal"), "mask"),
        (lambda: AttentionFlow(AttentionWeights(I3, I3, V, q_bias=jnp.ones(3)), attention_impl="harmonic"), "biases"),
        (lambda: RescaledFlow(I3, I3, V, attention_impl="harmonic"), "rescaled"),
        (lambda: jax.jit(lambda b: IdentitySphereFlow(b, attention_impl="harmonic")(0.0, cloud(0, 8)))(1.0), "traced"),
        (lambda: IdentitySphereFlow(1.0, attention_impl="harmonic")(0.0, jnp.ones((4, 2))), "d = 2"),
        (lambda: attend(I3, I3, I3, impl="harmonic"), "sphere_attention"),
        (lambda: sphere_flow(I3, I3, V, 5000.0, attention_impl="harmonic"), "degree above"),
    ]
    for make, words in cases:
        with pytest.raises(InputError, match=words) as err:
            make()
        message = str(err.value)
        assert message.endswith("."), message
    # the automatic choice never refuses: it falls back to the direct sum
    x = cloud(13, 64)
    assert bool(jnp.all(jnp.isfinite(sphere_flow(I3, I3, V, 5000.0)(0.0, x))))
    np.testing.assert_array_equal(np.asarray(sphere_flow(I3, 2 * I3 + 0.1, V, 1.0)(0.0, x)),
                                  np.asarray(sphere_flow(I3, 2 * I3 + 0.1, V, 1.0, attention_impl="dense")(0.0, x)))
