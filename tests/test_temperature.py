"""beta as a function of the context length (attnflow.temperature): the laws, simulate with a law, the
simplex's self weight and transition, and the equiangular reduction of pre-LN layers against particles."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attnflow
from attnflow.errors import InputError
from attnflow.fields import build_field
from attnflow.integrate import EulerStepper
from attnflow.temperature import (BetaOfN, prenorm_simplex_layers, simplex_self_weight, simplex_tokens,
                                  simplex_transition)

pytestmark = pytest.mark.usefixtures("x64")


@pytest.mark.parametrize("law, power, g", [
    ("log", 1.0, lambda n, p: math.log(n)),
    ("power", 0.7, lambda n, p: n ** p),
    ("power", -0.5, lambda n, p: n ** p),
    ("log_power", 2.5, lambda n, p: math.log(n) ** p),
    ("constant", 1.0, lambda n, p: 1.0),
])
def test_laws_against_their_formulas(law, power, g):
    rng = np.random.default_rng(3)
    for gamma, n in zip(rng.uniform(0.1, 5.0, 4), rng.integers(2, 10**6, 4)):
        got = float(BetaOfN(float(gamma), law, power=power)(int(n)))
        assert got == pytest.approx(gamma * g(int(n), power), rel=1e-14)


def test_a_batch_of_laws_jit_and_the_derivative_in_gamma():
    gammas = jnp.array([0.5, 1.0, 3.0])
    law = BetaOfN(gammas)
    np.testing.assert_allclose(law(100), gammas * math.log(100), rtol=1e-15)
    # gamma is a leaf: traced under jit, differentiable (d beta / d gamma = g(n))
    f = jax.jit(lambda g: BetaOfN(g, "power", power=0.5)(400))
    assert float(f(2.0)) == pytest.approx(40.0)
    assert float(jax.grad(lambda g: BetaOfN(g)(50))(1.3)) == pytest.approx(math.log(50), rel=1e-14)


def test_simulate_reads_n_from_the_tokens():
    x0 = jax.random.normal(jax.random.key(4), (24, 3))
    Q, K, V = (jax.random.normal(k, (3, 3)) / 2 for k in jax.random.split(jax.random.key(5), 3))
    opts = dict(t1=1.0, method="euler", dt=0.1, dtype="float64")
    by_law = attnflow.simulate(x0, Q, K, V, beta=BetaOfN(0.4), **opts)
    by_value = attnflow.simulate(x0, Q, K, V, beta=0.4 * math.log(24), **opts)
    np.testing.assert_array_equal(by_law.states, by_value.states)
    # a batch of laws is a batch of temperatures
    batch = attnflow.simulate(x0, Q, K, V, beta=BetaOfN(jnp.array([0.4, 1.2])), batch="beta", **opts)
    other = attnflow.simulate(x0, Q, K, V, beta=1.2 * math.log(24), **opts)
    np.testing.assert_array_equal(batch.states[0], by_value.states)
    np.testing.assert_array_equal(batch.states[1], other.states)
    # the same law on twice the tokens is another beta
    x1 = jnp.concatenate([x0, x0 + 0.01])
    longer = attnflow.simulate(x1, Q, K, V, beta=BetaOfN(0.4), **opts)
    ref = attnflow.simulate(x1, Q, K, V, beta=0.4 * math.log(48), **opts)
    np.testing.assert_array_equal(longer.states, ref.states)


@pytest.mark.parametrize("make, words", [
    (lambda: BetaOfN(1.0, "sqrt"), "law must be one of"),
    (lambda: BetaOfN(0.0), "gamma must be finite and > 0"),
    (lambda: BetaOfN(-1.0), "gamma must be finite and > 0"),
    (lambda: BetaOfN(float("nan")), "gamma"),
    (lambda: BetaOfN(jnp.ones((2, 2))), "gamma must be a scalar or a batch"),
    (lambda: BetaOfN(1.0, "power", power=float("inf")), "power must be a finite number"),
    (lambda: BetaOfN(1.0, "log_power", power=-1.0), "power must be > 0"),
    (lambda: BetaOfN(1.0)(1), "needs n >= 2"),
    (lambda: BetaOfN(1.0)(2.5), "must be an int"),
    (lambda: attnflow.AttentionWeights(jnp.eye(2), jnp.eye(2), jnp.eye(2), beta=BetaOfN(1.0)), "law(n)"),
    (lambda: build_field("sphere", jnp.eye(2), jnp.eye(2), jnp.eye(2), beta=BetaOfN(1.0)), "law(n)"),
    (lambda: simplex_tokens(5, 1.0), "0 <= rho < 1"),
    (lambda: simplex_transition(1, 0.5), "n >= 2"),
    (lambda: prenorm_simplex_layers(1.0, 10, 0.5, -1), "layers must be"),
    (lambda: prenorm_simplex_layers(1.0, 10, -0.5, 2), "-1/(n-1) <= rho < 1"),
])
def test_bad_laws_are_refused_in_one_sentence(make, words):
    with pytest.raises(InputError) as err:
        make()
    msg = str(err.value)
    assert words in msg and msg.count(". ") == 0 and msg.endswith(".")


def test_self_weight_is_the_softmax_row_of_a_simplex():
    """The closed form against the attention row computed by attnflow's softmax on simplex tokens."""
    rng = np.random.default_rng(7)
    for _ in range(5):
        n, rho, gamma = int(rng.integers(3, 60)), float(rng.uniform(0.0, 0.9)), float(rng.uniform(0.2, 4.0))
        y = jnp.asarray(simplex_tokens(n, rho))
        beta = float(BetaOfN(gamma)(n))
        P = attnflow.attention_matrix(y, jnp.eye(n + 1), jnp.eye(n + 1), beta=beta)
        a = float(simplex_self_weight(gamma, n, rho))
        np.testing.assert_allclose(np.diag(P), a, rtol=1e-13)
        np.testing.assert_allclose(P[~np.eye(n, dtype=bool)], (1 - a) / (n - 1), rtol=1e-12)


def test_the_transition_crossings_are_exact_and_narrow_like_one_over_log_n():
    rho = 0.35
    widths = []
    for n in (10**2, 10**4, 10**8):
        t = simplex_transition(n, rho, 0.1, 0.9)
        for key, q in (("gamma_low", 0.1), ("gamma_half", 0.5), ("gamma_high", 0.9)):
            assert float(simplex_self_weight(t[key], n, rho)) == pytest.approx(q, rel=1e-12)
        assert t["gamma_c"] == pytest.approx(1 / (1 - rho))
        widths.append(t["width"] * math.log(n))
    np.testing.assert_allclose(widths, 2 * math.log(9) / (1 - rho), rtol=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_equiangular_reduction_against_simulated_particles(seed):
    """Pre-LN layers (the registry's ``prenorm`` field, EulerStepper) on a simplex cloud stay equiangular, with
    the inner product and the norm of the exact recursion, to rounding (float64)."""
    rng = np.random.default_rng(seed)
    n, rho, gamma = int(rng.integers(8, 40)), float(rng.uniform(0.05, 0.8)), float(rng.uniform(0.3, 3.0))
    dt, layers = float(rng.uniform(0.3, 1.0)), 7
    beta = float(BetaOfN(gamma)(n))
    eye = jnp.eye(n + 1)
    traj = EulerStepper(dt, layers).solve(build_field("prenorm", eye, eye, eye, beta=beta),
                                          jnp.asarray(simplex_tokens(n, rho)))
    xs = np.asarray(traj.ys)
    norms = np.linalg.norm(xs, axis=-1)
    u = xs / norms[..., None]
    gram = np.einsum("lid,ljd->lij", u, u)[:, ~np.eye(n, dtype=bool)]
    ref = prenorm_simplex_layers(beta, n, rho, layers, dt=dt)
    # rounding: a few ulps of float64 per layer on entries of size 1 (tokens' norms of order 1 + layers dt)
    np.testing.assert_allclose(gram, np.broadcast_to(ref["rho"][:, None], gram.shape), rtol=0, atol=1e-13)
    np.testing.assert_allclose(norms, np.broadcast_to(ref["radius"][:, None], norms.shape), rtol=1e-13)
    assert ref["rho"][-1] > rho  # the layers pull the directions together


def test_collapse_below_and_identity_above_gamma_c():
    """Chen-Lin-Polyanskiy-Rigollet: at large n the layers collapse the simplex for gamma < 1/(1 - rho) and
    leave it (attention ~ identity) well above it."""
    rho, n, layers = 0.5, 10**8, 10
    beta = lambda g: float(BetaOfN(g)(n))
    below = prenorm_simplex_layers(beta(0.7 / (1 - rho)), n, rho, layers)
    above = prenorm_simplex_layers(beta(1.6 / (1 - rho)), n, rho, layers)
    assert below["rho"][-1] > 0.99 and below["self_weight"][0] < 1e-2
    assert above["rho"][-1] - rho < 1e-3 and above["self_weight"][0] > 1 - 1e-3
