"""Mutation tests: the report's cases, run on deliberately wrong vector fields, must fail.

Each wrong field (attnflow.report._mutations) replaces the integrated dynamics through
``reproduce(field_factory=...)``; everything else (weights, initial configurations, checks) is
unchanged. Where a mutation does not change the field for a case (e.g. V transposed when V = I),
the case runs the right dynamics and must pass; we measure that here, by evaluating both fields on
a random state, instead of listing it by hand. Tiny settings: n = 8, one configuration, short
horizons, no figures.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnflow.fields import make_dynamics
from attnflow.report import reproduce
from attnflow.report._catalogue import EULER_STEPS
from attnflow.report._mutations import MUTATIONS, mutated_field_factory

CASES = ["thm3_1", "thm4_2_2d", "thm5_2", "thm4_2_euler_dt1"]
TINY = {"batch": 1, "num_saves": 41, "gif_frames": 0,
        "thm3_1": {"n": 8, "t1": 8.0}, "thm4_2_2d": {"n": 8, "t1": 8.0}, "thm5_2": {"n": 8, "t1": 8.0},
        "thm4_2_euler_dt1": {"n": 8, "t1": 10.0}}
TESTED = ("scores_from_z", "softmax_axis", "V_transposed", "V_sign", "uniform", "no_self_term", "QK_transposed")


def _failed_cases(summary):
    bad = {c["case"] for c in summary["checks"] if c["passed"] is False}
    return bad | set(summary["failed_cases"])


@pytest.fixture(scope="module")
def right(tmp_path_factory):
    return reproduce(tmp_path_factory.mktemp("right") / "r", cases=CASES, progress=False, figures=False,
                     overrides=TINY)


def test_right_field_passes_every_graded_check(right):
    failed = [(c["case"], c["name"], c["observed"]) for c in right["checks"] if c["passed"] is False]
    assert not failed and right["all_passed"]
    assert right["num_graded"] >= 24


def _recording(mutation, active):
    """The mutated factory, noting per case whether the mutation changes the field at all."""
    wrong = mutated_field_factory(mutation)
    cases = iter(CASES)

    def factory(Q, K, V, *, picture, method):
        f = wrong(Q, K, V, picture=picture, method=method)
        g = make_dynamics(Q, K, V, picture=picture, method=method)
        name = next(cases)
        if method == "euler":  # the discrete rescaling is defined on the layer grid only (bound by the stepper)
            dt = EULER_STEPS[name]
            num_layers = round(TINY[name]["t1"] / dt)
            f, g = f.on_grid(dt, 0.0, num_layers), g.on_grid(dt, 0.0, num_layers)
        y = jax.random.normal(jax.random.key(0), (5, V.shape[0]), V.dtype)
        t = jnp.asarray(1.0 if method == "euler" else 0.7, V.dtype)
        active.append(float(jnp.max(jnp.abs(f.vector_field(t, y, None) - g.vector_field(t, y, None)))) > 1e-9)
        return f

    return factory


@pytest.mark.parametrize("mutation", TESTED)
def test_wrong_field_fails_the_cases_it_changes(mutation, tmp_path, right):
    active = []
    s = reproduce(tmp_path / "w", cases=CASES, progress=False, figures=False, overrides=TINY,
                  field_factory=_recording(mutation, active))
    assert len(active) == len(CASES)  # one field per case, in report order
    changed = {c for c, a in zip(CASES, active) if a}
    failed = _failed_cases(s)
    assert failed == changed, (mutation, changed, failed)
    assert len(changed) >= len(CASES) // 2  # each tested mutation changes (and fails) at least half the cases
    assert not s["all_passed"]


def test_every_mutation_is_a_different_field():
    """The mutations are genuinely wrong: each differs from the right field on a generic system."""
    rng = np.random.default_rng(0)
    Q, K = (jnp.asarray(rng.normal(size=(3, 3))) for _ in range(2))
    V = jnp.asarray(rng.normal(size=(3, 3)))
    y = jnp.asarray(rng.normal(size=(6, 3)))
    g = make_dynamics(Q, K, V, picture="rescaled", method="tsit5")
    for m in MUTATIONS:
        f = mutated_field_factory(m)(Q, K, V, picture="rescaled", method="tsit5")
        assert float(jnp.max(jnp.abs(f.vector_field(0.5, y, None) - g.vector_field(0.5, y, None)))) > 1e-3, m
