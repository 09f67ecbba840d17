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
    noisy = run_phase(_config(sigma=[0.0, 0.4]), tmp_path / "noisy", figure_workers=0, dtype_check=False)
    assert quiet["cells"] == 2 and noisy["cells"] == 4 and noisy["sigma"] == [0.0, 0.4]
    a, b = _rows(tmp_path / "quiet" / "cells.csv"), _rows(tmp_path / "noisy" / "cells.csv")
    zero = [r for r in b if float(r["sigma"]) == 0.0]
    assert zero == a  # sigma = 0: the rows of the run without noise, to the last digit
    # a noiseless config keeps the fingerprint it had before the key existed (its folders resume)
    assert check_phase_config(_config()).fingerprint == check_phase_config(_config(sigma=0.0)).fingerprint
    assert check_phase_config(_config(sigma=0.4)).fingerprint != check_phase_config(_config()).fingerprint
    # the same start clouds for every sigma (the table's t = 0 rows), and the noise moves them
    for key in ("ip_max", "ip_mean", "energy"):
        first = [[r[key] for r in rows if float(r["t"]) == 0.0] for rows in (a, [r for r in b if r["sigma"] != "0.0"])]
        assert first[0] == first[1], key
    later = [[float(r["ip_mean"]) for r in rows if float(r["t"]) == 2.0] for rows in (a, [r for r in b if r["sigma"] != "0.0"])]
    assert not np.allclose(later[0], later[1])
    # ensemble() runs a group from Python: the noisy group's arrays are the table's means
    arrays = ensemble(_config(sigma=[0.0, 0.4]), 1)
    table = [float(r["ip_mean"]) for r in b if r["sigma"] != "0.0" and float(r["t"]) == 2.0]
    np.testing.assert_allclose(arrays["ip_mean"][:, :, -1].mean(axis=1), table, rtol=1e-12)


def test_noise_settings_are_refused_before_any_work():
    with pytest.raises(InputError, match="sigma .* must be a finite number >= 0"):
        check_phase_config(_config(sigma=-0.1))
    with pytest.raises(InputError, match="applies to dynamics = \"sphere\""):
        check_phase_config(_config(sigma=0.5, dynamics="attention"))
