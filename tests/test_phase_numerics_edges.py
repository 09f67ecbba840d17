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
    from attnflow.meanfield import sphere_kernel_modes

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

    from attnflow.meanfield import sphere_kernel_modes

    jitted = jax.jit(lambda b: sphere_kernel_modes(b, 2, 6, beta_max=64.0))
    np.testing.assert_allclose(jitted(20.0), np.asarray(sphere_kernel_modes(20.0, 2, 6)), rtol=1e-14)
    np.testing.assert_allclose(jitted(20.0), ive(np.arange(7), 20.0), rtol=1e-14)
    assert np.all(np.isnan(np.asarray(jitted(65.0))))
    grad = jax.grad(lambda b: sphere_kernel_modes(b, 2, 3)[2])(3.0)
    assert float(grad) == pytest.approx((ive(1, 3.0) + ive(3, 3.0)) / 2 - ive(2, 3.0), rel=1e-12)
