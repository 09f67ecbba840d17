r"""The dynamics sweep: predicted vs observed limit geometry over random triples (Q, K, V).

Per system (seeded, see :mod:`attnflow.ensembles`):

1. spectral checks in float64 (:func:`attnflow.spectral.check_batch`): Def 4.1 with
   margins, Def 5.1, :math:`Q^TK > 0`, the predicted geometry;
2. ``clouds`` random token clouds (n tokens, i.i.d. :math:`N(0, I/d)`) run with the exact
   discrete rescaling (Euler layers of step dt, :math:`z[k] = (I+\Delta t V)^{-k}x[k]`,
   Remark 3.4) up to ``t1``, with V divided by its spectral radius (a positive rescaling,
   which changes neither the assumptions nor the prediction); the config's ``dynamics`` key
   selects another field instead (causal mask, several heads, Section 12.2 feed-forward,
   per-layer weights, the sphere: :mod:`attnflow._sweep_dynamics`);
3. the final configuration classified by :func:`attnflow.observables.classify_configuration`
   (the batched twin of :func:`attnflow.observables.classify_geometry`). A system's observed
   label is the first criterion met by all of its clouds; ``consistent`` says whether all
   clouds meet the criterion of the predicted geometry.

Everything for one chunk is one jitted function, sharded over the devices with shard_map. The
config is parsed once (:func:`check_dynamics_config`, a :class:`~attnflow.sweep.DynamicsSweepConfig`)
and passed down.
"""

from __future__ import annotations

from .._x64 import in_float64

from pathlib import Path

import copy

import jax
import jax.numpy as jnp
import numpy as np

from .. import _validate as v
from .._resources import attention_flops, check_fits
from .. import runs
from .._batching import group_size, loop_over_systems, vmap_systems
from ..kernels import DEFAULT_CHUNK
from ..kernels import select_impl
from ..ensembles import QK_ENSEMBLES, V_ENSEMBLES, draw_heads, system_seeds
from ..errors import InputError
from ..observables import GEOMETRY_LABELS
from ..spectral import GEOMETRIES, check_batch
from ..spectral import sort_by_modulus
from ..observables import classify_configuration
from ..spectral import left_eig, projector_from_left_eig
from ._config import DynamicsSweepConfig, run_settings
from .._sweep_dynamics import SWEEP_DYNAMICS, SweepDynamics, head_seeds, initial_clouds, run_final_layer, sweep_dynamics
from ..runs import check_job_table, check_table_memory, concat, plan_chunks, sharded, start_chunked, write_tables

__all__ = ["COLUMNS", "OBSERVED", "SWEEP_DYNAMICS", "run_dynamics_sweep", "make_chunk_fn", "check_dynamics_config",
           "check_dynamics_sizes", "dynamics_work"]

OBSERVED = GEOMETRY_LABELS + ("nonfinite",)
COLUMNS = ["system", "seed", "v_ensemble", "qk_ensemble", "d", "n", "clouds", "lambda1_re", "lambda1_im",
           "abs_lambda2", "gap", "qk_phi1", "cond1", "cond2", "good", "qk_spd", "qk_min_eig", "paranormal",
           "num_pos_real_part", "predicted", "observed", "consistent", "num_clusters", "num_levels",
           "num_subspaces", "f_clusters", "finite", "dynamics"]
#: also in every chunk file (``chunks/*.npz``), not in the table: max over clouds of max_i |z_i(t1)| and
#: max_i |x_i(t1)|. Their last float32 bits depend on the batch shape (so on the device count), while the
#: table is identical for any device count (tests/test_sweep.py).
CHUNK_ONLY = ["max_norm_z", "max_norm_x"]


#: bytes one row of the table takes while it is written (the chunk columns, their concatenation and the CSV
#: text, twice each: about 1.2 KiB measured with the longest ensemble names), with room to spare
TABLE_ROW_BYTES = 2048
#: copies of a cloud's state a layer holds at once (tokens, field, rescaled tokens, the step's temporaries)
STATE_COPIES = 6
#: complex d x d matrices one system's eigenproblems hold (the eigenvectors of V^T, their inverse, workspace)
EIG_COPIES = 8


def check_dynamics_config(config: dict) -> DynamicsSweepConfig:
    """Every key of a dynamics sweep config checked before any work (one :class:`InputError` sentence
    naming the key, its value and what is expected); returns the parsed config (the schema's types).

    Example:
        >>> from attnflow.runs import load_config
        >>> from attnflow.sweep import check_dynamics_config
        >>> cfg = check_dynamics_config(load_config(None, "ginibre-dynamics.toml"))
        >>> cfg.n, cfg.num_layers
        (32, 120)
    """
    if isinstance(config, DynamicsSweepConfig):
        return config
    cfg = check_job_table(config, "dynamics", "ginibre-dynamics.toml")
    v.check_names("v_ensembles", cfg["v_ensembles"], V_ENSEMBLES, "the ensembles of V")
    v.check_names("qk_ensembles", cfg["qk_ensembles"], QK_ENSEMBLES, "the ensembles of Q^T K")
    v.check_list("d", cfg["d"], "the token dimensions", item=lambda name, d: v.check_int(name, d, 1, "a dimension"))
    for key, meaning in (("systems", "systems per group"), ("n", "tokens per cloud"),
                         ("clouds", "token clouds per system")):
        v.check_int(key, cfg[key], 1, meaning)
    layers = v.check_layers("t1", cfg["t1"], "dt", cfg["dt"])
    v.check_number("rel_tol", cfg["rel_tol"], "the cluster and level tolerance, a fraction of the diameter",
                   low=0, high=1)
    if v.check_int("max_clusters", cfg["max_clusters"], 0, "most clusters of a polytope; 0: max(3, n // 2)") > cfg["n"]:
        raise InputError(f"max_clusters must be at most n = {cfg['n']} (0: max(3, n // 2)), got {cfg['max_clusters']}.")
    spec = sweep_dynamics(cfg)  # the dynamics keys and their cross-key constraint on dtype
    return DynamicsSweepConfig(
        seed=int(cfg["seed"]), dtype=cfg["dtype"], density=float(cfg["density"]), run=run_settings(cfg["run"]),
        source=copy.deepcopy(config), v_ensembles=tuple(cfg["v_ensembles"]), qk_ensembles=tuple(cfg["qk_ensembles"]),
        d=tuple(int(d) for d in cfg["d"]), systems=int(cfg["systems"]), n=int(cfg["n"]), clouds=int(cfg["clouds"]),
        t1=float(cfg["t1"]), dt=float(cfg["dt"]), num_layers=layers, rel_tol=float(cfg["rel_tol"]),
        max_clusters=int(cfg["max_clusters"]), dynamics=spec)


def check_dynamics_sizes(config: DynamicsSweepConfig, devices: int) -> None:
    """Refuse a dynamics sweep whose chunk (on each of ``devices``) or final table cannot fit in memory.

    One system of the largest d holds its weights and unstable projector (d x d, per head), its clouds'
    states (``clouds`` x n x (d, plus the block's hidden width) per head, :data:`STATE_COPIES` copies) and,
    for ``layered``, one weight triple per layer; while it runs, its attention scores (n x n per cloud and
    head; n x a key tile on the tiled path) and its eigenproblems (:data:`EIG_COPIES` complex d x d). A device
    holds ``run.chunk_size / devices`` systems; on CPU their scores are computed in groups
    (:func:`attnflow._batching.group_size`) and their eigenproblems one at a time.
    """
    spec, default = config.dynamics, runs.load_config(None, "ginibre-dynamics.toml")
    n, clouds, d, heads = config.n, config.clouds, max(config.d), spec.num_heads
    layers = config.num_layers
    item = 8 if config.dtype == "float64" else 4
    dense = select_impl(n, n) == "dense"
    scores = float(heads * clouds) * n * (n if dense else min(n, DEFAULT_CHUNK)) * item
    eig = float(EIG_COPIES) * d * d * 16
    width = d + (spec.hidden_width(d) if spec.name == "block" else 0)
    kept = float(STATE_COPIES * heads * clouds) * n * width * item + (3 * heads + 1) * d * d * 8
    keys = [("n", n, default["n"], 2 if dense else 1), ("clouds", clouds, default["clouds"], 1),
            ("d", d, max(default["d"]), 2), ("heads", heads, default["heads"], 1)]
    if spec.name == "layered":
        kept += 2.0 * layers * 3 * d * d * item
        keys.append(("t1 / dt (layers)", layers, round(default["t1"] / default["dt"]), 1))
    check_fits(f"one system of the dynamics sweep ({clouds} clouds of {n} tokens in d = {d})",
                 kept + scores + eig, keys)
    chunk = config.run.chunk_size
    per_device = -(-min(chunk, config.systems) // devices)
    at_once = 1 if jax.default_backend() == "cpu" else per_device
    check_fits(f"a chunk of the dynamics sweep ({per_device} systems per device)",
                 per_device * kept + group_size(per_device, n, item, heads * clouds) * scores + at_once * eig,
                 [("run.chunk_size", chunk, default["run"]["chunk_size"], 1)])
    rows = config.systems * len(config.v_ensembles) * len(config.qk_ensembles) * len(config.d)
    check_table_memory("the dynamics sweep", "systems", config.systems, default["systems"], rows,
                       TABLE_ROW_BYTES)


def dynamics_work(config: DynamicsSweepConfig) -> tuple[str, float, float, list]:
    """The work of a dynamics sweep, for :func:`attnflow._resources.check_work`: (what, flops, sequential steps,
    the keys it grows with). Per system of dimension d: ``clouds`` x heads x layers evaluations of the attention
    field (:func:`attnflow._resources.attention_flops`; the block's MLP adds 4 n d h a layer) and about
    30 d^3 for its eigenproblems; the layers of one chunk run one after another, and so do the chunks.

    Example:
        >>> from attnflow.runs import load_config
        >>> from attnflow.sweep import check_dynamics_config
        >>> from attnflow.sweep._dynamics import dynamics_work
        >>> what, flops, steps, keys = dynamics_work(check_dynamics_config(load_config(None, "ginibre-dynamics.toml")))
        >>> what
        'the dynamics sweep (12 group(s) x 250 systems x 2 clouds of 32 tokens, 120 layers)'
        >>> f"{flops:.3g}", steps
        ('2.13e+10', 1440.0)
    """
    spec, default = config.dynamics, runs.load_config(None, "ginibre-dynamics.toml")
    n, layers, heads = config.n, config.num_layers, spec.num_heads
    flops = 0.0
    for g in config.groups:
        d = g["d"]
        layer = heads * attention_flops(n, d) + (4.0 * n * d * spec.hidden_width(d) if spec.name == "block" else 0.0)
        flops += g["systems"] * (config.clouds * layers * layer + 30.0 * d**3)
    chunks = len(plan_chunks([g["systems"] for g in config.groups], config.run.chunk_size))
    keys = [("t1 / dt (layers)", layers, round(default["t1"] / default["dt"]), 1),
            ("systems", config.systems, default["systems"], 1), ("n", n, default["n"], 2),
            ("clouds", config.clouds, default["clouds"], 1)]
    what = (f"the dynamics sweep ({len(config.groups)} group(s) x {config.systems} systems x {config.clouds} clouds "
            f"of {n} tokens, {layers} layers)")
    return what, flops, float(layers) * chunks, keys


def _eigen_stage(V, route):
    """One eigendecomposition of V^T per system: sorted eigenvalues and the unstable projector."""
    w, vl = jax.vmap(lambda a: left_eig(a, route))(V)
    proj, k = jax.vmap(projector_from_left_eig)(w, vl)
    return sort_by_modulus(w), proj.astype(V.dtype), k


def _draw(seeds, v, qk, d, density):
    """The drawn weights and the V whose spectrum the checks read.

    seeds (B,): one triple per system, returned as (Q, K, V, V). seeds (B, H): H independent heads
    per system, (Q, K, V) of shape (B, H, d, d), and S = sum_h V_h (with head 1's Q, K for the
    checks; :mod:`attnflow._sweep_dynamics`)."""
    Q, K, V = draw_heads(seeds, v, qk, d, jnp.float64, density)
    return Q, K, V, (V if seeds.ndim == 1 else V.sum(axis=1))


def _spectral_stage(seeds, v, qk, d, density, route, w=None, proj=None, k=None):
    Q, K, V, V_spec = _draw(seeds, v, qk, d, density)
    if w is None:
        w, proj, k = _eigen_stage(V_spec, route)
    first = (lambda a: a) if seeds.ndim == 1 else (lambda a: a[:, 0])
    sb = check_batch(first(Q), first(K), V_spec, route, eigenvalues=w)
    return Q, K, V, sb, proj, k


def _dynamics_stage(seeds, Q, K, V, sb, proj, k, *, spec: SweepDynamics, n, clouds, dt, layers, dtype, rel_tol,
                    max_clusters):
    d = V.shape[-1]

    def one(seed, Q, K, V, lam1, phi_dual, para, dim_F, proj, k):
        seed = seed if seed.ndim == 0 else seed[0]  # several heads: the system's seed is head 1's
        rho = jnp.maximum(jnp.abs(lam1), 1e-30)  # spectral radius of V (of S = sum_h V_h for heads)
        Vd = (V / rho).astype(dtype)
        x0 = initial_clouds(spec, seed, clouds, n, d, dtype)
        zT, xT = run_final_layer(spec, seed, Q.astype(dtype), K.astype(dtype), Vd, x0, dt=dt, layers=layers,
                                 dtype=dtype)
        finite = jnp.all(jnp.isfinite(zT)) & jnp.all(jnp.isfinite(xT))
        zT = jnp.where(jnp.isfinite(zT), zT, 0.0)
        xT = jnp.where(jnp.isfinite(xT), xT, 0.0)
        scale = jnp.max(jnp.linalg.norm(x0, axis=-1), axis=-1)  # (clouds,)
        obs = jax.vmap(lambda z, x, s: classify_configuration(z, x, s, phi_dual, lam1, para, dim_F, proj, k,
                                                              rel_tol=rel_tol, max_clusters=max_clusters))(
            zT, xT, scale)
        all_crit = jnp.all(obs.criteria, axis=0)
        label = jnp.where(finite, jnp.argmax(all_crit), len(GEOMETRY_LABELS))
        return (label, all_crit, finite, jnp.max(obs.num_clusters), jnp.max(obs.num_levels),
                jnp.max(obs.num_subspaces), jnp.max(obs.f_clusters), jnp.max(jnp.linalg.norm(zT, axis=-1)),
                jnp.max(obs.max_norm_x))

    st = sb.stats
    # XLA:CPU: cache-sized groups of systems (attnflow._cache.GROUP_BYTES); vmap elsewhere
    heads = Q.shape[1] if Q.ndim == 4 else 1
    label, crit, finite, nc, nl, ns, fc, mz, mx = vmap_systems(
        one, tokens=n, itemsize=jnp.dtype(dtype).itemsize, matrices=heads * clouds)(
        seeds.astype(jnp.uint32), Q, K, V, st.lambda1, sb.phi_dual, sb.paranormal, sb.para_dim_F, proj, k)
    # map the prediction (spectral GEOMETRIES order) to the criteria (GEOMETRY_LABELS order)
    to_obs = jnp.asarray([GEOMETRY_LABELS.index(g) for g in GEOMETRIES])
    predicted = sb.predicted if spec.predicts else jnp.full_like(sb.predicted, GEOMETRIES.index("none"))
    consistent = finite & jnp.take_along_axis(crit, to_obs[predicted][:, None], axis=1)[:, 0]
    return {"lambda1_re": st.lambda1.real, "lambda1_im": st.lambda1.imag, "abs_lambda2": st.abs_lambda2,
            "gap": st.gap, "qk_phi1": sb.qk, "cond1": st.cond1, "cond2": sb.cond2, "good": sb.good,
            "qk_spd": sb.qk_spd, "qk_min_eig": sb.qk_min_eig, "paranormal": sb.paranormal,
            "num_pos_real_part": st.num_pos_real_part, "predicted_code": predicted, "observed_code": label,
            "consistent": consistent, "num_clusters": nc, "num_levels": nl, "num_subspaces": ns,
            "f_clusters": fc, "finite": finite, "max_norm_z": mz, "max_norm_x": mx}


def make_chunk_fn(group: dict, config: DynamicsSweepConfig | dict, route: str, mesh):
    """The function computing one chunk of ``group`` (seeds -> columns), sharded over ``mesh``."""
    config = check_dynamics_config(config)
    kw = dict(n=config.n, clouds=config.clouds, dt=config.dt, layers=config.num_layers, dtype=config.jax_dtype,
              rel_tol=config.rel_tol, max_clusters=config.max_clusters or None, spec=config.dynamics)
    v, qk, d, density = group["v"], group["qk"], group["d"], config.density
    on_cpu = all(dev.platform == "cpu" for dev in mesh.devices.ravel())

    def spectral(seeds, w=None, proj=None, k=None, *, route=route):
        stage = lambda *a: _spectral_stage(a[0], v, qk, d, density, route, *a[1:])
        args = (seeds,) if w is None else (seeds, w, proj, k)
        # XLA:CPU: independent batched LAPACK calls (eig, eigvalsh) can deadlock its pool;
        # one system at a time cannot (_batching.loop_over_systems), and looping the whole stage
        # keeps its bits independent of the device count. GPUs keep the batch.
        return (loop_over_systems(stage) if on_cpu else stage)(*args)

    if route != "cpu":
        def fn(seeds):
            Q, K, V, sb, proj, k = spectral(seeds)
            return _dynamics_stage(seeds, Q, K, V, sb, proj, k, **kw)

        return sharded(fn, mesh)

    # The eigenproblems (sorted eigenvalues of V, the unstable projector from the eigenvectors
    # of V^T) on the CPU device outside the sharded function; the rest sharded.
    cpu = jax.local_devices(backend="cpu")[0]

    @jax.jit
    @loop_over_systems
    def eigen_on_cpu(s):
        return _eigen_stage(_draw(s, v, qk, d, density)[3], "device")

    def fn_w(seeds, w, proj, k):
        Q, K, V, sb, proj, k = spectral(seeds, w, proj, k, route="host")
        return _dynamics_stage(seeds, Q, K, V, sb, proj, k, **kw)

    inner = sharded(fn_w, mesh)

    def call(seeds):
        w, proj, k = eigen_on_cpu(jax.device_put(np.asarray(seeds, np.uint32), cpu))
        return inner(seeds, np.asarray(w), np.asarray(proj), np.asarray(k))

    return call


@in_float64
@runs.releases_output_dirs
def run_dynamics_sweep(config: DynamicsSweepConfig | dict, out: str | Path, *, num_devices: int | None = None,
                       progress: bool | None = None, processes: dict | None = None) -> dict:
    """Run (or resume) the dynamics sweep of ``config`` (a table, parsed here, or parsed) into ``out``;
    returns the summary.

    Example:
        >>> import tempfile, pathlib
        >>> from attnflow.runs import load_config
        >>> from attnflow.sweep import run_dynamics_sweep
        >>> cfg = load_config(None, "ginibre-dynamics.toml")
        >>> cfg.update(v_ensembles=["positive"], qk_ensembles=["identity"], d=[2], systems=4, n=8, t1=2.0)
        >>> cfg["run"]["progress"] = False
        >>> s = run_dynamics_sweep(cfg, pathlib.Path(tempfile.mkdtemp()) / "out")
        >>> s["systems"]
        4
    """
    config = check_dynamics_config(config)
    groups, spec = config.groups, config.dynamics
    sw = start_chunked(config, out, "sweep-dynamics", num_devices=num_devices, progress=progress,
                     processes=processes, check_sizes=lambda devices: check_dynamics_sizes(config, devices),
                     work=lambda: dynamics_work(config))
    chunks = plan_chunks([g["systems"] for g in groups], config.run.chunk_size)
    fns: dict[int, object] = {}

    def compute(c):
        g = groups[c.group]
        if c.group not in fns:
            fns[c.group] = make_chunk_fn(g, config, sw.route, sw.mesh)
        seeds = system_seeds(sw.seed, g["label"], c.start, c.stop)
        drawn = head_seeds(seeds, sw.seed, g["label"], c.start, c.stop, spec.num_heads)
        cols = {k: np.asarray(v) for k, v in fns[c.group](drawn).items()}
        m = c.stop - c.start
        cols["predicted"] = np.array([GEOMETRIES[i] for i in cols.pop("predicted_code")])
        cols["observed"] = np.array([OBSERVED[i] for i in cols.pop("observed_code")])
        cols.update(system=np.arange(c.start, c.stop), seed=seeds, v_ensemble=np.full(m, g["v"]),
                    qk_ensemble=np.full(m, g["qk"]), d=np.full(m, g["d"]), n=np.full(m, config.n),
                    clouds=np.full(m, config.clouds), dynamics=np.full(m, spec.name))
        return cols

    parts, processes = sw.run_chunks(chunks, compute, "dynamics sweep")
    if sw.process_index != 0:
        return processes
    write_tables(sw.out, parts, COLUMNS, sw.formats)
    summary = summarize(concat(parts), groups)
    summary.update(eig_route=sw.route, devices=int(sw.mesh.shape["batch"]), t1=config.source["t1"],
                   dt=config.source["dt"], dynamics=spec.record())
    runs.atomic_write_json(sw.out / "summary.json", summary)
    plot(summary, sw.out)
    return dict(summary, **processes)


def _crosstab(pred, obs) -> dict:
    return {p: {o: int(np.sum((pred == p) & (obs == o))) for o in OBSERVED if np.any((pred == p) & (obs == o))}
            for p in GEOMETRIES if np.any(pred == p)}


def summarize(table: dict, groups: list[dict]) -> dict:
    pred, obs = table["predicted"], table["observed"]
    rows = []
    for g in groups:
        sel = (table["v_ensemble"] == g["v"]) & (table["qk_ensemble"] == g["qk"]) & (table["d"] == g["d"])
        tested = sel & (pred != "none")
        good, bad = sel & table["good"], sel & ~table["good"]
        rows.append({
            "v_ensemble": g["v"], "qk_ensemble": g["qk"], "d": g["d"], "systems": int(sel.sum()),
            "frac_cond1": float(table["cond1"][sel].mean()), "frac_good": float(table["good"][sel].mean()),
            "frac_consistent_where_predicted": float(table["consistent"][tested].mean()) if tested.any() else None,
            "predicted": {p: int(np.sum(pred[sel] == p)) for p in GEOMETRIES if np.any(pred[sel] == p)},
            "observed_good": {o: int(np.sum(obs[good] == o)) for o in OBSERVED if np.any(obs[good] == o)},
            "observed_not_good": {o: int(np.sum(obs[bad] == o)) for o in OBSERVED if np.any(obs[bad] == o)},
            "frac_levels_le3_not_good_real": (float(np.mean((table["num_levels"][bad] >= 1)
                                                            & (table["num_levels"][bad] <= 3)
                                                            )) if bad.any() else None),
        })
    tested = pred != "none"
    return {
        "systems": int(len(pred)),
        "crosstab_predicted_observed": _crosstab(pred, obs),
        "frac_consistent_where_predicted": float(table["consistent"][tested].mean()) if tested.any() else None,
        "nonfinite": int(np.sum(~table["finite"])),
        "groups": rows,
    }


def plot(summary: dict, out: Path) -> list[str]:
    """Write ``predicted_vs_observed.png`` (:func:`attnflow.plot.predicted_vs_observed`); returns the file names."""
    from .. import plot as ap

    fig = ap.predicted_vs_observed(summary, geometries=GEOMETRIES, observed=OBSERVED)
    return ap.save(fig, out / "predicted_vs_observed.png", dpi=120, close=True)
