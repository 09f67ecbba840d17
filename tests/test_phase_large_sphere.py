"""The phase job on large clouds in R^3 (d = 3, n > LARGE_CLOUD_ABOVE): statistics from
attnflow.observables.sphere_gram_statistics (no n x n matrix), the identity sphere on its sphere path with the degree
of the group's largest beta; the same numbers as the dense Gram matrix and the dense identity sphere. Counts equal;
the inner products and the energy to rounding: the two fields agree to 4e-15 per evaluation (the sphere path's
truncation is below rounding), and 10 layers at beta_n <= 8 grow that by at most e^(beta t) ~ 3e3. The comparisons
with the dense statistics run at n = 1100 with the large-cloud threshold lowered to 1024 (the same code path; the
dense n x n reference costs n^2, and at the default threshold's n = 4200 it took most of this file's time)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attnflow.phase._engine as engine
from attnflow import InputError
from attnflow.dynamics import IdentitySphereFlow, normalise
from attnflow.fields import build_field
from attnflow.phase import check_phase_config, ensemble, load_phase_config


def config(**kw):
    cfg = load_phase_config(None)
    cfg.update(beta=[0.25, 1.0], beta_law="log", n=[4200], d=[3], systems=1, t1=1.0, dt=0.1, checkpoints=3,
               dtype="float64")
    cfg.update(kw)
    return cfg


#: the large-cloud threshold of the comparisons with the dense statistics, and their cloud size above it
SMALL_THRESHOLD, SMALL_LARGE_CLOUD = 1024, 1100


@pytest.mark.parametrize("normalisation", ["softmax", "mean"])
def test_large_sphere_groups_equal_the_dense_statistics(monkeypatch, normalisation):
    # beta_n = gamma log n for the softmax; the 1/n normalisation takes constant betas (its step scale is per beta)
    monkeypatch.setattr(engine, "LARGE_CLOUD_ABOVE", SMALL_THRESHOLD)
    n = SMALL_LARGE_CLOUD
    cfg = (config(n=[n]) if normalisation == "softmax"
           else config(n=[n], normalisation="mean", beta_law="constant", beta=[2.0, 8.0]))
    group = check_phase_config(cfg).groups[0]
    top = np.log(n) if normalisation == "softmax" else 8.0
    assert engine.sphere_statistics_bound(check_phase_config(cfg), group) == pytest.approx(top)
    fast = ensemble(cfg)
    monkeypatch.setattr(engine, "LARGE_CLOUD_ABOVE", 10**9)
    assert engine.sphere_statistics_bound(check_phase_config(cfg), group) is None
    dense = ensemble(cfg)
    assert fast["finite"].all() and dense["finite"].all()
    for key in ("clusters", "pairs_clustered", "span"):
        np.testing.assert_array_equal(fast[key], dense[key])
    for key in ("energy", "ip_min", "ip_mean", "ip_max"):
        np.testing.assert_allclose(fast[key], dense[key], rtol=0, atol=1e-12 * np.abs(dense[key]).max())
    np.testing.assert_allclose(fast["order"], dense["order"], rtol=0, atol=1e-12)


def test_which_groups_read_the_sphere_statistics():
    c = check_phase_config(config(n=[64, 4096, 4097], d=[2, 3, 4], beta=[1.0, 2.0]))
    bounds = {(g.n, g.d): engine.sphere_statistics_bound(c, g) for g in c.groups}
    assert {k: b for k, b in bounds.items() if b is not None} == {(4097, 3): pytest.approx(2 * np.log(4097))}


def test_identity_sphere_takes_the_sphere_path_for_a_traced_beta():
    I = np.eye(3)
    with jax.enable_x64(True):
        x = normalise(jax.random.normal(jax.random.key(3), (300, 3)))

        def field(beta, impl, **kw):
            flow = build_field("sphere", I, I, I, beta=beta, identity_weights=True, attention_impl=impl, **kw)
            return flow.vector_field_with_aux(0.0, x, None)

        betas = jnp.array([0.5, 3.0, 6.0])
        fast = jax.jit(jax.vmap(lambda b: field(b, "harmonic", harmonic_max_score=6.0)))(betas)
        dense = jax.vmap(lambda b: field(b, "dense"))(betas)
        np.testing.assert_allclose(fast[0], dense[0], rtol=0, atol=1e-13)
        np.testing.assert_allclose(fast[1], dense[1], rtol=1e-13)
        # a beta above the bound is an error at run time, not a truncated series
        with pytest.raises(Exception, match="beta exceeds harmonic_max_score"):
            jax.block_until_ready(jax.jit(lambda b: field(b, "harmonic", harmonic_max_score=2.0))(3.0))


@pytest.mark.parametrize("kw,match", [
    (dict(attention_impl="auto", harmonic_max_score=4.0), "attention_impl='harmonic' takes"),
    (dict(attention_impl="harmonic", harmonic_max_score=1.0), "below beta = 2"),
    (dict(attention_impl="harmonic", harmonic_max_score=-1.0), "harmonic_max_score must be"),
])
def test_bad_bounds_are_one_sentence(kw, match):
    with pytest.raises(InputError, match=match):
        IdentitySphereFlow(2.0, **kw)


def test_the_bound_needs_identity_weights():
    I = np.eye(3)
    with pytest.raises(InputError, match="harmonic_max_score with identity_weights=True only"):
        build_field("sphere", I, I, I, beta=1.0, harmonic_max_score=2.0)


def test_the_job_on_two_cpu_devices_finishes(tmp_path):
    """The host statistics called back from a program sharded over two CPU devices hung (both callbacks waiting
    for their arguments on the pool that runs the devices); the job runs such groups on one device. A subprocess,
    so that it has two CPU devices (``--devices 2``), with a deadline far above its 10-20 s. At n = 10^4: with
    the groups sharded over both devices it hangs there, and not at n = 4200 (measured)."""
    import subprocess
    import sys

    config = tmp_path / "large.toml"
    config.write_text('kind = "phase"\nbeta = [0.5, 2.0]\nbeta_law = "log"\nn = [10000]\nd = 3\nsystems = 2\n'
                      't1 = 0.2\ndt = 0.1\ncheckpoints = 2\ndtype = "float64"\n')
    done = subprocess.run([sys.executable, "-m", "attnflow", "phase", str(config), "--out", str(tmp_path / "run"),
                           "--devices", "2", "--no-progress", "--no-figures"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "run" / "cells.csv").exists()


def test_the_study_reads_the_fastest_mode_of_each_geometry():
    # S^2: the fastest degree of the mean field (1, 2, 5, 11 at beta = 1, 4, 16, 64, the mean-field guide's degree
    # selection) and the maxima of a random harmonic of that degree; the circle: k* itself
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks.long_context_phase import fastest_mode

    assert [fastest_mode(b, 3)["l_star"] for b in (1.0, 4.0, 16.0, 64.0)] == [1, 2, 5, 11]
    assert fastest_mode(64.0, 3)["k_star"] == pytest.approx(121 / (2 * np.sqrt(3)))
    assert fastest_mode(4.0, 3)["k_star"] == 2 and fastest_mode(16.0, 2)["k_star"] == 6
