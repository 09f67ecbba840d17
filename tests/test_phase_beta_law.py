"""The phase job over (gamma, n): beta_law maps the grid's gamma to beta_n = gamma g(n) per group, and each group
runs exactly what a constant-beta config with those betas runs."""

from __future__ import annotations

import csv
import math

import numpy as np
import pytest

from attnflow import InputError
from attnflow.phase import check_phase_config, ensemble, load_phase_config, run_phase

pytestmark = pytest.mark.usefixtures("x64")

GAMMAS = [0.4, 1.3]


def _cfg(**changes):
    cfg = load_phase_config(None)
    cfg.update(beta=GAMMAS, d=2, n=[6, 12], systems=3, t1=2.0, dt=0.1, checkpoints=5)
    cfg["run"]["progress"] = False
    cfg.update(changes)
    return cfg


@pytest.mark.parametrize("law, power, g", [("log", 1.0, math.log), ("power", 0.5, math.sqrt),
                                           ("log_power", 2.0, lambda n: math.log(n) ** 2)])
def test_betas_of_each_group(law, power, g):
    config = check_phase_config(_cfg(beta_law=law, beta_power=power))
    for n in (6, 12):
        np.testing.assert_allclose(config.betas_at(n), [x * g(n) for x in GAMMAS], rtol=1e-15)
    assert check_phase_config(_cfg()).betas_at(12) == tuple(GAMMAS)  # constant: the grid's beta


def test_each_group_runs_what_a_constant_beta_config_runs(tmp_path):
    """The law's run of n = 12 equals a constant run at beta = gamma log 12 (same clouds, same systems), and
    its cells carry beta = gamma log n."""
    law = run_phase(_cfg(beta_law="log"), tmp_path / "law", figures=False)
    rows = list(csv.DictReader((tmp_path / "law" / "cells.csv").open()))
    for n in (6, 12):
        betas = sorted({float(r["beta"]) for r in rows if int(r["n"]) == n})
        np.testing.assert_allclose(betas, [x * math.log(n) for x in GAMMAS], rtol=1e-12)
    assert law["beta_law"] == {"law": "log", "power": 1.0, "grid_is": "gamma"}
    by_law = ensemble(_cfg(beta_law="log"), group=1)
    constant = ensemble(_cfg(n=[12], beta=[x * math.log(12) for x in GAMMAS]), group=0)
    np.testing.assert_allclose(by_law["beta"], constant["beta"], rtol=1e-15)
    np.testing.assert_array_equal(by_law["gamma"], GAMMAS)
    for name in ("pairs_clustered", "clusters", "energy", "ip_mean"):
        np.testing.assert_array_equal(by_law[name], constant[name])
    # and not what the grid's gamma would run as a constant beta (the law is applied)
    raw = ensemble(_cfg(n=[12]), group=0)
    assert not np.array_equal(raw["energy"], by_law["energy"])


def test_a_constant_law_leaves_the_fingerprint_and_the_files():
    base, same = check_phase_config(_cfg()), check_phase_config(_cfg(beta_law="constant", beta_power=1.0))
    assert base.fingerprint == same.fingerprint
    assert base.fingerprint != check_phase_config(_cfg(beta_law="log")).fingerprint


@pytest.mark.parametrize("change, words", [
    ({"beta_law": "sqrt"}, ["beta_law"]),
    ({"beta_law": "power", "beta_power": float("nan")}, ["beta_power", "finite"]),
    ({"beta_law": "log_power", "beta_power": -1.0}, ["power must be > 0"]),
    ({"beta_law": "log", "normalisation": "mean"}, ["beta_law", "softmax"]),
])
def test_bad_laws_refused_before_the_folder(tmp_path, change, words):
    with pytest.raises(InputError) as err:
        run_phase(_cfg(**change), tmp_path / "out")
    assert all(w in str(err.value) for w in words), str(err.value)
    assert not (tmp_path / "out").exists()


def test_mix_ln_runs_in_the_phase_job_and_its_switch_matters(tmp_path):
    """dynamics = "mixln" with its ln_switch: post-LN (on the sphere) until the switch, pre-LN after; a switch at
    the end of the run is the post-LN sphere run, system by system."""
    base = dict(beta=[1.0, 3.0], n=[8], systems=3, t1=1.0, checkpoints=4)
    late = ensemble(_cfg(dynamics="mixln", ln_switch=5.0, **base))
    early = ensemble(_cfg(dynamics="mixln", ln_switch=0.0, **base))
    sphere = ensemble(_cfg(dynamics="sphere", v_ensemble="identity", qk_ensemble="identity", **base))
    # tangent Euler steps against the sphere's renormalised ones: the norms drift by O(dt^2) a layer, so the
    # directions agree to about layers x dt^2 x |v|^2 / 2 (10 layers of 0.1 here: 5e-4 at most)
    np.testing.assert_allclose(late["ip_mean"], sphere["ip_mean"], rtol=0, atol=5e-4)
    assert np.abs(early["ip_mean"] - late["ip_mean"]).max() > 1e-2
    with pytest.raises(InputError, match="ln_switch"):
        check_phase_config(_cfg(dynamics="mixln", ln_switch=-1.0))
