"""The phase job's noise key: a diagram over (beta, sigma), the noiseless groups those of a run without the key,
every sigma on the same clouds and Brownian paths, and bad noise refused before any work."""

import csv

import numpy as np
import pytest

from attnflow import InputError
from attnflow.phase import check_phase_config, ensemble, load_phase_config, run_phase


def _config(**extra):
    cfg = load_phase_config(None)
    cfg.update(beta=[1.0, 4.0], d=2, n=8, systems=4, t1=2.0, checkpoints=5, **extra)
    cfg["run"]["progress"] = False
    return cfg


def _rows(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_a_beta_sigma_diagram_keeps_the_noiseless_run_and_shares_clouds_and_paths(tmp_path):
    quiet = run_phase(_config(), tmp_path / "quiet", figure_workers=0, dtype_check=False)
    noisy = run_phase(_config(sigma=[0.0, 0.4, 0.8]), tmp_path / "noisy", figure_workers=0, dtype_check=False)
    assert quiet["cells"] == 2 and noisy["cells"] == 6 and noisy["sigma"] == [0.0, 0.4, 0.8]
    a, b = _rows(tmp_path / "quiet" / "cells.csv"), _rows(tmp_path / "noisy" / "cells.csv")
    zero = [r for r in b if float(r["sigma"]) == 0.0]
    assert zero == a  # sigma = 0: the rows of the run without noise, to the last digit
    # a noiseless config keeps the fingerprint it had before the key existed (its folders resume)
    assert check_phase_config(_config()).fingerprint == check_phase_config(_config(sigma=0.0)).fingerprint
    assert check_phase_config(_config(sigma=0.4)).fingerprint != check_phase_config(_config()).fingerprint
    cfg = _config(sigma=[0.0, 0.4, 0.8])
    groups = [ensemble(cfg, g) for g in range(3)]
    for g in groups[1:]:  # the same start clouds for every sigma ...
        np.testing.assert_array_equal(g["ip_max"][:, :, 0], groups[0]["ip_max"][:, :, 0])
    # ... and the same Brownian path, scaled: the noise moves the clouds, more for a larger sigma
    moved = [float(np.mean(np.abs(g["ip_mean"][:, :, -1] - groups[0]["ip_mean"][:, :, -1]))) for g in groups]
    assert moved[0] == 0.0 < moved[1] < moved[2]


def test_noise_settings_are_refused_before_any_work():
    with pytest.raises(InputError, match="sigma .* must be a finite number >= 0"):
        check_phase_config(_config(sigma=-0.1))
    with pytest.raises(InputError, match="applies to dynamics = \"sphere\""):
        check_phase_config(_config(sigma=0.5, dynamics="attention"))
