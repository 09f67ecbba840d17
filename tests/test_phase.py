"""The phase job (attnflow.phase): grid validation, the statistics recorded inside the solve against an
independent per-system run, plateau detection on constructed trajectories, the equiangular theory
line against a simulated equiangular cloud, resume after an interruption, and the tables' consistency."""

import csv
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnflow import InputError
from attnflow.dynamics import normalise, sphere_flow
from attnflow.ensembles import system_seeds, token_key
from attnflow.integrate import EulerStepper, sphere_shift
from attnflow.observables import clusters_above, first_plateaus, plateaus
from attnflow.phase import (
    OBSERVABLES,
    check_phase_config,
    checkpoint_layers,
    ensemble,
    equiangular_time,
    lifetime_slope,
    load_phase_config,
    run_phase,
    statistics,
)
from attnflow.phase._engine import make_chunk_fn
from attnflow.runs import make_mesh

pytestmark = pytest.mark.usefixtures("x64")


def _small(**changes):
    cfg = load_phase_config(None)
    cfg.update(beta=[0.5, 4.0], d=2, n=6, systems=3, t1=3.0, dt=0.1, checkpoints=7)
    cfg["run"]["progress"] = False
    cfg.update(changes)
    return cfg


# ---------------------------------------------------------------- validation: one sentence, before any work

@pytest.mark.parametrize("change, words", [
    ({"betta": 1.0}, ["unknown config key 'betta'", "beta"]),
    ({"beta": -1.0}, ["beta must be finite and > 0", "-1.0"]),
    ({"beta": [1.0, float("nan")]}, ["beta[1]", "finite"]),
    ({"beta": []}, ["beta", "empty"]),
    ({"beta": [1.0, 1.0]}, ["beta", "repeats"]),
    ({"beta": {"start": 1.0, "stop": 2.0}}, ["beta", "range"]),
    ({"n": 4.5}, ["n", "whole number"]),
    ({"d": [2, "3"]}, ["d[1]", "number"]),
    ({"threshold": 1.0}, ["threshold"]),
    ({"threshold": -1.5}, ["threshold"]),
    ({"systems": 0}, ["systems"]),
    ({"t1": 1.05}, ["t1"]),
    ({"spacing": "geometric"}, ["spacing"]),
    ({"dynamics": "sphere", "normalisation": "none"}, ["normalisation"]),
    ({"dynamics": "attention", "normalisation": "mean"}, ["normalisation", "dynamics"]),
    ({"dynamics": "tensor"}, ["dynamics"]),
])
def test_bad_grid_or_key_is_one_sentence_naming_it_before_the_folder(tmp_path, change, words):
    with pytest.raises(InputError) as err:
        run_phase(_small(**change), tmp_path / "out")
    message = str(err.value)
    assert all(w in message for w in words), message
    assert message.count(". ") <= 1 and "\n" not in message
    assert not (tmp_path / "out").exists()


def test_grid_ranges_and_checkpoints():
    cfg = check_phase_config(_small(beta={"start": 0.1, "stop": 10.0, "num": 3, "spacing": "log"}, n=[4, 8],
                                    d={"start": 2, "stop": 4, "num": 3}))
    assert cfg.beta == pytest.approx((0.1, 1.0, 10.0)) and cfg.n == (4, 8) and cfg.d == (2, 3, 4)
    assert [(g.n, g.d) for g in cfg.groups] == [(n, d) for n in (4, 8) for d in (2, 3, 4)]
    layered = check_phase_config(_small(dynamics="layered", epsilon=[0.0, 0.2], heads=[1, 2], dtype="float64"))
    assert [(g.epsilon, g.heads) for g in layered.groups] == [(0.0, 1), (0.2, 1)]  # heads matter for multihead only
    for spacing in ("uniform", "log"):
        layers = checkpoint_layers(300, 50, spacing)
        assert len(layers) == 50 and layers[0] == 0 and layers[-1] == 300 and np.all(np.diff(layers) > 0)
    log = np.asarray(checkpoint_layers(10000, 10, "log")[1:], float)  # 0, then 9 layers from 1 to 10^4
    # 1, 3, 10, 32, ...: half a decade apart, up to the rounding to whole layers (3.16 -> 3: 0.023 decades)
    assert np.allclose(np.diff(np.log10(log)), 0.5, atol=0.025)


# ---------------------------------------------------------------- the recorded statistics

def test_chunk_statistics_match_an_independent_run_of_each_system():
    """Every (beta, system) of a chunk against its own sphere run (EulerStepper, states saved, statistics
    computed afterwards): the chunk's vmapped, sharded, save_fn path must give the same numbers."""
    config = check_phase_config(_small(beta=[0.7, 3.0, 9.0], systems=2, n=7, d=3, t1=2.0, checkpoints=5))
    group = config.groups[0]
    cols = make_chunk_fn(config, group, make_mesh())(0, 6)
    layers = list(config.checkpoint_layers)
    seeds = system_seeds(config.seed, group.label, 0, config.systems)

    @jax.jit
    def independent_run(seed_key, beta):  # one system alone, compiled once for every (beta, system)
        x0 = normalise(jax.random.normal(seed_key, (7, 3), jnp.float64) / jnp.sqrt(3.0))
        I = jnp.eye(3)
        traj = EulerStepper(config.dt, config.num_layers, shift=sphere_shift).solve(sphere_flow(I, I, I, beta), x0)
        return [statistics(traj.ys[layer], beta, config.threshold) for layer in layers]

    for k in range(6):
        b, s = cols["beta_index"][k], cols["system"][k]
        beta = config.beta[b]
        for j, (layer, want) in enumerate(zip(layers, independent_run(token_key(seeds[s]), beta))):
            for name, value in want.items():
                np.testing.assert_allclose(cols[name][k, j], float(value), rtol=1e-10, atol=1e-12,
                                           err_msg=f"{name} of pair {k} at layer {layer}")
    assert cols["finite"].all()
    # common random numbers: system s starts from the same cloud for every beta
    first = {(b, s): cols["ip_mean"][k, 0] for k, (b, s) in enumerate(zip(cols["beta_index"], cols["system"]))}
    assert first[(0, 1)] == first[(1, 1)] == first[(2, 1)]


@pytest.mark.parametrize("seed", range(3))
def test_statistics_equal_the_public_observables(seed):
    """The chunk's statistics (one Gram matrix shared) against the public observables of the same cloud."""
    from attnflow.observables import inner_product_range, interaction_energy, pairs_clustered, span_dimension

    rng = np.random.default_rng(seed)
    x = rng.standard_normal((9, 3)) * rng.uniform(0.5, 2.0, (9, 1))
    x[3] = x[0] * 1.5 + 1e-4  # a clustered pair whatever the scale
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    beta = 2.5
    s = statistics(x, beta, 0.99)
    assert float(s["pairs_clustered"]) == pytest.approx(float(pairs_clustered(u, 0.99)), abs=1e-15)
    assert float(s["pairs_clustered"]) > 0
    assert int(s["clusters"]) == int(clusters_above(u, 0.99))
    assert float(s["energy"]) == pytest.approx(float(interaction_energy(u, beta)), rel=1e-13)
    assert int(s["span"]) == int(span_dimension(u, 1e-6)) == 3
    lo, hi = np.asarray(inner_product_range(u))
    assert (float(s["ip_min"]), float(s["ip_max"])) == pytest.approx((lo, hi), abs=1e-15)
    gram = u @ u.T
    assert float(s["ip_mean"]) == pytest.approx(gram[~np.eye(9, dtype=bool)].mean(), abs=1e-15)



@pytest.mark.parametrize("n, d", [(32, 2), (12, 40)])
def test_span_is_the_count_of_gram_eigenvalues_above_the_tolerance(n, d):
    """The span statistic (a Sturm count of the smaller Gram matrix, no eigenvalues formed) against NumPy's
    eigenvalues of X^T X, on clouds of every rank with a perturbation from far below to far above the
    tolerance (rel_tol 1e-6 of the trace): the d x d and the n x n route."""
    from attnflow.observables import span_dimension

    rng = np.random.default_rng(n + d)
    clouds, want = [], []
    for rank in range(min(n, d) + 1):
        for noise in (0.0, 1e-9, 1e-4, 1e-2):
            x = rng.standard_normal((n, rank)) @ rng.standard_normal((rank, d)) + noise * rng.standard_normal((n, d))
            eigenvalues = np.linalg.eigvalsh(x.T @ x)
            # no eigenvalue within 1e-6 (relative) of the threshold: the count is then the same for any
            # backward-stable method
            tau = 1e-6 * np.sum(x * x)
            if np.min(np.abs(eigenvalues - tau)) > 1e-6 * tau:
                clouds.append(x)
                want.append(int(np.sum(eigenvalues > tau)) if tau > 0 else 0)
    got = jax.jit(jax.vmap(span_dimension))(np.stack(clouds))
    assert len(set(want)) > min(n, d) // 2  # many different dimensions are compared
    np.testing.assert_array_equal(np.asarray(got), want)


@pytest.mark.parametrize("n", [7, 32, 33])
def test_cluster_labels_match_scipy_on_both_sides_of_the_bitset_size(n):
    """The clusters statistic's components (bit-set closure up to 32 nodes, label spreading above) against
    SciPy on random symmetric graphs from empty to dense, and on random chains (the longest paths)."""
    from scipy.sparse.csgraph import connected_components as scipy_components

    from attnflow.observables import connected_components

    rng = np.random.default_rng(n)
    graphs = [a | a.T for p in (0.0, 0.03, 0.1, 0.5) for a in rng.random((8, n, n)) < p]
    for _ in range(4):
        chain, order = np.zeros((n, n), bool), rng.permutation(n)
        chain[order[:-1], order[1:]] = True
        graphs.append(chain | chain.T)
    labels = np.asarray(jax.jit(jax.vmap(connected_components))(np.stack(graphs)))
    counts = set()
    for a, got in zip(graphs, labels):
        count, want = scipy_components(a, directed=False)
        counts.add(count)
        for c in range(count):  # the same partition, each label the smallest index of its component
            members = np.flatnonzero(want == c)
            assert set(got[members]) == {members.min()}
    assert len(counts) > 2  # graphs of many component counts were compared

# ---------------------------------------------------------------- metastability on constructed trajectories

def test_plateaus_of_two_clusters_that_merge_at_a_known_time():
    """Two tight groups of tokens on the circle, 120 degrees apart, gather from a spread cloud by t = 1
    and merge at t = 6: the detection finds one plateau of 2 clusters from the gathering to t = 6."""
    rng = np.random.default_rng(0)
    t = np.linspace(0.0, 10.0, 101)
    n = 12
    start = rng.uniform(0, 2 * np.pi, n)
    centre = np.where(np.arange(n) < 6, 0.0, 2 * np.pi / 3)
    angles = []
    for time in t:
        if time < 1.0:
            angle = start + (centre - start) * time  # gathering
        elif time < 6.0:
            angle = centre + 1e-4 * rng.standard_normal(n)
        else:
            angle = np.zeros(n) + 1e-4 * rng.standard_normal(n)
        angles.append(angle)
    angles = np.asarray(angles)
    clouds = np.stack([np.cos(angles), np.sin(angles)], axis=-1)  # (T, n, 2)
    counts = jax.vmap(clusters_above)(jnp.asarray(clouds))
    counts = np.asarray(counts)
    found = plateaus(t, counts, min_duration=0.5)
    assert [(p.count, p.end, p.censored) for p in found] == [(2, 6.0, False)]
    assert 0.9 <= found[0].start <= 1.0  # the plateau starts when the groups have formed
    first = first_plateaus(t, counts[None], 0.5)
    assert first["merges"][0] == 1 and first["lifetime"][0] == pytest.approx(6.0 - found[0].start)
    # a plateau shorter than min_duration is not one; a run still on its plateau at the end is censored
    assert plateaus(t, counts, min_duration=5.5) == []
    assert plateaus(t[:50], counts[:50], 0.5)[0].censored


def test_lifetime_slope_recovers_an_exponential_law_and_takes_censored_lifetimes_as_lower_bounds():
    """One lifetime per beta, log-normal about exp(0.3 + 0.7 beta) (sigma 0.05); the last two are censored at
    1.0, far below the line: as lower bounds they are consistent with it and must not pull the slope down (a
    fit that took them as lifetimes would give a slope of 0.07)."""
    rng = np.random.default_rng(1)
    beta = np.linspace(1, 8, 12)
    life = np.exp(0.3 + 0.7 * beta) * np.exp(0.05 * rng.standard_normal(12))
    censored = np.zeros(12, bool)
    censored[-2:] = True
    life[-2:] = 1.0
    fit = lifetime_slope(beta, life, censored)
    assert fit["cells"] == 12 and fit["events"] == 10 and fit["slope_lo"] < 0.7 < fit["slope_hi"]
    # sigma = 0.05 over a beta range of 7 (10 events): a standard error of about 0.005 on the slope
    assert fit["slope_hi"] - fit["slope_lo"] < 0.1


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_lifetime_fit_is_the_likelihood_maximum_an_independent_optimiser_finds(seed):
    """The censored log-normal fit's own Newton iteration lands on the maximum that scipy's BFGS finds (from a
    different start) on random censored samples: the parameters agree to 1e-6 and the likelihood is no lower."""
    from scipy import optimize

    from attnflow.stats._survival import _censored_normal_nll

    rng = np.random.default_rng(seed)
    beta = np.repeat(np.linspace(1, 6, 6), 30)
    a, b, sigma = rng.uniform(-1, 1), rng.uniform(0.2, 1.5), rng.uniform(0.2, 1.0)
    T = np.exp(a + b * beta + sigma * rng.standard_normal(beta.size))
    horizon = np.quantile(T, rng.uniform(0.6, 0.9))  # 10-40% censored
    fit = lifetime_slope(beta, np.minimum(T, horizon), T > horizon)
    x, y, obs = beta, np.log(np.minimum(T, horizon)), T <= horizon
    ref = optimize.minimize(_censored_normal_nll, np.zeros(3), args=(x, y, obs), jac=True, method="BFGS",
                            options={"gtol": 1e-10, "maxiter": 2000})
    ours = np.array([fit["intercept"], fit["slope"], np.log(fit["sigma"])])
    np.testing.assert_allclose(ours, ref.x, atol=1e-6)
    assert _censored_normal_nll(ours, x, y, obs)[0] <= ref.fun + 1e-9


# ---------------------------------------------------------------- the theory line

def test_equiangular_time_matches_a_simulated_equiangular_cloud():
    """n = 3 orthonormal tokens in d = 3 stay equiangular under the sphere flow (Q = K = V = I); the time at
    which their inner product reaches 0.9 matches the scalar ODE's, to the Euler step's first order."""
    beta, threshold = 2.0, 0.9
    want = equiangular_time(0.0, threshold, beta, 3)
    x0 = jnp.eye(3, dtype=jnp.float64)
    I = jnp.eye(3)
    errors = []
    for dt in (0.02, 0.01):
        layers = int(round(2 * want / dt))
        traj = EulerStepper(dt, layers, shift=sphere_shift).solve(sphere_flow(I, I, I, beta), x0)
        rho = np.asarray(jnp.einsum("tid,tjd->tij", traj.ys, traj.ys)[:, 0, 1])
        k = int(np.argmax(rho >= threshold))
        # linear interpolation between the layers around the crossing
        t_cross = (k - 1 + (threshold - rho[k - 1]) / (rho[k] - rho[k - 1])) * dt
        errors.append(abs(t_cross - want))
    assert errors[1] < 0.02 * want  # within 2 percent at dt = 0.01 ...
    assert 1.5 < errors[0] / errors[1] < 2.6  # ... and the error halves with dt: first order


@pytest.mark.parametrize("normalisation", ["softmax", "mean"])
def test_equiangular_time_closed_form_agrees_with_quadrature(normalisation):
    """The Ei closed form against adaptive quadrature of 1 / rho' (relative 1e-12: the quadrature's own
    tolerance is 1e-13, and the closed form is a difference of O(e^beta) terms, rounding 1e-16 each)."""
    from scipy.integrate import quad

    from attnflow.phase import equiangular_rate
    from attnflow.phase._theory import _closed_form_time

    rng = np.random.default_rng(11)
    for _ in range(60):
        n = int(rng.integers(2, 200))
        beta, threshold = float(rng.uniform(0.01, 30.0)), float(rng.uniform(0.5, 0.9999))
        rho0 = float(rng.uniform(-1.0 / (n - 1) + 1e-3, threshold - 1e-3))
        want, _ = quad(lambda r: 1.0 / equiangular_rate(r, beta, n, normalisation), rho0, threshold, limit=200,
                       epsabs=0.0, epsrel=1e-13)
        assert equiangular_time(rho0, threshold, beta, n, normalisation) == pytest.approx(want, rel=1e-12)
        assert _closed_form_time(rho0, threshold, beta, n, normalisation) == pytest.approx(want, rel=1e-12)
    # beta = 0 (Ei(0) is infinite: the quadrature's answer): at n = 2 both normalisations give b = 1/2, so
    # rho' = 1 - rho^2 and T = artanh(0.5)
    want = np.arctanh(0.5)
    assert equiangular_time(0.0, 0.5, 0.0, 2, normalisation) == pytest.approx(want, rel=1e-10)


# ---------------------------------------------------------------- the job: tables, resume, dynamics

def _read(path):
    with open(path) as fh:
        return list(csv.DictReader(fh))


def test_job_tables_resume_identically_after_an_interruption(tmp_path, monkeypatch):
    cfg = _small(beta=[0.5, 2.0, 6.0], systems=4, t1=4.0, checkpoints=9)
    cfg["run"]["chunk_size"] = 5
    summary = run_phase(cfg, tmp_path / "full")
    cells = (tmp_path / "full" / "cells.csv").read_bytes()
    rows = _read(tmp_path / "full" / "cells.csv")
    assert len(rows) == 3 * 9 == summary["rows"]
    assert set(rows[0]) >= {"beta", "n", "d", "t", "pairs_clustered", "pairs_clustered_lo", "pairs_clustered_hi",
                            "clusters", "energy"}
    for r in rows:
        assert float(r["pairs_clustered_lo"]) <= float(r["pairs_clustered"]) <= float(r["pairs_clustered_hi"])
    # the means are those of the per-system arrays
    arrays = np.load(tmp_path / "full" / "systems" / "g000.npz", allow_pickle=False)
    sel = arrays["beta_index"] == 2
    mean_last = arrays["pairs_clustered"][sel][:, -1].mean()
    last = [r for r in rows if float(r["beta"]) == 6.0][-1]
    assert float(last["pairs_clustered"]) == pytest.approx(mean_last, rel=1e-12)
    # the same numbers from Python without a run folder: attnflow.phase.ensemble, arranged (beta, system, t)
    got = ensemble(cfg)
    order = np.lexsort((arrays["system"], arrays["beta_index"]))
    assert got["beta"].tolist() == [0.5, 2.0, 6.0] and got["t"].tolist() == sorted({float(r["t"]) for r in rows})
    for name in (*OBSERVABLES, "finite", "t_nonfinite"):
        np.testing.assert_array_equal(got[name].reshape(3 * 4, *got[name].shape[2:]), arrays[name][order], err_msg=name)
    with pytest.raises(InputError, match="group must be an index"):
        ensemble(cfg, group=1)
    for name in ("phase_g000.png", "curves_g000.png", "staircase_g000.png", "lifetime_g000.png", "report.md",
                 "summary.json", "metastability.csv", "provenance.json"):
        assert (tmp_path / "full" / name).is_file(), name

    # interrupted after two chunks, then started again without figures: the same table, and the finished chunks
    # are kept; then once more with figures: every chunk resumed, and the figures and report of the whole run
    import attnflow.phase._run as job

    real = job.make_chunk_fn
    calls = {"n": 0}

    def failing(*args, **kwargs):
        compute = real(*args, **kwargs)

        def once(start, stop, **kwargs):
            calls["n"] += 1
            if calls["n"] == 3:
                raise KeyboardInterrupt
            return compute(start, stop, **kwargs)

        return once

    monkeypatch.setattr(job, "make_chunk_fn", failing)
    with pytest.raises(KeyboardInterrupt):
        run_phase(cfg, tmp_path / "cut")
    assert len(list((tmp_path / "cut" / "chunks").glob("*.npz"))) == 2
    monkeypatch.setattr(job, "make_chunk_fn", real)
    resumed = run_phase(cfg, tmp_path / "cut", figures=False)
    assert resumed["chunks_computed_here"] == resumed["chunks"] - 2
    assert (tmp_path / "cut" / "cells.csv").read_bytes() == cells
    assert not list((tmp_path / "cut").glob("*.png"))
    report = (tmp_path / "full" / "report.md").read_text()
    bare = (tmp_path / "cut" / "report.md").read_text()
    assert "Figures: not drawn (figures=False" in bare and "![" not in bare and "![" in report
    drawn = run_phase(cfg, tmp_path / "cut")
    assert drawn["chunks_computed_here"] == 0 and (tmp_path / "cut" / "report.md").read_text() == report
    for name in ("phase_g000.png", "curves_g000.png", "staircase_g000.png", "lifetime_g000.png"):
        assert (tmp_path / "cut" / name).read_bytes() == (tmp_path / "full" / name).read_bytes(), name


def test_a_rerun_in_the_same_process_traces_and_compiles_nothing_again(tmp_path, monkeypatch):
    """The chunk programs a process built are kept (the last few, by their name in the program store and their
    devices): running a config again, into another folder or from ``ensemble``, builds none; another config
    builds its own, and the oldest is let go past the limit."""
    import attnflow.phase._engine as engine

    built = []
    real = engine.sharded

    def spy(*args, **kwargs):
        built.append(kwargs["keep"])
        return real(*args, **kwargs)

    monkeypatch.setattr(engine, "sharded", spy)
    cfg = _small(seed=20261206, systems=2)
    run_phase(cfg, tmp_path / "first", figures=False)
    assert len(built) == 1
    run_phase(cfg, tmp_path / "again", figures=False)
    got = ensemble(cfg)
    assert len(built) == 1
    assert (tmp_path / "again" / "cells.csv").read_bytes() == (tmp_path / "first" / "cells.csv").read_bytes()
    arrays = np.load(tmp_path / "first" / "systems" / "g000.npz")
    order = np.lexsort((arrays["system"], arrays["beta_index"]))
    np.testing.assert_array_equal(got["clusters"].reshape(4, -1), arrays["clusters"][order])
    monkeypatch.setattr(engine, "PROCESS_PROGRAMS", 1)
    other = _small(seed=20261207, systems=2)
    run_phase(other, tmp_path / "other", figures=False)
    assert len(built) == 2 and built[1] != built[0]
    run_phase(cfg, tmp_path / "evicted", figures=False)  # one kept: the first config's program was let go
    assert len(built) == 3 and built[2] == built[0]


@pytest.mark.parametrize("changes", [
    {"dynamics": "prenorm", "spacing": "log", "dtype": "float32"},
    {"dynamics": "attention", "v_ensemble": "ginibre", "qk_ensemble": "spd", "weights": "per_system"},
    {"dynamics": "multihead", "heads": [1, 2]},
    {"dynamics": "sphere", "normalisation": "mean", "n": [4, 6]},
])
def test_every_kind_of_dynamics_and_grid_runs(tmp_path, changes):
    cfg = _small(beta=[1.0, 3.0], systems=2, t1=1.0, checkpoints=4, **changes)
    summary = run_phase(cfg, tmp_path / "out", figures=False)
    groups = check_phase_config(cfg).groups
    rows = _read(tmp_path / "out" / "cells.csv")
    assert len(rows) == len(groups) * 2 * 4 and summary["nonfinite_runs"] == 0
    for r in rows:
        assert all(math.isfinite(float(r[k])) for k in ("pairs_clustered", "clusters", "energy", "span"))
        assert 0.0 <= float(r["pairs_clustered"]) <= 1.0 and 1 <= float(r["clusters"]) <= int(r["n"])


def test_cli_runs_one_cpu_device_per_core_with_the_same_cells(tmp_path):
    """``attnflow phase`` on a CPU shards over one XLA device per available core (run.devices = 0) and draws its
    figures in worker processes; its cells.csv, figures and report equal a one-device run of the same config that
    draws in its own process (each system's numbers do not depend on its device)."""
    import json
    import os
    import subprocess
    import sys

    cfg = tmp_path / "tiny.toml"
    cfg.write_text('kind = "phase"\nbeta = [0.5, 4.0]\nn = 6\nd = 2\nsystems = 5\nt1 = 3.0\ndt = 0.1\n'
                   'checkpoints = 7\n[run]\nprogress = false\n')
    env = {k: v for k, v in os.environ.items() if k != "JAX_NUM_CPU_DEVICES"}
    r = subprocess.run([sys.executable, "-m", "attnflow", "phase", str(cfg), "--out", str(tmp_path / "cli")],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    # two betas are fewer cells than a lifetime fit takes: the CLI says so instead of printing nothing
    assert "first plateau lifetime, pooled over cluster counts: not fitted: " in r.stdout, r.stdout
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert json.loads((tmp_path / "cli" / "summary.json").read_text())["devices"] == cores
    run_phase(load_phase_config(cfg), tmp_path / "one", num_devices=1, figure_workers=0)
    assert (tmp_path / "cli" / "cells.csv").read_text() == (tmp_path / "one" / "cells.csv").read_text()
    # the CLI's figure worker processes draw the files this process draws
    for name in ("phase_g000.png", "curves_g000.png", "staircase_g000.png", "lifetime_g000.png"):
        assert (tmp_path / "cli" / name).read_bytes() == (tmp_path / "one" / name).read_bytes(), name
    assert (tmp_path / "cli" / "report.md").read_text() == (tmp_path / "one" / "report.md").read_text()


@pytest.mark.parametrize("m", [3, 5, 32])
def test_tridiagonal_reduction_keeps_the_spectrum(m):
    """The span's Householder reduction (pure jnp, no LAPACK call) keeps every eigenvalue of random
    symmetric and rank-deficient Gram matrices to rounding (1e-13 of the largest, float64)."""
    from attnflow.observables._pairs import _tridiagonal

    rng = np.random.default_rng(m)
    x = rng.standard_normal((m, m))
    for a in (x + x.T, x[:, :2] @ x[:, :2].T, np.diag(rng.standard_normal(m))):
        diag, off = (np.asarray(v) for v in jax.jit(_tridiagonal)(a))
        T = np.diag(diag) + np.diag(off, 1) + np.diag(off, -1)
        want = np.linalg.eigvalsh(a)
        np.testing.assert_allclose(np.linalg.eigvalsh(T), want, rtol=0, atol=1e-13 * np.abs(want).max())
