"""The attention kernel: one softmax, P row-stochastic, dependence on Q^T K only."""

import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings, strategies as st
from hypothesis.extra.numpy import arrays
import pytest

import attnflow as af
from attnflow.kernels import project_qk
from reference import ref_attention

pytestmark = pytest.mark.usefixtures("x64")  # compared with float64 references at float64 tolerances


def test_attention_matrix_is_row_stochastic_and_positive(rng):
    for m in (2, 3, 7):
        x = rng.normal(size=(9, 3))
        Q, K = rng.normal(size=(m, 3)), rng.normal(size=(m, 3))
        P = np.asarray(af.attention_matrix(jnp.asarray(x), Q, K, beta=0.7))
        assert P.shape == (9, 9)
        assert np.all(P > 0)
        np.testing.assert_allclose(P.sum(axis=1), 1.0, atol=1e-14)
        np.testing.assert_allclose(P, ref_attention(x, Q, K, 0.7), rtol=1e-12, atol=1e-15)


def test_wide_and_tall_projections_give_the_same_scores(rng):
    # m > d goes through A = Q^T K; m <= d through (Q x, K x): same scores
    x = rng.normal(size=(5, 3))
    Q, K = rng.normal(size=(8, 3)), rng.normal(size=(8, 3))
    q, k = project_qk(jnp.asarray(x), Q, K, 1.3)
    np.testing.assert_allclose(np.asarray(q @ k.T), 1.3 * (x @ Q.T) @ (x @ K.T).T, rtol=1e-12, atol=1e-12)


finite = st.floats(min_value=-1e4, max_value=1e4, allow_nan=False, width=64)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(arrays(np.float64, (3, 5), elements=finite), st.floats(-1e4, 1e4))
def test_softmax_shift_invariant_and_finite(s, c):
    p = np.asarray(af.softmax(jnp.asarray(s)))
    assert np.all(np.isfinite(p))
    np.testing.assert_allclose(p.sum(axis=-1), 1.0, atol=1e-12)
    np.testing.assert_allclose(np.asarray(af.softmax(jnp.asarray(s + c))), p, atol=1e-9)


def test_softmax_of_huge_scores_is_finite_in_float32():
    s = jnp.asarray([[1e4, 1e4 - 3.0, -1e4], [3e4, 0.0, 1.0]], jnp.float32)
    p = af.softmax(s)
    assert p.dtype == jnp.float32
    assert bool(jnp.all(jnp.isfinite(p)))
    np.testing.assert_allclose(np.asarray(p[0, :2]), [1 / (1 + np.exp(-3.0)), np.exp(-3.0) / (1 + np.exp(-3.0))], rtol=1e-6)
    with np.errstate(over="ignore"):  # naive exp would overflow here (that is the point)
        assert not np.all(np.isfinite(np.exp(np.asarray(s, np.float32))))


def test_attend_equals_P_times_values(rng):
    q, k, v = (jnp.asarray(rng.normal(size=s)) for s in ((6, 4), (6, 4), (6, 2)))
    P = af.softmax(q @ k.T)
    np.testing.assert_allclose(np.asarray(af.attend(q, k, v)), np.asarray(P @ v), rtol=1e-12)


def test_trajectory_depends_on_QK_only_through_QtK(rng):
    """Two factorisations Q^T K = Q'^T K' (Q' = M Q, K' = M^{-T} K, even m' != m) give one trajectory."""
    d, m = 3, 3
    x0 = rng.normal(size=(7, d))
    Q, K = 0.6 * rng.normal(size=(m, d)), 0.6 * rng.normal(size=(m, d))
    V = rng.normal(size=(d, d)) / 2
    M = rng.normal(size=(m, m)) + 3 * np.eye(m)
    Q2, K2 = M @ Q, np.linalg.inv(M).T @ K
    # a tall factorisation with m' = 5 > d: pad with rows that cancel in Q^T K
    extra = rng.normal(size=(2, d))
    Q3 = np.vstack([Q, extra])
    K3 = np.vstack([K, np.zeros((2, d))])
    np.testing.assert_allclose(Q2.T @ K2, Q.T @ K, atol=1e-12)
    runs = [
        af.simulate(x0, q, k, V, t1=2.0, dtype="float64", num_saves=5).states
        for q, k in ((Q, K), (Q2, K2), (Q3, K3))
    ]
    np.testing.assert_allclose(np.asarray(runs[1]), np.asarray(runs[0]), rtol=1e-8, atol=1e-9)
    np.testing.assert_allclose(np.asarray(runs[2]), np.asarray(runs[0]), rtol=1e-8, atol=1e-9)


def test_attention_is_identical_in_raw_and_rescaled_pictures(rng):
    x0 = rng.normal(size=(6, 2))
    Q, K = rng.normal(size=(2, 2)), rng.normal(size=(2, 2))
    V = rng.normal(size=(2, 2))
    kw = dict(t1=1.0, dtype="float64", num_saves=4, return_attention=True, rtol=1e-11, atol=1e-12)
    raw = af.simulate(x0, Q, K, V, picture="raw", **kw)
    res = af.simulate(x0, Q, K, V, picture="rescaled", **kw)
    np.testing.assert_allclose(np.asarray(res.attention), np.asarray(raw.attention), atol=1e-8)
