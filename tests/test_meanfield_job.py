"""The mean-field study job (`attnflow meanfield`): its config checks, its results and its resume."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from attnflow.errors import InputError
from attnflow.meanfield import check_meanfield_config, load_meanfield_config, near_uniform_start, run_meanfield

pytestmark = pytest.mark.usefixtures("x64")


def _tiny() -> dict:
    cfg = load_meanfield_config(None)
    cfg["normalisations"] = ["softmax"]  # the mean normalisation's PDE and growth: tests/test_meanfield_pde.py
    cfg["convergence"].update(n=[64, 512], seeds=3, times=[0.0, 0.5], frames=3, grid=64, pde_dt=0.01)
    cfg["growth"].update(beta=[3.0], n=256, seeds=1, modes=4, saves=21, grid=64)
    cfg["largest"].update(n=2048, layers=1)
    return cfg


@pytest.mark.parametrize("section, key, value, words", [
    ("growth", "beta", [1.0, 0.0], "growth.beta"),
    ("convergence", "n", [256, 64], "convergence.n"),
    ("convergence", "times", [0.5, 1.0], "convergence.times"),
    ("convergence", "start_amplitudes", [0.7, 0.6], "convergence.start_amplitudes"),
    ("growth", "cluster_gap", 4.0, "growth.cluster_gap"),
    (None, "normalisations", ["softmax", "softmin"], "normalisations"),
    ("convergence", "sigma", -0.5, "convergence.sigma"),
    ("transition", "beta", [1.0, -2.0], "transition.beta"),
    ("transition", "sigma_ratios", [1.1, 0.9], "transition.sigma_ratios"),
    ("transition", "grid", 48, "transition.grid"),
])
def test_bad_values_are_refused_in_one_sentence_naming_the_key(section, key, value, words, tmp_path):
    cfg = _tiny()
    (cfg[section] if section else cfg)[key] = value
    with pytest.raises(InputError, match=words.replace(".", r"\.")):
        check_meanfield_config(cfg)
    with pytest.raises(InputError):
        run_meanfield(cfg, tmp_path / "never")
    assert not (tmp_path / "never").exists()  # refused before the folder is claimed


def test_near_uniform_start_gives_every_mode_half_epsilon():
    from attnflow.meanfield import fourier_coefficients

    th, phases = near_uniform_start(8192, 5, 1e-3, np.random.default_rng(4))
    mu = np.asarray(fourier_coefficients(th, 6))
    k = np.arange(1, 6)
    # first order in epsilon: mu_k = (epsilon / 2) e^{-i k phase_k} + O(epsilon^2) for k <= 5 (O(epsilon^2) =
    # 1e-6 relative to 1), and mode 6 only second order
    np.testing.assert_allclose(mu[1:6], 5e-4 * np.exp(-1j * k * phases), atol=2e-6)
    assert abs(mu[6]) < 2e-6


def test_tiny_study_writes_its_results_and_resumes_without_recomputing(tmp_path):
    out = tmp_path / "mf"
    s = run_meanfield(_tiny(), out, progress=False)
    for name in ("report.md", "summary.json", "convergence.csv", "rates.csv", "growth.csv", "config.json",
                 "provenance.json", "attnflow-run.json", "density_softmax.png", "w1_vs_n_softmax.png",
                 "growth_softmax.png"):
        assert (out / name).is_file(), name
    # iid samples: W1 ~ n^-1/2 at t = 0 (2 sizes x 3 seeds: a wide interval, but it must hold 1/2)
    r0 = s["convergence"]["softmax"]["rates"][0]
    assert r0["lo"] < 0.5 < r0["hi"] and 0.2 < r0["rate"] < 0.8
    assert s["convergence"]["softmax"]["pde_mass_drift"] < 1e-12  # the spectral scheme conserves mass
    with open(out / "growth.csv") as f:
        rows = [r for r in csv.DictReader(f) if r["normalisation"] == "softmax"]
    k_star = int(rows[0]["k_star"])
    fast = next(r for r in rows if int(r["k"]) == k_star)
    # the fastest mode of an equally spaced start: particles and PDE at the linear rate (a 10% window:
    # the fit spans the whole linear window, where second-order terms reach max_amplitude^2 / epsilon)
    for who in ("particles", "pde"):
        assert abs(float(fast[f"{who}_rate"]) / float(fast["predicted"]) - 1) < 0.1, (who, fast)
    assert s["largest"]["finite"] and s["largest"]["run_s"] > 0
    first = json.loads((out / "summary.json").read_text())
    tables = {name: (out / name).read_bytes() for name in ("convergence.csv", "rates.csv", "growth.csv")}
    for png in out.glob("*.png"):
        png.unlink()
    # resumed without figures: every unit kept, the same tables, no figure drawn and the report says so
    again = run_meanfield(_tiny(), out, progress=False, figures=False)
    assert again["units_computed"] == 0 and again["units_resumed"] == s["units_computed"]
    assert again["convergence"] == first["convergence"] and again["figures"] == [] and first["figures"]
    assert {name: (out / name).read_bytes() for name in tables} == tables
    assert not list(out.glob("*.png")) and "Not drawn (figures=False" in (out / "report.md").read_text()
    other = _tiny()
    other["seed"] = 1
    with pytest.raises(InputError, match="another config"):
        run_meanfield(other, out, progress=False)


def test_first_merge_reads_formation_lifetime_and_censoring_from_gap_counts():
    from attnflow.meanfield._study_units import _first_merge

    ts = np.arange(20.0)
    # covers the circle (0 gaps) until t = 4; a brief 5-cluster state that holds under a tenth of the rest
    # (t = 4 only), then 3 clusters from t = 5 until the merge at t = 12
    gaps = np.array([0] * 4 + [5] + [3] * 7 + [2] * 8)
    assert _first_merge(ts, gaps) == (3, 5.0, 7.0, False)
    assert _first_merge(ts, np.array([0] * 6 + [4] * 14)) == (4, 6.0, 13.0, True)  # censored at the horizon
    formed, _, _, censored = _first_merge(ts, np.zeros(20, int))
    assert formed is None and censored


def test_the_noise_keys_run_the_noisy_pde_and_the_transition_and_keep_old_fingerprints(tmp_path):
    """convergence.sigma: the particles are noisy and the PDE has the diffusion (its density is that of
    solve_continuity(..., sigma=...)); [transition]: the order parameter of the noisy continuity equation
    against sigma / sigma_c (1/n attention), whose measured threshold brackets the closed form on both sides
    of beta* and which is bistable above it only. A config without noise keeps the fingerprint of the code
    before the keys (folders written then resume); an unstable transition step is refused before any work."""
    import jax.numpy as jnp

    from attnflow.meanfield import circle_grid, solve_continuity
    from attnflow.meanfield._run import start_density

    assert check_meanfield_config(load_meanfield_config(None)).fingerprint == "c45432449f4feeef"
    cfg = _tiny()
    cfg["normalisations"] = ["mean"]
    cfg["convergence"].update(n=[32, 64], seeds=2, frames=2, grid=32, sigma=0.5)
    cfg["growth"].update(n=64, modes=2, saves=5, grid=32)
    cfg["largest"].update(n=256)
    cfg["transition"].update(beta=[1.5, 4.0], sigma_ratios=[0.9, 1.02, 1.15], t1=60.0, dt=0.025, grid=32)
    assert check_meanfield_config(cfg).fingerprint != check_meanfield_config(_tiny()).fingerprint
    bad = json.loads(json.dumps(cfg))
    bad["transition"]["dt"] = 0.1
    with pytest.raises(InputError, match=r"transition\.dt.* at beta = 4"):
        run_meanfield(bad, tmp_path / "never", progress=False)
    assert not (tmp_path / "never" / "units").exists()
    summary = run_meanfield(cfg, tmp_path / "run", progress=False)
    rows = {r["beta"]: r for r in summary["transition"]}
    for beta, bistable in ((1.5, False), (4.0, True)):
        assert rows[beta]["contains_sigma_c"], rows[beta]
        assert bool(rows[beta]["bistable"]) == bistable, rows[beta]
    with open(tmp_path / "run" / "transition.csv", newline="") as fh:
        table = list(csv.DictReader(fh))
    assert len(table) == 6 and {round(float(r["ratio"]), 6) for r in table} == {0.9, 1.02, 1.15}
    assert (tmp_path / "run" / "transition_mean.png").is_file()
    assert "## The phase transition of noisy tokens" in (tmp_path / "run" / "report.md").read_text()
    # the convergence study's PDE is the noisy one
    unit = np.load(tmp_path / "run" / "units" / "mean-convergence-pde.npz")
    c = check_meanfield_config(cfg).convergence
    rho0 = start_density(np.asarray(circle_grid(c.grid)), c.start_modes, c.start_amplitudes, c.start_phases)
    want = solve_continuity(jnp.asarray(rho0), c.beta, jnp.asarray(unit["ts"]), normalisation="mean",
                            dt=c.pde_dt * float(unit["ts"][-1]) / 0.5, sigma=0.5).density
    np.testing.assert_allclose(unit["density"], want, rtol=1e-10, atol=1e-12)
    assert np.isfinite(summary["convergence"]["mean"]["pde_mass_drift"])
