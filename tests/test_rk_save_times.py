"""RKStepper between given save times (``ts=``, ``steps_per_save``), its stages as one scan body
(``scan_stages``) and the minimum it tracks over every step (``track_min``)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnflow import AttentionFlow
from attnflow.errors import InputError
from attnflow.integrate import RESULTS, RK_TABLEAUX, ButcherTableau, RKStepper

pytestmark = pytest.mark.usefixtures("x64")


def _flow(scale=1.0):
    Q, K, V = jax.random.normal(jax.random.key(3), (3, 3, 3)) / np.sqrt(3)
    return AttentionFlow(Q, K, scale * V)


def _x0():
    return jax.random.normal(jax.random.key(4), (6, 3))


def test_uniform_save_times_are_the_layer_grid():
    flow, x0 = _flow(), _x0()
    at = RKStepper("rk4", ts=jnp.linspace(0.0, 1.0, 5), steps_per_save=4).solve(flow, x0)
    grid = RKStepper("rk4", 1 / 16, 16, save_every=4).solve(flow, x0)
    np.testing.assert_allclose(at.ys, grid.ys, rtol=0, atol=1e-13)
    np.testing.assert_allclose(at.ts, grid.ts, rtol=0, atol=1e-15)
    assert int(at.num_steps) == 16 and int(at.result) == RESULTS.successful and np.isinf(float(at.t_nonfinite))


def test_each_interval_takes_its_own_step():
    """ts = 0, 0.5, 2: 0.5 / 4 then 1.5 / 4, the same as two grid runs one after the other."""
    flow, x0 = _flow(), _x0()
    at = RKStepper("rk4", ts=jnp.array([0.0, 0.5, 2.0]), steps_per_save=4).solve(flow, x0)
    first = RKStepper("rk4", 0.125, 4, save_every=4).solve(flow, x0).ys[-1]
    second = RKStepper("rk4", 0.375, 4, t0=0.5, save_every=4).solve(flow, first).ys[-1]
    np.testing.assert_allclose(at.ys[1], first, rtol=0, atol=1e-14)
    np.testing.assert_allclose(at.ys[2], second, rtol=0, atol=1e-13)


@pytest.mark.parametrize("name", ["euler", "midpoint", "rk4"])
def test_scanned_stages_are_the_unrolled_stages(name):
    flow, x0 = _flow(), _x0()
    ts = jnp.array([0.0, 0.3, 1.0])
    unrolled = RKStepper(name, ts=ts, steps_per_save=5).solve(flow, x0)
    scanned = RKStepper(name, ts=ts, steps_per_save=5, scan_stages=True).solve(flow, x0)
    np.testing.assert_allclose(scanned.ys, unrolled.ys, rtol=1e-14, atol=1e-14)
    grid = RKStepper(name, 0.1, 10, save_every=5, scan_stages=True).solve(flow, x0)
    np.testing.assert_allclose(grid.ys, RKStepper(name, 0.1, 10, save_every=5).solve(flow, x0).ys, rtol=1e-14, atol=1e-14)


def test_track_min_is_the_minimum_over_every_step():
    flow, x0 = _flow(), _x0()
    states, lows = RKStepper("rk4", ts=jnp.array([0.0, 0.5, 1.0]), steps_per_save=5, track_min=jnp.min).solve(flow, x0).ys
    every = RKStepper("rk4", 0.1, 10).solve(flow, x0).ys  # the same steps, every state saved
    mins = np.asarray(jnp.min(every, axis=(1, 2)))
    np.testing.assert_allclose(np.asarray(lows), [mins[0], mins[1:6].min(), mins[6:].min()], rtol=0, atol=1e-13)
    assert states.shape == (3, 6, 3)


def test_jit_with_traced_save_times_and_a_failure_code():
    flow, x0 = _flow(scale=40.0), _x0()

    @jax.jit
    def run(ts):
        traj = RKStepper("rk4", ts=ts, steps_per_save=20, scan_stages=True).solve(flow, x0)
        return traj.result, traj.t_nonfinite

    result, t_bad = run(jnp.array([0.0, 50.0, 100.0]))
    assert int(result) == RESULTS.nonfinite and 0 < float(t_bad) <= 100.0


@pytest.mark.parametrize("kwargs, words", [
    (dict(ts=jnp.array([0.0, 1.0]), steps_per_save=2, dt=0.1), "leave dt"),
    (dict(dt=0.1, num_layers=4, track_min=jnp.min), "track_min goes with ts"),
    (dict(ts=jnp.array([0.0]), steps_per_save=2), "at least two times"),
    (dict(ts=jnp.array([0.0, 1.0, 0.5]), steps_per_save=2), "strictly increasing"),
    (dict(ts=jnp.array([0.0, 1.0]), steps_per_save=0), "steps_per_save"),
])
def test_bad_save_times_are_refused_in_one_sentence(kwargs, words):
    with pytest.raises(InputError, match=words):
        RKStepper("rk4", **kwargs)


def test_scan_stages_needs_a_chained_tableau():
    kutta3 = ButcherTableau([[0, 0, 0], [0.5, 0, 0], [-1, 2, 0]], [1 / 6, 2 / 3, 1 / 6], [0, 0.5, 1], order=3)
    assert RK_TABLEAUX["rk4"].chained and RK_TABLEAUX["heun"].chained and not kutta3.chained
    with pytest.raises(InputError, match="stage i reads only stage i - 1"):
        RKStepper(kutta3, 0.1, 4, scan_stages=True)
    with pytest.raises(InputError, match="save_aux=False"):
        RKStepper("rk4", 0.1, 4, scan_stages=True, save_aux=True)
