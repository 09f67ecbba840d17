"""The metastability rule of attnflow.phase on constructed trajectories: clouds whose clusters form and merge at
known times (the counts and energies read by the job's own statistics), a three-level staircase, censored
lifetimes and their summaries, and noise that makes the cluster count flicker."""

import numpy as np
import pytest
from scipy.sparse.csgraph import connected_components

from attnflow.observables import energy_plateaus, first_plateaus, plateaus
from attnflow.phase import lifetime_slope, lifetime_summary

BETA, THRESHOLD = 4.0, 0.999
#: log-spaced checkpoints, 60 per decade: consecutive times differ by 10^(1/60) - 1 = 3.9%
T = np.concatenate([[0.0], np.geomspace(0.1, 1e4, 301)])
STEP = 10 ** (1 / 60)
#: the noise test's jitter of every token at every checkpoint (rad)
JITTER = 0.025


def _read(clouds):
    """Cluster counts and energies of clouds (K, n, d), as the phase job defines them (attnflow.phase.statistics:
    components of the graph <u_i, u_j> >= threshold; E = sum_ij e^{beta <u_i, u_j>} / (2 beta n^2)), in NumPy."""
    gram = np.einsum("kid,kjd->kij", clouds, clouds)
    counts = np.array([connected_components(g >= THRESHOLD, directed=False)[0] for g in gram])
    n = clouds.shape[1]
    return counts, np.exp(BETA * gram).sum(axis=(1, 2)) / (2 * BETA * n**2)


def _circle(angles):
    return np.stack([np.cos(angles), np.sin(angles)], axis=-1)


def _two_clusters(rng, t_merge, jitter=1e-4, n=12):
    """n tokens at random angles gather linearly into two groups 120 degrees apart by t = 1; in the last tenth
    of the lifetime the second group slides onto the first (within the threshold's 0.045 rad by 0.998 t_merge)."""
    start = rng.uniform(0, 2 * np.pi, n)
    second = np.arange(n) >= n // 2
    angles = []
    for t in T:
        centre = np.where(second, 2 * np.pi / 3 * np.clip((t_merge - t) / (0.1 * t_merge), 0, 1), 0.0)
        a = start + (centre - start) * t if t < 1.0 else centre
        angles.append(a + jitter * rng.standard_normal(n) * (t >= 1.0))
    return _circle(np.asarray(angles))


def test_two_clusters_that_merge_at_a_known_time():
    rng = np.random.default_rng(0)
    t_merge = 150.0
    counts, energy = _read(_two_clusters(rng, t_merge))
    found = plateaus(T, counts)
    assert [(p.count, p.censored) for p in found] == [(2, False)]
    p = found[0]
    # the groups form at t = 1 (their spread falls below the threshold's angle shortly before), and the count
    # drops at the first checkpoint past 0.998 t_merge: one checkpoint (3.9%) of resolution at each end
    assert 0.9 <= p.start <= 1.0 * STEP
    assert 0.99 * t_merge <= p.end <= t_merge * STEP
    first = first_plateaus(T, counts[None], energy=energy[None])
    assert first["lifetime"][0] == pytest.approx(p.end - p.start) and first["merges"][0] == 1
    assert first["count"][0] == 2 and not first["pending"][0]
    # the fast clustering before t = 1 passes through several counts, each far too short to be a plateau
    assert len(set(counts[(T > 0.5) & (T < 1.0)])) > 1
    # the energy has a step at the merge: a plateau from the gathering until the groups start to slide
    # together (0.9 t_merge: the energy climbs as they approach, before the count drops), then the final one
    steps = energy_plateaus(T, energy)
    assert [s.censored for s in steps] == [False, True]
    assert steps[0].start <= 1.0 * STEP and 0.9 * t_merge <= steps[0].end <= t_merge * STEP
    assert steps[1].energy > 1.5 * steps[0].energy  # 2 groups of 6 -> 1 of 12: E nearly doubles


def test_a_three_level_staircase_with_the_fast_clustering_before_it():
    """24 tokens on S^2 gather by t = 1 into 4 groups at the vertices of a tetrahedron (inner products -1/3);
    a group joins another at t = 20, 200 and 2000 (4 -> 3 -> 2 -> 1 clusters)."""
    rng = np.random.default_rng(1)
    vertices = np.array([[1, 1, 1], [1, -1, -1], [-1, 1, -1], [-1, -1, 1]]) / np.sqrt(3)
    group = np.repeat(np.arange(4), 6)
    start = rng.standard_normal((24, 3))
    start /= np.linalg.norm(start, axis=1, keepdims=True)
    clouds = []
    for t in T:
        where = group.copy()
        where[where == 3] = 2 if t >= 20 else 3
        where[where == 2] = 1 if t >= 200 else 2
        where[:] = 0 if t >= 2000 else where
        x = vertices[where]
        x = start + (x - start) * t if t < 1.0 else x + 1e-5 * rng.standard_normal(x.shape)
        clouds.append(x / np.linalg.norm(x, axis=1, keepdims=True))
    counts, energy = _read(np.asarray(clouds))
    found = plateaus(T, counts)
    assert [(p.count, p.censored) for p in found] == [(4, False), (3, False), (2, False)]
    for p, end in zip(found, (20.0, 200.0, 2000.0)):
        assert end <= p.end <= end * STEP  # the first checkpoint at or after the jump
    assert found[0].start <= STEP and found[1].start == found[0].end and found[2].start == found[1].end
    first = first_plateaus(T, counts[None])
    assert first["count"][0] == 4 and first["plateaus"][0] == 3 and first["merges"][0] == 3
    steps = [s for s in energy_plateaus(T, energy) if s.start >= 0.9]
    assert len(steps) == 4 and np.all(np.diff([s.energy for s in steps]) > 0)
    for s, p in zip(steps, found):
        assert s.end == p.end  # the energy steps where the count does
    assert steps[-1].censored and steps[-1].start == found[-1].end


def test_censored_lifetimes_enter_the_summary_as_lower_bounds():
    """400 systems gathered into 3 clusters at t = 0.1 that merge (to 1) after an exponential lifetime of mean
    100, horizon 80: e^{-0.8} = 45% censored (42% in this sample). Kaplan-Meier must find the true median
    100 ln 2 = 69.3 (reached inside the horizon) and say that the upper quartile 100 ln 4 = 139 is not reached;
    dropping the censored systems would give a median of about 30."""
    rng = np.random.default_rng(2)
    t = np.concatenate([[0.0], np.geomspace(0.1, 80.0, 175)])
    life = rng.exponential(100.0, 400)
    counts = np.where(t[None, :] < 0.1 + life[:, None], 3, 1)
    counts[:, 0] = 12
    first = first_plateaus(t, counts)
    assert np.all(first["count"] == 3) and first["censored"].sum() == np.sum(0.1 + life > 80.0)
    observed = ~first["censored"]
    # an observed lifetime ends at the first checkpoint past the merge: 4% of resolution
    assert np.all(first["lifetime"][observed] >= life[observed] - 1e-9)
    assert np.all(first["lifetime"][observed] <= (0.1 + life[observed]) * 10 ** (np.log10(800) / 174) - 0.1)
    s = lifetime_summary(first)
    assert s["with_plateau"] == 400 and s["censored_fraction"] == pytest.approx(np.mean(0.1 + life > 80.0))
    # the median's standard error: sqrt(Var S) / f(median) ~ 0.027 / 0.005 = 5.4 (400 systems, 45% censored);
    # 3 of them, plus the 4% checkpoint resolution
    assert abs(s["median"] - 100 * np.log(2)) < 3 * 5.4 + 0.04 * 69.3 and not s["median_censored"]
    assert s["q75"] is None
    # a cell where most systems are still on their plateau at the end: the median is a lower bound
    late = lifetime_summary({"lifetime": np.array([5.0, 80.0, 80.0]), "censored": np.array([False, True, True])})
    assert late["median_censored"] and late["median"] == 80.0


def test_lifetime_slope_uses_the_censored_lifetimes():
    """log T = 1 + 0.8 beta + 0.5 eps at 60 systems per beta = 1..6, censored at T = 55 (~e^4): 46% of the
    lifetimes are censored, nearly all at beta >= 4. The censored fit recovers 0.8; a fit of the observed
    lifetimes alone is biased low (0.67 here: the long lifetimes are the censored ones)."""
    rng = np.random.default_rng(3)
    beta = np.repeat(np.arange(1.0, 7.0), 60)
    life = np.exp(1.0 + 0.8 * beta + 0.5 * rng.standard_normal(beta.size))
    censored = life > 55.0
    fit = lifetime_slope(beta, np.minimum(life, 55.0), censored)
    assert fit["events"] == int((~censored).sum()) and fit["cells"] == 6 and fit["systems"] == 360
    assert fit["slope_lo"] < 0.8 < fit["slope_hi"]
    # 360 systems, 193 events: a standard error of the slope of about 0.03 (interval ~0.12 wide); 0.3 allows
    # 2.5 times that; sigma from 193 events: standard error ~0.03, 0.15 allows 5 of them
    assert fit["slope_hi"] - fit["slope_lo"] < 0.3 and fit["sigma"] == pytest.approx(0.5, abs=0.15)
    naive = np.polyfit(beta[~censored], np.log(life[~censored]), 1)[0]
    assert naive < fit["slope_lo"]
    empty = lifetime_slope(beta[:3], life[:3], np.ones(3, bool))  # all censored: nothing to fit
    assert empty["slope"] is None and empty["events"] == 0


def test_noise_that_makes_the_count_flicker_leaves_the_merge_time():
    """Two groups with each token jittered by JITTER = 0.025 rad at every checkpoint: now and then a token sits
    farther than the threshold's 0.045 rad from all others of its group, which then counts as two for a
    checkpoint (16 upward flickers here). The running minimum reads these flickers as what they are, so the
    plateau and its merge are found as without noise; the energy jitters by ~3e-3, and by 2e-3 more added
    below, far under the energy rule's 2%."""
    rng = np.random.default_rng(4)
    t_merge = 300.0
    counts, energy = _read(_two_clusters(rng, t_merge, jitter=JITTER))
    after = counts[T >= 1.0]
    assert np.any(np.diff(after) > 0), "the noise should make the count flicker upwards"
    found = plateaus(T, counts)
    assert [(p.count, p.censored) for p in found] == [(2, False)]
    # the start waits for the first checkpoint with 2 clusters: within a few checkpoints of t = 1
    assert 0.9 <= found[0].start <= 1.0 * STEP**5
    assert 0.99 * t_merge <= found[0].end <= t_merge * STEP
    first = first_plateaus(T, counts[None])
    assert first["merges"][0] == 1
    steps = energy_plateaus(T, energy * (1 + 2e-3 * rng.standard_normal(T.size)))
    assert [s.censored for s in steps] == [False, True]
    assert 0.9 * t_merge <= steps[0].end <= t_merge * STEP  # as without noise: from the start of the approach


@pytest.mark.parametrize("seed", [0, 1])
def test_censored_likelihood_derivatives_match_central_differences(seed):
    """The fit's analytic gradient and Hessian of the censored log-normal likelihood against central differences
    of the value and of the gradient, at random parameters on a random censored sample (30% censored). Steps of
    1e-5 give differences accurate to ~1e-9 relative; the tolerance 1e-6 relative to the largest entry fails any
    wrong sign or factor of a term (a missing factor z in one censored term moves entries by >1e-2)."""
    from attnflow.stats._survival import _censored_normal_nll

    rng = np.random.default_rng(seed)
    x = rng.uniform(1, 6, 200)
    y = 0.3 + 0.6 * x + 0.7 * rng.standard_normal(200)
    observed = rng.random(200) > 0.3
    theta = np.array([rng.uniform(-0.5, 0.5), rng.uniform(0.3, 0.9), rng.uniform(-0.7, 0.3)])
    value, grad, H = _censored_normal_nll(theta, x, y, observed, hessian=True)
    h = 1e-5
    fd_grad, fd_H = np.zeros(3), np.zeros((3, 3))
    for k in range(3):
        e = np.zeros(3)
        e[k] = h
        fd_grad[k] = (_censored_normal_nll(theta + e, x, y, observed)[0]
                      - _censored_normal_nll(theta - e, x, y, observed)[0]) / (2 * h)
        fd_H[:, k] = (_censored_normal_nll(theta + e, x, y, observed)[1]
                      - _censored_normal_nll(theta - e, x, y, observed)[1]) / (2 * h)
    np.testing.assert_allclose(grad, fd_grad, atol=1e-6 * np.abs(fd_grad).max())
    np.testing.assert_allclose(H, fd_H, atol=1e-6 * np.abs(fd_H).max())
    np.testing.assert_allclose(H, H.T, rtol=0, atol=0)


def test_the_phase_job_times_a_prepared_four_cluster_start(tmp_path):
    """start = "clusters": the job's own clouds (4 clusters of 8 tokens, gaps 0.85, 1.5, 1.0 on the circle), the
    flow at beta = 20: every state is timed from t = 0 (4, then 3 at the first merge, then 2) in plateaus.csv and
    metastability.csv, where the rule for random starts would see only the 2-cluster state; the start's geometry
    (smallest gap 0.85) is recorded beside each plateau."""
    import csv

    from attnflow.phase import load_phase_config, run_phase

    cfg = load_phase_config(None)
    cfg.update(beta=20.0, n=32, d=2, systems=2, t1=1000.0, dt=0.1, checkpoints=101, start="clusters",
               start_centres=[[np.cos(a), np.sin(a)] for a in (0.0, 0.85, 2.35, 3.35)], start_spread=0.001)
    cfg["run"] = {**cfg["run"], "progress": False}
    run_phase(cfg, tmp_path / "out", figures=False)
    rows = list(csv.DictReader(open(tmp_path / "out" / "plateaus.csv")))
    for system in ("0", "1"):
        mine = [r for r in rows if r["system"] == system]
        assert [int(r["count"]) for r in mine] == [4, 3, 2] and [int(r["index"]) for r in mine] == [0, 1, 2]
        starts = [float(r["start"]) for r in mine]
        assert starts[0] == 0.0 and 20 <= starts[1] <= 150 and 200 <= starts[2] <= 1000   # measured: 50 and 390
        assert mine[-1]["censored"] == "true"
        assert abs(float(mine[0]["start_smallest_gap"]) - 0.85) < 0.01 and float(mine[0]["start_spread"]) < 0.01
    meta = list(csv.DictReader(open(tmp_path / "out" / "metastability.csv")))
    assert meta[0]["plateau_count"] == "4.0" and float(meta[0]["plateau_start"]) == 0.0
    assert float(meta[0]["mean_plateaus"]) == 3.0
    report = (tmp_path / "out" / "report.md").read_text()
    assert "**Prepared start:** every system starts as 4 tight clusters at the given centres" in report
    assert "plateaus.csv (every plateau of every system)" in report


def test_prepared_start_keys_are_checked_in_one_sentence():
    from attnflow import InputError
    from attnflow.phase import check_phase_config, load_phase_config

    def cfg(**change):
        c = load_phase_config(None)
        c.update({"d": 2, "start": "clusters", **change})
        return c

    for change, words in (({"start": "ring"}, "start must be one of"),
                          ({"start_clusters": 40}, "exceeds the 32 tokens"),
                          ({"start_spread": -1.0}, "start_spread"),
                          ({"start_centres": [[1.0, 0.0], [0.0]]}, "start_centres must be 2"),
                          ({"start_masses": [0.5, 0.6], "start_clusters": 2}, "start_masses must be 2"),
                          ({"dynamics": "prenorm"}, "applies to dynamics")):
        with pytest.raises(InputError, match=words):
            check_phase_config(cfg(**change))
    c = load_phase_config(None)
    c.update(start="clusters", start_centres=[[1.0, 0.0]])   # d = [2, 3] in the default grid
    with pytest.raises(InputError, match="one d in the grid"):
        check_phase_config(c)
