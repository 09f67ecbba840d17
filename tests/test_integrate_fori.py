"""The layer steppers' loop="fori": one scan over the save intervals with fori_loops inside, the same
numbers as the scan blocks, one compiled layer and save_fn whatever the saved layers, the by-product of the
layer that leaves a save, the non-finite marker, forward-mode derivatives and the refusal of a bad loop."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnflow import AttentionFlow
from attnflow._x64 import float64_scope
from attnflow.dynamics import AbstractDynamics
from attnflow.errors import InputError
from attnflow.integrate import RESULTS, EulerStepper, RKStepper, SaveLayers

SAVE_SETS = [(0, 3, 7, 20), (2, 5), (1, 2, 4, 8, 16), (20,), (0, 1, 2, 4, 5, 7, 8, 10, 20)]


def _flow(d=3, seed=0):
    Q, K, V = jax.random.normal(jax.random.key(seed), (3, d, d)) / np.sqrt(d)
    return AttentionFlow(Q, K, V)


def _tokens(n=6, d=3, seed=1, dtype=jnp.float64):
    return jax.random.normal(jax.random.key(seed), (n, d), dtype)


class AuxFlow(AttentionFlow):
    """The attention flow handing its own velocity to save_fn."""

    def vector_field_with_aux(self, t, y, args):
        dy = self.vector_field(t, y, args)
        return dy, dy


class BlowsUpAt(AbstractDynamics):
    """Zero before time t_bad, infinite from it on; its by-product is the time it was evaluated at."""

    t_bad: float

    def vector_field(self, t, y, args):
        return jnp.where(t >= self.t_bad, jnp.inf, 0.0) * y

    def vector_field_with_aux(self, t, y, args):
        return self.vector_field(t, y, args), t


def _make(kind, **kw):
    return EulerStepper(0.05, 20, **kw) if kind == "euler" else RKStepper("rk4", 0.05, 20, **kw)


@pytest.mark.parametrize("layers", SAVE_SETS)
@pytest.mark.parametrize("kind", ["euler", "rk4"])
@pytest.mark.parametrize("save_aux", [False, True])
def test_fori_saves_the_scan_blocks_numbers(layers, kind, save_aux):
    with float64_scope():
        f, x0 = AuxFlow(_flow().weights), _tokens()
        save = (lambda t, y, aux: {"y": y, "aux": aux, "t": t}) if save_aux else (lambda t, y, a: {"y": y, "t": t})
        solve = lambda stepper: eqx.filter_jit(lambda x: stepper.solve(f, x, save_fn=save))(x0)
        scan = solve(_make(kind, save_at=layers, save_aux=save_aux))
        fori = solve(_make(kind, save_at=layers, save_aux=save_aux, loop="fori"))
        for key in scan.ys:
            np.testing.assert_allclose(fori.ys[key], scan.ys[key], rtol=0, atol=1e-13)
        np.testing.assert_array_equal(fori.ts, scan.ts)
        assert float(fori.t_nonfinite) == float(scan.t_nonfinite) == np.inf


def test_fori_compiles_the_layer_and_save_fn_once():
    calls = {"scan": 0, "fori": 0}
    layers = SaveLayers.log_spaced(12, 200)  # gaps 1, 1, 1, 2, 3, ...: as many runs as saves
    assert len(layers.runs()) > 5

    def counting(loop):
        def save(t, y, args):
            calls[loop] += 1
            return jnp.sum(y)
        return save

    f, x0 = _flow(), _tokens(dtype=jnp.float32)
    for loop in ("scan", "fori"):
        for save_aux in (False, True):
            EulerStepper(0.01, 200, save_at=layers, loop=loop, save_aux=save_aux).solve(
                AuxFlow(f.weights), x0, save_fn=counting(loop))
    # scan: with more than MAX_SCAN_RUNS runs, one interval body too (the first or last save traced apart)
    assert calls["fori"] == 2 and calls["scan"] == 4


@pytest.mark.parametrize("save_aux", [False, True])
def test_fori_marks_the_first_non_finite_layer_as_the_scan_does(save_aux):
    field, x0 = BlowsUpAt(0.52), _tokens(dtype=jnp.float32)  # layer 11 (t = 0.55) ends non-finite
    for layers in ((0, 5, 20), (0, 3, 15)):
        scan = EulerStepper(0.05, 20, save_at=layers, save_aux=save_aux).solve(field, x0)
        fori = EulerStepper(0.05, 20, save_at=layers, save_aux=save_aux, loop="fori").solve(field, x0)
        assert float(fori.t_nonfinite) == float(scan.t_nonfinite) == pytest.approx(0.6)
        assert int(fori.result) == int(scan.result) == RESULTS.nonfinite


def test_fori_layer_past_the_end_is_for_its_by_product_only():
    # a save at num_layers with save_aux steps layer num_layers for its by-product: never marked non-finite
    field, x0 = BlowsUpAt(1.0), _tokens(dtype=jnp.float32)
    traj = EulerStepper(0.05, 20, save_at=(0, 10, 20), save_aux=True, loop="fori").solve(
        field, x0, save_fn=lambda t, y, aux: aux)
    assert np.isinf(float(traj.t_nonfinite)) and int(traj.result) == RESULTS.successful
    np.testing.assert_allclose(traj.ys, [0.0, 0.5, 1.0], rtol=1e-6)  # the by-product of the saved state's layer
    assert bool(jnp.all(jnp.isfinite(EulerStepper(0.05, 20, save_at=(20,), loop="fori").solve(field, x0).ys)))


def test_fori_is_forward_differentiable():
    with float64_scope():
        f, x0 = _flow(), _tokens()

        def last(dt, loop):
            return EulerStepper(dt, 20, save_at=(0, 3, 20), loop=loop).solve(f, x0).ys[-1]

        _, fori = jax.jvp(lambda dt: last(dt, "fori"), (0.05,), (1.0,))
        _, scan = jax.jvp(lambda dt: last(dt, "scan"), (0.05,), (1.0,))
        np.testing.assert_allclose(fori, scan, rtol=0, atol=1e-12)


@pytest.mark.parametrize("loop", ["while", None, 1])
def test_bad_loop_is_one_sentence(loop):
    with pytest.raises(InputError, match="loop must be one of"):
        EulerStepper(0.1, 10, loop=loop)
    with pytest.raises(InputError, match="loop must be one of"):
        RKStepper("heun", 0.1, 10, loop=loop)


class Accelerating(AuxFlow):
    """The attention flow sped up by (1 + 10 t): its steps depend on the time each layer is given."""

    def vector_field(self, t, y, args):
        return (1 + 10 * t) * super().vector_field(t, y, args)


def _scans(jaxpr) -> int:
    """How many scan loops a jaxpr holds, nested ones included (each compiles a loop body of its own)."""
    count = 0
    for eqn in jaxpr.eqns:
        count += eqn.primitive.name == "scan"
        for value in eqn.params.values():
            for sub in value if isinstance(value, (tuple, list)) else (value,):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    count += _scans(inner)
    return count


@pytest.mark.parametrize("save_aux", [False, True])
@pytest.mark.parametrize("layers", [SaveLayers.log_spaced(16, 120), (3, 4, 6, 9, 13, 20, 30, 45, 47, 100)])
def test_scan_with_many_runs_decomposes_gaps_into_powers_of_two(monkeypatch, layers, save_aux):
    """loop="scan" with more than MAX_SCAN_RUNS runs of gaps: the same numbers and gradient as one scan block per
    run, with one block per binary digit of the largest gap instead of one per run."""
    from attnflow.integrate import _euler

    with float64_scope():
        f, x0 = AuxFlow(_flow().weights), _tokens()
        save = (lambda t, y, aux: {"y": y, "aux": aux, "t": t}) if save_aux else (lambda t, y, a: {"y": y, "t": t})
        stepper = EulerStepper(0.01, 120, save_at=layers, save_aux=save_aux, checkpoint=None)
        runs = len(stepper.save_at.runs())
        assert runs > _euler.MAX_SCAN_RUNS

        def loss(x):
            return jnp.sum(stepper.solve(f, x, save_fn=save).ys["y"][-3:] ** 2)

        # each solve one jitted program, traced (and so split into blocks) under the MAX_SCAN_RUNS of its call;
        # the accelerating field's final states (~1e2) run op by op in both, rounded alike at atol 1e-13
        solve = lambda field, fn=None: eqx.filter_jit(lambda x: stepper.solve(field, x, save_fn=fn))(x0)
        blocks = lambda: _scans(jax.make_jaxpr(lambda x: stepper.solve(f, x, save_fn=save).ys)(x0).jaxpr)
        gradient = (lambda: jax.jit(jax.grad(loss))(x0)) if not save_aux else (lambda: None)  # reverse mode: one case each
        binary, g_binary, binary_blocks = solve(f, save), gradient(), blocks()
        monkeypatch.setattr(_euler, "MAX_SCAN_RUNS", 10**9)   # one scan block per run of equal gaps
        per_run, g_per_run, per_run_blocks = solve(f, save), gradient(), blocks()
        for key in per_run.ys:
            np.testing.assert_allclose(binary.ys[key], per_run.ys[key], rtol=0, atol=1e-13)
        if not save_aux:
            np.testing.assert_allclose(g_binary, g_per_run, rtol=1e-12, atol=1e-13)
        # the layers' times: a field that grows with t takes the same steps in both, and a field that blows up
        # from t = 0.537 on is marked at the same layer
        finals, marks = [], []
        for limit in (4, 10**9):
            monkeypatch.setattr(_euler, "MAX_SCAN_RUNS", limit)
            finals.append(stepper.solve(Accelerating(_flow().weights), x0).ys[-1])  # op by op, both alike
            marks.append(float(solve(BlowsUpAt(0.537), save).t_nonfinite))
        np.testing.assert_allclose(finals[0], finals[1], rtol=0, atol=1e-13)
        assert marks[0] == marks[1] == pytest.approx(0.55)
        digits = int(np.diff(stepper.save_at.indices()).max()).bit_length()
        # binary: the interval scan, one block per digit, the layers before the first / after the last save
        assert binary_blocks <= digits + 3 and runs <= per_run_blocks and binary_blocks < per_run_blocks
