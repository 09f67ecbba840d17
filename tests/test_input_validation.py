"""Bad input to the public API: one InputError sentence that names the argument, before any work."""

from __future__ import annotations

import numpy as np
import jax
import jax.numpy as jnp
import pytest

import attnflow as af
from attnflow import geometry as geo
from attnflow import observables as obs
from attnflow import spectral
from attnflow.dynamics import FeedForward, LayerInterpolation, TransformerBlock, Wrapped, perturbed_layers

I2 = np.eye(2)
X = np.random.default_rng(0).normal(size=(4, 2))
FLOW = af.AttentionFlow(I2, I2, I2)
P = np.full((3, 3), 1 / 3)


def sim(**kw):
    return lambda: af.simulate(X, I2, I2, I2, **{"t1": 1.0, **kw})


CASES = [
    # simulate: save times, counts, sizes
    ("ts", sim(ts=[0.0, np.nan])),
    ("ts", sim(ts=[[0.0, 1.0]])),
    ("ts", sim(ts=[0.0, 2.0])),
    ("ts", sim(ts="0 1")),
    ("ts", sim(method="euler", dt=0.5, ts=[0.0, 1.0])),
    ("num_saves", sim(num_saves=2.5)),
    ("num_saves", sim(num_saves=0)),
    ("num_saves", sim(num_saves=-3)),
    ("num_saves", sim(num_saves=True)),
    ("num_saves", sim(num_saves=10**9)),
    ("save_every", sim(method="euler", dt=0.1, save_every=2.5)),
    ("save_every", sim(method="euler", dt=1e-9)),
    ("(t1 - t0)/dt", sim(method="euler", dt=1e-10)),
    ("dt", sim(method="euler", dt=np.inf)),
    ("dt", sim(method="euler", dt="0.1")),
    ("t0 and t1", sim(t0="a")),
    ("rtol", sim(rtol="tight")),
    ("atol", sim(atol=0.0)),
    ("max_steps", sim(max_steps=10.5)),
    ("x0", lambda: af.simulate(X + 1j, I2, I2, I2, t1=1.0)),
    ("x0", lambda: af.simulate("tokens", I2, I2, I2, t1=1.0)),
    ("x0", lambda: af.simulate(None, I2, I2, I2, t1=1.0)),
    ("mask", sim(method="euler", dt=0.5, mask=np.ones((3, 3), bool))),
    ("mask", sim(method="euler", dt=0.5, mask=np.ones((4, 4)))),
    # the layer stepper
    ("num_layers", lambda: af.EulerStepper(0.001, 10**10)),
    ("num_layers", lambda: af.EulerStepper(0.1, 2.5)),
    ("save_every", lambda: af.EulerStepper(0.1, 4, save_every=True)),
    ("dt", lambda: af.EulerStepper(np.nan, 4)),
    ("t0", lambda: af.EulerStepper(0.1, 4, t0=np.inf)),
    ("checkpoint", lambda: af.EulerStepper(0.1, 4, checkpoint=True)),
    ("EulerStepper", lambda: af.EulerStepper(0.001, 10**9).solve(FLOW, X)),
    ("y", lambda: af.solve_euler(FLOW, np.ones((3, 3)), dt=0.1, num_steps=2)),
    ("y", lambda: af.solve_ode(FLOW, np.ones((3, 3)), t0=0.0, t1=1.0)),
    ("y", lambda: FLOW(0.0, np.ones((3, 5)))),
    # dynamics constructors
    ("t0", lambda: af.RescaledFlow(I2, I2, I2, t0=np.nan)),
    ("W", lambda: Wrapped(af.RescaledFlow(I2, I2, I2), W=(3, 3))),
    ("W", lambda: Wrapped(af.RescaledFlow(I2, I2, I2), W=np.eye(3))),
    ("feedforward", lambda: TransformerBlock(FLOW, FeedForward(np.ones((4, 3)), np.ones((3, 4))))),
    ("W2", lambda: FeedForward(np.ones((4, 2)), np.ones((3, 4)))),
    ("W1", lambda: FeedForward(np.ones((4, 2)) * np.nan, np.ones((2, 4)))),
    ("mask", lambda: af.AttentionFlow(I2, I2, I2, mask=np.ones((3, 3)))),
    ("mask", lambda: af.AttentionFlow(I2, I2, I2, mask=np.ones((3, 3), bool))(0.0, X)),
    ("terms", lambda: FLOW + af.AttentionFlow(np.eye(3), np.eye(3), np.eye(3))),
    ("terms", lambda: af.SumOfFields(())),
    ("dt", lambda: LayerInterpolation(af.AttentionWeights.stack([af.AttentionWeights(I2, I2, I2)] * 2, "layer"),
                                      dt=0.0)),
    ("epsilon", lambda: perturbed_layers(af.AttentionWeights(I2, I2, I2), 3, np.nan, jax.random.key(0))),
    ("num_layers", lambda: perturbed_layers(af.AttentionWeights(I2, I2, I2), 2.0, 0.1, jax.random.key(0))),
    ("normalisation", lambda: af.dynamics.LayeredFlow(
        af.AttentionWeights.stack([af.AttentionWeights(I2, I2, I2)] * 2, "layer"), normalisation="max")),
    # attention kernel
    ("mask", lambda: af.attend(jnp.ones((2, 1)), jnp.ones((2, 1)), jnp.ones((2, 1)), mask=jnp.ones((3, 2), bool))),
    ("attend", lambda: af.attend(jnp.ones((2, 1)), jnp.ones((2, 3)), jnp.ones((2, 1)))),
    ("axis", lambda: af.softmax(jnp.ones((2, 3)), axis=2)),
    ("s", lambda: af.softmax("scores")),
    ("Q", lambda: af.attention_matrix(X, np.eye(3), np.eye(3))),
    ("beta", lambda: af.attention_matrix(X, I2, I2, beta=np.nan)),
    ("x", lambda: af.scores(X + 1j, I2, I2)),
    # geometry
    ("y", lambda: geo.soft_cluster_count(X * np.nan, 1.0)),
    ("temperature", lambda: geo.soft_max(jnp.ones(3), 0.0)),
    ("temperature", lambda: geo.boltzmann_min(jnp.ones(3), -1.0)),
    ("axis", lambda: geo.soft_min(jnp.ones(3), 0.1, axis=1)),
    ("scale", lambda: geo.hyperplane_distances(X, np.ones(2), scale=0.0)),
    ("scale", lambda: geo.hyperplane_levels(np.ones(3), scale=np.inf)),
    ("temperature", lambda: geo.uniform_distance_soft(P, temperature=-1.0)),
    ("P", lambda: geo.boolean_distance_soft(np.ones((2, 3)))),
    ("scale", lambda: geo.soft_rank(P, scale=0.0)),
    ("r", lambda: geo.spectral_projector(np.eye(3), 4)),
    ("K", lambda: geo.qk_lambda_min(np.eye(2), np.eye(3))),
    ("f", lambda: geo.hvp("f", jnp.ones(2), jnp.ones(2))),
    ("vector", lambda: geo.hvp(jnp.sum, jnp.ones(2), jnp.ones(3))),
    ("argnums", lambda: geo.per_system_grad(lambda a: jnp.sum(a), jnp.ones((2, 2)), argnums=3)),
    # observables
    ("P", lambda: obs.uniform_distance(np.ones((2, 3)))),
    ("y", lambda: obs.diameter(np.ones(3))),
    ("y", lambda: obs.cluster_labels(np.ones(3))),
    ("phi_dual", lambda: obs.projections(X, np.ones(3))),
    ("s", lambda: obs.num_levels(np.ones((2, 2)), 0.1)),
    ("W", lambda: obs.codim_projections(X, np.ones((1, 3)))),
    # spectral
    ("V", lambda: spectral.check_batch(I2[None], I2[None], np.full((1, 2, 2), np.nan))),
    ("V", lambda: spectral.predict_geometry(I2, I2, I2 + 1j)),
    ("eigenvalues", lambda: spectral.check_batch(I2[None], I2[None], I2[None], eigenvalues=jnp.ones((1, 3)))),
    ("V", lambda: spectral.eigen_stats(I2)),
    ("tol", lambda: spectral.unstable_projector(I2, tol="small")),
]


@pytest.mark.parametrize("name, call", CASES, ids=[f"{i}-{c[0]}" for i, c in enumerate(CASES)])
def test_bad_input_is_one_sentence_naming_the_argument(name, call, monkeypatch):
    monkeypatch.setenv("ATTNFLOW_MEMORY_LIMIT", "1e9")  # size refusals do not depend on this machine
    with pytest.raises(af.InputError) as info:
        call()
    message = str(info.value)
    assert name in message, message
    assert message.endswith(".") and "\n" not in message, message


def test_checks_keep_working_under_jit():
    """Shapes are static, so a wrong token dimension is refused inside jit too; values are not checked."""
    with pytest.raises(af.InputError, match="the state y"):
        jax.jit(lambda y: FLOW(0.0, y))(jnp.ones((3, 3)))
    assert jnp.isfinite(jax.jit(lambda T: geo.soft_max(jnp.ones(3), T))(0.5))
    ts = jnp.linspace(0.0, 1.0, 3)
    out = jax.jit(lambda t: af.simulate(X, I2, I2, I2, t1=1.0, ts=t).states)(ts)
    assert out.shape == (3, 4, 2)
