"""Agreement with an independent plain NumPy/SciPy float64 reference (solve_ivp, DOP853)."""

import numpy as np
import pytest

import attnflow as af
from reference import ref_solve


@pytest.mark.parametrize("picture", ["raw", "rescaled"])
@pytest.mark.parametrize("n,d,m,beta", [(7, 2, 2, 1.0), (9, 3, 5, 0.8), (6, 4, 2, 1.5)])
def test_matches_scipy_reference(rng, picture, n, d, m, beta):
    x0 = rng.normal(size=(n, d))
    Q, K = 0.6 * rng.normal(size=(m, d)), 0.6 * rng.normal(size=(m, d))
    V = rng.normal(size=(d, d)) / np.sqrt(d)
    ts = np.linspace(0.0, 2.5, 6)
    ref = ref_solve(x0, Q, K, V, ts, picture=picture, beta=beta)
    sim = af.simulate(x0, Q, K, V, t1=2.5, ts=ts, picture=picture, beta=beta, dtype="float64", rtol=1e-10, atol=1e-12)
    scale = np.abs(ref).max()
    np.testing.assert_allclose(np.asarray(sim.states), ref, atol=1e-8 * scale)


def test_float32_default_is_close_to_reference(rng):
    x0 = rng.normal(size=(10, 2))
    Q, K, V = np.eye(2), np.eye(2), np.eye(2)
    ts = np.linspace(0.0, 3.0, 4)
    ref = ref_solve(x0, Q, K, V, ts, picture="rescaled")
    sim = af.simulate(x0, Q, K, V, t1=3.0, ts=ts, picture="rescaled")
    assert sim.states.dtype == np.float32 and sim.ts.dtype == np.float32
    np.testing.assert_allclose(np.asarray(sim.states), ref, atol=2e-4)
