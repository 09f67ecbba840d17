"""The dense attention's hand-written tangent (custom JVP, residual P only): first and second
derivatives equal plain autodiff through the same softmax, for every mask and normalisation,
in forward and reverse mode (float64, random inputs)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnflow.kernels import attend, mask_array, softmax

pytestmark = pytest.mark.usefixtures("x64")  # compared with float64 references at float64 tolerances


def _autodiff_reference(q, k, v, mask, normalisation):
    where = mask_array(mask, q.shape[0], k.shape[0])
    return softmax(q @ k.T, axis=-1, where=where, normalisation=normalisation) @ v


@pytest.mark.parametrize("normalisation", ["softmax", "mean"])
@pytest.mark.parametrize("mask_kind", ["none", "causal", "array"])
def test_dense_attention_derivatives_equal_autodiff(rng, mask_kind, normalisation):
    n, r = 7, 3
    q, k, v, W = (jnp.asarray(rng.normal(size=(n, r))) for _ in range(4))
    mask = {"none": None, "causal": "causal",
            "array": jnp.asarray(rng.random((n, n)) > 0.3).at[2].set(False)}[mask_kind]  # row 2: no key
    f = lambda a: jnp.sum(W * jnp.sin(attend(*a, impl="dense", mask=mask, normalisation=normalisation)))  # noqa: E731
    g = lambda a: jnp.sum(W * jnp.sin(_autodiff_reference(*a, mask, normalisation)))  # noqa: E731
    a = (q, k, v)
    t = tuple(jnp.asarray(rng.normal(size=(n, r))) for _ in range(3))
    # both are exact derivatives of the same float64 function: they differ by rounding only.
    # Gradients are O(1) (sin' <= 1, P <= 1 for softmax; "mean" rows e^{s}/n reach ~10^3 here),
    # so the rounding scale is eps x the reference's largest entry (>= 1): 1e-12 of it is ~5e3 eps.
    tol = lambda y: 1e-12 * max(1.0, float(np.abs(np.asarray(y)).max()))  # noqa: E731
    for x, y in zip(jax.grad(f)(a), jax.grad(g)(a)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=0, atol=tol(y))
    assert abs(float(jax.jvp(f, (a,), (t,))[1] - jax.jvp(g, (a,), (t,))[1])) <= 1e-12
    for x, y in zip(jax.jvp(jax.grad(f), (a,), (t,))[1], jax.jvp(jax.grad(g), (a,), (t,))[1]):  # Hessian-vector
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=0, atol=10 * tol(y))
    assert np.isfinite(np.asarray(jax.grad(f)(a)[0])).all()
