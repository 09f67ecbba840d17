"""The dynamics sweep's extension dynamics: each sweep row equals a direct run.

For every ``dynamics`` value beyond "attention" a tiny sweep runs; then, for each of its
systems, the test redraws the weights from the row's seed, builds the field from the
attnflow.dynamics modules itself, steps it with a plain EulerStepper (the raw picture wherever
one exists, rescaled afterwards with numpy) and classifies the final layer with the host
classifier. The row's label and counts must be equal, and its continuous columns
(max |z_i(t1)|, max |x_i(t1)|, kept in the chunk files) equal to 1e-9 relative: float64 throughout, 10 layers, so the two
routes (e.g. the sweep's exact discrete rescaling against the raw run rescaled by
R^{-10} with cond(R^10) < 10) differ by rounding only.
"""

import csv

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg

from attnflow import AttentionFlow, AttentionWeights
from attnflow.dynamics import LayeredFlow, Wrapped, normalise, perturbed_layers, section12_2_flow, sphere_flow
from attnflow.dynamics import FeedForward, TransformerBlock
from attnflow.dynamics import MixNorm, NormalisedGPT, PeriNorm, PreNorm
from attnflow.ensembles import draw_systems, system_seeds, token_key
from attnflow.errors import InputError
from attnflow.integrate import EulerStepper, sphere_shift
from attnflow.observables import GEOMETRY_LABELS, classify_geometry
from attnflow.runio import load_config
from attnflow.sweep import check_dynamics_config, run_dynamics_sweep
from attnflow._sweep_dynamics import ff_key, layer_key

pytestmark = pytest.mark.usefixtures("x64")  # float64 references

CASES = {  # test id: (dynamics, extra config keys)
    "causal": ("causal", {}),
    "multihead": ("multihead", {"heads": 3}),
    "feedforward-z": ("feedforward", {"activation": "tanh", "ff_weight": "random"}),
    "feedforward-x": ("feedforward", {"activation": "relu", "ff_reading": "x"}),
    "layered": ("layered", {"epsilon": 0.3}),
    "sphere": ("sphere", {}),
    "prenorm": ("prenorm", {}),
    "periln": ("periln", {}),
    "mixln": ("mixln", {"ln_switch": 0.5}),
    "ngpt": ("ngpt", {}),
    "mean": ("mean", {}),
    "block": ("block", {"activation": "gelu", "ff_hidden": 5}),
}
D, N, CLOUDS, DT, LAYERS = 3, 6, 2, 0.1, 10
GROUP = f"V=ginibre/QK=uniform/d={D}"
REL_TOL = 0.2  # coarse on purpose: at t1 = 1 the counts then sit between 1 and n


def _config(case: str) -> dict:
    name, extra = CASES.get(case, (case, {}))
    cfg = load_config(None, "ginibre-dynamics.toml")
    cfg.update(v_ensembles=["ginibre"], qk_ensembles=["uniform"], d=[D], systems=2, n=N, clouds=CLOUDS,
               t1=DT * LAYERS, dt=DT, dtype="float64", rel_tol=REL_TOL, dynamics=name, **extra)
    cfg["run"].update(progress=False, chunk_size=2)
    return cfg


@eqx.filter_jit
def _last_layer(stepper, field, x0):
    """Every cloud's last layer; the weights are inputs, so both systems of a dynamics share one program."""
    return jax.vmap(lambda x: stepper.solve(field, x).ys[-1])(x0)


def _direct(cfg: dict, system: int, seed: int) -> dict:
    """One system of the sweep, computed the direct way."""
    name = cfg["dynamics"]
    heads = cfg["heads"] if name == "multihead" else 1
    seeds = [seed] + [int(system_seeds(cfg["seed"], f"{GROUP}|head={h}", system, system + 1)[0])
                      for h in range(1, heads)]
    Q, K, V = (np.asarray(a) for a in draw_systems(np.array(seeds), "ginibre", "uniform", D))
    S = V.sum(axis=0)
    rho = np.max(np.abs(np.linalg.eigvals(S)))
    V, S = V / rho, S / rho
    x0 = np.asarray(jax.random.normal(token_key(seed), (CLOUDS, N, D))) / np.sqrt(D)
    if name in ("sphere", "ngpt", "mixln"):
        x0 = np.asarray(normalise(jnp.asarray(x0)))
    R_L = np.linalg.matrix_power(np.eye(D) + DT * S, LAYERS)
    stepper = EulerStepper(DT, LAYERS)
    z_of_raw = lambda xL: np.linalg.solve(R_L, np.swapaxes(xL, -1, -2)).swapaxes(-1, -2)  # z = R^{-L} x
    if name == "causal":
        field = AttentionFlow(Q[0], K[0], V[0], mask="causal")
    elif name == "multihead":
        field = AttentionFlow(AttentionWeights(Q, K, V, axes=("head",)))
    elif name == "layered":
        field = LayeredFlow(perturbed_layers(AttentionWeights(Q[0], K[0], V[0]), LAYERS, cfg["epsilon"],
                                             layer_key(seed)))
    elif name == "feedforward" and cfg["ff_reading"] == "x":
        field = Wrapped(AttentionFlow(Q[0], K[0], V[0]), np.eye(D) if cfg["ff_weight"] == "identity" else None,
                        cfg["activation"])
    elif name == "feedforward":
        W = np.asarray(jax.random.normal(ff_key(seed), (D, D))) / np.sqrt(D)
        field = section12_2_flow(Q[0], K[0], V[0], W=W, activation=cfg["activation"])
    elif name == "prenorm":
        field = PreNorm(AttentionFlow(Q[0], K[0], V[0]))
    elif name == "periln":
        field = PeriNorm(AttentionFlow(Q[0], K[0], V[0]))
    elif name == "mixln":
        field = MixNorm(AttentionFlow(Q[0], K[0], V[0]), cfg["ln_switch"])
    elif name == "ngpt":
        field, stepper = NormalisedGPT(AttentionFlow(Q[0], K[0], V[0]), 1.0), EulerStepper(DT, LAYERS, shift=sphere_shift)
    elif name == "mean":
        field = AttentionFlow(Q[0], K[0], V[0], normalisation="mean")
    elif name == "block":  # W1 (h, d) ~ N(0, 1/d), W2 (d, h) ~ N(0, 1/h), from the system's feed-forward key
        h = cfg["ff_hidden"]
        k1, k2 = jax.random.split(ff_key(seed))
        W1 = np.asarray(jax.random.normal(k1, (h, D))) / np.sqrt(D)
        W2 = np.asarray(jax.random.normal(k2, (D, h))) / np.sqrt(h)
        field = TransformerBlock(AttentionFlow(Q[0], K[0], V[0]), FeedForward(W1, W2, activation=cfg["activation"]))
    else:
        field, stepper = sphere_flow(Q[0], K[0], V[0]), EulerStepper(DT, LAYERS, shift=sphere_shift)
    last = np.asarray(_last_layer(stepper, field, x0))  # every cloud
    if name == "feedforward" and cfg["ff_reading"] == "z":
        zs, xs = last, last @ scipy.linalg.expm(DT * LAYERS * V[0]).T
    elif name in ("sphere", "ngpt"):
        zs = xs = last
    else:
        zs, xs = z_of_raw(last), last
    out = []
    for x, zL, xL in zip(x0, zs, xs):
        obs = classify_geometry(zL, S, x=xL, scale=np.linalg.norm(x, axis=-1).max(), rel_tol=REL_TOL)
        out.append((obs, zL, xL))
    met = [all(o.criteria[g] for o, _, _ in out) for g in GEOMETRY_LABELS]
    return {"observed": GEOMETRY_LABELS[met.index(True)],
            "num_clusters": max(o.num_clusters for o, _, _ in out),
            "num_levels": max(o.num_levels for o, _, _ in out),
            "num_subspaces": max(o.num_subspaces for o, _, _ in out),
            "max_norm_z": max(np.linalg.norm(z, axis=-1).max() for _, z, _ in out),
            "max_norm_x": max(np.linalg.norm(x, axis=-1).max() for _, _, x in out)}


@pytest.mark.parametrize("case", list(CASES))
def test_sweep_row_equals_direct_run_of_the_module(case, tmp_path):
    cfg = _config(case)
    name = cfg["dynamics"]
    summary = run_dynamics_sweep(cfg, tmp_path / "out")
    assert summary["dynamics"]["dynamics"] == name
    rows = list(csv.DictReader((tmp_path / "out" / "table.csv").open()))
    assert len(rows) == 2 and all(r["dynamics"] == name and r["finite"] == "true" for r in rows)
    (chunk,) = (tmp_path / "out" / "chunks").glob("*.npz")  # one chunk of both systems: its float columns
    with np.load(chunk) as f:
        norms = {key: f[key] for key in ("max_norm_z", "max_norm_x")}
    for i, r in enumerate(rows):
        r.update({key: norms[key][i] for key in norms})
        ref = _direct(cfg, int(r["system"]), int(r["seed"]))
        assert r["observed"] == ref["observed"]
        for key in ("num_clusters", "num_levels", "num_subspaces"):
            assert int(r[key]) == ref[key], key
        for key in ("max_norm_z", "max_norm_x"):
            np.testing.assert_allclose(float(r[key]), ref[key], rtol=1e-9, err_msg=key)
        if name in ("multihead", "sphere", "prenorm", "periln", "mixln", "ngpt", "mean", "block"):
            assert r["predicted"] == "none"  # no theorem


def test_dynamics_keys_validated_before_work():
    base = _config("attention")
    for bad, match in (({"dynamics": "mlp"}, "dynamics must be one of"), ({"heads": 0}, "heads"),
                       ({"activation": "sigmoid"}, "activation"), ({"ff_weight": "ones"}, "ff_weight"),
                       ({"epsilon": -0.1}, "epsilon"), ({"ff_reading": "y"}, "ff_reading"),
                       ({"dynamics": "feedforward", "ff_reading": "x", "dtype": "float32"}, "float64"),
                       ({"dynamics": "layered", "dtype": "float32"}, "float64"),
                       ({"dynamics": "multihead", "heads": 2, "dtype": "float32"}, "float64")):
        with pytest.raises(InputError, match=match):
            check_dynamics_config(dict(base, **bad))
    check_dynamics_config(dict(base, dynamics="multihead", heads=1, dtype="float32"))  # one head: the plain flow
