"""The mean-field limit at its edges: rough PDE starts, the step-size bound, the joint growth window, the
margin of the fastest mode, the job's size check and resumed progress, float64 kept, the gallery example's
resolved headline."""

from __future__ import annotations

import csv
import importlib.util
import math
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import iv

from attnflow.errors import InputError
from attnflow.meanfield import (circle_grid, growth_rates, load_meanfield_config, most_unstable_mode, run_meanfield,
                                solve_continuity)
from attnflow.meanfield._linear import fit_growth_rates
from attnflow.meanfield._pde import RK4_IMAGINARY_BOUND, circle_velocity, interpolate_density, kept_modes
from attnflow.meanfield._study import draw_from_density
from attnflow.meanfield._run import check_meanfield_sizes

ROOT = Path(__file__).resolve().parents[1]


def _rough_start(G=32):
    theta = circle_grid(G)
    return (1 + 0.5 * jnp.cos(theta) + 1e-3 * jnp.cos(14 * theta)) / (2 * np.pi)


def test_content_above_the_kept_modes_is_removed_from_the_start_and_reported(x64_here):
    rho0 = _rough_start()
    ts = jnp.array([0.0, 1.0, 3.0])
    path = solve_continuity(rho0, 1.0, ts, dt=0.01)
    high = np.abs(np.fft.rfft(np.asarray(path.density), axis=1))[:, kept_modes(32) + 1:]
    # no frozen mode 14 (it was 2.546e-3 = 1e-3 G / (4 pi) at every time): rounding only (values ~ 1e-16)
    assert high.max() < 1e-13, high.max()
    # the removed part's relative L2 norm, by Parseval: (1e-3^2 / 2) / (1 + 0.5^2 / 2 + 1e-3^2 / 2)
    np.testing.assert_allclose(float(path.discarded), math.sqrt(0.5e-6 / (1.125 + 0.5e-6)), rtol=1e-10)
    # the kept modes evolve as from the band-limited start: nothing aliased into them (rounding, 1e-13)
    smooth = solve_continuity((1 + 0.5 * jnp.cos(circle_grid(32))) / (2 * np.pi), 1.0, ts, dt=0.01)
    np.testing.assert_allclose(np.asarray(path.density), np.asarray(smooth.density), atol=1e-13)
    assert float(smooth.discarded) < 1e-15


def test_a_start_above_max_discarded_is_refused_in_one_sentence(x64_here):
    with pytest.raises(InputError, match=r"density0 has 0\.000667 of its L2 norm above the 10 modes"):
        solve_continuity(_rough_start(), 1.0, jnp.array([0.0, 1.0]), dt=0.01, max_discarded=1e-4)
    solve_continuity(_rough_start(), 1.0, jnp.array([0.0, 1.0]), dt=0.01, max_discarded=1e-3)


@pytest.mark.parametrize("normalisation", ["softmax", "mean"])
def test_an_rk4_step_above_the_stability_bound_is_refused_naming_one_that_passes(normalisation, x64_here):
    rho0 = (1 + 0.5 * jnp.cos(circle_grid(64))) / (2 * np.pi)
    vmax = float(jnp.max(jnp.abs(circle_velocity(rho0, 3.0, normalisation))))
    bound = RK4_IMAGINARY_BOUND / (vmax * kept_modes(64))
    ts = jnp.array([0.0, 4 * bound])
    with pytest.raises(InputError) as err:
        solve_continuity(rho0, 3.0, ts, dt=2 * bound, normalisation=normalisation)
    message = str(err.value)
    assert "dt = " in message and "2.83" in message and ". " not in message  # one sentence
    suggested = float(re.search(r"use dt <= ([0-9.e+-]+)", message).group(1))
    assert suggested == pytest.approx(bound, rel=1e-3)  # 4 significant digits in the message
    path = solve_continuity(rho0, 3.0, ts, dt=suggested, normalisation=normalisation)
    assert bool(jnp.all(jnp.isfinite(path.density)))
    with pytest.raises(InputError, match="steps_per_save"):  # the same bound for the step ts / steps_per_save
        solve_continuity(rho0, 3.0, ts, steps_per_save=2, normalisation=normalisation)


def test_the_growth_window_ends_for_every_mode_when_the_largest_passes_the_bound():
    ts = np.linspace(0.0, 8.0, 161)
    fast = 1e-6 * np.exp(2.0 * ts)
    # a slow mode at rate 0.5, driven quadratically by the fast one (as rho v drives 2k from k) once it is large
    slow = 1e-6 * np.exp(0.5 * ts) + 1e-4 * fast**2
    joint = fit_growth_rates(ts, np.stack([fast, slow], 1), max_amplitude=1e-3)
    # inside the joint window the driven part is at most 1e-10 against 5.6e-6: rate 0.5 to 2e-5
    np.testing.assert_allclose(joint["rate"], [2.0, 0.5], rtol=1e-4)
    assert joint["points"].tolist() == [70, 70]
    own = fit_growth_rates(ts, np.stack([fast, slow], 1), max_amplitude=1e-3, window="own")
    assert own["rate"][1] > 0.6  # its own window runs deep into the driven regime


def test_mode_growth_of_the_pde_matches_the_linear_rates_at_every_mode():
    """softmax, beta = 8 (k* = 4), modes 1..8 with amplitude epsilon / 2 = 5e-5 and random phases, saved over
    the job's 1.5 x the fastest mode's linear time: with the joint window every mode with lambda_k >= 0.4
    lambda_max (k = 2..7) is fitted within 6% of lambda_k (k = 7 measured -4%: at 0.41 lambda_max the square of
    mode 4, driven at 2 lambda_4, has reached it by the window's end; k = 2..6 within 0.2%); each mode's own
    window put k = 7 at +39% in the job's run."""
    with jax.enable_x64(True):
        beta, modes, eps, amax, G = 8.0, 8, 1e-4, 0.01, 64
        lam = np.asarray(growth_rates(beta, modes))[1:]
        t_lin = 1.5 * math.log(2 * amax / eps) / lam.max()
        ts = np.linspace(0.0, t_lin, 81)
        phases = np.random.default_rng(3).uniform(0, 2 * np.pi, modes)
        theta, k = np.asarray(circle_grid(G)), np.arange(1, modes + 1)
        rho0 = (1 + eps * np.cos(k * (theta[:, None] - phases)).sum(1)) / (2 * np.pi)
        path = solve_continuity(jnp.asarray(rho0), beta, jnp.asarray(ts), dt=min(0.05 / lam.max(), ts[1]))
        amps = np.abs(np.fft.rfft(np.asarray(path.density), axis=1))[:, 1:modes + 1]
    fit = fit_growth_rates(ts, amps, max_amplitude=amax * G / (2 * np.pi))  # rfft scale: G / 2pi per |mu_k|
    fair = lam >= 0.4 * lam.max()
    assert fair.tolist() == [False] + [True] * 6 + [False]
    assert np.all(np.abs(fit["rate"][fair] / lam[fair] - 1) < 0.06), fit["rate"] / lam - 1


def test_the_fastest_mode_comes_with_its_runner_up_and_margin():
    fast = most_unstable_mode(6.0)
    lam = [k * k * iv(k, 6.0) for k in (3, 4)]
    assert (int(fast), int(fast.k), int(fast.runner_up)) == (3, 3, 4)
    assert float(fast.margin) == pytest.approx((lam[0] - lam[1]) / lam[0], rel=1e-5)  # float32 Bessel modes
    assert 0.015 < float(fast.margin) < 0.02  # modes 3 and 4 within 2%
    assert float(most_unstable_mode(2.0).margin) > 0.3


def _tiny() -> dict:
    cfg = load_meanfield_config(None)
    cfg["normalisations"] = ["softmax"]
    cfg["convergence"].update(n=[64, 128], seeds=2, times=[0.0, 0.5], frames=2, grid=32, pde_dt=0.01)
    cfg["growth"].update(beta=[6.0], n=128, seeds=1, modes=4, saves=11, grid=32)
    cfg["largest"].update(n=256, layers=1)
    return cfg


@pytest.mark.parametrize("section, values", [("convergence", [64, 10**12]), ("growth", 10**12),
                                             ("largest", 10**12)])
def test_a_count_that_cannot_fit_is_refused_before_any_unit_runs(section, values, tmp_path):
    cfg = _tiny()
    cfg[section]["n"] = values
    with pytest.raises(InputError, match=rf"{section}\.n = 1000000000000\) needs about .* lower {section}\.n to "
                                         r"at most about \d+\."):
        run_meanfield(cfg, tmp_path / "never", progress=False)
    assert not (tmp_path / "never").exists()  # refused before the folder is claimed


def test_the_named_largest_count_fits(monkeypatch):
    monkeypatch.setenv("ATTNFLOW_MEMORY_LIMIT", "2e9")
    cfg = _tiny()
    cfg["largest"]["n"] = 10**9
    with pytest.raises(InputError) as err:
        check_meanfield_sizes(cfg)
    most = int(re.search(r"at most about (\d+)", str(err.value)).group(1))
    cfg["largest"]["n"] = most
    assert check_meanfield_sizes(cfg)["units"] == 1 + 2 * 2 + 2 + 1  # it fits now
    cfg["largest"]["n"] = int(most * 1.01)
    with pytest.raises(InputError):
        check_meanfield_sizes(cfg)


def test_a_resumed_run_starts_its_bar_at_the_units_kept_and_reports_the_margin(tmp_path, capsys):
    out = tmp_path / "mf"
    first = run_meanfield(_tiny(), out, progress=False, figures=False)
    total = first["planned"]["units"]
    assert first["units_computed"] == total == 8
    (out / "units" / "softmax-growth-b0-s0-pde.npz").unlink()
    capsys.readouterr()
    again = run_meanfield(_tiny(), out, progress=True, figures=False)
    assert again["units_computed"] == 1 and again["units_resumed"] == total - 1
    bar = capsys.readouterr().err
    assert f"{total - 1}/{total}" in bar and f" 0/{total}" not in bar, bar
    with open(out / "growth.csv") as f:
        row = next(csv.DictReader(f))
    assert (row["k_star"], row["k_star_runner_up"]) == ("3", "4")
    assert float(row["k_star_margin"]) == pytest.approx(float(most_unstable_mode(6.0).margin), rel=1e-5)
    assert "| softmax | 6 | 3 | 4 (1.9%) |" in (out / "report.md").read_text()


def test_float64_input_is_computed_in_float64_with_float64_mode_off():
    assert not jax.config.jax_enable_x64
    theta = 2 * np.pi * np.arange(32) / 32
    rho0 = (1 + 0.3 * np.cos(theta) + 1e-9 * np.cos(2 * theta)) / (2 * np.pi)  # 1e-9: below float32's rounding
    path = solve_continuity(rho0, 2.0, np.array([0.0, 0.5]), dt=0.05)
    assert path.density.dtype == np.float64 and path.mass.dtype == np.float64
    mode2 = np.abs(np.fft.rfft(np.asarray(path.density[0])))[2]
    assert mode2 == pytest.approx(1e-9 * 16 / (2 * np.pi), rel=1e-5)  # kept, not lost to float32
    assert circle_velocity(rho0, 2.0).dtype == np.float64
    assert interpolate_density(rho0, 64).dtype == np.float64
    assert draw_from_density(jax.random.key(0), rho0, 16).dtype == np.float64
    assert solve_continuity(rho0.astype(np.float32), 2.0, np.array([0.0, 0.5], np.float32),
                            dt=0.05).density.dtype == np.float32


def test_gallery_example_09_stops_where_the_pde_is_resolved(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("example_09", ROOT / "examples" / "09_mean_field_density.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    # past the clusters' formation (t about 8 at beta = 4): the G = 128 solution goes negative before t = 10
    example.SIZES["edge"] = dict(n=400, bins=32, grid=128, t1=10.0, frames=11)
    example.main("edge", tmp_path)
    line = capsys.readouterr().out
    t_end = float(re.search(r"at t = ([0-9.]+)", line).group(1))
    assert "no longer resolved" not in line and t_end < 10.0
    with jax.enable_x64(True):
        _, phases = example.near_uniform_start(400, example.MODES, example.EPSILON, np.random.default_rng(0))
        grid, k = (2 * np.pi / 128) * np.arange(128), np.arange(1, example.MODES + 1)
        rho0 = (1 + example.EPSILON * np.cos(k * (grid[:, None] - phases)).sum(1)) / (2 * np.pi)
        pde = solve_continuity(jnp.asarray(rho0), example.BETA, jnp.linspace(0.0, 10.0, 11), dt=0.01)
    low = np.minimum.accumulate(np.asarray(pde.min_density))
    at = round(t_end)  # saves every 1.0
    assert low[at] >= 0 and low[at + 1] < 0  # the last saved time the PDE resolves


def _continuity_case(name: str):
    """(solver, start, the path's field to compare) of the circle's or the sphere's continuity equation."""
    from attnflow.meanfield import perturbed_uniform_sphere_density, solve_sphere_continuity

    if name == "sphere":
        return solve_sphere_continuity, perturbed_uniform_sphere_density(4, 2, 0.2), "coefficients"
    theta = circle_grid(32)
    wobble = 0.1 * np.random.default_rng(11).standard_normal()
    return solve_continuity, (1 + 0.3 * jnp.cos(theta) + wobble * jnp.sin(2 * theta)) / (2 * jnp.pi), "density"


@pytest.mark.parametrize("case", ["circle", "sphere"])
def test_rk4_steps_between_saves_one_rule_for_both_continuity_solvers(case):
    # dt = 0.3 over the longest interval 1.0 needs ceil(1/0.3) = 4 steps: the same solve, bit for bit, as
    # steps_per_save=4, and not as 3 (the rule's floor) or 5; a missing step and a single save time are
    # refused in the same sentence on the circle and on S^2
    solve, start, key = _continuity_case(case)
    ts = jnp.array([0.0, 0.5, 1.5])
    by_dt = np.asarray(getattr(solve(start, 2.0, ts, dt=0.3), key))
    np.testing.assert_array_equal(by_dt, np.asarray(getattr(solve(start, 2.0, ts, steps_per_save=4), key)))
    for other in (3, 5):
        assert not np.array_equal(by_dt, np.asarray(getattr(solve(start, 2.0, ts, steps_per_save=other), key)))
    with pytest.raises(InputError, match=r"^solver='rk4' needs steps_per_save \(an int\), or a concrete dt"):
        solve(start, 2.0, ts)
    with pytest.raises(InputError, match=r"^ts must hold at least two times"):
        solve(start, 2.0, jnp.array([0.0]), dt=0.1)
