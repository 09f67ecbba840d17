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
    quiet = run_phase(_config(), tmp_path / "quiet", figures=False, dtype_check=False)
    noisy = run_phase(_config(sigma=[0.0, 0.4]), tmp_path / "noisy", figures=False, dtype_check=False)
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


def test_a_sigma_grid_compiles_one_program_and_each_sigma_is_its_own_run(tmp_path, caplog):
    """The noisy groups of a (beta, sigma) grid share one compiled chunk program (sigma is one of its inputs):
    one XLA compilation of it for three sigmas, and each sigma's rows equal those of a run with that sigma
    alone (the shared program reads each group's own strength)."""
    import jax

    grid = (0.2, 0.4, 0.7)
    with jax.log_compiles(True), caplog.at_level("WARNING"):
        run_phase(_config(sigma=list(grid)), tmp_path / "grid", figures=False, dtype_check=False)
    compiled = [r for r in caplog.records if "Finished XLA compilation" in r.getMessage() and "run_pairs" in
                r.getMessage()]
    assert len(compiled) == 1, [r.getMessage() for r in compiled]
    rows = _rows(tmp_path / "grid" / "cells.csv")
    last = {sigma: [r["ip_mean"] for r in rows if float(r["sigma"]) == sigma and float(r["t"]) == 2.0]
            for sigma in grid}
    assert len({tuple(v) for v in last.values()}) == 3  # each sigma moves the tokens its own way
    for sigma in (0.4, 0.7):
        run_phase(_config(sigma=sigma), tmp_path / f"alone{sigma}", figures=False, dtype_check=False)
        alone = _rows(tmp_path / f"alone{sigma}" / "cells.csv")
        assert [r for r in rows if float(r["sigma"]) == sigma] == alone


def test_noise_settings_are_refused_before_any_work():
    with pytest.raises(InputError, match="sigma .* must be a finite number >= 0"):
        check_phase_config(_config(sigma=-0.1))
    with pytest.raises(InputError, match="applies to dynamics = \"sphere\""):
        check_phase_config(_config(sigma=0.5, dynamics="attention"))


def test_the_order_parameter_column_is_the_norm_of_the_mean_direction_and_falls_past_the_critical_noise(tmp_path):
    """cells.csv's order column: |mean of the directions| from the recorded mean inner product (checked on
    random clouds against the norm of the mean); on the circle (softmax, beta = 1) the tokens cluster without
    noise (r near 1 at t = 20) and stay disordered at twice the mean-field threshold sigma_c (r at the
    finite-n floor 1/sqrt(n)), and the report draws r against sigma."""
    from attnflow.meanfield import critical_noise
    from attnflow.phase import order_parameter

    rng = np.random.default_rng(3)
    for n, d in ((5, 2), (40, 3), (200, 7)):
        u = rng.standard_normal((n, d))
        u /= np.linalg.norm(u, axis=1, keepdims=True)
        g = (u @ u.T)[~np.eye(n, dtype=bool)].mean()
        np.testing.assert_allclose(order_parameter(g, n), np.linalg.norm(u.mean(axis=0)), rtol=1e-12)
    sigma_c = float(critical_noise(1.0, 2, normalisation="softmax"))
    cfg = _config(sigma=[0.0, 2 * sigma_c])
    cfg.update(beta=[1.0], n=32, systems=6, t1=20.0)
    summary = run_phase(cfg, tmp_path / "run", figure_workers=0, dtype_check=False)
    rows = [r for r in _rows(tmp_path / "run" / "cells.csv") if float(r["t"]) == 20.0]
    order = {float(r["sigma"]): float(r["order"]) for r in rows}
    assert order[0.0] > 0.9  # one cluster (or nearly) without noise
    assert order[2 * sigma_c] < 2 / np.sqrt(32)  # disordered: at the floor 1/sqrt(n) = 0.18, far below 1
    for r in rows:
        assert 0.0 <= float(r["order_lo"]) <= float(r["order"]) <= float(r["order_hi"]) <= 1.0
    arrays = ensemble(cfg, 1)  # ensemble() gives the per-system order parameter whose mean the table holds
    np.testing.assert_allclose(arrays["order"][0, :, -1].mean(), order[2 * sigma_c], rtol=1e-12)
    assert summary["noise"][0]["sigma"] == [0.0, 2 * sigma_c]
    report = (tmp_path / "run" / "report.md").read_text()
    assert "## Noise: the order parameter" in report and (tmp_path / "run" / "noise_000.png").is_file()
