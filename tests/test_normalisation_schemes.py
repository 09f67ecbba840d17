"""Post-LN, pre-LN, Peri-LN, Mix-LN and nGPT: each registered field against its equiangular reduction
(attnflow.equiangular) on simulated simplex clouds, and the collapse laws the reductions predict."""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
import pytest

from attnflow.equiangular import equiangular_path, equiangular_velocity
from attnflow.errors import InputError
from attnflow.fields import build_field
from attnflow.integrate import ODESolver
from attnflow.temperature import simplex_tokens

pytestmark = pytest.mark.usefixtures("x64")

#: scheme -> (registry field, its options)
FIELDS_OF = {"post": ("sphere", {}), "pre": ("prenorm", {}), "peri": ("periln", {}),
             "mix": ("mixln", {"switch": 0.8}), "ngpt": ("ngpt", {"alpha": 0.6})}


def _cloud_path(scheme: str, n: int, rho0: float, beta: float, times: np.ndarray):
    """Mean off-diagonal inner product of directions and mean norm of a simulated simplex cloud."""
    name, options = FIELDS_OF[scheme]
    eye = jnp.eye(n + 1)
    field = build_field(name, eye, eye, eye, beta=beta, stepper="ode", **options)
    traj = ODESolver(0.0, float(times[-1]), ts=jnp.asarray(times), solver="tsit5", rtol=1e-11, atol=1e-13,
                     max_steps=200_000).solve(field, jnp.asarray(simplex_tokens(n, rho0)))
    xs = np.asarray(traj.ys)
    norms = np.linalg.norm(xs, axis=-1)
    u = xs / norms[..., None]
    off = ~np.eye(n, dtype=bool)
    gram = np.einsum("tid,tjd->tij", u, u)[:, off]
    return gram, norms


@pytest.mark.parametrize("scheme", list(FIELDS_OF))
def test_each_scheme_against_its_equiangular_reduction(scheme):
    """The field moves a simplex cloud as the scalar law says: every pair's inner product and every norm, at
    every save, to the solvers' tolerances (tsit5 at 1e-11 on the cloud, RK4 of step 1e-3 on the law)."""
    rng = np.random.default_rng(sorted(FIELDS_OF).index(scheme))
    n, rho0, beta = int(rng.integers(6, 14)), float(rng.uniform(0.0, 0.5)), float(rng.uniform(0.5, 3.0))
    times = np.array([0.0, 0.3, 0.8, 1.5, 2.5])
    gram, norms = _cloud_path(scheme, n, rho0, beta, times)
    name, options = FIELDS_OF[scheme]
    law = equiangular_path(scheme, rho0, beta, n, times, **options)
    # equiangular: all pairs equal to rounding; and equal to the law to the integrators' accuracy
    assert np.ptp(gram, axis=1).max() < 1e-10
    np.testing.assert_allclose(gram.mean(axis=1), law["rho"], rtol=0, atol=2e-8)
    np.testing.assert_allclose(norms.mean(axis=1), law["radius"], rtol=2e-8)
    assert law["rho"][-1] > rho0 + 0.02  # the cloud moved: the comparison is not of two constants


def test_the_laws_differ_where_the_schemes_differ():
    """A reduction with the wrong speed factor is told apart by the simulated cloud: pre-LN's cloud is not
    post-LN's law, nor Peri-LN's pre-LN's (the guard that the test above can fail)."""
    n, rho0, beta = 9, 0.2, 1.0
    times = np.array([0.0, 1.0, 2.5])
    for cloud, law in (("pre", "post"), ("peri", "pre"), ("ngpt", "post")):
        gram, _ = _cloud_path(cloud, n, rho0, beta, times)
        other = equiangular_path(law, rho0, beta, n, times, **FIELDS_OF[law][1])
        assert np.abs(gram.mean(axis=1) - other["rho"]).max() > 1e-3


def test_collapse_laws_near_one():
    """Near collapse 1 - rho ~ e^{-2t} (post-LN), e^{-2 alpha t} (nGPT) and ~ t^{-2} (pre-LN, Peri-LN)."""
    n, beta = 64, 1.0
    # (1 - rho stays above 1e-8 at these times: no cancellation in float64)
    gap = lambda s, t, **kw: 1 - equiangular_path(s, 0.5, beta, n, t, step=0.01, **kw)["rho"]
    post, ngpt = gap("post", [4.0, 8.0]), gap("ngpt", [16.0, 32.0], alpha=0.25)
    assert math.log(post[0] / post[1]) / 4 == pytest.approx(2.0, rel=1e-2)
    assert math.log(ngpt[0] / ngpt[1]) / 16 == pytest.approx(0.5, rel=1e-2)
    late = np.array([400.0, 1600.0])
    for scheme in ("pre", "peri"):
        # RK4 of step 0.2 on a gap that changes over times ~ t: the exponent is step 0.05's to 1e-7 (1.9990, 1.9981)
        g = 1 - equiangular_path(scheme, 0.5, beta, n, late, step=0.2)["rho"]
        assert math.log(g[0] / g[1]) / math.log(4) == pytest.approx(2.0, rel=0.03)


def test_peri_and_ngpt_move_a_spread_cloud_faster():
    """Far from collapse the attention output is short (|A| ~ sqrt(1/n + rho)): normalising it speeds the
    directions up by 1/|A| against pre- and post-LN."""
    rho, n, beta = 0.01, 1000, 1.0
    post = equiangular_velocity("post", rho, 1.0, beta, n)[0]
    pre = equiangular_velocity("pre", rho, 1.0, beta, n)[0]
    peri = equiangular_velocity("peri", rho, 1.0, beta, n)[0]
    ngpt = equiangular_velocity("ngpt", rho, 1.0, beta, n)[0]
    assert pre == pytest.approx(post) and peri == pytest.approx(ngpt)
    assert peri / post == pytest.approx(1 / math.sqrt(1 / n + rho), rel=0.1)


@pytest.mark.parametrize("make, words", [
    (lambda: equiangular_velocity("rms", 0.1, 1.0, 1.0, 10), "scheme must be one of"),
    (lambda: equiangular_path("post", 1.0, 1.0, 10, [1.0]), "rho0 must satisfy"),
    (lambda: equiangular_path("post", 0.1, 1.0, 1, [1.0]), "n must be an int >= 2"),
    (lambda: equiangular_path("post", 0.1, -1.0, 10, [1.0]), "beta must be"),
    (lambda: equiangular_path("post", 0.1, 1.0, 10, [2.0, 1.0]), "times must be a sorted"),
    (lambda: equiangular_path("ngpt", 0.1, 1.0, 10, [1.0], alpha=0.0), "alpha must be"),
    (lambda: build_field("mixln", jnp.eye(2), jnp.eye(2), jnp.eye(2)), "needs the option 'switch'"),
    (lambda: build_field("mixln", jnp.eye(2), jnp.eye(2), jnp.eye(2), switch=-1.0), "switch must be >= 0"),
    (lambda: build_field("ngpt", jnp.eye(2), jnp.eye(2), jnp.eye(2), alpha=-0.5), "alpha must be"),
])
def test_bad_scheme_arguments_are_refused(make, words):
    with pytest.raises(InputError) as err:
        make()
    assert words in str(err.value)
