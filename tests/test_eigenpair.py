"""The one leading-eigenpair implementation (attnflow.spectral._eigenpair): the spectral checks
and the differentiable margins return the same vectors, and its derivative is exact for a simple
lambda_1 even where the other eigenvalues coincide (a low-rank V, as a real attention head's
V_h = W_O W_V), checked against float64 central differences along random directions."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnflow.spectral import check_batch, eigenpair_at, leading_eigenpair, leading_eigenpair_jax

pytestmark = pytest.mark.usefixtures("x64")  # float64 central differences and tolerances


def _directional_fd(f, X, U, h=1e-6):
    return (float(f(X + h * U)) - float(f(X - h * U))) / (2 * h)


def _low_rank_with_simple_top(rng, d=6, r=2):
    while True:
        V = rng.normal(size=(d, r)) @ rng.normal(size=(r, d))
        w = np.linalg.eigvals(V)
        w = w[np.argsort(-np.abs(w))]
        if abs(w[0].imag) < 1e-12 and w[0].real > 0 and abs(w[0]) - abs(w[1]) > 0.3:
            return jnp.asarray(V)


def test_spectral_checks_and_margins_share_the_eigenpair(rng):
    V = jnp.asarray(rng.normal(size=(4, 4)))
    while np.iscomplex(leading_eigenpair(np.asarray(V)).lambda1):  # a real lambda_1: check_batch has phi
        V = jnp.asarray(rng.normal(size=(4, 4)))
    lam, phi, dual = leading_eigenpair_jax(V)
    r = check_batch(jnp.eye(4)[None], jnp.eye(4)[None], V[None])
    np.testing.assert_allclose(np.asarray(phi.real), np.asarray(r.phi[0]), atol=1e-12)
    np.testing.assert_allclose(np.asarray(dual.real), np.asarray(r.phi_dual[0]), atol=1e-12)
    e = leading_eigenpair(np.asarray(V))
    assert abs(complex(lam) - e.lambda1) < 1e-12
    np.testing.assert_allclose(np.asarray(V @ phi), np.asarray(lam * phi), atol=1e-12)
    np.testing.assert_allclose(np.asarray(dual @ V), np.asarray(lam * dual), atol=1e-12)
    assert abs(complex(dual @ phi) - 1) < 1e-12 and abs(float(jnp.linalg.norm(phi)) - 1) < 1e-12


def test_eigenpair_derivatives_exact_with_coinciding_lower_eigenvalues(rng):
    V = _low_rank_with_simple_top(rng)  # 4 zero eigenvalues: eig_sorted's tangent is undefined here
    x = jnp.asarray(rng.normal(size=6))
    fns = {
        "lambda_1": lambda V: leading_eigenpair_jax(V)[0].real,
        "phi . x": lambda V: leading_eigenpair_jax(V)[1].real @ x,
        "phi* . x": lambda V: leading_eigenpair_jax(V)[2].real @ x,
    }
    for name, f in fns.items():
        f = jax.jit(f)
        g = np.asarray(jax.grad(f)(V))
        assert np.isfinite(g).all(), name
        for _ in range(2):
            U = jnp.asarray(rng.normal(size=V.shape))
            fd = _directional_fd(f, V, U)
            # float64, h = 1e-6: truncation h^2 |f'''| + rounding eps |f| / h, both <= 1e-8 here
            assert abs(float(jnp.sum(g * U)) - fd) <= 1e-7 * max(1.0, abs(fd)), name
            # forward mode == reverse mode (same linear map)
            assert abs(float(jax.jvp(f, (V,), (U,))[1]) - float(jnp.sum(g * U))) <= 1e-10, name


def test_eigenpair_derivatives_exact_for_a_complex_leading_pair(rng):
    R = np.array([[0.5, -2.0, 0.0], [2.0, 0.5, 0.0], [0.0, 0.0, 1.0]])
    S = rng.normal(size=(3, 3))
    V = jnp.asarray(S @ R @ np.linalg.inv(S))
    x = jnp.asarray(rng.normal(size=3))
    fns = {
        "Im lambda_1": lambda V: leading_eigenpair_jax(V)[0].imag,
        "|phi . x|^2": lambda V: jnp.abs(leading_eigenpair_jax(V)[1] @ x) ** 2,
        "Re phi* . x": lambda V: jnp.real(leading_eigenpair_jax(V)[2] @ x),
    }
    for name, f in fns.items():
        g = np.asarray(jax.grad(f)(V))
        U = jnp.asarray(rng.normal(size=V.shape))
        fd = _directional_fd(f, V, U)
        assert abs(float(jnp.sum(g * U)) - fd) <= 1e-7 * max(1.0, abs(fd)), name


def test_eigenpair_at_vmaps_and_ignores_the_eigenvalue_tangent(rng):
    Vs = jnp.stack([_low_rank_with_simple_top(rng, d=4) for _ in range(3)])
    lams = jnp.stack([jnp.max(jnp.linalg.eigvals(V).real) for V in Vs])
    out = jax.vmap(eigenpair_at)(Vs, lams)
    for b in range(3):
        np.testing.assert_allclose(np.asarray(Vs[b] @ out[1][b]), np.asarray(lams[b] * out[1][b]), atol=1e-11)
    # d lambda / dV = phi* phi^T (rank one), whatever route produced lambda
    g = jax.grad(lambda V, lam: eigenpair_at(V, lam)[0])(Vs[0], lams[0])
    np.testing.assert_allclose(np.asarray(g), np.outer(np.asarray(out[2][0]), np.asarray(out[1][0])), atol=1e-12)
