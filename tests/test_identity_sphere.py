"""The sphere field's registry option identity_weights=True (IdentitySphereFlow): the same field and layer as
the general sphere field with Q = K = V = I, its 1/n field divided by the step scale, the row sums it hands to
save_fn (the energy), and its refusals."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnflow import InputError
from attnflow.dynamics import IdentitySphereFlow, normalise
from attnflow.fields import build_field, field_entry
from attnflow.integrate import EulerStepper
from attnflow.observables import interaction_energy
from attnflow.observables._pairs import sphere_energy_from_row_sums

pytestmark = pytest.mark.usefixtures("x64")


def _cloud(n=7, d=3, seed=0):
    return normalise(jax.random.normal(jax.random.key(seed), (n, d), jnp.float64))


@pytest.mark.parametrize("normalisation", ["softmax", "mean"])
@pytest.mark.parametrize("beta", [0.5, 4.0])
@pytest.mark.parametrize("d", [2, 5])
def test_identity_option_is_the_general_sphere_field_and_layer(normalisation, beta, d):
    I, x = jnp.eye(d), _cloud(d=d)
    general = build_field("sphere", I, I, I, beta=beta, normalisation=normalisation)
    fast = build_field("sphere", I, I, I, beta=beta, normalisation=normalisation, identity_weights=True)
    assert isinstance(fast, IdentitySphereFlow)
    np.testing.assert_allclose(fast(0.0, x), general(0.0, x), rtol=0, atol=1e-13)
    np.testing.assert_allclose(fast.vector_field_with_aux(0.0, x, None)[0], general(0.0, x), rtol=0, atol=1e-13)
    np.testing.assert_allclose(fast.attention(0.0, x), general.attention(0.0, x), rtol=1e-13, atol=1e-15)
    stepper = EulerStepper(0.1, 3, shift=field_entry("sphere").shift)
    np.testing.assert_allclose(stepper.solve(fast, x).ys, stepper.solve(general, x).ys, rtol=0, atol=1e-13)


def test_mean_field_divided_by_the_step_scale():
    I, x, beta, log_s = jnp.eye(3), _cloud(), 9.0, 8.0
    general = build_field("sphere", I, I, I, beta=beta, normalisation="mean")
    fast = build_field("sphere", I, I, I, beta=beta, normalisation="mean", identity_weights=True, log_scale=log_s)
    np.testing.assert_allclose(fast(0.0, x), general(0.0, x) * np.exp(-log_s), rtol=1e-12, atol=1e-15)
    # at a beta where e^beta overflows float32 the field divided by s stays finite
    big = IdentitySphereFlow(jnp.float32(120.0), normalisation="mean", log_scale=jnp.float32(120.0))
    assert bool(jnp.all(jnp.isfinite(big(0.0, x.astype(jnp.float32)))))


@pytest.mark.parametrize("normalisation", ["softmax", "mean"])
def test_row_sums_give_the_energy(normalisation):
    x, beta = _cloud(), 3.0
    _, row_sums = IdentitySphereFlow(beta, normalisation=normalisation).vector_field_with_aux(0.0, x, None)
    np.testing.assert_allclose(sphere_energy_from_row_sums(row_sums, beta), interaction_energy(x, beta), rtol=1e-12)


def test_builds_under_vmap_over_beta():
    I, x = jnp.eye(3), _cloud()
    betas = jnp.array([0.5, 2.0])
    out = jax.vmap(lambda b: build_field("sphere", I, I, I, beta=b, identity_weights=True)(0.0, x))(betas)
    for k, b in enumerate([0.5, 2.0]):
        np.testing.assert_allclose(out[k], build_field("sphere", I, I, I, beta=b)(0.0, x), atol=1e-13)


@pytest.mark.parametrize("call, words", [
    (lambda I: build_field("sphere", 2 * I, I, I, identity_weights=True), ["identity_weights", "identity"]),
    (lambda I: build_field("sphere", I, I, I, identity_weights=True, mask="causal"), ["mask"]),
    (lambda I: build_field("sphere", I, I, I, log_scale=1.0), ["log_scale", "identity_weights"]),
    (lambda I: build_field("sphere", I, I, I, identity_weights=True, log_scale=1.0), ["log_scale", "mean"]),
    (lambda I: IdentitySphereFlow(1.0, attention_impl="fourier"), ["attention_impl"]),
    (lambda I: IdentitySphereFlow(-1.0), ["beta"]),
])
def test_refusals_are_one_sentence(call, words):
    with pytest.raises(InputError) as err:
        call(jnp.eye(3))
    message = str(err.value)
    assert all(w in message for w in words), message
    assert "\n" not in message
