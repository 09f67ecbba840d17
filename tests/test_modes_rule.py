"""One rule for the number K of Fourier modes: attnflow.kernels.fourier.fourier_modes with a tolerance, asked by the
attention's Fourier path (default: the unit roundoff) and by the mean field's Fourier energy."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import ive

from attnflow.kernels.fourier import fourier_modes, tail_bound
from attnflow.errors import InputError


def _true_tail(a: float, K: int) -> float:
    """sum_{|m| > K} e^{-a} I_m(a), summed far out."""
    m = np.arange(K + 1, K + 4000)
    return float(2 * ive(m, a).sum())


@pytest.mark.parametrize("a", [0.3, 1.0, 4.0, 16.0, 100.0])
@pytest.mark.parametrize("tol", [1e-3, 1e-8, 1e-14])
def test_fourier_modes_meets_its_tolerance(a, tol):
    K = fourier_modes(a, tol=tol)
    assert 2 * _true_tail(a, K) <= tol
    assert 2 * tail_bound(a, K) <= tol
    if K > 0:
        assert 2 * tail_bound(a, K - 1) > tol       # the smallest K with the bound below tol


def test_fourier_modes_default_is_the_unit_roundoff():
    for a in (1.0, 4.0, 16.0):
        assert fourier_modes(a) == fourier_modes(a, tol=float(np.finfo(np.float64).eps) / 2)
        assert fourier_modes(a, "float32") == fourier_modes(a, tol=float(np.finfo(np.float32).eps) / 2)
    with pytest.raises(InputError, match="tol"):
        fourier_modes(1.0, tol=0.0)


def test_fourier_energy_names_enough_modes():
    from attnflow.meanfield import interaction_energy_fourier
    from attnflow.meanfield._measures import ENERGY_MODES_TOL

    beta = 20.0
    need = fourier_modes(beta, tol=2 * ENERGY_MODES_TOL * ive(0, beta))
    with pytest.raises(InputError, match=f"num_modes={need}"):
        interaction_energy_fourier(np.zeros(3), beta, num_modes=need - 1)
    import jax

    with jax.enable_x64(True):
        theta = np.random.default_rng(0).uniform(0, 2 * np.pi, 64)
        a = float(interaction_energy_fourier(theta, beta, num_modes=need))
        b = float(interaction_energy_fourier(theta, beta, num_modes=4 * need))
    assert abs(a / b - 1) <= 4e-15
