"""Noise: the stochastic layer stepper and the diffrax SDE solves.

Known answers: the heat kernel on S^2 (E<x_t, x_0> = exp(-(d - 1) sigma^2 t / 2)) and the exact expectation of the
renormalised Euler-Maruyama scheme there; the spread of tokens under uniform attention with additive noise;
strong order 1/2 on a shared Brownian path; the same key gives the same path; sigma = 0 is the deterministic
stepper bit for bit; pathwise gradients against finite differences on the same path; bad noise refused.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate

from attnflow import AttentionFlow, InputError, RescaledFlow
from attnflow.dynamics import AbstractDynamics, sphere_flow
from attnflow.integrate import (CommonNoise, EulerMaruyamaStepper, EulerStepper, SDESolver, TokenNoise,
                                sphere_shift)
from attnflow.integrate._noise import layer_increment
from attnflow.stats import fit_slope

pytestmark = pytest.mark.usefixtures("x64")


class Still(AbstractDynamics):
    """The zero field: the noise alone moves the tokens."""

    def vector_field(self, t, y, args=None):
        return jnp.zeros_like(y)


def unit(x):
    return x / jnp.linalg.norm(x, axis=-1, keepdims=True)


def cloud(n, d, seed=0):
    return unit(jax.random.normal(jax.random.key(seed), (n, d), jnp.float64))


def renormalised_em_moment(d, sigma, dt, layers):
    r"""E<x_L, x_0> of the renormalised Euler-Maruyama scheme with no drift, exactly: each layer multiplies it by
    a = E[(1 + sigma^2 dt chi^2_{d-1})^{-1/2}] (the tangent kick is odd, so only the renormalisation shrinks the
    mean)."""
    k = (d - 1) / 2

    def density(u):
        return (1 + sigma ** 2 * dt * u) ** -0.5 * u ** (k - 1) * np.exp(-u / 2) / (2 ** k * math.gamma(k))

    return integrate.quad(density, 0, np.inf)[0] ** layers


@pytest.mark.parametrize("d", [2, 3])  # d = 2: one Brownian motion per token along the circle's tangent
def test_the_renormalised_stepper_has_the_scheme_s_exact_mean_on_the_sphere_and_weak_order_one(d):
    sigma, T, n = 1.0, 1.0, 4096
    x0 = cloud(n, d)
    heat = math.exp(-(d - 1) * sigma ** 2 * T / 2)
    for layers in (4, 16):
        def run(key, layers=layers):
            stepper = EulerMaruyamaStepper(T / layers, layers, noise=TokenNoise(sigma, key, sphere=True),
                                           shift=sphere_shift, save_every=layers)
            return jnp.sum(stepper.solve(Still(), x0).ys[-1] * x0, axis=-1)

        c = np.asarray(jax.jit(jax.vmap(run))(jax.random.split(jax.random.key(1), 8)))
        mean, se = c.mean(), c.std() / math.sqrt(c.size)  # tokens are independent: 32768 samples
        expected = renormalised_em_moment(d, sigma, T / layers, layers)
        # the tokens' sample mean against the scheme's exact expectation: 4 standard errors (a false alarm
        # 6e-5 of the time); a scheme without the projection or the renormalisation is off by > 0.05 (30 se)
        assert abs(mean - expected) < 4 * se, (layers, mean, expected, se)
    # the scheme's weak error against the heat kernel, from its exact expectation: order 1 as dt -> 0
    dts = T / np.array([64, 128, 256, 512])
    err = [renormalised_em_moment(d, sigma, dt, round(T / dt)) - heat for dt in dts]
    fit = fit_slope(np.log(dts), np.log(err))
    assert 0.9 < fit["slope"] < 1.05, fit


@pytest.mark.parametrize("d", [2, 3])
def test_both_forms_agree_in_law_with_the_heat_kernel(d):
    """Stratonovich (Heun, the diffusion as given) and Ito (Euler, with the drift -(d - 1) sigma^2/2 x): both
    reach E<x_1, x_0> = e^{-(d - 1)/2} (e^{-1} on S^2) with weak order 1: their Richardson extrapolations
    (2 m(dt/2) - m(dt), on the same Brownian paths) agree with it."""
    sigma, T, n = 1.0, 1.0, 256
    x0 = cloud(n, d, seed=3)
    heat = math.exp(-(d - 1) * sigma ** 2 * T / 2)
    keys = jax.random.split(jax.random.key(2), 8)
    for solver in ("heun", "euler"):
        @jax.jit
        def moments(dt, solver=solver):
            def run(key):
                s = SDESolver(0.0, T, dt=dt, noise=TokenNoise(sigma, key, sphere=True), solver=solver,
                              max_steps=64, tree_tol=T / 2 ** 10)
                return jnp.sum(unit(s.solve(Still(), x0).ys[-1]) * x0, axis=-1)

            return jax.vmap(run)(keys)

        means = [np.asarray(moments(jnp.asarray(dt))) for dt in (0.04, 0.02)]
        extrapolated = 2 * means[1] - means[0]
        se = extrapolated.std() / math.sqrt(extrapolated.size)
        # 4 standard errors of the extrapolated samples (about 0.04 with 2048 samples), plus 0.005 for the O(dt^2)
        # left by the extrapolation (the unextrapolated means are 0.02-0.04 off at dt = 0.04); an Ito solve
        # without its drift correction is off by more than 0.1
        assert abs(extrapolated.mean() - heat) < 4 * se + 0.005, (solver, extrapolated.mean(), heat, se)


def test_uniform_attention_with_additive_noise_spreads_the_tokens_exactly():
    """Q = K = 0: P = 1/n, dx_i = V xbar dt + sigma dW_i, so x_i - xbar is a Brownian motion with variance
    sigma^2 (1 - 1/n) t per coordinate, for the scheme as for the flow."""
    n, d, sigma, T, layers = 64, 2, 0.7, 2.0, 20
    x0 = jax.random.normal(jax.random.key(5), (n, d), jnp.float64)
    V = jnp.asarray(np.random.default_rng(0).normal(size=(d, d)) / 4)
    flow = AttentionFlow(jnp.zeros((d, d)), jnp.zeros((d, d)), V)

    def spread(key):
        stepper = EulerMaruyamaStepper(T / layers, layers, noise=TokenNoise(sigma, key), save_every=layers)
        y = stepper.solve(flow, x0).ys[-1]
        return jnp.mean(jnp.sum((y - y.mean(0)) ** 2, -1)) - jnp.mean(jnp.sum((x0 - x0.mean(0)) ** 2, -1))

    growth = np.asarray(jax.jit(jax.vmap(spread))(jax.random.split(jax.random.key(6), 400)))
    expected = sigma ** 2 * (1 - 1 / n) * d * T
    # the cross term 2<x0_i - x0bar, noise> and the noise's own spread average out: 4 standard errors
    assert abs(growth.mean() - expected) < 4 * growth.std() / math.sqrt(growth.size), (growth.mean(), expected)


def test_strong_order_one_half_on_a_shared_path():
    """The noise alone on the circle: runs with dt = T/4 .. T/16 against dt = T/256, all on the same virtual
    Brownian tree; the mean distance at T falls like dt^{1/2} (non-commutative noise: the tangent direction turns
    with the token)."""
    d, sigma, T, n = 2, 1.0, 1.0, 64
    x0 = cloud(n, d, seed=7)
    tol = T / 2 ** 9

    def end(key, layers):
        stepper = EulerMaruyamaStepper(T / layers, layers, noise=TokenNoise(sigma, key, sphere=True),
                                       shift=sphere_shift, save_every=layers, brownian="tree", tree_tol=tol)
        return stepper.solve(Still(), x0).ys[-1]

    keys = jax.random.split(jax.random.key(8), 4)
    ends = {L: jax.jit(jax.vmap(lambda k, L=L: end(k, L)))(keys) for L in (4, 8, 16, 256)}
    ls = np.array([4, 8, 16])
    errs = [float(jnp.mean(jnp.linalg.norm(ends[L] - ends[256], axis=-1))) for L in ls]
    fit = fit_slope(np.log(T / ls), np.log(errs))
    # Euler-Maruyama's strong order is 1/2; a stepper whose increments ignored the tree (independent draws per
    # dt) would not converge at all (slope about 0)
    assert 0.35 < fit["slope"] < 0.7, (fit, errs)


def test_the_same_key_gives_the_same_path_bit_for_bit_and_another_key_another():
    x0 = cloud(6, 3)
    field = sphere_flow(jnp.eye(3), jnp.eye(3), jnp.eye(3), 2.0)
    for brownian in ("layers", "tree"):
        @jax.jit
        def run(seed, brownian=brownian):
            return EulerMaruyamaStepper(0.1, 10, noise=TokenNoise(0.4, jax.random.key(seed), sphere=True),
                                        shift=sphere_shift, brownian=brownian).solve(field, x0).ys
        a, b, c = run(0), run(0), run(1)
        assert np.array_equal(np.asarray(a), np.asarray(b))
        assert not np.allclose(np.asarray(a), np.asarray(c))
    solve = jax.jit(lambda s: SDESolver(0.0, 1.0, dt=0.1, noise=TokenNoise(0.4, jax.random.key(s), sphere=True))
                    .solve(field, x0).ys)
    sde = [solve(s) for s in (0, 0, 1)]
    assert np.array_equal(np.asarray(sde[0]), np.asarray(sde[1])) and not np.allclose(sde[0], sde[2])
    # the path is a function of the key and the layer: a run of 10 layers repeats the first 5 of a run of 5
    five = EulerMaruyamaStepper(0.1, 5, noise=TokenNoise(0.4, jax.random.key(0), sphere=True),
                                shift=sphere_shift).solve(field, x0).ys
    ten = EulerMaruyamaStepper(0.1, 10, noise=TokenNoise(0.4, jax.random.key(0), sphere=True),
                               shift=sphere_shift).solve(field, x0).ys
    assert np.array_equal(np.asarray(five), np.asarray(ten[:6]))


@pytest.mark.parametrize("geometry", ["flat", "sphere"])
def test_zero_noise_is_the_deterministic_stepper_bit_for_bit(geometry):
    d = 3
    rng = np.random.default_rng(4)
    Q, K, V = (jnp.asarray(rng.normal(size=(d, d))) for _ in range(3))
    if geometry == "flat":
        field, shift, x0 = AttentionFlow(Q, K, V), None, jax.random.normal(jax.random.key(0), (7, d), jnp.float64)
    else:
        field, shift, x0 = sphere_flow(Q, K, V, 2.0), sphere_shift, cloud(7, d)
    kw = {} if shift is None else {"shift": shift}
    plain = EulerStepper(0.05, 40, **kw).solve(field, x0).ys
    for noise in (TokenNoise(0.0, jax.random.key(3), sphere=geometry == "sphere"),
                  CommonNoise(0.0, jax.random.key(3), sphere=geometry == "sphere")):
        noisy = EulerMaruyamaStepper(0.05, 40, noise=noise, **kw).solve(field, x0).ys
        assert np.array_equal(np.asarray(plain), np.asarray(noisy)), type(noise).__name__


def test_common_noise_moves_every_token_by_the_same_matrix_through_the_attention():
    n, d, dt = 5, 3, 0.1
    rng = np.random.default_rng(9)
    Q, K, V = (jnp.asarray(rng.normal(size=(d, d)) / 2) for _ in range(3))
    field = AttentionFlow(Q, K, V)
    x0 = jax.random.normal(jax.random.key(1), (n, d), jnp.float64)
    noise = CommonNoise(0.8, jax.random.key(2))
    y1 = EulerMaruyamaStepper(dt, 1, noise=noise).solve(field, x0).ys[-1]
    dW = layer_increment(noise, 0, dt, (d, d), jnp.float64)
    P = field.attention(0.0, x0)
    expected = x0 + dt * field.vector_field(0.0, x0, None) + 0.8 * (P @ x0) @ dW.T
    np.testing.assert_allclose(np.asarray(y1), np.asarray(expected), rtol=0, atol=1e-13)


def test_pathwise_gradient_matches_finite_differences_on_the_same_path():
    n, d = 6, 2
    rng = np.random.default_rng(11)
    Q, K = (jnp.asarray(rng.normal(size=(d, d))) for _ in range(2))
    V0 = jnp.asarray(rng.normal(size=(d, d)) / 2)
    x0 = jax.random.normal(jax.random.key(4), (n, d), jnp.float64)
    direction = jnp.asarray(rng.normal(size=(d, d)))

    for make in (lambda: EulerMaruyamaStepper(0.1, 10, noise=TokenNoise(0.3, jax.random.key(5)), save_every=10),
                 lambda: SDESolver(0.0, 1.0, dt=0.1, noise=CommonNoise(0.3, jax.random.key(5)))):
        def loss(V, make=make):
            y = make().solve(AttentionFlow(Q, K, V), x0).ys[-1]
            return jnp.sum(jnp.sin(y))

        value_and_grad = jax.jit(jax.value_and_grad(loss))  # one compile: the differences reuse it
        g = jnp.sum(value_and_grad(V0)[1] * direction)
        h = 1e-6
        fd = (value_and_grad(V0 + h * direction)[0] - value_and_grad(V0 - h * direction)[0]) / (2 * h)
        # central differences in float64: truncation ~h^2 and rounding ~1e-16/h, so about 1e-9 relative
        assert abs(float(g) - float(fd)) < 1e-7 * max(1.0, abs(float(fd))), (float(g), float(fd))


def test_bad_noise_is_refused_in_one_sentence():
    key = jax.random.key(0)
    with pytest.raises(InputError, match="sigma must be >= 0"):
        TokenNoise(-0.1, key)
    with pytest.raises(InputError, match="sigma must be a finite real number"):
        TokenNoise(float("nan"), key)
    with pytest.raises(InputError, match="sigma must be a finite real number"):
        TokenNoise(jnp.ones(3), key)
    with pytest.raises(InputError, match="key must be one JAX random key"):
        TokenNoise(0.1, 3)
    with pytest.raises(InputError, match="key must be one JAX random key"):
        TokenNoise(0.1, jax.random.split(key, 4))
    with pytest.raises(InputError, match="pass shift=sphere_shift"):
        EulerMaruyamaStepper(0.1, 3, noise=TokenNoise(0.1, key, sphere=True))
    with pytest.raises(InputError, match="build it with sphere=True"):
        EulerMaruyamaStepper(0.1, 3, noise=TokenNoise(0.1, key), shift=sphere_shift)
    with pytest.raises(InputError, match="noise must be a noise model"):
        EulerMaruyamaStepper(0.1, 3, noise=0.1)
    with pytest.raises(InputError, match="no Ito form"):
        SDESolver(0.0, 1.0, dt=0.1, noise=CommonNoise(0.1, key), solver="euler")
    with pytest.raises(InputError, match="solver must be one of"):
        SDESolver(0.0, 1.0, dt=0.1, noise=TokenNoise(0.1, key), solver="tsit5")
    eye = jnp.eye(2)
    with pytest.raises(InputError, match="rescaled"):
        EulerMaruyamaStepper(0.1, 3, noise=CommonNoise(0.1, key)).solve(RescaledFlow(eye, eye, eye), jnp.eye(2))
    with pytest.raises(InputError, match="one cloud of tokens"):
        EulerMaruyamaStepper(0.1, 3, noise=TokenNoise(0.1, key)).solve(AttentionFlow(eye, eye, eye),
                                                                       jnp.ones((2, 3, 2)))


def test_simulate_with_noise_gives_each_member_of_a_batch_its_own_path():
    import attnflow

    n, d, B = 8, 3, 3
    xs = jnp.stack([cloud(n, d, seed=s) for s in range(B)])
    field = sphere_flow(jnp.eye(3), jnp.eye(3), jnp.eye(3), 1.5)
    noise = TokenNoise(0.6, jax.random.key(4), sphere=True)
    sim = attnflow.simulate(xs, field, t1=1.0, method="euler", dt=0.1, shift="sphere", noise=noise, batch="x0",
                            dtype="float64")
    assert sim.states.shape == (B, 11, n, d) and sim.method == "euler"
    keys = noise.member_keys(B)

    @jax.jit  # one compiled stepper for every member's key
    def alone(key, x0):
        return EulerMaruyamaStepper(0.1, 10, noise=TokenNoise(0.6, key, sphere=True),
                                    shift=sphere_shift).solve(field, x0).ys

    for b in range(B):  # member b is the stepper run alone with the b-th key
        np.testing.assert_allclose(np.asarray(sim.states[b]), np.asarray(alone(keys[b], xs[b])), rtol=0, atol=1e-14)
    sde = attnflow.simulate(xs[0], field, t1=1.0, method="heun", dt=0.05, num_saves=3, noise=noise, dtype="float64")
    assert sde.states.shape == (3, n, d) and sde.method == "heun" and int(sde.result) == 0
    with pytest.raises(InputError, match="with noise, method must be 'euler'"):
        attnflow.simulate(xs[0], field, t1=1.0, method="tsit5", dt=0.1, noise=noise)
    with pytest.raises(InputError, match="constant dt"):
        attnflow.simulate(xs[0], field, t1=1.0, method="heun", noise=noise)


def test_two_tokens_under_common_noise_end_antipodal_with_positive_probability():
    from attnflow.stochastic import two_token_fates

    quiet = two_token_fates(0.0, 2, t1=30.0, dt=0.02, paths=64)
    assert quiet["merged"]["count"] == 64  # attention alone merges them
    d2 = two_token_fates(1.0, 2, t1=30.0, dt=0.02, paths=200)
    d3 = two_token_fates(1.0, 3, t1=30.0, dt=0.02, paths=200)
    # measured at 400 paths: 0.29 antipodal on the circle, 0.13 on S^2 (t1 = 30, dt = 0.01)
    assert d2["antipodal"]["lo"] > 0.1 and d3["antipodal"]["lo"] > 0.02
    assert d2["antipodal"]["fraction"] > d3["antipodal"]["fraction"]
    assert d2["merged"]["count"] + d2["antipodal"]["count"] + d2["undecided"]["count"] == 200
    with pytest.raises(InputError, match="sigma must be >= 0"):
        two_token_fates(-1.0, 2)
