"""The statistics of the phase job's lifetimes: the left-truncated, right-censored log-normal likelihood and its
derivatives, its recovery of known parameters where the untruncated fit is biased, the cluster-robust interval
on lifetimes that share clouds, the least number of cells a fit is made on, and the job's report (per-beta
table, fits that are not made, the dtype note)."""

import json

import numpy as np
import pytest

from attnflow.errors import InputError
from attnflow.phase import lifetime_slope
from attnflow.stats._survival import _censored_normal_nll


@pytest.mark.parametrize("seed", [0, 1])
def test_truncated_likelihood_derivatives_match_central_differences(seed):
    """Gradient and Hessian of the left-truncated, right-censored likelihood against central differences, at
    random parameters on a random sample: 30% censored, 60% truncated at bounds 0.05-1.5 below the value (z_l
    from -5 to 4 at these parameters), the others untruncated (bound -inf). Steps of 1e-5 give differences
    accurate to ~1e-9 relative; 1e-6 relative to the largest entry fails any wrong sign or factor of the
    truncation terms (leaving them out moves the Hessian by 30-45% of its largest entry)."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(1, 6, 200)
    y = 0.3 + 0.6 * x + 0.7 * rng.standard_normal(200)
    observed = rng.random(200) > 0.3
    lower = np.where(rng.random(200) < 0.6, y - rng.uniform(0.05, 1.5, 200), -np.inf)
    theta = np.array([rng.uniform(-0.5, 0.5), rng.uniform(0.3, 0.9), rng.uniform(-0.7, 0.3)])
    value, grad, H = _censored_normal_nll(theta, x, y, observed, lower, hessian=True)
    h = 1e-5
    fd_grad, fd_H = np.zeros(3), np.zeros((3, 3))
    for k in range(3):
        e = np.zeros(3)
        e[k] = h
        up, down = (_censored_normal_nll(theta + s * e, x, y, observed, lower) for s in (1, -1))
        fd_grad[k] = (up[0] - down[0]) / (2 * h)
        fd_H[:, k] = (up[1] - down[1]) / (2 * h)
    np.testing.assert_allclose(grad, fd_grad, atol=1e-6 * np.abs(fd_grad).max())
    np.testing.assert_allclose(H, fd_H, atol=1e-6 * np.abs(fd_H).max())
    np.testing.assert_allclose(H, H.T, rtol=0, atol=0)
    # the truncation is a real term: without it the likelihood is another function
    assert abs(value - _censored_normal_nll(theta, x, y, observed)[0]) > 1.0


def _plateau_like_sample(seed):
    """What the plateau rule records, synthetically: 300 clouds per beta = 1..6 reach their first state at
    t_a ~ U(3, 9); its lifetime is log-normal, log T = 0.5 + 0.5 beta + 0.8 eps (medians 2.7 to 33); the state
    is recorded only when T >= t_a (hold ratio 1), and censored at the horizon 200 - t_a."""
    rng = np.random.default_rng(seed)
    beta = np.repeat(np.arange(1.0, 7.0), 300)
    t_a = rng.uniform(3, 9, beta.size)
    T = np.exp(0.5 + 0.5 * beta + 0.8 * rng.standard_normal(beta.size))
    keep = T >= t_a
    horizon = 200.0 - t_a
    return beta[keep], np.minimum(T, horizon)[keep], (T > horizon)[keep], t_a[keep]


def test_left_truncated_fit_recovers_known_parameters_where_the_untruncated_fit_is_biased():
    """On the plateau-like sample (35% of the states are too short to be recorded, nearly all at small beta)
    the left-truncated fit recovers b = 0.5 and sigma = 0.8; the fit that ignores the truncation sees too long
    lifetimes at small beta and finds b = 0.32 with an interval far from 0.5. ~1170 recorded lifetimes: the
    truncated fit's standard error of b is ~0.03, 0.08 allows 2.7 of them; sigma's is ~0.03, 0.1 allows 3."""
    beta, life, censored, t_a = _plateau_like_sample(0)
    fit = lifetime_slope(beta, life, censored, truncation=t_a)
    assert fit["truncated"] == beta.size and fit["not_fitted"] is None
    assert fit["slope_lo"] < 0.5 < fit["slope_hi"] and abs(fit["slope"] - 0.5) < 0.08
    assert abs(fit["sigma"] - 0.8) < 0.1
    naive = lifetime_slope(beta, life, censored)
    assert naive["slope_hi"] < 0.4  # biased by ~-0.18, six of its standard errors
    # lifetimes below their bound are impossible under the rule: refused, not fitted
    with pytest.raises(InputError, match="below its truncation"):
        lifetime_slope(beta, life, censored, truncation=t_a + 50.0)


@pytest.mark.parametrize("clouds", [40, 20])
def test_cluster_robust_interval_covers_lifetimes_that_share_clouds(clouds):
    """Each cloud g is reused at every beta = 1..6 (as the phase job does) and has its own slope 0.6 + v_g,
    v_g ~ N(0, 0.15^2) about beta = 3.5, plus independent noise 0.3, censored at e^3.5 (8-12%). The population
    slope 0.6 is what the fit estimates; its error is dominated by the mean of the v_g, which the model-based
    Wald interval (independent systems) does not see: over 200 samples it covers 0.6 in ~74% of them, the
    interval clustered by cloud in ~95%. 200 samples give a coverage to +-0.015 (one standard error): the bounds
    are 3 of them for the clustered interval, 7 for the Wald one."""
    rng = np.random.default_rng(7)
    betas = np.arange(1.0, 7.0)
    robust = wald = 0
    widening = []
    for _ in range(200):
        v = 0.15 * rng.standard_normal(clouds)
        beta, g = np.tile(betas, clouds), np.repeat(np.arange(clouds), betas.size)
        T = np.exp(2.0 + (0.6 + v[g]) * (beta - 3.5) + 0.3 * rng.standard_normal(beta.size))
        fit = lifetime_slope(beta, np.minimum(T, np.exp(3.5)), T > np.exp(3.5), clusters=g)
        assert fit["interval"] == "cluster-robust" and fit["clusters"] == clouds
        robust += fit["slope_lo"] < 0.6 < fit["slope_hi"]
        wald += fit["wald_lo"] < 0.6 < fit["wald_hi"]
        widening.append((fit["slope_hi"] - fit["slope_lo"]) / (fit["wald_hi"] - fit["wald_lo"]))
    assert 0.90 <= robust / 200 <= 0.99
    assert wald / 200 < 0.85
    assert np.median(widening) > 1.4  # ~1.8 expected (sqrt of the variance ratio 6.9e-4 / 2.2e-4)


def test_no_fit_on_fewer_than_min_fit_cells():
    """A line through 2 or 3 betas is not fitted, with the reason (MIN_FIT_CELLS = 4: two cells left to check the
    line against); 4 betas are. The data follow log T = 1 + 0.5 beta up to noise 0.1 (no censoring), so the fit
    is well posed whenever it is made."""
    rng = np.random.default_rng(2)
    for cells in (2, 3, 4):
        beta = np.repeat(np.arange(1.0, cells + 1.0), 30)
        T = np.exp(1.0 + 0.5 * beta + 0.1 * rng.standard_normal(beta.size))
        fit = lifetime_slope(beta, T, np.zeros(beta.size, bool), clusters=np.tile(np.arange(30), cells))
        if cells < 4:
            assert fit["slope"] is None and fit["slope_lo"] is None
            assert fit["not_fitted"] == f"{cells} cells < MIN_FIT_CELLS = 4"
        else:
            assert fit["not_fitted"] is None and fit["slope_lo"] < 0.5 < fit["slope_hi"]
    few = lifetime_slope(np.repeat([1.0, 2.0, 3.0, 4.0], 5), np.ones(20), np.zeros(20, bool), clusters=np.tile(
        np.arange(5), 4))
    assert few["slope"] is None and few["not_fitted"].startswith("5 clouds <")


def test_float64_check_steps_the_float32_clouds():
    """The float32 run's precision check re-runs pairs in float64 from the float32 start clouds (make_chunk_fn's
    cloud_dtype): at t = 0 the two runs' statistics are those of one cloud, read in two precisions (mean inner
    products within 1e-6: float32 rounding of a sum of 8 terms), and differ only later. Without it a float64 run
    draws other clouds (the two precisions' normal draws differ), whose mean inner products differ by ~0.1."""
    import dataclasses

    import jax.numpy as jnp

    from attnflow._x64 import float64_scope
    from attnflow.phase import check_phase_config, load_phase_config
    from attnflow.phase._engine import make_chunk_fn
    from attnflow.runs import make_mesh

    cfg = load_phase_config(None)
    cfg.update(beta=[2.0, 6.0], d=2, n=8, systems=4, t1=4.0, dt=0.2, checkpoints=4, dtype="float32")
    ours = check_phase_config(cfg)
    theirs = dataclasses.replace(ours, dtype="float64")
    with float64_scope():
        a = make_chunk_fn(ours, ours.groups[0], make_mesh())(0, 8)
        b = make_chunk_fn(theirs, theirs.groups[0], make_mesh(), cloud_dtype=jnp.float32)(0, 8)
        other = make_chunk_fn(theirs, theirs.groups[0], make_mesh())(0, 8)
    assert a["ip_mean"].dtype == np.float32 and b["ip_mean"].dtype == np.float64
    np.testing.assert_allclose(b["ip_mean"][:, 0], a["ip_mean"][:, 0], rtol=0, atol=1e-6)
    assert np.abs(other["ip_mean"][:, 0] - a["ip_mean"][:, 0]).max() > 1e-2


def _write_run(folder, dtype, values, systems=6):
    """A run folder as attnflow phase writes it (config.json, systems/g000.npz) with every observable = values."""
    from attnflow.phase import OBSERVABLES, load_phase_config

    cfg = load_phase_config(None)
    cfg.update(beta=[2.0], d=2, n=4, systems=systems, t1=1.0, checkpoints=3, dtype=dtype)
    (folder / "systems").mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(cfg))
    np.savez(folder / "systems" / "g000.npz", beta_index=np.zeros(systems, int), system=np.arange(systems),
             finite=np.ones(systems, bool), **{name: values for name in OBSERVABLES})


def test_compare_runs_of_two_precisions_is_unpaired(tmp_path):
    """A float32 and a float64 folder of one seed start from different clouds: compare_runs says so (paired False)
    and its interval is Welch's for two independent means (scipy's ttest_ind, equal_var=False, to 1e-9); two
    folders of one dtype stay paired (the Student-t interval of the differences)."""
    from scipy import stats

    from attnflow.phase import compare_runs

    rng = np.random.default_rng(5)
    ya, yb = rng.uniform(0, 1, (6, 3)), rng.uniform(0, 1, (6, 3))
    _write_run(tmp_path / "f32", "float32", ya)
    _write_run(tmp_path / "f64", "float64", yb)
    _write_run(tmp_path / "g64", "float64", ya)
    c = compare_runs(tmp_path / "f32", tmp_path / "f64")
    assert c["paired"] is False
    rows = c["rows"]["observable"] == "energy"
    for k in range(3):
        ci = stats.ttest_ind(ya[:, k], yb[:, k], equal_var=False).confidence_interval(0.95)
        np.testing.assert_allclose([c["rows"]["diff_lo"][rows][k], c["rows"]["diff_hi"][rows][k]],
                                   [ci.low, ci.high], rtol=1e-9)
    same = compare_runs(tmp_path / "g64", tmp_path / "f64")
    assert same["paired"] is True
    ci = stats.ttest_rel(ya[:, 0], yb[:, 0]).confidence_interval(0.95)
    np.testing.assert_allclose(same["rows"]["diff_lo"][same["rows"]["observable"] == "energy"][0], ci.low, rtol=1e-9)


def test_float32_job_report_has_the_per_beta_table_the_precision_check_and_no_fit_on_three_betas(tmp_path):
    """A small float32 job (3 betas, 12 clouds of 8 tokens, log-spaced checkpoints to t = 40): report.md has the
    per-beta table (each row's clusters and clustered pairs at t1 are cells.csv's mean and interval at t1), the
    precision paragraph of the float64 check of its sample, and no lifetime fit (3 betas < MIN_FIT_CELLS)."""
    import csv

    from attnflow.phase import load_phase_config, run_phase

    cfg = load_phase_config(None)
    cfg.update(beta=[3.0, 5.0, 8.0], d=2, n=8, systems=12, t1=40.0, dt=0.2, checkpoints=30, spacing="log",
               dtype="float32")
    cfg["run"]["progress"] = False
    s = run_phase(cfg, tmp_path / "run", figures=False)
    report = (tmp_path / "run" / "report.md").read_text()
    assert "**Precision: float32.** A float64 re-run of 3 betas (3, 5, 8) x 12 clouds per group" in report
    check = s["dtype_check"]
    assert check["run"] and check["systems"] == 12 and check["groups"][0]["clouds"] == 36
    assert "not fitted: " in report and " cells < MIN_FIT_CELLS = 4" in report
    assert s["lifetime_fits"][0]["slope"] is None
    with open(tmp_path / "run" / "cells.csv", newline="") as fh:
        last = [r for r in csv.DictReader(fh) if float(r["t"]) == 40.0]
    table = [line for line in report.splitlines() if line.startswith("| ") and not line.startswith(("| beta", "| ---"))]
    assert len(table) == 3 and "betas, spread over the grid" not in report  # every beta shown: no caption
    for line, row in zip(table, last):
        cols = [c.strip() for c in line.strip("|").split("|")]
        assert float(cols[0]) == float(row["beta"]) and int(cols[1]) == int(row["systems"])
        assert cols[2] == (f"{float(row['clusters']):.2f} [{float(row['clusters_lo']):.2f}, "
                           f"{float(row['clusters_hi']):.2f}]")
        assert cols[3] == (f"{float(row['pairs_clustered']):.3f} [{float(row['pairs_clustered_lo']):.3f}, "
                           f"{float(row['pairs_clustered_hi']):.3f}]")


def test_a_fit_that_extrapolates_below_every_recorded_lifetime_is_not_identified():
    """Lifetimes recorded only in a window [5, 15] (truncated at 5, censored at 15) from a log-normal whose mass
    lies far below it (log T ~ N(-5, 4^2), no dependence on beta: 4.8% of the states last 5 or more): the recorded
    log lifetimes are nearly uniform in the window and say little of the spread; the truncated likelihood lets it
    run away (sigma 29, slope -8.6, and a fitted fraction of recorded states of 5e-62 when not refused). It is
    refused as not identified (fraction < MIN_RETAINED = 0.05); the untruncated fit of the same data is made."""
    rng = np.random.default_rng(11)
    beta = np.repeat(np.arange(1.0, 7.0), 4000)
    T = np.exp(-5.0 + 4.0 * rng.standard_normal(beta.size))
    keep = T >= 5.0
    beta, T = beta[keep], T[keep]
    fit = lifetime_slope(beta, np.minimum(T, 15.0), T > 15.0, truncation=np.full(beta.size, 5.0))
    assert fit["slope"] is None and fit["not_fitted"].startswith("not identified")
    assert fit["retained"] < 0.05
    assert lifetime_slope(beta, np.minimum(T, 15.0), T > 15.0)["slope"] is not None


def test_the_report_says_when_its_per_beta_table_shows_a_spread_of_a_long_beta_grid(tmp_path):
    """11 betas: the table shows REPORT_BETAS of them, first and last included, and says so under it."""
    from attnflow.phase import load_phase_config, run_phase
    from attnflow.phase._run import REPORT_BETAS

    cfg = load_phase_config(None)
    cfg.update(beta={"start": 0.5, "stop": 5.5, "num": 11}, d=2, n=4, systems=2, t1=1.0, dt=0.1, checkpoints=3)
    cfg["run"]["progress"] = False
    run_phase(cfg, tmp_path / "run", figures=False)
    report = (tmp_path / "run" / "report.md").read_text()
    table = [line for line in report.splitlines() if line.startswith("| ") and not line.startswith(("| beta", "| ---"))]
    shown = [float(line.strip("|").split("|")[0]) for line in table]
    assert len(shown) == REPORT_BETAS < 11 and shown[0] == 0.5 and shown[-1] == 5.5 and shown == sorted(set(shown))
    caption = report.split(table[-1] + "\n")[1].splitlines()[0]
    assert caption == (f"({REPORT_BETAS} of the 11 betas, spread over the grid; every beta's row is in cells.csv and "
                       "metastability.csv.)")
