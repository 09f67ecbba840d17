"""Measured convergence orders, against a much finer float64 reference."""

import numpy as np
import pytest

import attnflow as af
from reference import ref_euler, ref_solve

pytestmark = pytest.mark.usefixtures("x64")  # compared with float64 references at float64 tolerances


def _problem(rng, n=8, d=3):
    x0 = rng.normal(size=(n, d))
    Q, K = 0.7 * rng.normal(size=(d, d)), 0.7 * rng.normal(size=(d, d))
    V = rng.normal(size=(d, d)) / np.sqrt(d)
    return x0, Q, K, V


def _orders(errors):
    errors = np.asarray(errors)
    return np.log2(errors[:-1] / errors[1:])


def test_euler_layer_stepper_has_order_one(rng):
    x0, Q, K, V = _problem(rng)
    T = 1.0
    ref = ref_solve(x0, Q, K, V, np.array([0.0, T]))[-1]
    errs = []
    for dt in (0.05, 0.025, 0.0125):
        sim = af.simulate(x0, Q, K, V, t1=T, method="euler", dt=dt, dtype="float64", save_every=int(round(T / dt)))
        errs.append(np.abs(np.asarray(sim.states[-1]) - ref).max())
    orders = _orders(errs)
    assert np.all(np.abs(orders - 1.0) < 0.15), (errs, orders)


def test_euler_layer_stepper_matches_plain_loop(rng):
    x0, Q, K, V = _problem(rng, n=5, d=2)
    sim = af.simulate(x0, Q, K, V, t1=3.0, method="euler", dt=1.0, dtype="float64")
    np.testing.assert_allclose(np.asarray(sim.states), ref_euler(x0, Q, K, V, 1.0, 3), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("picture", ["raw", "rescaled"])
def test_tsit5_has_high_order_and_is_not_secretly_euler(rng, picture):
    """Constant-step Tsit5 shows order >= 4 in both pictures.

    SPEC section 6: the rescaled drift depends only on differences z_j - z_i, so an 'RK4'
    whose stages add one common vector to every token is really Euler. A real fifth-order
    method shows it here; Euler at the same step is orders of magnitude worse.
    """
    x0, Q, K, V = _problem(rng)
    T = 2.0
    ref = ref_solve(x0, Q, K, V, np.array([0.0, T]), picture=picture, rtol=1e-13, atol=1e-14)[-1]
    errs = []
    for dt in (0.25, 0.125, 0.0625):
        sim = af.simulate(x0, Q, K, V, t1=T, method="tsit5", dt=dt, picture=picture, dtype="float64", num_saves=2)
        errs.append(np.abs(np.asarray(sim.states[-1]) - ref).max())
    orders = _orders(errs)
    assert np.all(orders > 4.0), (errs, orders)
    if picture == "raw":
        euler = af.simulate(x0, Q, K, V, t1=T, method="euler", dt=0.0625, dtype="float64", save_every=32)
        e_err = np.abs(np.asarray(euler.states[-1]) - ref).max()
        assert e_err > 1e3 * errs[-1]


def test_heun_has_order_two(rng):
    x0, Q, K, V = _problem(rng)
    T = 1.0
    ref = ref_solve(x0, Q, K, V, np.array([0.0, T]), picture="rescaled")[-1]
    errs = []
    for dt in (0.1, 0.05, 0.025):
        sim = af.simulate(x0, Q, K, V, t1=T, method="heun", dt=dt, picture="rescaled", dtype="float64", num_saves=2)
        errs.append(np.abs(np.asarray(sim.states[-1]) - ref).max())
    orders = _orders(errs)
    assert np.all(np.abs(orders - 2.0) < 0.25), (errs, orders)


def test_adaptive_error_follows_tolerance(rng):
    x0, Q, K, V = _problem(rng)
    T = 2.0
    ref = ref_solve(x0, Q, K, V, np.array([0.0, T]))[-1]
    errs = []
    for tol in (1e-6, 1e-9):
        sim = af.simulate(x0, Q, K, V, t1=T, dtype="float64", rtol=tol, atol=tol, num_saves=2)
        errs.append(np.abs(np.asarray(sim.states[-1]) - ref).max())
    assert errs[0] < 1e-4 and errs[1] < 1e-7 and errs[1] < errs[0] / 30, errs
