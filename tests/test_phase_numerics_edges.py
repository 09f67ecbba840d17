"""The phase job's numerics at their edges: the equiangular time at extreme beta, the Funk--Hecke modes of the
sphere kernel for every degree, the 1/n normalisation's step at large beta, and the config's refusals."""

import math

import mpmath
import numpy as np
import pytest

from attnflow import InputError

mpmath.mp.dps = 60  # the references: 60 digits, far beyond the float64 results they check


# ---------------------------------------------------------------- the equiangular time

def _equiangular_reference(rho0, threshold, beta, n, normalisation):
    """T from the Ei closed form in 60-digit arithmetic (mpmath's Ei and exponentials have no overflow or
    underflow, and the difference of its O(e^beta) terms keeps 40 digits or more)."""
    m = n - 1
    b = mpmath.mpf(beta)

    def F(rho):
        rho = mpmath.mpf(rho)
        w = 1 + m * rho
        if normalisation == "softmax":
            return ((-mpmath.ei(b * (1 - rho)) + mpmath.exp(b * n / m) * mpmath.ei(-b * w / m)) / (2 * n)
                    + m * (mpmath.log(w) - mpmath.log(1 - rho)) / (2 * n))
        return (-mpmath.exp(-b) * mpmath.ei(b * (1 - rho)) + mpmath.exp(b / m) * mpmath.ei(-b * w / m)) / 2

    return F(threshold) - F(rho0)


def _compare(got, want):
    """Relative error of a float64 time against a reference beyond the float64 range: inf exactly where the
    reference exceeds the largest float, 0 where it is below the smallest normal (then nothing to compare)."""
    if want > mpmath.mpf(np.finfo(float).max):
        assert got == math.inf
        return 0.0
    if want < mpmath.mpf(np.finfo(float).tiny):
        assert 0.0 <= got < 1e-300
        return 0.0
    assert math.isfinite(got) and got > 0
    return abs(float((mpmath.mpf(got) - want) / want))


@pytest.mark.parametrize("normalisation", ["softmax", "mean"])
def test_equiangular_time_against_60_digits_up_to_beta_1000(normalisation):
    """Random (rho0, threshold, n) at beta from 1e-3 to 1000, n = 2 (the case whose closed form underflowed or
    overflowed) and larger n: relative 1e-12 (the log-space form rounds ~10 operations of 1e-16 each, times the
    condition of the difference of G, at most 1e4 by construction; the measured worst on 800 cases is 2e-13)."""
    from attnflow.phase import equiangular_time

    rng = np.random.default_rng(3)
    betas = np.concatenate([[500.0, 700.0, 800.0, 1000.0], 10.0 ** rng.uniform(-3, 3, 36)])
    worst = 0.0
    for k, beta in enumerate(betas):
        n = 2 if k % 2 == 0 else int(rng.integers(3, 100))
        threshold = float(rng.choice([0.9, 0.999, rng.uniform(0.0, 0.9999)]))
        rho0 = float(rng.uniform(-1.0 / (n - 1) + 1e-3, threshold - 1e-3))
        got = equiangular_time(rho0, threshold, float(beta), n, normalisation)
        want = _equiangular_reference(rho0, threshold, float(beta), n, normalisation)
        worst = max(worst, _compare(got, want))
    assert worst < 1e-12, worst


def test_equiangular_time_beyond_the_float_range_is_inf_and_below_keeps_its_digits():
    """The cases of the report: softmax n = 2 from rho0 = 0 to 0.999 takes about 1.7e344 at beta = 800 (inf,
    not ZeroDivisionError), 7.2e300 at beta = 700 (finite); the 1/n normalisation at n = 2, beta = 500..1000
    from rho0 = 0.5 (where e^{beta/m} Ei(-beta w/m) underflowed) keeps 1e-12."""
    from attnflow.phase import equiangular_time

    assert equiangular_time(0.0, 0.999, 800.0, 2) == math.inf
    assert equiangular_time(0.0, 0.999, 1000.0, 2) == math.inf
    want = _equiangular_reference(0.0, 0.999, 700.0, 2, "softmax")
    assert _compare(equiangular_time(0.0, 0.999, 700.0, 2), want) < 1e-12
    for beta in (500.0, 600.0, 800.0, 1000.0):
        for rho0 in (0.3, 0.5):
            got = equiangular_time(rho0, 0.999, beta, 2, "mean")
            assert _compare(got, _equiangular_reference(rho0, 0.999, beta, 2, "mean")) < 1e-12, (beta, rho0, got)


def test_equiangular_time_short_intervals_and_refusals():
    """An interval much shorter than 1/beta (the closed form's difference cancels) against the reference, and
    bad arguments refused with one sentence naming them."""
    from attnflow.phase import equiangular_time

    for beta, rho0, threshold in ((2.0, 0.3, 0.3 + 1e-7), (400.0, 0.5, 0.5 + 1e-6), (0.01, -0.2, -0.2 + 1e-9)):
        for normalisation in ("softmax", "mean"):
            got = equiangular_time(rho0, threshold, beta, 5, normalisation)
            assert _compare(got, _equiangular_reference(rho0, threshold, beta, 5, normalisation)) < 1e-11
    for args, word in (((0.0, 0.9, -1.0, 4), "beta"), ((0.0, 0.9, 1.0, 1), "n"), ((0.0, 1.0, 1.0, 4), "threshold"),
                       ((0.0, 0.9, math.inf, 4), "beta")):
        with pytest.raises(InputError, match=word):
            equiangular_time(*args)
    assert math.isnan(equiangular_time(float("nan"), 0.9, 1.0, 4))


# ---------------------------------------------------------------- the Funk--Hecke modes of the sphere kernel

def _kernel_mode_reference(beta, d, max_degree):
    lam = mpmath.mpf(d) / 2 - 1
    b = mpmath.mpf(beta)
    return [mpmath.gamma(mpmath.mpf(d) / 2) * (2 / b) ** lam * mpmath.besseli(l + lam, b) * mpmath.exp(-b)
            for l in range(max_degree + 1)]


@pytest.mark.usefixtures("x64_here")
@pytest.mark.parametrize("d", [2, 3, 5])
def test_sphere_kernel_modes_have_a_relative_error_of_a_few_roundings_for_every_degree(d):
    """k_l = K_l e^{-beta} against 60-digit Bessel functions, l = 0..40, beta from 1e-3 to 1024: every mode,
    however small against k_0 (down to 1e-200), within 4e-15 relative, the bound the docstring states (the
    recurrence and the cumulative product round about l + 10 times; the measured worst is 3e-15)."""
    from attnflow.meanfield._linear import sphere_kernel_modes

    rng = np.random.default_rng(d)
    for beta in np.concatenate([[1e-3, 1.0, 64.0, 1024.0], 10.0 ** rng.uniform(-3, 3, 4)]):
        got = np.asarray(sphere_kernel_modes(float(beta), d, 40))
        want = _kernel_mode_reference(float(beta), d, 40)
        rel = [abs(float((mpmath.mpf(float(g)) - w) / w)) for g, w in zip(got, want)]
        assert max(rel) < 4e-15, (beta, int(np.argmax(rel)), max(rel))


@pytest.mark.usefixtures("x64_here")
def test_sphere_kernel_modes_traced_beta_and_its_bound():
    """Under jit the recurrence's depth is that of beta_max: the same numbers as a concrete beta below it, NaN
    above it; the gradient in beta is d/dbeta (I_l(beta) e^{-beta}) = (I_{l-1} + I_{l+1})/2 e^{-beta} - k_l."""
    import jax
    from scipy.special import ive

    from attnflow.meanfield._linear import sphere_kernel_modes

    jitted = jax.jit(lambda b: sphere_kernel_modes(b, 2, 6, beta_max=64.0))
    np.testing.assert_allclose(jitted(20.0), np.asarray(sphere_kernel_modes(20.0, 2, 6)), rtol=1e-14)
    np.testing.assert_allclose(jitted(20.0), ive(np.arange(7), 20.0), rtol=1e-14)
    assert np.all(np.isnan(np.asarray(jitted(65.0))))
    grad = jax.grad(lambda b: sphere_kernel_modes(b, 2, 3)[2])(3.0)
    assert float(grad) == pytest.approx((ive(1, 3.0) + ive(3, 3.0)) / 2 - ive(2, 3.0), rel=1e-12)


# ---------------------------------------------------------------- the 1/n normalisation's step

def _small_phase(**changes):
    from attnflow.phase import load_phase_config

    cfg = load_phase_config(None)
    cfg.update(beta=[1.0, 6.0, 9.0], d=2, n=8, systems=2, t1=1.0, dt=0.1, checkpoints=4, normalisation="mean")
    cfg["run"]["progress"] = False
    cfg.update(changes)
    return cfg


def test_step_scale_bounds_the_rescaled_pull_by_one():
    """A token at angle theta pulls with e^{beta cos theta} sin theta under the 1/n normalisation; divided by
    s(beta) = max(sqrt(beta) e^{beta - 1/2}, 1) the largest pull is at most 1.2214 (at beta = 0.687, where s
    leaves 1) and about 1/beta beyond, for beta in [1e-3, 700]: like the softmax field's pull (at most 1), a
    layer of dt moves a token by about dt at most. Unscaled, the pull at beta = 9 is 1.6e3 (160 rad at dt = 0.1).
    The grid of 2e5 angles resolves the maximum to 1e-10 relative."""
    from attnflow.phase import step_scale

    theta = np.linspace(0.0, np.pi, 200001)
    for beta in np.geomspace(1e-3, 700.0, 40):
        pull = np.exp(beta * (np.cos(theta) - 1.0) + np.log(np.sin(theta) + 1e-300)).max()  # e^{-beta} times it
        ratio = pull * math.exp(beta) / step_scale(beta)
        assert 0.5 / max(beta, 1.0) < ratio <= 1.222, (beta, ratio)
    assert step_scale(9.0, "softmax") == 1.0 and step_scale(800.0) == math.inf


@pytest.mark.usefixtures("x64_here")
@pytest.mark.parametrize("weights", ["identity", "spd"])
def test_mean_normalisation_steps_the_rescaled_flow(weights):
    """Every (beta, system) of a chunk with normalisation = "mean" against its own run of the public pieces: the
    sphere field with V / s(beta) (the 1/n weights do not involve V, so that is f / s exactly), Euler layers of
    dt, statistics at the checkpoint layers. Q = K = V = I (the job's log-space path) and Q^T K drawn (the
    general field). rtol 1e-9: the same arithmetic in another order, over 10 layers of a contracting flow."""
    import jax
    import jax.numpy as jnp

    from attnflow.dynamics import normalise, sphere_flow
    from attnflow.ensembles import system_seeds, token_key
    from attnflow.integrate import EulerStepper, sphere_shift
    from attnflow.phase import check_phase_config, statistics, step_scale
    from attnflow.phase._engine import make_chunk_fn
    from attnflow.phase._engine import _weights
    from attnflow.runs import make_mesh

    config = check_phase_config(_small_phase(qk_ensemble=weights, beta=[1.0, 9.0], systems=1))
    group = config.groups[0]
    cols = make_chunk_fn(config, group, make_mesh())(0, 2)
    seeds = system_seeds(config.seed, group.label, 0, config.systems)
    Q, K, V = (np.asarray(w) for w in _weights(config, group, np.arange(config.systems)))
    for k in range(2):
        b, s = int(cols["beta_index"][k]), int(cols["system"][k])
        beta = config.beta[b]
        x0 = normalise(jax.random.normal(token_key(seeds[s]), (8, 2), jnp.float64) / jnp.sqrt(2.0))
        field = sphere_flow(Q[s], K[s], V[s] / step_scale(beta), beta, normalisation="mean")
        traj = EulerStepper(config.dt, config.num_layers, shift=sphere_shift).solve(field, x0)
        for j, layer in enumerate(config.checkpoint_layers):
            for name, value in statistics(traj.ys[layer], beta, config.threshold).items():
                np.testing.assert_allclose(cols[name][k, j], float(value), rtol=1e-9, atol=1e-12,
                                           err_msg=f"{weights}: {name} of beta = {beta}, system {s}, layer {layer}")
    assert cols["finite"].all()


@pytest.mark.usefixtures("x64_here")
def test_mean_normalisation_runs_beyond_the_float_range_of_e_beta():
    """With Q = K = V = I the rescaled 1/n field is the softmax layer times r_i e^{beta - log s}/n: the state
    stays finite at beta = 800, where e^beta overflows float64 (the unscaled 1/n attention is inf there). The
    energy E_beta ~ e^beta / (2 beta) itself exceeds float64 there, so the run is reported non-finite by it."""
    from attnflow.phase import check_phase_config
    from attnflow.phase._engine import make_chunk_fn
    from attnflow.runs import make_mesh

    config = check_phase_config(_small_phase(beta=[800.0], t1=0.5, checkpoints=3))
    cols = make_chunk_fn(config, config.groups[0], make_mesh())(0, 2)
    assert np.all(np.isinf(cols["t_nonfinite"]))  # no state became non-finite
    for name in ("pairs_clustered", "clusters", "span", "ip_min", "ip_mean", "ip_max"):
        assert np.all(np.isfinite(cols[name])), name
    assert np.all(np.isinf(cols["energy"])) and not cols["finite"].any()


def test_mean_normalisation_converges_to_its_flow_with_order_one():
    """sphere_convergence measures the job's layers of f / s(beta) against that flow: order 1 at beta = 1 and 6
    ([0.9, 1.1] as for the softmax; unscaled, beta = 6 at dt = 0.04 steps up to 0.9 rad and the ladder is not
    in its asymptotic range)."""
    import jax

    from attnflow.phase import convergence_order, sphere_convergence

    with jax.enable_x64(True):
        x0 = np.random.default_rng(5).standard_normal((2, 8, 2))
        r = sphere_convergence(x0, [1.0, 6.0], 1.0, [0.04, 0.02, 0.01], normalisation="mean")
    for s in range(2):
        fit = convergence_order(r["dt"], r["error"][s])
        assert 0.9 <= fit["order"] <= 1.1, (s, r["error"][s], fit)


def test_mean_run_reports_its_time_scale_and_effective_step(tmp_path):
    """summary.json records s(beta) and dt / s(beta) per beta, report.md says that its times are the rescaled
    flow's, and the theory line is in the same rescaled time."""
    import json

    from attnflow.phase import equiangular_time, run_phase, step_scale

    summary = run_phase(_small_phase(beta=[1.0, 6.0], systems=2), tmp_path / "run", figures=False)
    assert summary["step_scale"] == pytest.approx([step_scale(1.0), step_scale(6.0)], rel=1e-15)
    assert summary["effective_dt"] == pytest.approx([0.1 / step_scale(1.0), 0.1 / step_scale(6.0)], rel=1e-15)
    report = (tmp_path / "run" / "report.md").read_text()
    assert "1/n normalisation" in report and "rescaled flow" in report and "effective step" in report
    line = json.loads((tmp_path / "run" / "summary.json").read_text())["theory"]
    (label, theory), = line.items()
    for b, t, rho0 in zip(theory["beta"], theory["t"], theory["rho0"]):
        want = equiangular_time(rho0, 0.999, b, 8, "mean") * step_scale(b)
        assert t == pytest.approx(want, rel=1e-12)


# ---------------------------------------------------------------- the config's edges

@pytest.mark.parametrize("text, words", [
    ("run = 3\n", ["'run'", "table", "int 3"]),
    ('run = "fast"\n', ["'run'", "table", "str"]),
    ("t1 = 2.0\ncheckpoints = 50\n", ["checkpoints = 50", "21 layers", "<= 21"]),
])
def test_phase_config_edges_are_one_sentence_before_the_folder(tmp_path, text, words):
    """A number where the [run] table belongs, and more checkpoints than layers (they were capped in silence),
    are refused with one sentence naming the key, before the run folder exists."""
    from attnflow.phase import load_phase_config, run_phase

    path = tmp_path / "edge.toml"
    path.write_text('kind = "phase"\n' + text)
    with pytest.raises(InputError) as err:
        run_phase(load_phase_config(path), tmp_path / "out")
    message = str(err.value)
    assert all(w in message for w in words), message
    assert message.count(". ") <= 1 and "\n" not in message
    assert not (tmp_path / "out").exists()
