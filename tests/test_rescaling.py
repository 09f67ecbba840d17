"""The rescaled pictures: x(t) = e^{tV} z(t) (continuous) and x[k] = (I + dt V)^k z[k] (discrete, exact)."""

import jax.numpy as jnp
import numpy as np
from scipy.linalg import expm
import pytest

import attnflow as af

pytestmark = pytest.mark.usefixtures("x64")  # compared with float64 references at float64 tolerances


def test_continuous_rescaling_x_equals_expm_tV_z(rng):
    for trial in range(2):
        n, d = 8, 3
        x0 = rng.normal(size=(n, d))
        Q, K = 0.5 * rng.normal(size=(d, d)), 0.5 * rng.normal(size=(d, d))
        V = rng.normal(size=(d, d)) / np.sqrt(d)
        kw = dict(t1=3.0, dtype="float64", num_saves=7, rtol=1e-11, atol=1e-12)
        raw = af.simulate(x0, Q, K, V, picture="raw", **kw)
        res = af.simulate(x0, Q, K, V, picture="rescaled", **kw)
        ts = np.asarray(res.ts)
        x_from_z = np.stack([np.asarray(res.states[i]) @ expm(t * V).T for i, t in enumerate(ts)])
        scale = np.abs(np.asarray(raw.states)).max()
        np.testing.assert_allclose(x_from_z, np.asarray(raw.states), atol=1e-8 * scale)
        # and the library's own tokens() agrees with SciPy's expm
        np.testing.assert_allclose(np.asarray(res.tokens), x_from_z, rtol=1e-12, atol=1e-12 * scale)
        np.testing.assert_allclose(np.asarray(res.states[0]), x0, atol=0)


def test_discrete_rescaling_identity_to_rounding(rng):
    """Remark 3.4: the z-recursion and the x-recursion agree exactly: x[k] = R^k z[k].

    Reconstructing x from z multiplies by R^k, which amplifies rounding by cond(R^k); the
    bound is therefore a small multiple of eps * k * cond(R^k), i.e. rounding error.
    """
    n, d, layers = 10, 3, 20
    eps = np.finfo(np.float64).eps
    for dt in (0.1, 1.0):
        x0 = rng.normal(size=(n, d))
        Q, K = 0.5 * rng.normal(size=(d, d)), 0.5 * rng.normal(size=(d, d))
        V = rng.normal(size=(d, d)) / np.sqrt(d)
        raw = af.simulate(x0, Q, K, V, t1=layers * dt, method="euler", dt=dt, dtype="float64")
        res = af.simulate(x0, Q, K, V, t1=layers * dt, method="euler", dt=dt, dtype="float64", picture="rescaled")
        R = np.eye(d) + dt * V
        zs, xs = np.asarray(res.states), np.asarray(raw.states)
        for k in range(layers + 1):
            Rk = np.linalg.matrix_power(R, k)
            rel = np.abs(zs[k] @ Rk.T - xs[k]).max() / np.abs(xs[k]).max()
            assert rel <= 64 * eps * (k + 1) * np.linalg.cond(Rk), (dt, k, rel)
            if dt == 0.1:  # well-conditioned R: a few ulps
                assert rel < 5e-15, (k, rel)
        # z really is the rescaled variable (not x): it differs from x once V != 0
        assert np.abs(zs[-1] - xs[-1]).max() > 1e-3


def test_discrete_rescaled_field_matches_remark_3_4_formula(rng):
    """One step of DiscreteRescaledFlow at layer k equals the formula of Remark 3.4 written out."""
    n, d, dt, k = 5, 2, 0.3, 3
    z = rng.normal(size=(n, d))
    Q, K, V = rng.normal(size=(d, d)), rng.normal(size=(d, d)), rng.normal(size=(d, d))
    R = np.eye(d) + dt * V
    x = z @ np.linalg.matrix_power(R, k).T
    S = (x @ Q.T) @ (x @ K.T).T
    P = np.exp(S - S.max(axis=1, keepdims=True))
    P /= P.sum(axis=1, keepdims=True)
    W = np.linalg.solve(R, V)
    expected = np.stack([sum(P[i, j] * W @ (z[j] - z[i]) for j in range(n)) for i in range(n)])
    f = af.EulerStepper(dt, 10).bind(af.DiscreteRescaledFlow(Q, K, V))
    np.testing.assert_allclose(np.asarray(f(k * dt, jnp.asarray(z))), expected, rtol=1e-10, atol=1e-12)


def test_rescaled_identity_tokens_do_not_move_apart_for_V_identity(rng):
    """V = I: the convex hull of z is non-increasing (Thm 3.1): max |z_i| never grows."""
    x0 = rng.normal(size=(12, 2))
    I = np.eye(2)
    res = af.simulate(x0, I, I, I, t1=4.0, picture="rescaled", dtype="float64", num_saves=41)
    radii = np.abs(np.asarray(res.states)).max(axis=(1, 2))  # max over tokens and coordinates
    assert np.all(np.diff(radii) <= 1e-9)
