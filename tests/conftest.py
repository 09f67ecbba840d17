import os

# Tests run on CPU; keep XLA from grabbing all cores' worth of threads per process.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import attnflow  # noqa: E402,F401

# The tests compare against float64 references, so the test process enables float64
# (attnflow itself never changes JAX's configuration; tests/test_core.py checks that in a
# subprocess).
jax.config.update("jax_enable_x64", True)


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


def random_problem(rng, n=6, d=3, m=None, scale=0.5):
    """Random float64 (x0, Q, K, V) with moderate scores."""
    m = d if m is None else m
    x0 = rng.normal(size=(n, d))
    Q = scale * rng.normal(size=(m, d))
    K = scale * rng.normal(size=(m, d))
    V = rng.normal(size=(d, d)) / np.sqrt(d)
    return x0, Q, K, V


@pytest.fixture(autouse=True, scope="module")
def _free_compiled_programs():
    """Release each module's compiled XLA programs when it ends (a long process that kept them
    all crashed inside an XLA:CPU compile; see the Makefile's test target)."""
    yield
    import gc

    jax.clear_caches()
    gc.collect()
