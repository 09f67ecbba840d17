"""The stationary clustered branch of the noisy mean field (attnflow.meanfield.stationary_branch): the order of the
transition, against the tricritical beta of 1/n attention and against the time-stepped PDE."""

from __future__ import annotations

import numpy as np
import pytest

from attnflow.errors import InputError
from attnflow.meanfield import stationary_branch, stationary_clustered_state, tricritical_beta

SMALL = [0.02, 0.05, 0.1]


@pytest.mark.parametrize("d", [2, 3])
def test_the_landau_coefficient_changes_sign_at_the_tricritical_beta(d):
    """1/n attention: continuous (c < 0) just below beta*(d), discontinuous (c > 0) just above it, with
    beta*(2) = 2.4469 and beta*(3) = 1.8162 from the Bessel-ratio condition, an independent computation. At
    beta* -+ 0.05 the coefficient is -+ 0.01-0.02 (it crosses 0 with slope about 0.3 per unit of beta), far above
    the fixed point's residual (states converged to 1e-12, ratios to about 1e-12)."""
    star = tricritical_beta(d)
    below = stationary_branch(star - 0.05, SMALL, d=d)
    above = stationary_branch(star + 0.05, SMALL, d=d)
    assert below["converged"].all() and above["converged"].all()
    assert below["kind"] == "continuous" and below["landau"] < -0.005, below["landau"]
    assert above["kind"] == "discontinuous" and above["landau"] > 0.005, above["landau"]
    assert below["fold_ratio"] is None and above["fold_ratio"] > 1


def test_the_branch_holds_the_time_stepped_clustered_state():
    """The clustered state the noisy continuity equation settles into at sigma = 1.02 sigma_c (circle, beta = 4,
    1/n; stationary_clustered_state, RK4 in time to t = 200 on 64 points) has an order parameter r at which the
    branch's sigma / sigma_c is 1.02: within 2e-4 (the time-stepped state's drift over its last tenth, about 1e-5
    in r, times the branch's slope d ratio / d r of about -0.02; and its grid). The branch is the upper, stable one:
    at r = 0.5 the ratio is above 1.02 (the fold lies between)."""
    pde = stationary_clustered_state(4.0, 1.02, d=2)
    branch = stationary_branch(4.0, [0.5, pde["r"]], d=2)
    assert branch["converged"].all()
    assert abs(branch["ratio"][1] - 1.02) < 2e-4, (pde["r"], branch["ratio"])
    assert branch["ratio"][0] > branch["ratio"][1]


@pytest.mark.parametrize("d", [2, 3])
def test_softmax_attention_stays_continuous_as_beta_grows(d):
    """Softmax: c < 0 at every beta tried (1, 8, 32), and c beta nearly constant from 8 to 32 (within 10%; c ~ -c0 / beta: the branch
    flattens but does not turn), where 1/n attention at the same betas is discontinuous."""
    cs = []
    for beta in (1.0, 8.0, 32.0):
        soft = stationary_branch(beta, SMALL, d=d, normalisation="softmax")
        assert soft["kind"] == "continuous" and soft["converged"].all(), (beta, soft["landau"])
        cs.append(soft["landau"] * beta)
        if beta > 2:
            assert stationary_branch(beta, SMALL, d=d)["kind"] == "discontinuous"
    assert abs(cs[2] / cs[1] - 1) < 0.1, cs  # measured 1.006 (circle) and 1.058 (S^2)


def test_bad_amplitudes_are_refused_in_one_sentence():
    for bad in ([0.1, 0.05], [0.0, 0.1], [0.5, 1.0], []):
        with pytest.raises(InputError, match="amplitudes"):
            stationary_branch(2.0, bad)
    with pytest.raises(InputError, match="normalisation"):
        stationary_branch(2.0, [0.1], normalisation="softmin")


def test_the_barrier_falls_to_zero_at_the_fold_and_its_stable_state_is_the_time_stepped_one(monkeypatch):
    """noise_barrier (circle, beta = 4, 1/n): at 1.02 sigma_c the stable state is the one the time-stepped equation
    settles into (r = 0.6951, within 1e-3), the saddle lies below the fold and the stable state above it; the barrier
    b = (2 / sigma^2)(F[saddle] - F[stable]) is positive, falls as sigma nears the fold (1.0290 sigma_c) and is at
    most 2% of its value at 1.01 there (1.0285); a ratio outside the bistable range is refused. The four calls
    bracket their states on one scan of the branch over r (it depends on beta and the grid only), kept read-only."""
    import attnflow.meanfield._branch as branch
    from attnflow.meanfield import noise_barrier

    branch._coarse_branch.cache_clear()
    scans = []
    real = branch.stationary_branch

    def counted(beta, amplitudes, **kw):
        scans.extend([float(beta)] if np.size(amplitudes) > 2 else [])
        return real(beta, amplitudes, **kw)

    monkeypatch.setattr(branch, "stationary_branch", counted)
    mid = noise_barrier(4.0, 1.02)
    assert abs(mid["stable_r"] - 0.6951) < 1e-3 and mid["saddle_r"] < mid["fold_r"] < mid["stable_r"]
    low, edge = noise_barrier(4.0, 1.01), noise_barrier(4.0, 1.0285)
    assert low["slope"] > mid["slope"] > edge["slope"] > 0
    assert edge["slope"] < 0.02 * low["slope"]
    with pytest.raises(InputError, match="bistable range"):
        noise_barrier(np.float64(4.0), 1.05)
    assert scans == [4.0]
    with pytest.raises(ValueError, match="read-only"):
        branch._coarse_branch(4.0, 2, 192, 768)[1][0] = 0.0


def test_the_branch_states_are_critical_points_of_the_free_energy():
    """At a state of the branch (S^2, beta = 4, r = 0.75, at its own sigma) the free energy
    int f log f - (gamma / 2) int int K f f has no first-order change along mass-preserving zonal perturbations h
    (over +-eps, eps = 1e-4, the two changes agree to 1e-2 of their size, measured 6e-5 to 1.2e-3: third order;
    second order only), which fixes the factor 1/2 of the interaction term against the dynamics' fixed-point
    equation: with gamma instead of gamma / 2 the first-order change dominates."""
    import math

    from attnflow.meanfield._branch import _basis, _free_energy, _kernel_ratios

    beta, d, degree, nodes = 4.0, 3, 64, 256
    z, w, Z = _basis(d, degree, nodes)
    K = _kernel_ratios(beta, d, degree)
    norms = (Z ** 2) @ w
    b = stationary_branch(beta, [0.75], d=d, degree=degree, nodes=nodes)
    g = 1 / b["ratio"][0] ** 2
    f = b["density"][0]
    np.testing.assert_array_equal(b["z"], z)
    assert abs(float((f * z) @ w) - 0.75) < 1e-9
    rng = np.random.default_rng(0)
    for _ in range(3):
        h = (rng.normal(size=4) @ Z[1:5]) * f  # zonal, and int h = 0 up to the l = 0 part removed next
        h -= (h @ w) * f
        eps = 1e-4
        up, down = _free_energy(f + eps * h, g, K, Z, w, norms), _free_energy(f - eps * h, g, K, Z, w, norms)
        base = _free_energy(f, g, K, Z, w, norms)
        step = max(abs(up - base), abs(down - base))
        assert abs(up - down) < 1e-2 * step, (up - down, step)
        assert math.isfinite(step) and step > 0


def test_a_beta_or_grid_that_is_not_a_number_is_refused_before_any_scan(monkeypatch):
    import attnflow.meanfield._branch as branch
    from attnflow.meanfield import noise_barrier

    monkeypatch.setattr(branch, "stationary_branch", lambda *a, **k: pytest.fail("scanned before the check"))
    for bad, words in (({"beta": "4"}, "beta"), ({"beta": float("nan")}, "beta"), ({"degree": 1.5}, "degree"),
                       ({"nodes": 10}, "nodes")):
        args = {"beta": 4.0, "degree": 48, "nodes": 96} | bad
        with pytest.raises(InputError, match=words):
            noise_barrier(args["beta"], 1.02, degree=args["degree"], nodes=args["nodes"])
