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
    again = run_meanfield(_tiny(), out, progress=False)
    assert again["units_computed"] == 0 and again["units_resumed"] == s["units_computed"]
    assert again["convergence"] == first["convergence"]
    other = _tiny()
    other["seed"] = 1
    with pytest.raises(InputError, match="another config"):
        run_meanfield(other, out, progress=False)


def test_first_merge_reads_formation_lifetime_and_censoring_from_gap_counts():
    from attnflow.meanfield._run import _first_merge

    ts = np.arange(20.0)
    # covers the circle (0 gaps) until t = 4; a brief 5-cluster state that holds under a tenth of the rest
    # (t = 4 only), then 3 clusters from t = 5 until the merge at t = 12
    gaps = np.array([0] * 4 + [5] + [3] * 7 + [2] * 8)
    assert _first_merge(ts, gaps) == (3, 5.0, 7.0, False)
    assert _first_merge(ts, np.array([0] * 6 + [4] * 14)) == (4, 6.0, 13.0, True)  # censored at the horizon
    formed, _, _, censored = _first_merge(ts, np.zeros(20, int))
    assert formed is None and censored
