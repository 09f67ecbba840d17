"""The library's default path, float32 with JAX's float64 mode off (as in a user's process),
against independent float64 references (plain NumPy/SciPy, tests/reference.py).

The references take the same float32 inputs, widened to float64, so a difference measures the
float32 computation only. Every tolerance is a multiple of float32's epsilon (or of the float32
default solver tolerances) times the problem's scale, with the reason beside it.
"""

import importlib
import pkgutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.linalg import expm

import attnflow as af
from attnflow.integrate import DEFAULT_TOLERANCES, EulerStepper, solve_ode
from attnflow.observables import boolean_distance, num_clusters, numerical_rank
from reference import ref_attention, ref_euler, ref_solve

EPS = float(np.finfo(np.float32).eps)  # 1.19e-7
RTOL, ATOL = DEFAULT_TOLERANCES["float32"]  # what simulate uses for float32 when no tolerance is given
N, D, T1 = 8, 3, 2.0
TS = np.linspace(0.0, T1, 5)


@pytest.fixture(autouse=True)
def _float64_stays_off():
    assert not jax.config.jax_enable_x64, "float64 mode is on before a float32 test"
    yield
    assert not jax.config.jax_enable_x64, "float64 mode was left on"


def _problem(seed=0, n=N, d=D, batch=None):
    """float32 (x0, Q, K, V) with moderate scores, and the same numbers in float64."""
    rng = np.random.default_rng(seed)
    shape = (n, d) if batch is None else (batch, n, d)
    arrays = (rng.normal(size=shape), 0.5 * rng.normal(size=(d, d)), 0.5 * rng.normal(size=(d, d)),
              rng.normal(size=(d, d)) / np.sqrt(d))
    f32 = tuple(a.astype(np.float32) for a in arrays)
    return f32, tuple(a.astype(np.float64) for a in f32)


def _check_float32(*arrays):
    for a in arrays:
        assert a.dtype == jnp.float32, a.dtype
        assert bool(jnp.isfinite(a).all())


def _scores_scale(x, Q, K):
    """max |<Q x_i, K x_j>|: the size of the largest score."""
    return float(np.abs((x @ Q.T) @ (x @ K.T).T).max())


def _attention_rtol(x, Q, K):
    """Relative error of float32 attention weights: a score s is off by ~eps |s| (its rounding; the
    D-term sums of O(1) products add a few eps more), which moves P_ij = e^{s_ij} / sum_k e^{s_ik}
    by a relative ~2 eps max|s|, and the normalisation adds a few eps: 4 eps (2 + max|s|)."""
    return 4 * EPS * (2 + _scores_scale(x, Q, K))


def _ode_atol(ref):
    # the adaptive float32 solve keeps each step's local error below RTOL |x| + ATOL (RTOL = 1e-5,
    # 84 eps; what simulate picks for float32); over a short span (t1 = 2, ||V|| ~ 1) the global
    # error stays of that order: a factor 10 for its accumulation over the steps
    return 10 * (RTOL * float(np.abs(ref).max()) + ATOL)


def _euler_atol(ref, num_steps):
    # a float32 layer x + dt f(x) rounds once at ~eps |x| (f's own rounding is dt times smaller), so
    # num_steps layers add at most ~num_steps eps |x|; a factor 2 for the growth of early errors
    # over the short span (t1 = 2, ||V|| ~ 1)
    return 2 * num_steps * EPS * float(np.abs(ref).max())


# --- attention: dense and chunked ---------------------------------------------------------------
def test_attention_matrix_and_both_implementations_of_attend():
    (x, Q, K, V), (x64, Q64, K64, V64) = _problem(1, n=40)
    P = af.attention_matrix(jnp.asarray(x), jnp.asarray(Q), jnp.asarray(K))
    _check_float32(P)
    P64 = ref_attention(x64, Q64, K64)
    rtol = _attention_rtol(x64, Q64, K64)
    np.testing.assert_allclose(np.asarray(P), P64, rtol=rtol, atol=0)
    q, k, v = (jnp.asarray(x @ M.T) for M in (Q, K, V))
    want = P64 @ (x64 @ V64.T)
    for impl, chunk in (("dense", None), ("chunked", 16)):  # 16: three tiles of keys, one partial
        out = af.attend(q, k, v, impl=impl, chunk_size=chunk)
        _check_float32(out)
        # a row-stochastic average of values of size <= max|v|: P's relative error times max|v|,
        # plus the rounding of the sum (and of the chunks' rescaling), a few eps max|v|
        np.testing.assert_allclose(np.asarray(out), want, rtol=0, atol=(rtol + 4 * EPS) * float(np.abs(v).max()),
                                   err_msg=impl)


# --- simulate: raw and rescaled, tsit5 and Euler, one system and a batch ----------------------
@pytest.mark.parametrize("picture", ["raw", "rescaled"])
def test_simulate_tsit5_default_float32(picture):
    (x0, Q, K, V), (x64, Q64, K64, V64) = _problem(2)
    sim = af.simulate(x0, Q, K, V, t1=T1, ts=TS, picture=picture)
    _check_float32(sim.states, sim.tokens)
    ref = ref_solve(x64, Q64, K64, V64, TS, picture=picture)
    np.testing.assert_allclose(np.asarray(sim.states), ref, rtol=0, atol=_ode_atol(ref))
    raw = ref if picture == "raw" else np.stack([z @ expm(t * V64).T for z, t in zip(ref, TS)])
    np.testing.assert_allclose(np.asarray(sim.tokens), raw, rtol=0, atol=_ode_atol(raw))


@pytest.mark.parametrize("picture", ["raw", "rescaled"])
def test_simulate_euler_default_float32(picture):
    (x0, Q, K, V), (x64, Q64, K64, V64) = _problem(3)
    dt, layers = 0.1, 20
    sim = af.simulate(x0, Q, K, V, t1=dt * layers, method="euler", dt=dt, picture=picture)
    _check_float32(sim.states, sim.tokens)
    x = ref_euler(x64, Q64, K64, V64, dt, layers)
    R_inv = np.linalg.inv(np.eye(D) + dt * V64)  # z[k] = (I + dt V)^{-k} x[k]
    z = np.stack([xk @ np.linalg.matrix_power(R_inv, k).T for k, xk in enumerate(x)])
    want = x if picture == "raw" else z
    np.testing.assert_allclose(np.asarray(sim.states), want, rtol=0, atol=_euler_atol(want, layers))
    np.testing.assert_allclose(np.asarray(sim.tokens), x, rtol=0, atol=_euler_atol(x, layers))


@pytest.mark.parametrize("method", ["tsit5", "euler"])
def test_simulate_batched_default_float32(method):
    (x0, Q, K, V), (x64, Q64, K64, V64) = _problem(4, batch=3)
    kw = dict(method="euler", dt=0.1) if method == "euler" else dict(ts=TS)
    sim = af.simulate(x0, Q, K, V, t1=T1, batch="x0", **kw)
    _check_float32(sim.states)
    for b in range(3):
        if method == "euler":
            ref = ref_euler(x64[b], Q64, K64, V64, 0.1, 20)
            atol = _euler_atol(ref, 20)
        else:
            ref = ref_solve(x64[b], Q64, K64, V64, TS)
            atol = _ode_atol(ref)
        np.testing.assert_allclose(np.asarray(sim.states[b]), ref, rtol=0, atol=atol, err_msg=f"system {b}")


# --- the integrators themselves -------------------------------------------------------------------
def test_euler_stepper_and_solve_ode_in_float32():
    (x0, Q, K, V), (x64, Q64, K64, V64) = _problem(5)
    flow = af.AttentionFlow(jnp.asarray(Q), jnp.asarray(K), jnp.asarray(V))
    y0 = jnp.asarray(x0)
    euler = EulerStepper(0.1, 20).solve(flow, y0)
    _check_float32(euler.ys)
    ref = ref_euler(x64, Q64, K64, V64, 0.1, 20)
    np.testing.assert_allclose(np.asarray(euler.ys), ref, rtol=0, atol=_euler_atol(ref, 20))
    traj = solve_ode(flow, y0, t0=0.0, t1=T1, ts=jnp.asarray(TS, jnp.float32), rtol=RTOL, atol=ATOL)
    _check_float32(traj.ys)
    assert int(traj.result) == 0
    ref = ref_solve(x64, Q64, K64, V64, TS)
    np.testing.assert_allclose(np.asarray(traj.ys), ref, rtol=0, atol=_ode_atol(ref))


# --- observables on float32 states ----------------------------------------------------------------
def _components(y, tau):
    """Connected components of |y_i - y_j| <= tau, in float64 (a plain union-find)."""
    parent = list(range(len(y)))

    def root(i):
        while parent[i] != i:
            i = parent[i]
        return i

    for i in range(len(y)):
        for j in range(i):
            if np.linalg.norm(y[i] - y[j]) <= tau:
                parent[root(i)] = root(j)
    return len({root(i) for i in range(len(y))})


def test_cluster_count_rank_and_boolean_distance_in_float32():
    rng = np.random.default_rng(6)
    centres = np.array([[0.0, 0.0, 0.0], [3.0, 0.0, 0.0], [0.0, 2.0, 1.0]])
    # three clusters of 4 tokens spread 1e-3 around their centres: the gaps (>= 2) and the spreads
    # (~2e-3) lie far on either side of the threshold 0.05 * diameter (~0.18), so float32 rounding
    # (~eps * 3) cannot move a pair across it
    y = np.repeat(centres, 4, axis=0) + 1e-3 * rng.normal(size=(12, 3))
    y32 = y.astype(np.float32)
    count = num_clusters(jnp.asarray(y32), rel_tol=0.05)
    assert count.dtype == jnp.int32
    y64 = y32.astype(np.float64)
    diameter = max(np.linalg.norm(a - b) for a in y64 for b in y64)
    assert int(count) == _components(y64, 0.05 * diameter) == 3

    # P of three distinct tokens, each repeated three times: exactly rank 3 (repeated rows/columns)
    Q = K = np.eye(D, dtype=np.float32)
    Q64 = K64 = np.eye(D)
    x = np.repeat(rng.normal(size=(3, D)), 3, axis=0).astype(np.float32)
    P = af.attention_matrix(jnp.asarray(x), jnp.asarray(Q), jnp.asarray(K))
    _check_float32(P)
    P64 = ref_attention(x.astype(np.float64), Q64, K64)
    s = np.linalg.svd(P64, compute_uv=False)
    assert s[2] > 1e-2 * s[0] and s[3] < 1e-12 * s[0]
    # tol 1e-4: float32's SVD leaves the six zero singular values below ~9 eps sigma_1 (~1e-6), far
    # below it; the three others are above 1e-2 sigma_1 (checked above), far above it
    rank = numerical_rank(P, tol=1e-4)
    assert rank.dtype == jnp.int32 and int(rank) == int(np.sum(s > 1e-4 * s[0])) == 3
    dist = boolean_distance(P)
    _check_float32(dist)
    # 1 - max_j P_ij: one entry of P (<= 1, so its relative error is an absolute one) and a subtraction
    np.testing.assert_allclose(float(dist), np.max(1 - P64.max(axis=1)), rtol=0,
                               atol=_attention_rtol(x, Q, K) + EPS)


# --- no global configuration is changed ---------------------------------------------------------
def test_importing_attnflow_and_simulating_leave_float64_mode_off():
    for module in pkgutil.walk_packages(af.__path__, "attnflow."):
        if module.name != "attnflow.__main__":
            importlib.import_module(module.name)
            assert not jax.config.jax_enable_x64, f"importing {module.name} enabled float64"
    (x0, Q, K, V), _ = _problem(8)
    assert af.simulate(x0, Q, K, V, t1=1.0, num_saves=2).states.dtype == jnp.float32
    assert not jax.config.jax_enable_x64
    # a float64 run happens in a scope: float64 numbers inside, the setting unchanged outside
    sim = af.simulate(x0.astype(np.float64), Q, K, V, t1=1.0, num_saves=2, dtype="float64")
    assert sim.states.dtype == np.float64
    assert not jax.config.jax_enable_x64
    assert jnp.zeros(1, dtype=float).dtype == jnp.float32


def test_draws_keep_an_asked_float64_and_default_to_jax_float_without_a_warning():
    """With JAX's float64 mode off (a user's default): an explicit float64 draw is float64 and equals the
    draw made with the mode on; the default dtype is JAX's default float (float32 here), drawn without
    JAX's truncation warning, and equal to an explicit float32 draw."""
    import warnings

    import jax
    import jax.numpy as jnp

    from attnflow.ensembles import draw_clouds, draw_heads, draw_systems, sample_QK, sample_V

    key, seeds = jax.random.key(3), np.array([5, 6, 7])
    draws = {
        "sample_V": lambda **kw: sample_V(key, "goe", 4, **kw),
        "sample_QK": lambda **kw: sample_QK(key, "spd", 4, **kw)[1],
        "draw_systems": lambda **kw: draw_systems(seeds, "wishart", "uniform", 3, **kw)[2],
        "draw_heads": lambda **kw: draw_heads(seeds, "ginibre", "spd", 3, **kw)[1],
        "draw_clouds": lambda **kw: draw_clouds(11, 5, 3, clouds=2, on_sphere=True, **kw),
    }
    assert not jax.config.jax_enable_x64
    for name, draw in draws.items():
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # JAX's "will be truncated to dtype float32" would raise here
            default = draw()
            asked64 = draw(dtype=jnp.float64)
        assert default.dtype == jnp.float32, name
        np.testing.assert_array_equal(np.asarray(default), np.asarray(draw(dtype=jnp.float32)), err_msg=name)
        assert asked64.dtype == jnp.float64, name
        with jax.enable_x64(True):
            np.testing.assert_array_equal(np.asarray(asked64), np.asarray(draw()), err_msg=name)
