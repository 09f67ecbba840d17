r"""The spectral sweep: how often does a random V satisfy Definition 4.1(1)?

For every ensemble and dimension d, ``samples`` value matrices; per system the leading
eigenvalue (largest modulus), the gap :math:`\lambda_1 - |\lambda_2|`, condition (1) read
correctly (largest modulus) and incorrectly (largest real part), and the number of real
eigenvalues. The summary gives each fraction with a Wilson score interval and
:math:`E[\#\text{real}]` against Edelman-Kostlan-Shub's :math:`\sqrt{2d/\pi} + 1/2`.
"""

from __future__ import annotations

from .._x64 import in_float64

import copy
import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from .. import _validate as v
from .._resources import check_fits
from .. import runs
from ..ensembles import V_ENSEMBLES, V_TAG, sample_V, system_seeds
from ..errors import InputError
from ..spectral import eigen_stats, stats_from_eigvals
from ..spectral import eigvals_sorted
from ._config import SpectralSweepConfig, run_settings
from ..stats import standard_error, wilson_interval
from ..runs import check_job_table, check_table_memory, concat, plan_chunks, sharded, start_chunked, write_tables

__all__ = ["COLUMNS", "run_spectral_sweep", "wilson_interval", "check_spectral_config", "check_spectral_sizes"]

COLUMNS = ["system", "seed", "ensemble", "d", "lambda1_re", "lambda1_im", "abs_lambda2", "gap",
           "cond1", "cond1_real_part", "num_real"]


#: bytes one row of the table takes while it is written (the chunk columns, their concatenation and the CSV
#: text, twice each: about 0.45 KiB measured with the longest ensemble name), with room to spare
TABLE_ROW_BYTES = 1024
#: complex d x d matrices one eigenvalue problem holds (its Hessenberg form, workspace, the eigenvalues' sort)
EIG_COPIES = 6


def check_spectral_config(config: dict) -> SpectralSweepConfig:
    """Every key of a spectral sweep config checked before any work (one :class:`InputError` sentence
    naming the key, its value and what is expected); returns the parsed config (the schema's types).

    Example:
        >>> from attnflow.runs import load_config
        >>> from attnflow.sweep import check_spectral_config
        >>> check_spectral_config(load_config(None, "ginibre-spectral.toml")).confidence
        0.95
    """
    if isinstance(config, SpectralSweepConfig):
        return config
    cfg = check_job_table(config, "spectral", "ginibre-spectral.toml")
    v.check_names("ensembles", cfg["ensembles"], V_ENSEMBLES, "the ensembles of V")
    ds = v.check_list("d", cfg["d"], "the dimensions", item=lambda name, d: v.check_int(name, d, 1, "a dimension"))
    samples = v.check_list("samples", cfg["samples"], "matrices per d: one entry, or one per d", distinct=False,
                           item=lambda name, k: v.check_int(name, k, 1, "matrices of this d"))
    if len(samples) not in (1, len(ds)):
        raise InputError(f"samples must have one entry or one per d ({len(ds)}), got {len(samples)}: {samples}.")
    v.check_number("confidence", cfg["confidence"], "the level of the Wilson intervals", low=0, high=1)
    return SpectralSweepConfig(seed=int(cfg["seed"]), dtype=cfg["dtype"], density=float(cfg["density"]),
                               run=run_settings(cfg["run"]), source=copy.deepcopy(config),
                               ensembles=tuple(cfg["ensembles"]), d=tuple(int(d) for d in ds),
                               samples=tuple(int(k) for k in samples), confidence=float(cfg["confidence"]))


def check_spectral_sizes(config: SpectralSweepConfig, devices: int) -> None:
    """Refuse a spectral sweep whose chunk or final table cannot fit in memory.

    Each of ``devices`` holds ``run.chunk_size / devices`` matrices of the largest d (drawn, and the copy
    the eigensolver takes) and the workspace (:data:`EIG_COPIES` complex matrices) of the problems solved at
    once: one on CPU (LAPACK solves a batch one matrix at a time), the device's whole share elsewhere.
    """
    default = runs.load_config(None, "ginibre-spectral.toml")
    d = max(config.d)
    item = 8 if config.dtype == "float64" else 4
    matrix, workspace = 2.0 * d * d * item, float(EIG_COPIES) * d * d * 2 * item
    check_fits(f"one eigenvalue problem of the spectral sweep (d = {d})", matrix + workspace,
                 [("d", d, max(default["d"]), 2)])
    chunk = config.run.chunk_size
    per_device = -(-min(chunk, max(config.samples)) // devices)
    at_once = 1 if jax.default_backend() == "cpu" else per_device
    check_fits(f"a chunk of the spectral sweep ({per_device} matrices of d = {d} per device)",
                 per_device * matrix + at_once * workspace, [("run.chunk_size", chunk, default["run"]["chunk_size"], 1)])
    per_d = list(config.samples) * (len(config.d) if len(config.samples) == 1 else 1)
    check_table_memory("the spectral sweep", "samples", max(per_d), max(default["samples"]),
                       sum(per_d) * len(config.ensembles), TABLE_ROW_BYTES)


def spectral_work(config: SpectralSweepConfig) -> tuple[str, float, float, list]:
    """The work of a spectral sweep, for :func:`attnflow._resources.check_work`: (what, flops, sequential steps,
    the keys it grows with); an eigenvalue problem of size d costs about 25 d^3 flops (Hessenberg reduction and
    QR iterations), the chunks run one after another.

    Example:
        >>> from attnflow.runs import load_config
        >>> from attnflow.sweep import check_spectral_config
        >>> from attnflow.sweep._spectral import spectral_work
        >>> spectral_work(check_spectral_config(load_config(None, "ginibre-spectral.toml")))[0]
        'the spectral sweep (8 group(s), up to 4000 matrices of d = 256)'
    """
    default = runs.load_config(None, "ginibre-spectral.toml")
    flops = sum(g["samples"] * 25.0 * g["d"] ** 3 for g in config.groups)
    chunks = len(plan_chunks([g["samples"] for g in config.groups], config.run.chunk_size))
    keys = [("samples", max(config.samples), max(default["samples"]), 1), ("d", max(config.d), max(default["d"]), 3)]
    what = (f"the spectral sweep ({len(config.groups)} group(s), up to {max(config.samples)} matrices of "
            f"d = {max(config.d)})")
    return what, flops, float(chunks), keys


def _compute_fn(ensemble: str, d: int, dtype, density: float, route: str):
    def batch(seeds):
        V = jax.vmap(lambda s: sample_V(jax.random.fold_in(jax.random.key(s), V_TAG), ensemble, d, dtype, density))(
            seeds.astype(jnp.uint32))
        st = eigen_stats(V, route)
        return {"lambda1_re": st.lambda1.real, "lambda1_im": st.lambda1.imag, "abs_lambda2": st.abs_lambda2,
                "gap": st.gap, "cond1": st.cond1, "cond1_real_part": st.cond1_real_part, "num_real": st.num_real}

    return batch


def _cpu_route_fn(ensemble: str, d: int, dtype, density: float):
    """Route 'cpu': draw on the default device, eig on the CPU device, statistics back."""
    draw = jax.jit(jax.vmap(lambda s: sample_V(jax.random.fold_in(jax.random.key(s), V_TAG), ensemble, d, dtype,
                                               density)))
    stats = jax.jit(stats_from_eigvals)

    def batch(seeds):
        w = eigvals_sorted(draw(jnp.asarray(seeds, jnp.uint32)), "cpu")
        st = stats(w)
        out = {"lambda1_re": st.lambda1.real, "lambda1_im": st.lambda1.imag, "abs_lambda2": st.abs_lambda2,
               "gap": st.gap, "cond1": st.cond1, "cond1_real_part": st.cond1_real_part, "num_real": st.num_real}
        return {k: np.asarray(v) for k, v in out.items()}

    return batch


def make_spectral_chunk_fn(ensemble: str, d: int, dtype, density: float, route: str, mesh):
    """The function computing one chunk of a spectral group (seeds -> eigenvalue statistics): on the
    CPU device for route ``"cpu"``, else sharded over ``mesh`` on the route's device."""
    if route == "cpu":
        return _cpu_route_fn(ensemble, d, dtype, density)
    return sharded(_compute_fn(ensemble, d, dtype, density, route), mesh)


@in_float64
@runs.releases_output_dirs
def run_spectral_sweep(config: SpectralSweepConfig | dict, out: str | Path, *, num_devices: int | None = None,
                       progress: bool | None = None, processes: dict | None = None) -> dict:
    """Run (or resume) the spectral sweep of ``config`` (a table, parsed here, or parsed) into ``out``;
    returns the summary.

    Example:
        >>> import tempfile, pathlib
        >>> from attnflow.runs import load_config
        >>> from attnflow.sweep import run_spectral_sweep
        >>> cfg = load_config(None, "ginibre-spectral.toml")
        >>> cfg.update(d=[4], samples=[50]); cfg["run"]["progress"] = False
        >>> s = run_spectral_sweep(cfg, pathlib.Path(tempfile.mkdtemp()) / "out")
        >>> s["groups"][0]["n"]
        50
    """
    config = check_spectral_config(config)
    groups, dtype = config.groups, config.jax_dtype
    sw = start_chunked(config, out, "sweep-spectral", num_devices=num_devices, progress=progress,
                     processes=processes, check_sizes=lambda devices: check_spectral_sizes(config, devices),
                     work=lambda: spectral_work(config))
    chunks = plan_chunks([g["samples"] for g in groups], config.run.chunk_size)
    fns: dict[int, object] = {}

    def compute(c):
        g = groups[c.group]
        if c.group not in fns:
            fns[c.group] = make_spectral_chunk_fn(g["ensemble"], g["d"], dtype, config.density, sw.route, sw.mesh)
        seeds = system_seeds(sw.seed, g["label"], c.start, c.stop)
        cols = fns[c.group](seeds)
        cols = {k: np.asarray(v) for k, v in cols.items()}
        m = c.stop - c.start
        cols.update(system=np.arange(c.start, c.stop), seed=seeds, ensemble=np.full(m, g["ensemble"]),
                    d=np.full(m, g["d"]))
        return cols

    parts, processes = sw.run_chunks(chunks, compute, "spectral sweep")
    if sw.process_index != 0:
        return processes
    write_tables(sw.out, parts, COLUMNS, sw.formats)
    summary = summarize(concat(parts), groups, config.confidence)
    summary["eig_route"] = sw.route
    summary["devices"] = int(sw.mesh.shape["batch"])
    runs.atomic_write_json(sw.out / "summary.json", summary)
    plot(summary, sw.out)
    return dict(summary, **processes)


def summarize(table: dict, groups: list[dict], confidence: float) -> dict:
    rows = []
    for g in groups:
        sel = (table["ensemble"] == g["ensemble"]) & (table["d"] == g["d"])
        n = int(sel.sum())
        k1 = int(table["cond1"][sel].sum())
        k2 = int(table["cond1_real_part"][sel].sum())
        nr = table["num_real"][sel].astype(np.float64)
        rows.append({
            "ensemble": g["ensemble"], "d": g["d"], "n": n,
            "frac_cond1": k1 / n, "frac_cond1_ci": wilson_interval(k1, n, confidence),
            "frac_cond1_real_part": k2 / n, "frac_cond1_real_part_ci": wilson_interval(k2, n, confidence),
            "mean_num_real": float(nr.mean()),
            "mean_num_real_se": standard_error(nr),
            "ginibre_num_real_asymptotic": math.sqrt(2 * g["d"] / math.pi) + 0.5,
            "mean_gap_given_cond1": float(table["gap"][sel][table["cond1"][sel]].mean()) if k1 else float("nan"),
        })
    head = next((r for r in rows if r["ensemble"] == "ginibre" and r["d"] == 128), None)
    headline = None
    if head is not None:
        lo, hi = head["frac_cond1_ci"]
        headline = (f"Ginibre d = 128: Def 4.1(1) (largest modulus real, positive, simple) holds for "
                    f"{100 * head['frac_cond1']:.1f}% of {head['n']} matrices "
                    f"({100 * confidence:.0f}% CI {100 * lo:.1f}-{100 * hi:.1f}%); the paper says about 14%. "
                    f"Reading it as 'largest real part' would give {100 * head['frac_cond1_real_part']:.1f}%.")
    return {"confidence": confidence, "groups": rows, "headline": headline}


def plot(summary: dict, out: Path) -> list[str]:
    """Write ``fraction_vs_d.png`` (:func:`attnflow.plot.fraction_vs_d`); returns the file names."""
    from .. import plot as ap

    return ap.save(ap.fraction_vs_d(summary), out / "fraction_vs_d.png", dpi=120, close=True)
