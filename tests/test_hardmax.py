"""The hardmax limit (beta = infinity), finite beta up to 4000 in float64, and the energy staircase's jump count.

Every check compares with an independent computation: a brute-force numpy argmax step, a numpy log-sum-exp
field, the closed form of a follower's straight line to its leader, the softmax field at growing beta.
"""

import math

import jax.numpy as jnp
import numpy as np
import pytest

from attnflow import InputError
from attnflow.dynamics import HardmaxFlow, IdentitySphereFlow, normalise, sphere_flow
from attnflow.fields import build_field
from attnflow.integrate import EulerStepper, sphere_shift

pytestmark = pytest.mark.usefixtures("x64")


def _numpy_hardmax_step(x, Q, K, V, dt, *, sphere=False, centred=False):
    """One Euler step of the hardmax field, by brute force: for each i the exact argmax set of the float64
    scores (ties compared with a relative 1e-12), uniform weights on it."""
    s = (x @ Q.T) @ (x @ K.T).T
    out = np.zeros_like(x)
    for i in range(len(x)):
        best = np.flatnonzero(s[i] >= s[i].max() - 1e-12 * np.abs(s[i]).max())
        drift = np.mean(x[best] @ V.T, axis=0)
        if centred:
            drift = drift - x[i]
        if sphere:
            drift = drift - (drift @ x[i]) / (x[i] @ x[i]) * x[i]
        out[i] = drift
    y = x + dt * out
    return y / np.linalg.norm(y, axis=1, keepdims=True) if sphere else y


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("kind", ["raw", "centred", "sphere"])
def test_hardmax_step_matches_brute_force_argmax(seed, kind):
    rng = np.random.default_rng(seed)
    n, d = 12, 3
    Q, K, V = (rng.normal(size=(d, d)) for _ in range(3))
    x = rng.normal(size=(n, d))
    sphere, centred = kind == "sphere", kind == "centred"
    if sphere:
        x /= np.linalg.norm(x, axis=1, keepdims=True)
    field = build_field("hardmax", Q, K, V, sphere=sphere, centred=centred)
    shift = sphere_shift if sphere else None
    stepper = EulerStepper(0.1, 1, **({"shift": shift} if shift else {}))
    got = np.asarray(stepper.solve(field, jnp.asarray(x)).ys[-1])
    want = _numpy_hardmax_step(x, Q, K, V, 0.1, sphere=sphere, centred=centred)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_exactly_tied_keys_get_equal_weights():
    """Token 0 scores its mirror images 1 and 2 exactly alike (and above itself): half each, whatever the order."""
    x = jnp.array([[1.0, 0.0], [0.8, 0.6], [0.8, -0.6], [-1.0, 0.0]]) * jnp.array([1.0, 3.0, 3.0, 1.0])[:, None]
    H = HardmaxFlow(jnp.eye(2), jnp.eye(2), jnp.eye(2)).attention(0.0, x)
    assert H[0].tolist() == [0.0, 0.5, 0.5, 0.0]
    swapped = HardmaxFlow(jnp.eye(2), jnp.eye(2), jnp.eye(2)).attention(0.0, x[jnp.array([0, 2, 1, 3])])
    assert swapped[0].tolist() == [0.0, 0.5, 0.5, 0.0]
    # coinciding tokens (scores equal up to rounding) share the weight too; tie_tol=0 breaks a rounding-level tie
    y = jnp.array([[1.0, 0.0], [0.6, 0.8], [0.6, 0.8 + 1e-15]])
    assert HardmaxFlow(jnp.eye(2), jnp.eye(2), jnp.eye(2)).attention(0.0, y)[1, 1:].tolist() == [0.5, 0.5]
    assert HardmaxFlow(jnp.eye(2), jnp.eye(2), jnp.eye(2), tie_tol=0.0).attention(0.0, y)[1, 1:].tolist() == [0.0, 1.0]


def test_softmax_converges_to_hardmax_at_the_rate_of_the_score_gap():
    r"""|f_beta - f_inf| ~ C e^{-beta g}, g the smallest gap between a row's best and second-best score: the
    measured slope of log|f_beta - f_inf| against beta is -g (within 5%), and the error shrinks with beta."""
    rng = np.random.default_rng(3)
    n, d = 8, 3
    Q, K, V = (rng.normal(size=(d, d)) for _ in range(3))
    x = jnp.asarray(rng.normal(size=(n, d)))
    s = np.sort(np.asarray((x @ Q.T) @ (x @ K.T).T), axis=1)
    gap = float(np.min(s[:, -1] - s[:, -2]))
    limit = np.asarray(build_field("hardmax", Q, K, V)(0.0, x))
    betas = np.linspace(5.0, 25.0, 6) / gap
    errors = [float(np.abs(np.asarray(build_field("attention", Q, K, V, beta=b)(0.0, x)) - limit).max())
              for b in betas]
    assert all(b < a for a, b in zip(errors, errors[1:]))
    slope = np.polyfit(betas, np.log(errors), 1)[0]
    assert slope == pytest.approx(-gap, rel=0.05)


def test_leaders_are_stationary_and_followers_go_straight_to_them():
    """Centred field, A = Q^T K = I (positive semi-definite), V = I: tokens sitting on leaders are stationary;
    a follower whose maximiser is a leader L goes along the segment to it, x(k) = L + (1 - dt)^k (x(0) - L)."""
    I = jnp.eye(2)
    field = HardmaxFlow(I, I, I, centred=True)
    leaders = jnp.array([[3.0, 0.0], [0.0, 3.0], [-2.0, -2.0]])
    on_leaders = jnp.concatenate([leaders, leaders[:2]])
    report = field.leaders(on_leaders)
    assert bool(report.stationary) and float(report.residual) == 0.0
    assert report.leaders.tolist() == [True] * 5
    start = jnp.array([[1.0, 0.2]])  # scores 3, 0.6, -2.4 against the leaders: it follows leader 0
    y0 = jnp.concatenate([leaders, start])
    r0 = field.leaders(y0)
    assert r0.follows.tolist() == [0, 1, 2, 0] and r0.leaders.tolist() == [True, True, True, False]
    assert r0.attracts.tolist() == [True, False, False, False] and not bool(r0.stationary)
    dt, layers = 0.25, 30
    traj = EulerStepper(dt, layers).solve(field, y0)
    k = np.arange(layers + 1)[:, None]
    want = np.asarray(leaders[0]) + (1 - dt) ** k * np.asarray(start[0] - leaders[0])
    np.testing.assert_allclose(np.asarray(traj.ys[:, 3]), want, rtol=0, atol=1e-14)
    np.testing.assert_array_equal(np.asarray(traj.ys[:, :3]), np.broadcast_to(leaders, (layers + 1, 3, 2)))


def test_sphere_hardmax_keeps_unit_tokens_and_stops_on_leaders():
    rng = np.random.default_rng(4)
    Q, K = rng.normal(size=(3, 3)), rng.normal(size=(3, 3))
    x0 = normalise(jnp.asarray(rng.normal(size=(10, 3))))
    field = build_field("hardmax", Q, K, jnp.eye(3), sphere=True)
    traj = EulerStepper(0.05, 200, shift=sphere_shift).solve(field, x0)
    assert float(jnp.abs(jnp.linalg.norm(traj.ys, axis=-1) - 1).max()) < 1e-14
    x = traj.ys[-1]
    g = field(0.0, x)
    assert float(jnp.abs(jnp.sum(g * x, axis=-1)).max()) < 1e-14  # tangent
    # on the sphere with V = I a token that is its own maximiser does not move
    r = field.leaders(x)
    speeds = jnp.linalg.norm(g, axis=-1)
    assert float(speeds[r.leaders & (r.ties == 1)].max(initial=0.0)) < 1e-14


def _clustered_circle(beta, n=6, seed=5):
    """Tokens on the circle within a few 1/sqrt(beta) of each other: interactions of order one at this beta."""
    theta = np.random.default_rng(seed).normal(scale=2.0 / math.sqrt(beta), size=n)
    return np.stack([np.cos(theta), np.sin(theta)], axis=1)


def _numpy_sphere_field(x, beta, normalisation):
    """The post-LN field by log-sum-exp in float64: weights e^{beta(<x_i,x_j> - m_i)} with m_i the row maximum,
    then the softmax (divide by the row sum) or the 1/n field divided by e^beta (multiply by e^{m_i - beta}/n)."""
    s = beta * (x @ x.T)
    m = s.max(axis=1, keepdims=True)
    e = np.exp(s - m)
    w = e / e.sum(axis=1, keepdims=True) if normalisation == "softmax" else e * np.exp(m - beta) / len(x)
    u = w @ x
    return u - np.sum(u * x, axis=1, keepdims=True) * x


@pytest.mark.parametrize("beta", [500.0, 1000.0, 2000.0, 4000.0])
def test_sphere_fields_at_large_beta_are_finite_and_correct(beta):
    """Softmax (IdentitySphereFlow and the general sphere_flow) and the 1/n field divided by e^beta
    (``log_scale=beta``, the paper's e^{beta(<x_i,x_j> - 1)}/n) against numpy log-sum-exp, float64."""
    x = jnp.asarray(_clustered_circle(beta))
    I = jnp.eye(2)
    soft = _numpy_sphere_field(np.asarray(x), beta, "softmax")
    mean = _numpy_sphere_field(np.asarray(x), beta, "mean")
    assert np.abs(mean).max() > 1e-3  # the tokens interact at this beta
    for got, want in [(IdentitySphereFlow(beta)(0.0, x), soft),
                      (sphere_flow(I, I, I, beta, attention_impl="dense")(0.0, x), soft),
                      (build_field("sphere", I, I, I, beta=beta, identity_weights=True, normalisation="mean",
                                   log_scale=beta)(0.0, x), mean)]:
        assert np.all(np.isfinite(np.asarray(got)))
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-9, atol=1e-13)


def test_log_scale_is_a_time_rescaling():
    """Dividing the 1/n field by s = e^L is the same path in the time tau = s t: f_L = e^{-L} f_0 (beta where
    e^beta is representable)."""
    x = jnp.asarray(_clustered_circle(300.0))
    f0 = IdentitySphereFlow(300.0, normalisation="mean")(0.0, x)
    fL = IdentitySphereFlow(300.0, normalisation="mean", log_scale=300.0)(0.0, x)
    np.testing.assert_allclose(np.asarray(fL), np.asarray(f0) * math.exp(-300.0), rtol=1e-12, atol=1e-15)


def test_staircase_has_four_jumps_for_five_tokens():
    """n = 5 on the circle, beta = 1000, the 1/n field divided by e^beta: the energy climbs 5 levels in 4 jumps, the
    first three where the collision model puts them, all four where the point-cluster model does (within 0.02 in s,
    3% of tau at this beta; benchmarks/low_temperature_staircase.py has the study)."""
    from benchmarks.low_temperature_staircase import run_staircase

    out = run_staircase(1000.0, num_saves=100)
    assert out["jumps"] == 4 and out["model_levels"] == [5.0, 7.0, 9.0, 13.0, 25.0]
    np.testing.assert_allclose(out["levels"], out["model_levels"], rtol=0.05)  # 5.2: the singletons still interact
    np.testing.assert_allclose(out["jump_s"][:3], out["model_s"][:3], atol=0.05)
    assert out["point_model_levels"] == out["model_levels"]
    np.testing.assert_allclose(out["jump_s"], out["point_model_s"], atol=0.02)


@pytest.mark.parametrize("call, message", [
    (lambda: HardmaxFlow(np.eye(2), np.eye(2), np.eye(2), tie_tol=-1.0), "tie_tol must be a finite real number"),
    (lambda: HardmaxFlow(np.eye(2), np.eye(2), np.eye(2), tie_tol=float("nan")), "tie_tol must be a finite real"),
    (lambda: HardmaxFlow(np.eye(2), np.eye(2), np.eye(2), sphere=True, centred=True), "sphere=True or centred=True"),
    (lambda: HardmaxFlow(np.eye(2), np.eye(2), np.eye(2), beta=-1.0), "beta must be finite and > 0"),
    (lambda: HardmaxFlow(np.eye(2), np.eye(2), np.eye(2), mask="everything"), "mask must be None"),
    (lambda: HardmaxFlow(np.eye(2), np.eye(2), np.eye(2))(0.0, jnp.ones((3, 4))), "the state y"),
    (lambda: build_field("hardmax", np.eye(2), np.eye(2), np.eye(2), gamma=1.0), "field 'hardmax' takes no option"),
])
def test_bad_inputs_are_refused_in_one_sentence(call, message):
    with pytest.raises(InputError) as e:
        call()
    text = str(e.value)
    assert message in text and text.endswith(".") and text.count(". ") == 0
