"""The phase job's accuracy: the projected-Euler layers converge to the continuous sphere flow with order 1, and
the paired comparison of two run folders (e.g. dt = 0.1 against dt = 0.01) finds exactly the cells that differ."""

import json

import numpy as np
import pytest

from attnflow import InputError
from attnflow.phase import (
    OBSERVABLES,
    compare_runs,
    convergence_order,
    load_phase_config,
    sphere_convergence,
)

pytestmark = pytest.mark.usefixtures("x64")  # the layer map against a float64 reference at float64 tolerances


def test_projected_euler_converges_to_the_sphere_flow_with_order_one():
    """Projected Euler is first order: the field is tangent and the normalisation agrees with the flow to
    O(dt^2) per step (attnflow.phase._accuracy), so the error at a fixed time is O(dt). Measured at t = 1 on
    random clouds of 8 tokens, beta = 1 and 4, against diffrax Tsit5 at rtol = atol = 1e-12 (10^-12 is far
    below the smallest Euler error, ~1e-3). The d = 2 clouds lie in the plane x_3 = 0 of R^3, which the flow
    with Q = K = V = I never leaves (the field is a combination of the tokens): they run the d = 2 dynamics
    inside the d = 3 program, one compilation for both."""
    rng = np.random.default_rng(7)
    x0 = rng.standard_normal((4, 8, 3))
    x0[:2, :, 2] = 0.0  # systems 0, 1: d = 2; systems 2, 3: d = 3
    beta = [1.0, 4.0, 1.0, 4.0]
    dts = [0.04, 0.02, 0.01]
    r = sphere_convergence(x0, beta, 1.0, dts)
    assert np.all(np.isfinite(r["error"])) and np.all(r["error"] > 1e-6), r["error"]
    # the ladder is in the asymptotic regime: the O(dt^2) term moves the measured order by ~0.01 here (1 - 0.99
    # at dt = 0.1 in the study); [0.9, 1.1] allows ten times that and excludes order 0 (a wrong reference) and 2
    for s in range(4):
        fit = convergence_order(dts, r["error"][s])
        assert 0.9 <= fit["order"] <= 1.1, (s, r["error"][s], fit)
    assert 0.9 <= r["order_lo"] <= r["order"] <= r["order_hi"] <= 1.1, r
    assert r["points"] == 12 and r["systems"] == 4


def test_convergence_order_is_a_common_slope_with_an_interval_and_excludes_bad_errors():
    dts = np.array([0.1, 0.05, 0.025, 0.0125])
    rng = np.random.default_rng(3)
    errors = np.stack([c * dts**2 * np.exp(0.01 * rng.standard_normal(4)) for c in (1.0, 30.0)])
    errors[1, 0] = np.nan  # a non-finite error is left out and counted, never fitted
    fit = convergence_order(dts, errors)
    assert fit["excluded"] == 1 and fit["points"] == 7
    # log-noise 0.01 over log dt spanning 2.1, 4 residual degrees of freedom: an interval half-width of
    # t_{0.975,4} * 0.01 / 1.83 = 0.015 on average; 0.1 in all allows a sample spread three times the true one
    assert fit["order_lo"] < 2.0 < fit["order_hi"] and fit["order_hi"] - fit["order_lo"] < 0.1
    with pytest.raises(InputError, match="columns"):
        convergence_order(dts[:3], errors)


# ---------------------------------------------------------------- the paired comparison on constructed folders

N, SYSTEMS, TIMES = 5, 20, np.array([0.0, 1.0, 2.0, 3.0, 4.0])


def _write_run(folder, dt, beta, values, *, seed=0, finite=None, order=None):
    """A folder as ``attnflow phase`` writes it (config.json, systems/g000.npz), with the given per-system
    ``values`` (len(beta), SYSTEMS, len(TIMES)) for every observable; ``order`` permutes the stored rows."""
    cfg = load_phase_config(None)
    cfg.update(beta=list(beta), d=2, n=N, systems=SYSTEMS, t1=4.0, dt=dt, checkpoints=len(TIMES), seed=seed)
    (folder / "systems").mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(cfg))
    b_idx, system = np.repeat(np.arange(len(beta)), SYSTEMS), np.tile(np.arange(SYSTEMS), len(beta))
    flat = values.reshape(-1, len(TIMES))
    ok = np.ones(len(b_idx), bool) if finite is None else finite.reshape(-1)
    perm = np.arange(len(b_idx)) if order is None else order
    np.savez(folder / "systems" / "g000.npz", beta_index=b_idx[perm], system=system[perm], finite=ok[perm],
             **{name: flat[perm] for name in OBSERVABLES})


def test_compare_runs_pairs_systems_and_finds_the_cells_that_differ(tmp_path):
    """The reference: random per-system values. The other run: the same plus noise of exactly zero mean per
    cell (agrees), plus a shift of 0.2 at beta = 4, t = 2 and 3 (disagrees), a shift of half a pair in n(n-1)
    at beta = 1, t = 4 (below the pairs' resolution: agrees though the interval excludes 0), a pairs ramp
    crossing 0.5 later by 0.25 at beta = 4, a relative 1e-13 at beta = 1, t = 0 (rounding: agrees), one
    non-finite system; rows stored in another order."""
    rng = np.random.default_rng(11)
    beta = [1.0, 4.0]
    ref = rng.uniform(0.0, 1.0, (2, SYSTEMS, len(TIMES)))
    noise = rng.standard_normal((2, SYSTEMS, len(TIMES))) * 0.01
    other = ref + noise - noise.mean(axis=1, keepdims=True)
    other[1, :, 2:4] += 0.2
    other[0, :, 4] = ref[0, :, 4] + 0.5 / (N * (N - 1))
    other[0, :, 0] = ref[0, :, 0] * (1 + 1e-13)  # a rounding-level difference (below ROUNDING = 1e-9 relative)
    # pairs clustered: a ramp of slope 0.25 per unit t, crossing 0.5 at t = 2 + s/40 (reference) and 0.25 later
    ramp = 0.25 * TIMES[None, :] - np.arange(SYSTEMS)[:, None] / 160.0
    pairs_ref, pairs = ref.copy(), other.copy()
    pairs_ref[1], pairs[1] = ramp, ramp - 0.0625
    finite = np.ones((2, SYSTEMS), bool)
    finite[0, 3] = False
    _write_run(tmp_path / "fine", 0.01, beta, ref)
    _write_run(tmp_path / "coarse", 0.1, beta, other, finite=finite, order=rng.permutation(2 * SYSTEMS))
    for folder, values in ((tmp_path / "fine", pairs_ref), (tmp_path / "coarse", pairs)):
        data = dict(np.load(folder / "systems" / "g000.npz"))
        rows = data["beta_index"] * SYSTEMS + data["system"]
        data["pairs_clustered"] = values.reshape(-1, len(TIMES))[rows]
        np.savez(folder / "systems" / "g000.npz", **data)

    c = compare_runs(tmp_path / "coarse", tmp_path / "fine", observables=("pairs_clustered", "energy"))
    rows = c["rows"]
    assert c["excluded"] == 1 and set(rows["systems"].tolist()) == {SYSTEMS - 1, SYSTEMS}
    energy = rows["observable"] == "energy"
    bad = {(b, t) for b, t, a in zip(rows["beta"][energy], rows["t"][energy], rows["agrees"][energy]) if not a}
    assert bad == {(4.0, 2.0), (4.0, 3.0), (1.0, 4.0)}  # the half-pair shift is a difference for the energy
    at = energy & (rows["beta"] == 4.0) & (rows["t"] == 2.0)
    # the noise has zero mean per cell, so the mean difference is the shift to rounding (1e-12)
    assert rows["diff"][at][0] == pytest.approx(0.2, abs=1e-12) and rows["diff_lo"][at][0] > 0
    summary = {(s["observable"]): s for s in c["summary"]}
    assert summary["energy"]["agree_fraction"] == pytest.approx(7 / 10)
    assert summary["energy"]["disagree_beta"] == [1.0, 4.0] and summary["energy"]["disagree_t"] == [2.0, 4.0]
    rounding = energy & (rows["beta"] == 1.0) & (rows["t"] == 0.0)
    assert rows["diff_lo"][rounding][0] > 0 and rows["agrees"][rounding][0]  # significant, but rounding
    small = (rows["observable"] == "pairs_clustered") & (rows["beta"] == 1.0) & (rows["t"] == 4.0)
    assert rows["diff_lo"][small][0] > 0 and rows["agrees"][small][0]  # significant, but below one pair
    # the ramps differ by 0.0625 > 1/20 at every t of beta = 4; the rest agrees
    assert summary["pairs_clustered"]["agree_fraction"] == pytest.approx(5 / 10)
    shift = c["crossing"]["shift"][c["crossing"]["beta"] == 4.0][0]
    assert shift == pytest.approx(0.25, abs=1e-12)  # linear ramps: the interpolated crossing is exact


def test_compare_runs_refuses_runs_that_are_not_paired(tmp_path):
    values = np.random.default_rng(0).uniform(size=(1, SYSTEMS, len(TIMES)))
    _write_run(tmp_path / "a", 0.1, [2.0], values, seed=0)
    _write_run(tmp_path / "b", 0.01, [2.0], values, seed=1)
    with pytest.raises(InputError, match="'seed'"):
        compare_runs(tmp_path / "a", tmp_path / "b")
    with pytest.raises(InputError, match="not a finished phase run folder"):
        compare_runs(tmp_path / "a", tmp_path / "missing")
