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
