"""Noisy particles in the bistable range above beta* (1/n attention, beta = 4): the exact time change of the noisy
flow, the clustered and the uniform branch at finite n, and the argument checks of the functions that measure them.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnflow.dynamics import IdentitySphereFlow
from attnflow.errors import InputError
from attnflow.integrate import EulerMaruyamaStepper, TokenNoise, sphere_shift
from attnflow.meanfield import particle_escape_times, stationary_clustered_state, time_rescaled_noise

BETA = 4.0


def _cloud(n, d, seed):
    x = jax.random.normal(jax.random.key(seed), (n, d))
    return x / jnp.linalg.norm(x, axis=1, keepdims=True)


@pytest.mark.parametrize("d", [2, 3])
def test_the_time_change_is_exact_layer_by_layer(d):
    """The 1/n field divided by s = e^beta, stepped by h with noise sigma / sqrt(s), is the 1/n field stepped by h / s
    with noise sigma, on the same key: the same layers to float32 rounding (each adds h f / s + sigma sqrt(h / s) xi_k).
    A noise scaled as sigma / s (or not at all) leaves them apart by the noise's size."""
    x0, key, sigma, h, layers = _cloud(48, d, 0), jax.random.key(7), 2.0, 0.1, 40
    scaled = IdentitySphereFlow(BETA, normalisation="mean", log_scale=BETA, attention_impl="dense")
    plain = IdentitySphereFlow(BETA, normalisation="mean", attention_impl="dense")
    run = lambda field, step, s: EulerMaruyamaStepper(step, layers, noise=TokenNoise(s, key, sphere=True),
                                                      shift=sphere_shift, save_every=1).solve(field, x0).ys
    a = run(scaled, h, time_rescaled_noise(sigma, BETA))
    b = run(plain, h * math.exp(-BETA), sigma)
    gap = float(jnp.max(jnp.abs(a - b)))
    assert gap < 2e-4, gap
    for wrong in (sigma * math.exp(-BETA), sigma):  # the exponent 1, or no rescaling of the noise
        c = run(scaled, h, wrong)
        assert float(jnp.max(jnp.abs(c - b))) > 0.1
    assert float(time_rescaled_noise(sigma, BETA)) == pytest.approx(sigma * math.exp(-BETA / 2), rel=1e-6)


def test_the_circle_paths_of_the_escape_study_agree():
    """particle_escape_times on the circle: the Fourier path (the 1/n field in the PDE's time, steps dt e^-beta,
    noise sigma) and the dense one (the field divided by e^beta, steps dt, noise sigma e^(-beta/2)) give the same
    order parameter, reading by reading, for the same seed."""
    common = dict(start="uniform", threshold=0.9, systems=2, t1=6.0, dt=0.1, burn=1.0, save_every=5, seed=3)
    fourier = particle_escape_times(BETA, 1.1, 40, attention_impl="fourier", **common)
    dense = particle_escape_times(BETA, 1.1, 40, attention_impl="dense", **common)
    assert fourier["nonfinite"] == dense["nonfinite"] == 0
    assert np.max(np.abs(fourier["r"] - dense["r"])) < 2e-4, (fourier["r"], dense["r"])
    assert dense["sigma_rescaled"] == pytest.approx(dense["sigma"] * math.exp(-BETA / 2), rel=1e-6)


@pytest.fixture(scope="module")
def circle_state():
    return stationary_clustered_state(BETA, 1.02, d=2)


def test_the_clustered_and_the_uniform_branch_both_hold_at_large_n(circle_state):
    """Circle, beta = 4 > beta*(2), sigma = 1.02 sigma_c (in the PDE's bistable range), n = 1000: the clouds drawn
    from the PDE's clustered state stay clustered over tau = 60 at the PDE's order parameter (0.695), and the
    uniform clouds stay disordered: two stable branches at the same sigma. Without noise the clustered cloud
    sharpens (r -> 1); with beta below beta* there is no clustered state to start from."""
    assert circle_state["ordered"] and abs(circle_state["r"] - 0.695) < 0.01, circle_state["r"]
    common = dict(systems=3, t1=60.0, dt=0.1, burn=20.0, clustered=circle_state, seed=1)
    clu = particle_escape_times(BETA, 1.02, 1000, start="clustered", **common)
    uni = particle_escape_times(BETA, 1.02, 1000, start="uniform", **common)
    assert clu["nonfinite"] == uni["nonfinite"] == 0
    assert clu["events"] == 0 and uni["events"] == 0, (clu["lifetime"], uni["lifetime"])
    assert abs(clu["branch_r"][0] - circle_state["r"]) < 0.04, clu["branch_r"]
    assert uni["branch_r"][0] < 0.15, uni["branch_r"]
    assert clu["threshold"] == pytest.approx(circle_state["r"] / 2)


def test_the_clustered_branch_on_the_sphere_holds_at_the_pdes_order_parameter():
    """S^2, beta = 4 > beta*(3), sigma = 1.1 sigma_c: 300 particles drawn from the PDE's clustered state keep its order
    parameter over tau = 40 (no escape), and a uniform cloud stays disordered."""
    state = stationary_clustered_state(BETA, 1.1, d=3, resolution=12, t1=40.0, dt=0.01)
    assert state["ordered"] and 0.8 < state["r"] < 0.9, state["r"]
    common = dict(d=3, systems=2, t1=40.0, dt=0.1, burn=10.0, clustered=state, seed=2)
    clu = particle_escape_times(BETA, 1.1, 300, start="clustered", **common)
    uni = particle_escape_times(BETA, 1.1, 300, start="uniform", **common)
    assert clu["events"] == 0 and uni["events"] == 0
    assert abs(clu["branch_r"][0] - state["r"]) < 0.04, (clu["branch_r"], state["r"])
    assert uni["branch_r"][0] < 0.2, uni["branch_r"]


def test_a_small_cloud_escapes_and_the_statistics_count_it():
    """At n = 10 the barrier is of order one: clustered clouds on the circle at 1.02 sigma_c melt within tau = 300.
    The lifetimes are the first readings below the threshold, the censored ones end at t1, and the Kaplan-Meier curve
    and the exponential mean count the same events."""
    out = particle_escape_times(BETA, 1.02, 10, systems=8, t1=300.0, dt=0.1, burn=0.0, seed=0)
    life, cen = out["lifetime"], out["censored"]
    assert out["events"] == int((~cen).sum()) >= 4, life
    assert np.all(life[cen] == out["times"][-1])
    for row, end, kept in zip(out["r"], life, cen):
        below = row < out["threshold"]
        assert kept == (not below.any())
        if not kept:
            assert out["times"][np.argmax(below)] == end
    assert out["mean_lifetime"][0] == pytest.approx(life.sum() / out["events"])
    assert out["mean_lifetime"][1] < out["mean_lifetime"][0] < out["mean_lifetime"][2]
    assert out["km"][1][-1] == pytest.approx(out["surviving"][0]) or out["surviving"][0] == 0


@pytest.mark.parametrize("call, message", [
    (lambda: particle_escape_times(4.0, 1.02, 50, d=4), "d must be 2"),
    (lambda: particle_escape_times(4.0, 1.02, 50, start="middle"), "start must be"),
    (lambda: particle_escape_times(4.0, 1.1, 50, d=3, attention_impl="fourier", start="uniform", threshold=0.4),
     "attention_impl='fourier' is the circle's path"),
    (lambda: particle_escape_times(4.0, 1.02, 50, threshold=1.5, start="uniform"), "threshold must be"),
    (lambda: particle_escape_times(4.0, 1.02, 50, start="uniform", threshold=0.4, t1=1.0, dt=0.1, burn=0.0,
                                   save_every=20),
     "save_every = 20 is more than"),
    (lambda: particle_escape_times(4.0, 1.02, 1, start="uniform", threshold=0.4), "n must be"),
    (lambda: particle_escape_times(-4.0, 1.02, 50), "beta must be"),
    (lambda: particle_escape_times(4.0, -1.0, 50), "sigma_ratio must be"),
    (lambda: particle_escape_times(4.0, 1.02, 50, clustered={"d": 3, "beta": 4.0, "ratio": 1.02, "r": 0.7}),
     "clustered must be the stationary_clustered_state"),
    (lambda: particle_escape_times(4.0, 1.3, 50, start="uniform"), "the mean field has no stationary clustered"),
    (lambda: stationary_clustered_state(4.0, 1.02, d=1), "d must be 2"),
    (lambda: stationary_clustered_state(4.0, 1.02, kappa=-1.0), "kappa must be"),
    (lambda: time_rescaled_noise(1.0, float("nan")), "log_scale must be"),
])
def test_bad_input_is_refused_in_one_sentence(call, message):
    with pytest.raises(InputError, match=message) as info:
        call()
    text = str(info.value)
    assert text.endswith(".") and text.count(". ") == 0, text
