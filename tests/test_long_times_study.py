"""The long-time study's own pieces (benchmarks/circle_long_times.py): the n = 2 reduction's merge time against
two tokens stepped by attnflow's sphere flow, and the per-kind-of-state lifetimes against attnflow.stats."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.circle_long_times import per_state, two_cluster_time  # noqa: E402

from attnflow.dynamics import sphere_flow  # noqa: E402
from attnflow.integrate import EulerStepper, sphere_shift  # noqa: E402
from attnflow.stats import censored_lognormal_mean  # noqa: E402


@pytest.mark.parametrize("beta,gap", [(2.0, 1.5), (4.0, 3.05), (8.0, 2.0), (16.0, 1.0)])
def test_two_cluster_time_is_the_flow_of_two_tokens(beta, gap):
    """Two tokens at angle gap, softmax attention with Q = K = V = I on the circle, stepped with dt = 0.002: the time
    their angle takes to fall below 0.1 against the quadrature, to 2e-3 relative (the saves' granularity dt / T is
    at most 1.3e-3 at the shortest T here, 1.6; Euler's own error measured 1e-4 and below)."""
    with jax.enable_x64(True):
        x0 = jnp.array([[1.0, 0.0], [math.cos(gap), math.sin(gap)]])
        expected = two_cluster_time(beta, gap, end=0.1)
        dt, layers = 0.002, int(1.3 * expected / 0.002)
        I = jnp.eye(2)
        stepper = EulerStepper(dt, layers, shift=sphere_shift, save_every=1)
        ys = np.asarray(stepper.solve(sphere_flow(I, I, I, beta, attention_impl="dense"), x0).ys)
    angle = np.arccos(np.clip(np.sum(ys[:, 0] * ys[:, 1], axis=1), -1, 1))
    merged = np.flatnonzero(angle < 0.1)
    assert merged.size, "the pair did not merge"
    assert merged[0] * dt == pytest.approx(expected, rel=2e-3)
    law = math.exp(beta * (1 - math.cos(gap))) / (2 * beta * math.sin(gap) ** 2)
    if beta * math.sin(gap) > 10:  # far from the antipode the law is the integral's Laplace estimate
        assert expected == pytest.approx(law, rel=0.2)


def test_two_cluster_time_edges():
    assert two_cluster_time(8.0, 0.05) == 0.0 and two_cluster_time(8.0, math.pi) == math.inf
    assert two_cluster_time(8.0, 2.0) < two_cluster_time(8.0, 2.5) < two_cluster_time(16.0, 2.5)


def test_per_state_groups_kinds_of_state_over_clouds():
    """States of one (beta, count) over clouds form one kind: its lifetime centre and its ratios to the law are
    censored_lognormal_mean of its members; kinds with one merge get no estimate."""
    rng = np.random.default_rng(4)

    def state(count, gap, beta, censored):
        law = math.exp(beta * (1 - math.cos(gap))) / (2 * beta * math.sin(gap) ** 2)
        return {"count": count, "smallest_gap": gap, "two_cluster_law": law, "censored": censored,
                "lifetime": law * math.exp(0.2 * rng.standard_normal())}

    rows = [{"beta": 12.0, "states": [state(4, 1.2 + 0.05 * k, 12.0, False), state(3, 2.0, 12.0, True)]}
            for k in range(4)]
    rows.append({"beta": 16.0, "states": [state(5, 0.9, 16.0, False)]})
    kinds = {(g["beta"], g["count"]): g for g in per_state(rows)}
    assert set(kinds) == {(12.0, 4), (12.0, 3), (16.0, 5)}
    four = kinds[(12.0, 4)]
    life = np.array([r["states"][0]["lifetime"] for r in rows[:4]])
    law = np.array([r["states"][0]["two_cluster_law"] for r in rows[:4]])
    ref = censored_lognormal_mean(life, np.zeros(4, bool))
    assert four["lifetime"] == pytest.approx([ref["median"], ref["median_lo"], ref["median_hi"]])
    ratio = censored_lognormal_mean(life / law, np.zeros(4, bool))
    assert four["ratio_to_law"] == pytest.approx([ratio["median"], ratio["median_lo"], ratio["median_hi"]])
    assert four["states"] == 4 and four["merges"] == 4 and four["smallest_gap"] == pytest.approx([1.2, 1.35])
    assert kinds[(12.0, 3)]["merges"] == 0 and kinds[(12.0, 3)]["lifetime"] == [None, None, None]
    assert kinds[(16.0, 5)]["lifetime"] == [None, None, None]
