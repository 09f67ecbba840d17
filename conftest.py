"""Root pytest configuration: JAX's float64 mode stays off here, as in a user's process; the
doctests of attnflow/ that need float64 say so themselves (``dtype="float64"`` or
``jax.enable_x64(True)``), and tests/conftest.py gives test modules a scoped ``x64`` fixture."""

import sys

import pytest


@pytest.fixture(autouse=True)
def _close_figures():
    """Close the figures a test or doctest drew (pyplot keeps every figure it opened until closed)."""
    yield
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is not None:
        plt.close("all")
