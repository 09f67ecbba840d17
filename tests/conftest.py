import os

# Tests run on CPU; keep XLA from grabbing all cores' worth of threads per process.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
# The `attnflow` command keeps its compiled programs in ~/.cache/attnflow/xla; the suite's commands compile
# afresh, so that no test depends on what another left there (tests/test_compile_cache.py turns it on).
os.environ.setdefault("ATTNFLOW_COMPILE_CACHE", "off")
# The tests' small sizes spend most of their time compiling, much of it in XLA:CPU's LLVM backend:
# its optimisation level 0 ran a sample of five test files in 195 s instead of 231 s (2-core Intel Xeon).
# The programs compute the same operations (results within rounding; tests that compare two runs
# compare runs compiled alike). Subprocesses inherit it unless they set XLA_FLAGS; users' programs keep
# XLA's default level. Set XLA_FLAGS yourself to test at another level.
if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0").strip()
# XLA:CPU's older (non-"fusion emitter") code generator compiles these small programs faster: 28% less
# CPU time on a sample of five test files (243 s -> 174 s of user time, 118 tests, 2-core AMD EPYC),
# same results within rounding. Older jaxlibs may lack the flag (an unknown flag aborts XLA): it is set
# from jaxlib 0.7 on.
if "xla_cpu_use_fusion_emitters" not in os.environ.get("XLA_FLAGS", ""):
    from importlib.metadata import version as _version

    if tuple(int(p) for p in _version("jaxlib").split(".")[:2] if p.isdigit()) >= (0, 7):
        os.environ["XLA_FLAGS"] += " --xla_cpu_use_fusion_emitters=false"

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import attnflow  # noqa: E402,F401

# JAX's float64 mode stays off for the test process, as in a user's process: the library's default
# path is float32. A test module that compares with float64 references opts in for its own tests
# with `pytestmark = pytest.mark.usefixtures("x64")`; tests/test_float32_default.py checks the
# float32 path against float64 references with float64 off.


@pytest.fixture(scope="module")
def x64():
    """float64 mode for a whole test module (``jax.enable_x64(True)``), used as the module's
    ``pytestmark``: it is entered before the module's other fixtures of module scope (so their arrays
    are float64 too) and left when the module ends; for one test of a module use ``x64_here``."""
    with jax.enable_x64(True):
        yield


@pytest.fixture
def x64_here():
    """float64 mode for one test only (``jax.enable_x64(True)`` around it)."""
    with jax.enable_x64(True):
        yield


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


# The longest test files first: `make test` spreads whole files over two processes (pytest-xdist,
# --dist loadfile) in collection order, so a long file collected last would leave one process
# idle at the end. Within a file the order is unchanged.
_LONGEST_FIRST = ("test_report.py", "test_sweep.py", "test_distributed_jobs.py", "test_mutation.py", "test_core.py",
                  "test_readme.py", "test_baselines.py", "test_batching.py", "test_probe_verdicts.py", "test_sensitivities.py",
                  "test_gallery.py", "test_phase.py", "test_meanfield_job.py", "test_fourier.py", "test_track.py",
                  "test_probe.py", "test_noise.py", "test_noise_meanfield.py", "test_meanfield_pde.py",
                  "test_failures_early.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(_LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # a stable sort
