"""attnflow.stats against independent references: scipy.stats' intervals, regressions and survival curves, and a
censored log-normal likelihood written here from scipy.stats.norm and maximised by scipy.optimize."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import optimize, stats

from attnflow.errors import InputError
from attnflow.stats import (
    censored_exponential_fit,
    censored_lognormal_fit,
    censored_lognormal_mean,
    difference_interval,
    fit_slope,
    kaplan_meier,
    mean_interval,
    standard_error,
    survival_quantile,
    t_quantile,
    wilson_interval,
)


@pytest.mark.parametrize("confidence", [0.5, 0.9, 0.95, 0.99])
def test_t_quantile_is_scipys(confidence):
    for dof in (1, 2, 7, 30, 1000):
        assert t_quantile(dof, confidence) == pytest.approx(stats.t.ppf((1 + confidence) / 2, dof), rel=1e-12)


@pytest.mark.parametrize("seed", range(5))
def test_mean_interval_is_the_student_t_interval(seed):
    rng = np.random.default_rng(seed)
    m, c = int(rng.integers(2, 40)), float(rng.choice([0.9, 0.95, 0.99]))
    values = rng.standard_normal((m, 3)) * rng.uniform(0.1, 5, 3) + rng.uniform(-3, 3, 3)
    mean, lo, hi = mean_interval(values, c)
    for j in range(3):
        ref = stats.t.interval(c, m - 1, loc=values[:, j].mean(), scale=stats.sem(values[:, j]))
        assert mean[j] == pytest.approx(values[:, j].mean(), rel=1e-13)
        assert (lo[j], hi[j]) == pytest.approx(ref, rel=1e-12)


def test_mean_interval_edges():
    nan = mean_interval(np.zeros((0, 2)), 0.95)
    assert all(np.isnan(a).all() for a in nan)
    one = mean_interval(np.array([[2.0, 3.0]]), 0.95)
    assert [a.tolist() for a in one] == [[2.0, 3.0]] * 3


@pytest.mark.parametrize("seed", range(5))
def test_difference_interval_paired_and_welch(seed):
    rng = np.random.default_rng(seed)
    m = int(rng.integers(3, 30))
    a = rng.standard_normal((m, 1)) * 2.0 + 1.0
    b = rng.standard_normal((m, 1)) * 0.5
    diff, lo, hi = difference_interval(a, b, 0.95)
    ref = stats.ttest_rel(a[:, 0], b[:, 0]).confidence_interval(0.95)
    assert diff[0] == pytest.approx(a.mean() - b.mean(), rel=1e-12)
    assert (lo[0], hi[0]) == pytest.approx((ref.low, ref.high), rel=1e-10)
    diff, lo, hi = difference_interval(a, b, 0.9, paired=False)
    ref = stats.ttest_ind(a[:, 0], b[:, 0], equal_var=False).confidence_interval(0.9)
    assert (lo[0], hi[0]) == pytest.approx((ref.low, ref.high), rel=1e-10)


@pytest.mark.parametrize("k,n", [(0, 10), (1, 10), (5, 10), (10, 10), (280, 2000), (3, 7), (999, 1000)])
@pytest.mark.parametrize("confidence", [0.9, 0.95])
def test_wilson_interval_is_scipys_wilson(k, n, confidence):
    ref = stats.binomtest(k, n).proportion_ci(confidence, method="wilson")
    lo, hi = wilson_interval(k, n, confidence)
    assert (lo, hi) == pytest.approx((ref.low, ref.high), rel=1e-12, abs=1e-15)
    assert 0.0 <= lo <= k / n <= hi <= 1.0


def test_wilson_interval_given_quantile_and_empty():
    assert wilson_interval(3, 0) != wilson_interval(3, 0)  # NaN, NaN
    a = wilson_interval(280, 2000, 0.95)
    b = wilson_interval(280, 2000, 0.95, z=1.959963984540054)
    assert a == pytest.approx(b, rel=1e-14)


@pytest.mark.parametrize("seed", range(6))
def test_fit_slope_is_linregress(seed):
    rng = np.random.default_rng(seed)
    N, c = int(rng.integers(3, 50)), float(rng.choice([0.9, 0.95]))
    x = rng.uniform(-2, 5, N)
    y = 0.7 - 1.3 * x + rng.standard_normal(N) * rng.uniform(0.01, 2)
    fit = fit_slope(x, y, c)
    ref = stats.linregress(x, y)
    half = stats.t.ppf((1 + c) / 2, N - 2) * ref.stderr
    assert fit["slope"] == pytest.approx(ref.slope, rel=1e-11)
    assert fit["intercept"] == pytest.approx(ref.intercept, rel=1e-10, abs=1e-12)
    assert fit["stderr"] == pytest.approx(ref.stderr, rel=1e-10)
    assert (fit["lo"], fit["hi"]) == pytest.approx((ref.slope - half, ref.slope + half), rel=1e-10)
    assert fit["points"] == N and fit["dof"] == N - 2


@pytest.mark.parametrize("seed", range(4))
def test_fit_slope_with_groups_is_the_fixed_effects_regression(seed):
    rng = np.random.default_rng(seed)
    G = int(rng.integers(2, 6))
    sizes = rng.integers(2, 9, G)
    groups = np.repeat(np.arange(G), sizes)
    x = rng.uniform(0, 3, groups.size)
    y = rng.uniform(-5, 5, G)[groups] + 2.5 * x + 0.3 * rng.standard_normal(groups.size)
    # a lonely point in its own group says nothing about the slope
    xs, ys, gs = np.r_[x, 9.0], np.r_[y, -40.0], np.r_[groups, G]
    fit = fit_slope(xs, ys, 0.95, groups=gs)
    X = np.column_stack([x, (groups[:, None] == np.arange(G)[None, :]).astype(float)])  # slope + one dummy per group
    beta, rss, *_ = np.linalg.lstsq(X, y, rcond=None)
    dof = groups.size - G - 1
    cov = rss[0] / dof * np.linalg.inv(X.T @ X)
    se = np.sqrt(cov[0, 0])
    half = stats.t.ppf(0.975, dof) * se
    assert fit["slope"] == pytest.approx(beta[0], rel=1e-10)
    assert fit["stderr"] == pytest.approx(se, rel=1e-9)
    assert (fit["lo"], fit["hi"]) == pytest.approx((beta[0] - half, beta[0] + half), rel=1e-9)
    assert (fit["points"], fit["groups"], fit["dof"], fit["intercept"]) == (groups.size, G, dof, None)


def test_fit_slope_edges():
    two = fit_slope([0.0, 1.0], [1.0, 3.0])
    assert two["slope"] == 2.0 and np.isnan(two["lo"]) and np.isnan(two["stderr"]) and two["dof"] == 0
    flat = fit_slope([1.0, 1.0, 1.0], [1.0, 2.0, 3.0])
    assert np.isnan(flat["slope"])
    with pytest.raises(InputError, match="one value per point"):
        fit_slope([1.0, 2.0], [1.0])


@pytest.mark.parametrize("seed", range(5))
def test_kaplan_meier_is_scipys_ecdf(seed):
    rng = np.random.default_rng(seed)
    S = int(rng.integers(5, 80))
    life = np.round(rng.exponential(4.0, S), 1) + 0.1   # rounded: ties, also between events and censorings
    censored = rng.random(S) < 0.35
    if censored.all():
        censored[0] = False
    times, surv = kaplan_meier(life, censored)
    ref = stats.ecdf(stats.CensoredData(uncensored=life[~censored], right=life[censored])).sf
    assert times.tolist() == np.unique(life[~censored]).tolist()
    assert surv == pytest.approx(ref.evaluate(times), rel=1e-12, abs=1e-15)   # S just after each event time
    grid = np.unique(np.r_[life, life - 0.05, life + 0.05])   # S is a step function that falls at events only
    step = np.searchsorted(times, grid, side="right")
    ours_on_grid = np.where(step > 0, surv[np.maximum(step - 1, 0)], 1.0)
    assert ours_on_grid == pytest.approx(ref.evaluate(grid), rel=1e-12, abs=1e-15)
    for q in (0.25, 0.5, 0.75):
        ours = survival_quantile(times, surv, q)
        reached = np.flatnonzero(ref.evaluate(times) <= 1 - q + 1e-12)
        assert ours == (float(times[reached[0]]) if reached.size else None)


def _reference_nll(theta, x, y, observed, lower):
    """-log L of log T = a + b x + sigma eps, written from scipy.stats.norm (independent of attnflow.stats)."""
    a, b, log_s = theta
    s = np.exp(log_s)
    mu = a + b * x
    ell = np.where(observed, stats.norm.logpdf(y, mu, s), stats.norm.logsf(y, mu, s))
    cut = np.isfinite(lower)
    ell[cut] -= stats.norm.logsf(lower[cut], mu[cut], s)
    return -ell


def _numerical_scores(theta, x, y, observed, lower, h=1e-6):
    """Per-lifetime scores d(log L_i)/d theta by central differences."""
    out = np.empty((x.size, 3))
    for j in range(3):
        e = np.zeros(3)
        e[j] = h
        out[:, j] = -(_reference_nll(theta + e, x, y, observed, lower) - _reference_nll(theta - e, x, y, observed, lower)) / (2 * h)
    return out


@pytest.mark.parametrize("seed,truncated,clustered", [(0, False, False), (1, True, False), (2, False, True),
                                                      (3, True, True)])
def test_censored_lognormal_fit_against_scipy_optimize(seed, truncated, clustered):
    rng = np.random.default_rng(seed)
    x = np.repeat(np.linspace(1.0, 5.0, 5), 60)
    T = np.exp(0.4 + 0.6 * x + 0.7 * rng.standard_normal(x.size))
    cap = float(np.quantile(T, 0.8))
    life, censored = np.minimum(T, cap), T > cap
    bound = None
    if truncated:
        L = float(np.quantile(T, 0.15))
        keep = life >= L
        x, life, censored = x[keep], life[keep], censored[keep]
        bound = np.where(rng.random(x.size) < 0.7, L, np.nan)
    clusters = np.tile(np.arange(60), 5)[: x.size] if clustered else None
    if clustered and truncated:
        clusters = rng.integers(0, 25, x.size)
    fit = censored_lognormal_fit(x, life, censored, 0.9, truncation=bound, clusters=clusters)
    y = np.log(life)
    lower = np.full(x.size, -np.inf) if bound is None else np.where(np.isfinite(bound), np.log(np.where(np.isfinite(bound), bound, 1.0)), -np.inf)
    ref = optimize.minimize(lambda th: _reference_nll(th, x, y, ~censored, lower).sum(), np.array([0.0, 0.5, 0.0]),
                            method="Nelder-Mead", options={"xatol": 1e-10, "fatol": 1e-12, "maxiter": 20000})
    assert fit["slope"] == pytest.approx(ref.x[1], abs=1e-5)
    assert fit["intercept"] == pytest.approx(ref.x[0], abs=1e-5)
    assert fit["sigma"] == pytest.approx(np.exp(ref.x[2]), rel=1e-5)
    theta = np.array([fit["intercept"], fit["slope"], np.log(fit["sigma"])])
    # the observed information by differences of the numerical scores, and the sandwich from them
    h = 1e-5
    H = np.empty((3, 3))
    for j in range(3):
        e = np.zeros(3)
        e[j] = h
        H[:, j] = -(_numerical_scores(theta + e, x, y, ~censored, lower).sum(0)
                    - _numerical_scores(theta - e, x, y, ~censored, lower).sum(0)) / (2 * h)
    H_inv = np.linalg.inv((H + H.T) / 2)
    wald = stats.norm.ppf(0.95) * np.sqrt(H_inv[1, 1])
    assert (fit["wald_lo"], fit["wald_hi"]) == pytest.approx((fit["slope"] - wald, fit["slope"] + wald), rel=1e-5)
    codes = np.arange(x.size) if clusters is None else np.unique(clusters, return_inverse=True)[1]
    G = codes.max() + 1
    per = _numerical_scores(theta, x, y, ~censored, lower)
    sums = np.stack([np.bincount(codes, weights=per[:, j], minlength=G) for j in range(3)], axis=1)
    V = H_inv @ (sums.T @ sums) @ H_inv * G / (G - 1)
    half = stats.t.ppf(0.95, G - 1) * np.sqrt(V[1, 1])
    assert (fit["slope_lo"], fit["slope_hi"]) == pytest.approx((fit["slope"] - half, fit["slope"] + half), rel=1e-5)
    assert fit["clusters"] == G and fit["interval"] == ("model" if clusters is None else "cluster-robust")
    assert fit["events"] == int((~censored).sum()) and fit["systems"] == x.size
    if truncated:
        S_L = stats.norm.sf(lower[np.isfinite(lower)], theta[0] + theta[1] * x[np.isfinite(lower)], fit["sigma"])
        assert fit["retained"] == pytest.approx(np.isfinite(lower).sum() / np.sum(1 / S_L), rel=1e-9)
    else:
        assert fit["retained"] is None


def test_censored_lognormal_fit_refusals_and_too_few_events():
    with pytest.raises(InputError, match="below its truncation"):
        censored_lognormal_fit(np.array([1.0, 2.0]), np.array([1.0, 2.0]), np.zeros(2, bool),
                               truncation=np.array([3.0, 1.0]))
    with pytest.raises(InputError, match="one entry per system"):
        censored_lognormal_fit(np.array([1.0, 2.0]), np.array([1.0]), np.zeros(2, bool))
    few = censored_lognormal_fit(np.array([1.0, 1.0, 2.0]), np.array([1.0, 2.0, 3.0]), np.array([False, False, True]))
    assert few["slope"] is None and few["events"] == 2 and few["x_values"] == [1.0, 2.0]


def test_standard_error_is_scipys_sem():
    rng = np.random.default_rng(7)
    for m in (2, 3, 10, 100):
        v = rng.standard_normal(m) * 3.0
        assert standard_error(v) == pytest.approx(stats.sem(v), rel=1e-13)
    assert np.isnan(standard_error(np.array([1.0]))) and np.isnan(standard_error(np.array([])))


def _poisson_nll(a, b, x, events, exposure):
    """The counts' negative log-likelihood, events_r ~ Poisson(exposure_r e^{-(a + b x_r)}), up to a constant."""
    log_rate = -(a + b * x)
    return -float(np.sum(events * log_rate - exposure * np.exp(log_rate)))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_censored_exponential_fit_against_scipy_optimize(seed):
    rng = np.random.default_rng(seed)
    x = np.array([0.3, 1.1, 1.9, 2.6, 3.4])
    T = rng.exponential(np.exp(1.5 + 0.9 * x)[:, None], (5, 30))
    cap = 40.0  # the last groups mostly censored, one perhaps with no escape at all
    events, exposure = (T < cap).sum(1), np.minimum(T, cap).sum(1)
    fit = censored_exponential_fit(x, events, exposure, 0.9)
    ref = optimize.minimize(lambda th: _poisson_nll(th[0], th[1], x, events, exposure), np.array([0.0, 0.0]),
                            method="Nelder-Mead", options={"xatol": 1e-11, "fatol": 1e-13, "maxiter": 20000})
    assert fit["slope"] == pytest.approx(ref.x[1], abs=1e-6) and fit["intercept"] == pytest.approx(ref.x[0], abs=1e-6)
    best = ref.fun

    def profile_drop(b):  # 2 (max l - max_a l(a, b)), a optimised numerically
        inner = optimize.minimize_scalar(lambda a: _poisson_nll(a, b, x, events, exposure), bounds=(-20, 30),
                                         method="bounded", options={"xatol": 1e-12})
        return 2 * (inner.fun - best)

    for edge in (fit["slope_lo"], fit["slope_hi"]):
        assert profile_drop(edge) == pytest.approx(stats.chi2.ppf(0.9, 1), abs=1e-5)
    assert fit["slope_lo"] < fit["slope"] < fit["slope_hi"]
    assert fit["events"] == int(events.sum()) and fit["groups"] == 5


def test_censored_exponential_fit_counts_groups_without_an_escape():
    """A group with no escape pulls the slope up (its exposure bounds the mean from below); dropping it does not."""
    x = np.array([0.0, 1.0, 2.0, 3.0])
    events, exposure = np.array([30, 12, 4, 0]), np.array([300.0, 330.0, 360.0, 360.0])
    with_zero = censored_exponential_fit(x, events, exposure)
    without = censored_exponential_fit(x[:3], events[:3], exposure[:3])
    assert with_zero["slope"] > without["slope"] and with_zero["x_values"] == 3 and with_zero["groups"] == 4
    few = censored_exponential_fit(x, [2, 0, 0, 0], exposure)
    assert few["slope"] is None and few["events"] == 2
    with pytest.raises(InputError, match="counts"):
        censored_exponential_fit(x, [1.5, 0, 0, 0], exposure)
    with pytest.raises(InputError, match="one entry per group"):
        censored_exponential_fit(x, [1, 0], exposure)


@pytest.mark.parametrize("seed,fraction", [(0, 0.0), (1, 0.3), (2, 0.6)])
def test_censored_lognormal_mean_against_scipy_optimize(seed, fraction):
    """The estimate against a Nelder-Mead maximum of the likelihood written from scipy.stats.norm; the interval's
    ends against the profile likelihood computed here (a minimum over sigma at each mu by scipy) at the stated
    cut, m log(1 + t^2/(m - 1)); with no censoring the interval is the t-interval of the mean of log T."""
    rng = np.random.default_rng(seed)
    T = np.exp(1.5 + 0.8 * rng.standard_normal(12))
    cap = float(np.quantile(T, 1 - fraction)) if fraction else np.inf
    life, censored = np.minimum(T, cap), T >= cap
    fit = censored_lognormal_mean(life, censored, 0.9)
    y, obs = np.log(life), ~censored
    nll = lambda mu, ls: _reference_nll(np.array([mu, 0.0, ls]), np.zeros_like(y), y, obs, np.full(y.size, -np.inf)).sum()
    ref = optimize.minimize(lambda th: nll(*th), np.array([1.0, 0.0]), method="Nelder-Mead",
                            options={"xatol": 1e-10, "fatol": 1e-12, "maxiter": 20000})
    assert fit["mu"] == pytest.approx(ref.x[0], abs=1e-6) and fit["sigma"] == pytest.approx(np.exp(ref.x[1]), rel=1e-5)
    m = int(obs.sum())
    cut = 0.5 * m * np.log1p(stats.t.ppf(0.95, m - 1) ** 2 / (m - 1))
    profile = lambda mu: optimize.minimize_scalar(lambda ls: nll(mu, ls), bounds=(-5, 5), method="bounded",
                                                  options={"xatol": 1e-12}).fun
    for end in (fit["mu_lo"], fit["mu_hi"]):
        assert profile(end) - ref.fun == pytest.approx(cut, abs=1e-6)
    assert fit["mu_lo"] < fit["mu"] < fit["mu_hi"] and fit["events"] == m and fit["systems"] == 12
    assert fit["median"] == pytest.approx(np.exp(fit["mu"])) and fit["median_lo"] == pytest.approx(np.exp(fit["mu_lo"]))
    if not fraction:
        mean, lo, hi = mean_interval(y[:, None], 0.9)
        assert (fit["mu"], fit["mu_lo"], fit["mu_hi"]) == pytest.approx((mean[0], lo[0], hi[0]), abs=1e-8)


def test_censored_lognormal_mean_edges():
    """Fewer than two observed lifetimes: no estimate; censored lifetimes far beyond the observed ones pull the
    centre up and leave a wide interval that reaches past them; sizes that disagree are refused."""
    none = censored_lognormal_mean(np.array([2.0, 5.0, 7.0]), np.array([False, True, True]))
    assert none["mu"] is None and none["events"] == 1 and none["systems"] == 3
    open_above = censored_lognormal_mean(np.array([1.0, 1.1, 50.0, 60.0, 70.0, 80.0]),
                                         np.array([False, False, True, True, True, True]))
    both = censored_lognormal_mean(np.array([1.0, 1.1]), np.array([False, False]))
    assert open_above["mu"] > both["mu"] and open_above["mu_hi"] > np.log(80.0)
    assert open_above["mu_lo"] < open_above["mu"] < open_above["mu_hi"]
    with pytest.raises(InputError, match="one entry each"):
        censored_lognormal_mean(np.array([1.0, 2.0]), np.array([False]))
