"""Property: any input to a public entry either runs or raises InputError, never another error;
and finite valid input gives finite output where the mathematics promises it."""

from __future__ import annotations

import numpy as np
import jax.numpy as jnp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import attnflow as af
from attnflow import geometry as geo
from attnflow import observables as obs

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)

ENTRIES = [0.0, 1.0, -1.0, 0.5, -2.0, 2.0, np.nan, np.inf, -np.inf]
FINITE_ENTRIES = [0.0, 1.0, -1.0, 0.5, -0.5]


def arrays(max_rank: int = 3, max_side: int = 3, finite: bool = False):
    dtypes = st.sampled_from(["float32", "float64", "int32", "complex64"] if not finite else ["float32", "float64"])
    return dtypes.flatmap(lambda dt: hnp.arrays(
        dt, hnp.array_shapes(min_dims=0, max_dims=max_rank, min_side=0, max_side=max_side),
        elements=st.sampled_from([0, 1, -1, 2] if dt.startswith("int") else FINITE_ENTRIES if finite else ENTRIES)))


SCALARS = st.one_of(st.sampled_from([0, 1, 2, -1, 0.5, 1e-3, 0.0, -0.5, np.nan, np.inf, -np.inf, 2.5, True]),
                    st.sampled_from([None, "a", "1", [1.0], (1, 2), 1 + 2j]))
ANYTHING = st.one_of(arrays(), SCALARS)


def finite(*xs) -> bool:
    for x in xs:
        try:
            a = np.asarray(x)
        except Exception:
            return False
        if a.dtype.kind not in "iuf" or not np.all(np.isfinite(a)):
            return False
    return True


def runs_or_refuses(call):
    """The result of ``call()``, or None when it raised InputError (any other error fails the test)."""
    try:
        return call()
    except af.InputError as err:
        assert str(err).endswith(".") and "\n" not in str(err)
        return None


def all_finite(tree) -> bool:
    import jax

    return all(bool(jnp.all(jnp.isfinite(leaf))) for leaf in jax.tree_util.tree_leaves(tree))


@SETTINGS
@given(x0=st.one_of(arrays(), arrays(max_rank=2, finite=True).filter(lambda a: a.ndim == 2)),
       V=st.one_of(st.just(np.eye(2) * 0.5), arrays(max_rank=2)),
       dt=st.sampled_from([0.5, 0.25, 0.0, -0.5, np.nan, 0.3, "x"]),
       t1=st.sampled_from([1.0, 0.5, 0.0, -1.0, np.inf]),
       save_every=st.sampled_from([None, 1, 2, 0, 2.5]),
       mask=st.sampled_from([None, "causal", "bad", np.ones((2, 2), bool), np.ones((3, 3))]),
       dtype=st.sampled_from(["float32", "float64", "float16"]))
def test_simulate_euler(x0, V, dt, t1, save_every, mask, dtype):
    d = V.shape[-1] if np.ndim(V) == 2 else 2
    Q = np.eye(d) if np.ndim(V) == 2 else np.eye(2)
    sim = runs_or_refuses(lambda: af.simulate(x0, Q, Q, V, t1=t1, method="euler", dt=dt, save_every=save_every,
                                              mask=mask, dtype=dtype))
    if sim is not None and finite(x0, V):
        assert all_finite(sim.states)


@SETTINGS
@given(ts=st.one_of(arrays(max_rank=2), SCALARS), num_saves=SCALARS, rtol=st.sampled_from([None, 1e-5, 0.0, -1.0]))
def test_simulate_ode_save_times(ts, num_saves, rtol):
    x0 = np.random.default_rng(0).normal(size=(3, 2))
    sim = runs_or_refuses(lambda: af.simulate(x0, np.eye(2), np.eye(2), -np.eye(2), t1=1.0, ts=ts, num_saves=num_saves,
                                              rtol=rtol, method="euler" if ts is None else "tsit5", dt=0.5))
    if sim is not None:
        assert all_finite(sim.states)


@SETTINGS
@given(dt=SCALARS, num_layers=SCALARS, t0=SCALARS, save_every=SCALARS)
def test_euler_stepper(dt, num_layers, t0, save_every):
    stepper = runs_or_refuses(lambda: af.EulerStepper(dt, num_layers, t0=t0, save_every=save_every))
    if stepper is not None and stepper.num_layers <= 8:
        flow = af.AttentionFlow(np.eye(2), np.eye(2), -np.eye(2))
        assert all_finite(stepper.solve(flow, np.ones((3, 2))).ys)


@SETTINGS
@given(Q=st.one_of(st.just(np.eye(2)), arrays(max_rank=3)), V=st.one_of(st.just(np.eye(2)), arrays(max_rank=3)),
       beta=SCALARS, t0=SCALARS, kind=st.sampled_from(["raw", "rescaled", "ffn", "block"]),
       y=arrays(max_rank=3, finite=True))
def test_dynamics_constructors(Q, V, beta, t0, kind, y):
    def build():
        if kind == "raw":
            return af.AttentionFlow(Q, Q, V, beta)
        if kind == "rescaled":
            return af.RescaledFlow(Q, Q, V, beta, t0=t0)
        ffn = af.dynamics.FeedForward(Q, V)
        return ffn if kind == "ffn" else af.dynamics.TransformerBlock(af.AttentionFlow(np.eye(2), np.eye(2), np.eye(2)), ffn)

    field = runs_or_refuses(build)
    if field is not None:
        out = runs_or_refuses(lambda: field(0.0, y))
        if out is not None and finite(Q, V, beta, t0) and abs(float(beta)) <= 2:
            assert all_finite(out)


GEOMETRY = [
    lambda a, s: geo.soft_max(a, s),
    lambda a, s: geo.boltzmann_min(a, s),
    lambda a, s: geo.soft_cluster_count(a, s),
    lambda a, s: geo.soft_rank(a, temperature=s),
    lambda a, s: geo.hyperplane_distances(a, np.ones(np.shape(a)[-1:]), scale=s),
    lambda a, s: geo.vertex_distances(a, np.ones((2, 2)), scale=1.0, temperature=s),
    lambda a, s: geo.uniform_distance_soft(a, temperature=s),
    lambda a, s: geo.boolean_distance_soft(a, temperature=s),
    lambda a, s: geo.good_triple_margins(np.eye(2), np.eye(2), a),
    lambda a, s: geo.distance_to_paranormal(a, s),
    lambda a, s: geo.qk_lambda_min(a, a),
    lambda a, s: obs.num_clusters(a, rel_tol=s),
    lambda a, s: obs.diameter(a),
    lambda a, s: obs.boolean_distance(a),
    lambda a, s: obs.uniform_distance(a),
    lambda a, s: obs.num_levels(a, s),
    lambda a, s: obs.abz_levels(a, s),
    lambda a, s: obs.projections(a, np.ones(2)),
    lambda a, s: af.softmax(a),
    lambda a, s: af.attention_matrix(a, np.eye(2), np.eye(2), beta=s),
]


@pytest.mark.parametrize("index", range(len(GEOMETRY)))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(a=ANYTHING, s=SCALARS)
def test_geometry_and_observables(index, a, s):
    out = runs_or_refuses(lambda: GEOMETRY[index](a, s))
    sensible = isinstance(s, (int, float)) and not isinstance(s, bool) and 1e-3 <= s <= 10
    if out is not None and finite(a) and sensible and index not in (12, 13):
        assert all_finite(out)
