"""Simulation.ts is shared by a batch; Simulation.save / attnflow.load round-trip without pickle."""

import json

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attnflow as af
from attnflow import InputError


def _problem(rng, B=None, n=5, d=2):
    x0 = rng.normal(size=((B,) if B else ()) + (n, d))
    Q, K = rng.normal(size=(d, d)) * 0.5, rng.normal(size=(d, d)) * 0.5
    V = -np.eye(d) + 0.1 * rng.normal(size=(d, d))
    return x0, Q, K, V


def _same(a: af.Simulation, b: af.Simulation) -> None:
    """Equal statics, pytree structure, dtypes, shapes and values."""
    assert (a.picture, a.method) == (b.picture, b.method)
    leaves_a, tree_a = jax.tree_util.tree_flatten(a)
    leaves_b, tree_b = jax.tree_util.tree_flatten(b)
    assert tree_a == tree_b
    for x, y in zip(leaves_a, leaves_b):
        assert np.asarray(x).dtype == np.asarray(y).dtype and np.shape(x) == np.shape(y)
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    assert eqx.tree_equal(a, b)


@pytest.mark.parametrize("method,kw", [("euler", {"dt": 0.25}), ("tsit5", {"num_saves": 4}),
                                       ("tsit5", {"num_saves": 4, "batch_mode": "fold"})])
def test_batched_ts_is_shared(rng, method, kw):
    """A batch's save times are one (T,) array, the same as an unbatched run's."""
    x0, Q, K, V = _problem(rng, B=3)
    sim = af.simulate(x0, Q, K, V, t1=1.0, method=method, batch="x0", return_attention=True, **kw)
    one = af.simulate(x0[0], Q, K, V, t1=1.0, method=method, **{k: v for k, v in kw.items() if k != "batch_mode"})
    T = sim.states.shape[1]
    assert sim.ts.shape == (T,) == one.ts.shape and sim.states.shape == (3, T, 5, 2)
    assert sim.attention.shape == (3, T, 5, 5)
    np.testing.assert_array_equal(sim.ts, one.ts)


def test_batched_weights_ts_is_shared(rng):
    """Batched weights (vmapped fields) also give ts (T,)."""
    x0, Q, K, V = _problem(rng)
    Vs = np.stack([V, 0.5 * V])
    sim = af.simulate(x0, Q, K, Vs, t1=1.0, method="euler", dt=0.5, batch="V")
    assert sim.ts.shape == (3,) and sim.states.shape == (2, 3, 5, 2)


def test_round_trip_unbatched(rng, tmp_path):
    x0, Q, K, V = _problem(rng)
    sim = af.simulate(x0, Q, K, V, t1=1.0, num_saves=6, picture="rescaled", return_attention=True)
    sim.save(tmp_path / "one.npz")
    back = af.load(tmp_path / "one.npz")
    _same(sim, back)
    assert back.tokens is not None and back.picture == "rescaled" and back.method == "tsit5"


def test_round_trip_batched_with_attention(rng, tmp_path):
    x0, Q, K, V = _problem(rng, B=3)
    sim = af.simulate(x0, Q, K, V, t1=1.0, method="euler", dt=0.25, batch="x0", return_attention=True)
    sim.save(tmp_path / "batch.npz")
    back = af.load(tmp_path / "batch.npz")
    _same(sim, back)
    assert back.attention.shape == (3, 5, 5, 5) and back.ts.shape == (5,)


def test_round_trip_save_fn_pytree(rng, tmp_path):
    """A dict pytree from save_fn (with a nested tuple) keeps its structure; tokens and attention are None."""
    x0, Q, K, V = _problem(rng, B=2)
    save_fn = lambda t, y, args: {"mean": y.mean(axis=0), "pair": (y[0], jnp.linalg.norm(y, axis=-1))}
    sim = af.simulate(x0, Q, K, V, t1=1.0, method="euler", dt=0.5, batch="x0", save_fn=save_fn)
    path = tmp_path / "tree.npz"
    sim.save(path)
    back = af.load(path)
    _same(sim, back)
    assert back.tokens is None and back.attention is None
    assert isinstance(back.states, dict) and isinstance(back.states["pair"], tuple)
    meta = json.loads(str(np.load(path, allow_pickle=False)["__attnflow_simulation__"][()]))
    assert meta["fields"]["tokens"] is None and "dict" in meta["fields"]["states"]
    assert meta["picture"] == "raw" and meta["attnflow_version"] == af.__version__


def test_round_trip_float32(rng, tmp_path):
    x0, Q, K, V = _problem(rng)
    sim = af.simulate(x0, Q, K, V, t1=1.0, method="euler", dt=0.5)
    assert sim.states.dtype == np.float32
    sim.save(tmp_path / "f32.npz")
    back = af.load(tmp_path / "f32.npz")
    _same(sim, back)
    assert back.states.dtype == np.float32 and isinstance(back.states, jax.Array)


def test_round_trip_float64(rng, tmp_path, x64_here):
    x0, Q, K, V = _problem(rng, B=2)
    sim = af.simulate(x0, Q, K, V, t1=1.0, num_saves=3, dtype="float64", batch="x0", return_attention=True)
    assert sim.states.dtype == np.float64
    sim.save(tmp_path / "f64.npz")
    back = af.load(tmp_path / "f64.npz")
    _same(sim, back)
    assert back.states.dtype == np.float64 and isinstance(back.states, jax.Array)


def test_no_pickle(rng, tmp_path):
    """The file is a plain .npz: NumPy reads every entry with allow_pickle=False."""
    x0, Q, K, V = _problem(rng)
    sim = af.simulate(x0, Q, K, V, t1=1.0, method="euler", dt=0.5, return_attention=True)
    sim.save(tmp_path / "plain.npz")
    with np.load(tmp_path / "plain.npz", allow_pickle=False) as data:
        for key in data.files:
            assert data[key].dtype != object
    assert [p.name for p in tmp_path.iterdir()] == ["plain.npz"]  # no temporary left behind


def test_not_a_simulation(tmp_path):
    np.savez(tmp_path / "other.npz", a=np.zeros(3))
    with pytest.raises(InputError, match="is not an attnflow simulation"):
        af.load(tmp_path / "other.npz")
    (tmp_path / "text.npz").write_text("hello")
    with pytest.raises(InputError, match="is not an attnflow simulation"):
        af.load(tmp_path / "text.npz")
    np.save(tmp_path / "single.npy", np.zeros(3))
    with pytest.raises(InputError, match="single NumPy array"):
        af.load(tmp_path / "single.npy")
    with pytest.raises(InputError, match="does not exist"):
        af.load(tmp_path / "missing.npz")


def test_unstorable_pytree_is_refused(rng, tmp_path):
    """A save_fn output that is not arrays in dicts / tuples / lists is refused in one sentence."""
    sim = af.simulate(np.ones((2, 2)), np.eye(2), np.eye(2), np.eye(2), t1=1.0, method="euler", dt=0.5)
    odd = eqx.tree_at(lambda s: s.states, sim, {1: sim.states})
    with pytest.raises(InputError, match="string keys"):
        odd.save(tmp_path / "odd.npz")
    assert not (tmp_path / "odd.npz").exists()
