r"""``attnflow extensions``: studies beyond the theorems, predicted vs observed.

Five studies, each a function of its config table that returns a :class:`Study` (settings,
graded checks with a fixed tolerance, measurements, figures):

* ``sec12_2``: the paper's Section 12.2 feed-forward flow on a good triple (d = 2), in two
  readings: SPEC's :math:`\dot z_i = W\sigma(V\sum_j P_{ij}(z_j - z_i))` (P from :math:`e^{tV}z`)
  and the nonlinearity on the raw attention output, :math:`\dot x_i = W\sigma(\sum_j P_{ij} V x_j)`
  read in :math:`z[k] = (I + \Delta t V)^{-k}x[k]`. Graded: what follows from the dynamics (the
  plain flow's Thm 4.2 in both readings; ReLU with W = I only raises coordinates of z; tanh's
  speed bound and the collapse it implies). The paper's three observations (ReLU, W = I: three
  hyperplanes; tanh, W = I and ReLU, random W: collapse to 0) are "paper says / we observe" rows.
* ``multihead``: H = 1, 2, 4, 8 heads, each a random good triple (entrywise positive V_h, so
  Def 4.1 (1) holds by Perron-Frobenius); levels of :math:`\varphi_S^*(z)`, :math:`z[k] = (I +
  \Delta t S)^{-k} x[k]`, :math:`S = \sum_h V_h`, and the layer at which the count settles.
  Prediction (Thm 4.2) only for H = 1.
* ``albert``: the shared good triple against per-layer weights perturbed by relative Frobenius
  size epsilon (:func:`~attnflow.dynamics.perturbed_layers`); agreement of every token's limit
  level (a, 0 or b) with the shared-weight run, against epsilon. epsilon = 0 must reproduce the
  shared run to rounding error.
* ``causal``: tokens on the sphere with V = I (projected Euler), causal against full attention.
  Known (Karagodin, Polyanskiy, Rigollet 2024): the causal flow collapses to one cluster; since
  token 1 attends only to itself, that cluster is :math:`x_1(0)`.
* ``sphere``: Q = K = V = I on the sphere, beta swept: one cluster for small beta, metastable
  clusters for large beta; the time spent in the metastable state against beta.

All runs are float64 Euler layer stacks (one jitted, vmapped call per setting over the random
initial clouds).
"""

from __future__ import annotations

import math
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .. import plot
from ..dynamics import normalise
from .._x64 import float64_scope
from ..errors import InputError
from ..fields import build_field, field_entry, rescaled_from_raw
from ..integrate import RESULTS, EulerStepper, plain_shift
from ..observables import abz_levels, leading_vectors, metastable_states, num_clusters, num_levels
from ..runs import (
    atomic_write_json,
    atomic_write_text,
    count_kept,
    load_config,
    open_run,
    provenance,
    releases_output_dirs,
)
from .._resources import announce_work
from .._weights import AttentionWeights
from ._draws import good_qk
from ._extensions_config import (AlbertSettings, MultiheadSettings, Sec12_2Settings, SphereSettings,
                                check_extensions_config, parse_extensions_config, save_every, study_work)

__all__ = ["run_extensions", "STUDIES", "Study", "DEFAULT_OUT", "check_extensions_config"]

KIND = "extensions"
DEFAULT_OUT = "results/extensions"
#: the good triple's value matrix of the d = 2 studies (eigenvalues 1.087 and 0.313; also the
#: reproduction report's Thm 4.2 case)
V2D = np.array([[1.0, 0.3], [0.2, 0.4]])
#: identities that must hold to rounding error (float64, O(1) rescaled tokens, <= 300 layers)
ROUNDING_TOL = 1e-10


@dataclass
class Study:
    name: str
    title: str
    settings: dict = field(default_factory=dict)
    checks: list = field(default_factory=list)
    measurements: list = field(default_factory=list)
    figures: list = field(default_factory=list)
    seconds: float = 0.0

    def check(self, name: str, predicted: str, observed: str, passed: bool | None, tolerance: str,
              verdict: str | None = None) -> None:
        """A graded comparison (``passed`` None: a measurement without prediction; ``verdict`` then
        replaces "measured" in the table, e.g. whether a paper's observation was reproduced)."""
        row = {"study": self.name, "name": name, "predicted": predicted, "observed": observed,
               "passed": None if passed is None else bool(passed), "tolerance": tolerance}
        if verdict is not None:
            if passed is not None:
                raise InputError(f"check {name!r}: a verdict text is only for an ungraded row (passed=None), got "
                                 f"passed={passed!r}.")
            row["verdict"] = verdict
        self.checks.append(row)

    def measure(self, **row) -> None:
        self.measurements.append({k: _plain(v) for k, v in row.items()})


def _plain(v):
    if isinstance(v, (np.generic, jax.Array)):
        v = np.asarray(v)
        return v.item() if v.ndim == 0 else v.tolist()
    if isinstance(v, np.ndarray):
        return v.tolist()
    return v


# ------------------------------------------------------------------------------------------------
# running layer stacks
@eqx.filter_jit
def _stack_run(field, x0s, dt, num_layers, save_every, shift, save_fn):
    stepper = EulerStepper(dt, num_layers, save_every=save_every, shift=shift)
    return jax.vmap(lambda x0: stepper.solve(field, x0, save_fn=save_fn))(x0s)


def run_layers(field, x0s, *, dt: float, layers: int, save_every: int = 1, shift=None, save_fn=None):
    """Euler layer stack of ``field`` from every cloud of ``x0s`` (B, n, d): saved (B, T, ...) and times."""
    traj = _stack_run(field, jnp.asarray(x0s, jnp.float64), float(dt), int(layers), int(save_every),
                      plain_shift if shift is None else shift, save_fn)
    if bool(jnp.any(RESULTS.failed(traj.result))):
        raise InputError(f"a layer stack overflowed (first non-finite time {float(jnp.min(traj.t_nonfinite))}); "
                         "reduce the number of layers or the weights' scale in the config.")
    return np.asarray(traj.ts[0]), jax.tree_util.tree_map(np.asarray, traj.ys)


def _levels(s: np.ndarray, scale: float, rel_tol: float) -> int:
    return int(num_levels(jnp.asarray(s), rel_tol * scale))


@jax.jit
def _rescaled_saves(R, layers, x):
    """z[k] = R^{-k} x[k] for the saved layers k (layers: (T,), x: (B, T, n, d)), with
    :func:`attnflow.fields.rescaled_from_raw`."""
    return jax.vmap(rescaled_from_raw, in_axes=(None, 0, 1), out_axes=1)(R, layers, x)


def _rescale(R: np.ndarray, ts_layers: np.ndarray, x: np.ndarray) -> np.ndarray:
    """z[k] = R^{-k} x[k] for saved layers k (x: (B, T, n, d)) as NumPy."""
    return np.asarray(_rescaled_saves(jnp.asarray(R), jnp.asarray(np.asarray(ts_layers), jnp.int32), jnp.asarray(x)))


# ------------------------------------------------------------------------------------------------
# figures (drawn by attnflow.plot; every format of the surrounding attnflow.plot.figure_formats)
def _save(ax, path: Path) -> str:
    names = plot.save(ax.figure, path, close=True)
    return next((n for n in names if n.endswith(".png")), names[0])


def _fig_paths(folder: Path, name: str, panels: list[tuple[str, np.ndarray]], ts) -> str:
    """Token paths (2-d) of one cloud, one panel per setting (rows of at most four)."""
    cols = min(4, len(panels))
    rows = -(-len(panels) // cols)
    fig, axes = plot.new_figure(cols, rows, panel=(3.2, 3.2))
    for ax, (title, z) in zip(axes.ravel(), panels):
        plot.trajectories(z, ts=ts, ax=ax, title=title, show_legend=False)
    for ax in axes.ravel()[len(panels):]:
        ax.set_axis_off()
    fig.suptitle("grey: paths; hollow: start; blue: end", fontsize="small")
    return _save(axes.ravel()[0], folder / f"{name}.png")


def _fig_curves(folder: Path, name: str, x, curves: dict, *, xlabel: str, ylabel: str, title: str,
                logy: bool | None = None, marker: str | None = None, **options) -> str:
    """Curves against x (:func:`attnflow.plot.series_by_parameter`; ``options``: values, parameter, styles, ...)."""
    ax = plot.series_by_parameter(x, curves, xlabel=xlabel, ylabel=ylabel, title=title, log=logy, marker=marker,
                                  **options)
    return _save(ax, folder / f"{name}.png")


_SHORT = 6  # lists longer than this are summarised in report.md (full values in summary.json)


def _summary(v, limit: int = _SHORT) -> str:
    """A report.md cell for a measured value: short lists as they are, long ones as "min–max (mean), k values"."""
    if isinstance(v, dict):
        return "; ".join(f"{k}: {_summary(x, limit)}" for k, x in v.items())
    if isinstance(v, np.ndarray):
        v = v.tolist()
    if not isinstance(v, (list, tuple)):
        return str(v)
    flat = np.asarray(v, dtype=object).ravel().tolist() if v else []
    if len(flat) <= limit:
        return str(list(v))
    if all(isinstance(x, (bool, np.bool_)) for x in flat):
        return f"{sum(map(bool, flat))} of {len(flat)} true"
    try:
        a = np.asarray(flat, dtype=float)
    except (TypeError, ValueError):
        return ", ".join(map(str, flat[:3])) + f", … ({len(flat)} values)"
    fin = a[np.isfinite(a)]
    if fin.size == 0:
        return f"{len(flat)} values, none finite"
    bad = f", {a.size - fin.size} non-finite" if fin.size < a.size else ""
    return f"{fin.min():.4g}–{fin.max():.4g} (mean {fin.mean():.4g}), {len(flat)} values{bad}"


_LIST = re.compile(r"\[([-+0-9.eE, ]+|True|False)\]")


def _short_text(text: str) -> str:
    """``text`` with every bracketed number list longer than _SHORT replaced by its :func:`_summary`."""

    def shorten(m):
        items = [x for x in re.split(r"[,\s]+", m.group(1).strip()) if x]
        if len(items) <= _SHORT:
            return m.group(0)
        try:
            return "[" + _summary([float(x) for x in items]) + "]"
        except ValueError:
            return m.group(0)

    return _LIST.sub(shorten, str(text))


def _cell(text) -> str:
    return _short_text(text).replace("|", "\\|").replace("\n", " ")


# ------------------------------------------------------------------------------------------------
# studies
#: the two readings of the paper's Section 12.2 flow (benchmarks/sec12_2_grid.py, docs/extensions.md)
SEC12_2_PICTURES = {
    "z": "z picture (SPEC 3): dz_i/dt = W sigma(V sum_j P_ij (z_j - z_i)), P from e^{tV} z",
    "x": "x picture: dx_i/dt = W sigma(sum_j P_ij V x_j), read in z[k] = (I + dt V)^{-k} x[k]",
}


def _sec12_2_field(picture: str, Q, K, V, W, act: str):
    """The registry's ``feedforward`` field in one reading: z (its rescaled picture) or x (raw)."""
    return build_field("feedforward", Q, K, V, picture="rescaled" if picture == "z" else "raw", W=W, activation=act)


def _sec12_2_run(picture, Q, K, V, W, act, z0, cfg, every):
    """Euler layers of one reading; (times, rescaled z (B, T, n, d), raw x (B, T, n, d))."""
    ts, y = run_layers(_sec12_2_field(picture, Q, K, V, W, act), z0, dt=cfg.dt, layers=cfg.layers,
                       save_every=every)
    ks = np.round(ts / cfg.dt)
    if picture == "z":
        return ts, y, None
    return ts, _rescale(np.eye(len(V)) + cfg.dt * V, ks, y), y


#: line style per reading in the Section 12.2 figures
_STYLE = {"z": "-", "x": "--"}
_STYLE_LABELS = {"-": "z reading", "--": "x reading"}


def _paper_verdict(hits: int, total: int) -> str:
    return "paper: reproduced" if hits == total else ("paper: not reproduced" if hits == 0 else
                                                      f"paper: partly ({hits}/{total})")


def study_sec12_2(cfg: Sec12_2Settings, rng: np.random.Generator, folder: Path) -> Study:
    st = Study("sec12_2", "Section 12.2: feed-forward flow, W sigma(attention), in two readings")
    V = np.asarray(cfg.V, float)  # checked by the parse
    d, n, B, L, dt = V.shape[0], cfg.n, cfg.clouds, cfg.layers, cfg.dt
    t1 = dt * L
    Q, K = good_qk(rng, V)
    W_draws = [rng.normal(size=(d, d)) / math.sqrt(d) for _ in range(cfg.random_W_draws)]
    _, phi_dual, lam = leading_vectors(V)
    z0 = rng.normal(size=(B, n, d))
    st.settings = {"V": V, "eigenvalues of V": np.round(np.sort(np.linalg.eigvals(V).real), 4), "Q": Q, "K": K,
                   "random W": f"{len(W_draws)} draws with N(0, 1/d) entries (the first is plotted)",
                   "n": n, "clouds": B, "dt": dt, "t1": t1, **{f"{p} picture": txt for p, txt in SEC12_2_PICTURES.items()},
                   "grid": "benchmarks/sec12_2_grid.py runs both readings over V kinds, Q, K, beta and t "
                           "(docs/extensions.md)"}
    settings = {"identity, W = I": ("identity", np.eye(d)), "ReLU, W = I": ("relu", np.eye(d)),
                "tanh, W = I": ("tanh", np.eye(d)), "ReLU, random W": ("relu", W_draws[0])}
    every = save_every("sec12_2", L)
    tol_levels = f"levels: gap > {cfg.level_tol} max_i|phi_1^*(z_i(0))|"
    tol_collapse = f"collapse: max|z(t1)| <= {cfg.collapse_tol} max|z(0)|"
    panels, level_curves, ratio_curves, seen = [], {}, {}, {}

    def observe(z):
        s = z @ phi_dual  # (B, T, n)
        scale = np.abs(s[:, 0]).max(axis=1)
        levels = [_levels(s[b, -1], scale[b], cfg.level_tol) for b in range(B)]
        norms = np.linalg.norm(z, axis=-1).max(axis=-1)  # (B, T)
        return s, scale, levels, norms[:, -1] / norms[:, 0], norms / norms[:, :1]

    for picture in SEC12_2_PICTURES:
        for label, (act, W) in settings.items():
            ts, z, x = _sec12_2_run(picture, Q, K, V, W, act, z0, cfg, every)
            s, scale, levels, ratio, ratio_t = observe(z)
            name = f"{picture}: {label}"
            seen[name] = (levels, ratio)
            st.measure(picture=picture, setting=label, levels=levels, norm_ratio=np.round(ratio, 6))
            level_curves[name] = [np.mean([_levels(s[b, t], scale[b], cfg.level_tol) for b in range(B)])
                                  for t in range(len(ts))]
            ratio_curves[name] = np.exp(np.log(np.maximum(ratio_t, 1e-300)).mean(axis=0))
            panels.append((name, z[0]))
            if label == "identity, W = I":  # sigma = identity, W = I: the plain flow, Thm 4.2
                st.check(f"{picture}: identity, W = I is the plain flow: at most three hyperplanes (Thm 4.2)",
                         "<= 3 levels of phi_1^*(z_i(t1)), no collapse",
                         f"levels per cloud {levels}; max|z(t1)|/max|z(0)| {np.round(ratio, 3).tolist()}",
                         all(k <= 3 for k in levels) and bool(np.all(ratio > cfg.collapse_tol)), tol_levels)
            if picture == "z" and label == "ReLU, W = I":
                # z[k+1] = z[k] + dt relu(.) >= z[k] coordinatewise, exactly (also in floating point)
                drop = float(np.max(-np.diff(z, axis=1)))
                st.check("z: ReLU, W = I moves every coordinate of every token up only (so tokens freeze)",
                         "z_i[k+1] - z_i[k] >= 0 in every coordinate", f"largest decrease {drop if drop > 0 else 0.0:.1e}",
                         drop <= 0.0, "0 (exact: dt relu(.) >= 0)")
            if picture == "x" and label == "tanh, W = I":
                # |dx_i/dt|_inf < 1: |x_i(t) - x_i(0)|_inf <= t; hence |z(t1)| <= ||R^{-L}||_2 (|x(0)| + sqrt(d) t1)
                move = float(np.max(np.abs(x[:, -1] - x[:, 0]).max(axis=-1)))
                st.check("x: tanh, W = I has speed < 1 per coordinate", f"max_i |x_i(t1) - x_i(0)|_inf <= t1 = {t1:g}",
                         f"{move:.4g}", move <= t1 + ROUNDING_TOL, f"{ROUNDING_TOL:g} (rounding)")
                R_inv_L = np.linalg.matrix_power(np.linalg.inv(np.eye(d) + dt * V), L)
                norm0 = np.linalg.norm(z0, axis=-1).max(axis=-1)
                bound = np.linalg.norm(R_inv_L, 2) * (norm0 + math.sqrt(d) * t1) / norm0
                implied = "implies collapse" if bound.max() <= cfg.collapse_tol else "does not imply collapse"
                st.check("x: tanh, W = I: rescaled size below the speed bound (V with spectrum > 0: -> 0)",
                         "max|z(t1)|/max|z(0)| <= ||R^-L||_2 (max|x(0)| + sqrt(d) t1)/max|x(0)|, R = I + dt V",
                         f"{np.array2string(ratio, precision=2)} <= {np.array2string(bound, precision=2)} "
                         f"(the bound {implied} at t1 = {t1:g})",
                         bool(np.all(ratio <= bound * (1 + 1e-9))), "1e-9 relative (rounding)")
    # random W: the paper's collapse, over several draws of W
    collapsed = {p: [] for p in SEC12_2_PICTURES}
    for W in W_draws:
        for picture in SEC12_2_PICTURES:
            _, z, _ = _sec12_2_run(picture, Q, K, V, W, "relu", z0, cfg, L)
            collapsed[picture].append(bool(np.all(observe(z)[3] <= cfg.collapse_tol)))
    st.measure(picture="both", setting="ReLU, random W draws: collapsed (all clouds)",
               levels="-", norm_ratio={p: c for p, c in collapsed.items()})
    # the paper's three observations: what it says, what we observe, in each reading
    for picture in SEC12_2_PICTURES:
        levels, ratio = seen[f"{picture}: ReLU, W = I"]
        hits = sum(k <= 3 and r > cfg.collapse_tol for k, r in zip(levels, ratio))
        st.check(f"{picture}: paper says ReLU, W = I follows three hyperplanes", "<= 3 levels, no collapse",
                 f"levels per cloud {levels}; ratio {np.round(ratio, 3).tolist()}", None, tol_levels,
                 verdict=_paper_verdict(hits, B))
        levels, ratio = seen[f"{picture}: tanh, W = I"]
        hits = int(np.sum(ratio <= cfg.collapse_tol))
        st.check(f"{picture}: paper says tanh, W = I collapses to 0", "max|z(t1)|/max|z(0)| -> 0",
                 f"{np.array2string(ratio, precision=2)} (levels {levels})", None, tol_collapse,
                 verdict=_paper_verdict(hits, B))
        hits = sum(collapsed[picture])
        st.check(f"{picture}: paper says ReLU, random W collapses to 0",
                 f"collapse for random W ({len(W_draws)} draws)",
                 f"{hits} of {len(W_draws)} draws collapse in every cloud", None, tol_collapse,
                 verdict=_paper_verdict(hits, len(W_draws)))
    st.figures.append((_fig_paths(folder, "sec12_2_paths", panels, ts),
                       "Rescaled tokens z_i(t), cloud 0, each reading (z: SPEC's form; x: sigma on the raw "
                       "attention output) and activation / W (random W: the first draw)."))
    st.figures.append((_fig_curves(folder, "sec12_2_levels", ts, level_curves, xlabel="t",
                                   ylabel="levels of phi_1^*(z)", title="Section 12.2: hyperplane levels "
                                   "(mean over clouds)", styles=[_STYLE[k[0]] for k in level_curves],
                                   style_labels=_STYLE_LABELS),
                       "Number of levels of phi_1^*(z_i(t)) against t (3 or fewer: Thm 4.2 geometry)."))
    st.figures.append((_fig_curves(folder, "sec12_2_collapse", ts, ratio_curves, xlabel="t",
                                   ylabel="max|z(t)| / max|z(0)|", title="Section 12.2: collapse to 0? "
                                   "(geometric mean over clouds)", styles=[_STYLE[k[0]] for k in ratio_curves],
                                   style_labels=_STYLE_LABELS),
                       "Size of the rescaled cloud against t; collapse to 0 is a line falling below "
                       f"{cfg.collapse_tol}."))
    return st


def _positive_good_triple(rng, d: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    V = rng.uniform(0.05, 1.0, size=(d, d))  # positive: Def 4.1 (1) by Perron-Frobenius
    Q, K = good_qk(rng, V)
    return Q, K, V


def study_multihead(cfg: MultiheadSettings, rng: np.random.Generator, folder: Path) -> Study:
    st = Study("multihead", "Several heads, each a random good triple")
    d, n, B = cfg.d, cfg.n, cfg.clouds
    x0 = rng.normal(size=(B, n, d))
    every = save_every("multihead", cfg.layers)
    curves, settle = {}, []
    st.settings = {"heads": list(cfg.heads), "n": n, "d": d, "clouds": B, "dt": cfg.dt, "layers": cfg.layers,
                   "weights": "V_h entrywise U[0.05, 1], divided by the spectral radius of S = sum_h V_h; "
                   "Q_h, K_h Gaussian with <Q_h phi_h, K_h phi_h> > 0.1"}
    for H in cfg.heads:
        triples = [_positive_good_triple(rng, d) for _ in range(H)]
        S = sum(t[2] for t in triples)
        rho = max(abs(np.linalg.eigvals(S)))
        Vs = [t[2] / rho for t in triples]
        S = S / rho
        w = AttentionWeights(np.stack([t[0] for t in triples]), np.stack([t[1] for t in triples]), np.stack(Vs),
                             axes=("head",))
        ts, x = run_layers(build_field("multihead", w), x0, dt=cfg.dt, layers=cfg.layers, save_every=every)
        z = _rescale(np.eye(d) + cfg.dt * S, np.round(ts / cfg.dt), x)
        _, phi_dual, _ = leading_vectors(S)
        s = z @ phi_dual
        scale = np.abs(s[:, 0]).max(axis=1)
        lv = np.array([[_levels(s[b, t], scale[b], cfg.level_tol) for t in range(len(ts))] for b in range(B)])
        dirs = np.array([int(num_clusters(jnp.asarray(normalise(jnp.asarray(x[b, -1]))), 0.02, 1.0))
                         for b in range(B)])
        final = lv[:, -1]
        # layer at which the level count reaches its final value for good
        settled = [float(ts[np.max(np.nonzero(lv[b] != final[b])[0], initial=-1) + 1]) for b in range(B)]
        settle.append(np.mean(settled))
        curves[f"H = {H}"] = lv.mean(axis=0)
        st.measure(heads=H, final_levels=final, direction_clusters=dirs, settle_time=np.round(settled, 2))
        if H == 1:
            st.check("H = 1: Thm 4.2, at most three hyperplanes", "<= 3 levels of phi_1^*(z(t1))",
                     f"levels per cloud {final.tolist()}", bool(np.all(final <= 3)),
                     f"gap > {cfg.level_tol} max_i|phi_1^*(z_i(0))|")
        else:
            st.check(f"H = {H}: levels of phi_S^*(z), S = sum_h V_h (open problem)", "no theorem",
                     f"levels per cloud {final.tolist()}, settled at t = {np.round(settled, 1).tolist()}", None,
                     f"gap > {cfg.level_tol} max_i|phi_S^*(z_i(0))|")
    st.figures.append((_fig_curves(folder, "multihead_levels", ts, curves, xlabel="t (layers x dt)",
                                   ylabel="levels of phi_S^*(z)", title="Several heads: hyperplane levels "
                                   "(mean over clouds)", values=list(cfg.heads), parameter="heads H"),
                       "How many hyperplanes remain, and how fast, for H = 1, 2, 4, 8 heads."))
    st.figures.append((_fig_curves(folder, "multihead_settle", cfg.heads, {"settle time": settle},
                                   xlabel="heads H", ylabel="t at which the level count settles",
                                   title="Several heads: time to the final level count", marker="o"),
                       "Mean time after which the number of levels no longer changes."))
    return st


def study_albert(cfg: AlbertSettings, rng: np.random.Generator, folder: Path) -> Study:
    st = Study("albert", "The ALBERT defence: shared weights vs per-layer weights perturbed by epsilon")
    V, d, n, B, L, dt = V2D, 2, cfg.n, cfg.clouds, cfg.layers, cfg.dt
    Q, K = good_qk(rng, V)
    shared = AttentionWeights(Q, K, V)
    _, phi_dual, _ = leading_vectors(V)
    x0 = rng.normal(size=(B, n, d))
    key = jax.random.key(int(rng.integers(2**31)))
    R = np.eye(d) + dt * V
    st.settings = {"V": V, "Q": Q, "K": K, "n": n, "clouds": B, "dt": dt, "layers": L,
                   "epsilons": list(cfg.epsilons), "perturbation": "X_l = X + eps ||X||_F G_l/||G_l||_F, X in Q, K, V"}

    def final_z(field):
        ts, x = run_layers(field, x0, dt=dt, layers=L, save_every=L)
        return _rescale(R, np.round(ts / dt), x)[:, -1]

    z_shared = final_z(build_field("attention", shared))
    s_shared = z_shared @ phi_dual
    labels_shared = [np.asarray(abz_levels(jnp.asarray(s / np.abs(s).max()), cfg.level_tol)[0]) for s in s_shared]
    agreement, levels_mean = [], []
    for eps in cfg.epsilons:
        z = final_z(build_field("layered", shared, num_layers=L, epsilon=float(eps), key=key))
        s = z @ phi_dual
        lab = [np.asarray(abz_levels(jnp.asarray(sb / np.abs(sb).max()), cfg.level_tol)[0]) for sb in s]
        agree = float(np.mean([np.mean(a == b) for a, b in zip(lab, labels_shared)]))
        lv = [_levels(sb, np.abs(sb).max(), cfg.level_tol) for sb in s]
        agreement.append(agree)
        levels_mean.append(float(np.mean(lv)))
        st.measure(epsilon=eps, agreement=round(agree, 4), levels=lv)
        if eps == 0:
            err = float(np.abs(z - z_shared).max())
            st.check("epsilon = 0 reproduces shared weights", "identical layer stack",
                     f"max |z_L - z_L(shared)| = {err:.2e}", err <= ROUNDING_TOL, f"{ROUNDING_TOL:g} (rounding)")
            st.check("epsilon = 0: Thm 4.2, at most three hyperplanes", "<= 3 levels",
                     f"levels per cloud {lv}", all(k <= 3 for k in lv),
                     f"gap > {cfg.level_tol} max_i|phi_1^*(z_i(t1))|")
    eps_arr = np.asarray(cfg.epsilons, float)
    st.check("agreement with the shared-weight limit vs epsilon (no theorem)", "1 at epsilon = 0",
             ", ".join(f"{e:g}: {a:.2f}" for e, a in zip(eps_arr, agreement)), None, "fraction of tokens")
    st.figures.append((_fig_curves(folder, "albert_agreement", eps_arr,
                                   {"agreement of limit levels (a / 0 / b)": agreement}, xlabel="epsilon "
                                   "(relative Frobenius size of the per-layer perturbation)", ylabel="fraction",
                                   title="ALBERT defence: agreement with the shared-weight prediction", marker="o"),
                       "Fraction of tokens whose limit level (a, 0 or b of phi_1^*(z)) matches the shared run."))
    st.figures.append((_fig_curves(folder, "albert_levels", eps_arr, {"levels": levels_mean}, xlabel="epsilon",
                                   ylabel="levels of phi_1^*(z(t1))", title="ALBERT defence: does the geometry "
                                   "survive? (mean levels)", marker="o"),
                       "Mean number of hyperplane levels at the last layer (3 or fewer: the Thm 4.2 geometry)."))
    return st


def _sphere_counts(field, x0, cfg, study: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Projected Euler on the sphere: save times, cluster counts, norm drift and tokens (B, T, ...)."""
    tol = cfg.cluster_tol
    save = lambda t, y, args: (num_clusters(y, tol, 1.0), jnp.abs(jnp.linalg.norm(y, axis=-1) - 1).max(), y)
    ts, (counts, drift, ys) = run_layers(field, x0, dt=cfg.dt, layers=cfg.layers,
                                         save_every=save_every(study, cfg.layers), shift=field_entry("sphere").shift,
                                         save_fn=save)
    return ts, counts, drift, ys


def _sphere_start(cfg: SphereSettings, rng: np.random.Generator):
    """The sphere studies' starts: ``clouds`` normalised Gaussian clouds (B, n, d), I_d, and the
    settings they share."""
    d, n, B = cfg.d, cfg.n, cfg.clouds
    x0 = np.asarray(normalise(jnp.asarray(rng.normal(size=(B, n, d)))))
    settings = {"n": n, "d": d, "clouds": B, "dt": cfg.dt, "t1": cfg.dt * cfg.layers, "betas": list(cfg.betas)}
    return x0, np.eye(d), settings


def study_causal(cfg: SphereSettings, rng: np.random.Generator, folder: Path) -> Study:
    st = Study("causal", "Causal vs full attention (tokens on the sphere, V = I)")
    x0, I, st.settings = _sphere_start(cfg, rng)
    st.settings.update(weights="Q = K = V = I", step="projected Euler (renormalise)")
    curves = {}
    for beta in cfg.betas:
        for mask in (None, "causal"):
            ts, counts, drift, ys = _sphere_counts(build_field("sphere", I, I, I, beta=beta, mask=mask), x0, cfg, "causal")
            name = f"beta = {beta:g}, {'causal' if mask else 'full'}"
            curves[name] = counts.mean(axis=0)
            final = counts[:, -1]
            dist_to_x1 = np.linalg.norm(ys[:, -1] - x0[:, None, 0], axis=-1).max(axis=1)
            st.measure(setting=name, final_clusters=final, max_distance_to_x1_0=np.round(dist_to_x1, 4),
                       max_norm_drift=float(drift.max()))
            if mask:
                st.check(f"{name}: one cluster at x_1(0)", "1 cluster, every token -> x_1(0)",
                         f"clusters {final.tolist()}, max |x_i(t1) - x_1(0)| = {dist_to_x1.max():.2e}",
                         bool(np.all(final == 1) and dist_to_x1.max() <= cfg.cluster_tol),
                         f"chordal distance {cfg.cluster_tol}")
            else:
                st.check(f"{name}: clusters (no prediction at this horizon)", "-",
                         f"clusters {final.tolist()}, max |x_i(t1) - x_1(0)| = {dist_to_x1.max():.2e}", None,
                         f"chordal distance {cfg.cluster_tol}")
            st.check(f"{name}: tokens stay on the sphere", "| |x_i| - 1 | at rounding level",
                     f"{drift.max():.1e}", bool(drift.max() <= ROUNDING_TOL), f"{ROUNDING_TOL:g}")
    st.figures.append((_fig_curves(folder, "causal_clusters", ts, curves, xlabel="$t$", ylabel="clusters",
                                   title="Causal vs full attention on the sphere (mean over clouds)",
                                   values=[b for b in cfg.betas for _ in (0, 1)], parameter=r"$\beta$",
                                   styles=["-", "--"] * len(cfg.betas), style_labels={"-": "full", "--": "causal"}),
                       "Number of clusters against time, causal and full attention, same starts."))
    return st


def study_sphere(cfg: SphereSettings, rng: np.random.Generator, folder: Path) -> Study:
    st = Study("sphere", "Tokens on the sphere (Q = K = V = I): one cluster vs metastable clusters")
    x0, I, st.settings = _sphere_start(cfg, rng)
    n = cfg.n
    st.settings["metastable"] = (f"2 <= clusters(t) <= n/2 (tokens grouped, not yet one cluster; chordal "
                                 f"tolerance {cfg.cluster_tol}), time on the save grid, censored at t1")
    curves, meta, final_all = {}, [], {}
    for beta in cfg.betas:
        ts, counts, drift, _ = _sphere_counts(build_field("sphere", I, I, I, beta=beta), x0, cfg, "sphere")
        step = ts[1] - ts[0]
        in_meta = metastable_states(counts, reference=n, running_min=False)  # 2 <= clusters <= n/2, each save
        t_meta = in_meta.sum(axis=1) * step
        meta.append(float(t_meta.mean()))
        curves[f"beta = {beta:g}"] = counts.mean(axis=0)
        final_all[beta] = counts[:, -1]
        st.measure(beta=beta, final_clusters=counts[:, -1], metastable_time=np.round(t_meta, 2),
                   max_norm_drift=float(drift.max()))
    small = [b for b in cfg.betas if b <= 1.0]
    if small:
        obs = {b: final_all[b].tolist() for b in small}
        st.check("small beta (<= 1): one cluster", "1 cluster at t1", f"{obs}",
                 all(np.all(final_all[b] == 1) for b in small), f"chordal distance {cfg.cluster_tol}")
    big = max(cfg.betas)
    st.check(f"large beta ({big:g}): metastable clusters", ">= 2 clusters persist at t1",
             f"{final_all[big].tolist()}", bool(np.all(final_all[big] >= 2)), f"chordal distance {cfg.cluster_tol}")
    order = [m for b, m in zip(cfg.betas, meta) if b >= 1.0]
    grid = float(ts[1] - ts[0])
    st.check("time in the metastable state grows with beta (beta >= 1)", "non-decreasing in beta",
             ", ".join(f"{b:g}: {m:.1f}" for b, m in zip(cfg.betas, meta)),
             bool(np.all(np.diff(order) >= -grid)), f"one save interval ({grid:g}); censored at t1")
    st.figures.append((_fig_curves(folder, "sphere_clusters", ts, curves, xlabel="$t$", ylabel="clusters",
                                   title="Sphere: clusters against time (mean over clouds)",
                                   values=list(cfg.betas), parameter=r"$\beta$"),
                       "Number of clusters against time for each beta."))
    st.figures.append((_fig_curves(folder, "sphere_metastable", cfg.betas, {"time in metastable state": meta},
                                   xlabel=r"$\beta$", ylabel="time", title="Sphere: time spent with 2..n/2 clusters",
                                   marker="o"),
                       "Time spent in the metastable (few separated clusters) state against beta."))
    return st


#: the studies in report order (:data:`~attnflow.report._extensions_config.STUDY_NAMES`): (title, study function)
STUDIES: dict[str, tuple[str, Callable]] = {
    "sec12_2": ("Section 12.2 feed-forward", study_sec12_2),
    "multihead": ("Several heads", study_multihead),
    "albert": ("ALBERT defence (per-layer weights)", study_albert),
    "causal": ("Causal vs full attention", study_causal),
    "sphere": ("Sphere dynamics against beta", study_sphere),
}


# ------------------------------------------------------------------------------------------------
# the job
def _render(studies: list[Study], prov: dict, quick: bool) -> str:
    fmt_pass = {True: "PASS", False: "FAIL", None: "measured"}
    lines = ["# attnflow extensions: beyond the theorems", "",
             f"{'Quick smoke run. ' if quick else ''}Generated {prov['time_utc']} (git {prov['git_commit']}).",
             "Graded rows (PASS / FAIL) are consequences of the verified dynamics, Thm 4.2 where it applies and "
             "the known sphere results; 'paper: ...' rows set the paper's Section 12.2 observations against ours "
             "(not graded: an observation that differs is a finding); 'measured' rows have no prediction "
             "(open problems).", "",
             "| study | check | predicted | observed | tolerance | verdict |", "|---|---|---|---|---|---|"]
    for st in studies:
        for c in st.checks:
            lines.append(f"| {st.name} | {_cell(c['name'])} | {_cell(c['predicted'])} | {_cell(c['observed'])} | "
                         f"{_cell(c['tolerance'])} | {c.get('verdict') or fmt_pass[c['passed']]} |")
    for st in studies:
        lines += ["", f"## {st.title}", "", f"Run time {st.seconds:.1f} s.", "", "Settings:", ""]
        for k, v in st.settings.items():
            lines.append(f"* {k}: {_summary(np.round(v, 4) if isinstance(v, np.ndarray) else v, 16)}")
        if st.measurements:
            keys = list(st.measurements[0])
            lines += ["", "Measurements (lists longer than six values summarised as min–max (mean); every value "
                      "in summary.json):", "", "| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
            lines += ["| " + " | ".join(_cell(_summary(m.get(k, "-"))) for k in keys) + " |" for m in st.measurements]
        for fig, caption in st.figures:
            lines += ["", f"![{caption}]({fig})", "", f"*{caption}*"]
    return "\n".join(lines) + "\n"


@releases_output_dirs
def run_extensions(out: str | os.PathLike = DEFAULT_OUT, *, config: str | os.PathLike | None = None,
                   quick: bool = False, studies: list[str] | None = None, progress: bool = True) -> dict:
    """Run the selected studies (default: the config's ``studies``, or all) and write the report folder.

    Writes ``report.md`` (table first), ``summary.json`` (every check and measurement),
    ``config.json`` (resolved), ``provenance.json`` and PNG figures into ``out``. float64 is
    scoped to this call. Returns the summary.

    Example:
        >>> from attnflow.report._extensions import STUDIES
        >>> list(STUDIES)
        ['sec12_2', 'multihead', 'albert', 'causal', 'sphere']
    """
    cfg = load_config(config, "extensions.toml")
    parsed = parse_extensions_config(cfg)  # every key checked, before any work
    selected = list(studies or parsed.studies or STUDIES)
    settings = check_extensions_config(parsed, selected, quick)  # sizes and work checked
    work = [study_work(name, settings[name]) for name in selected]  # said on stderr when it is long
    announce_work(f"extensions ({len(selected)} stud{'y' if len(selected) == 1 else 'ies'})",
                  sum(w[1] for w in work), sum(w[2] for w in work))
    run = open_run(out, KIND, cfg, seed=parsed.seed, replaces=True)  # a previous report is replaced, not resumed
    folder = run.out
    run.mark(complete=False)
    prov = provenance(seed=parsed.seed, fingerprint=run.fingerprint)
    results = []
    from tqdm.auto import tqdm

    done = count_kept(len(selected), "studies", resumes=False)  # the summary is written when all have run
    with float64_scope():
        for name in tqdm(selected, desc="extensions", disable=not progress):
            start = time.perf_counter()
            rng = np.random.default_rng([parsed.seed, list(STUDIES).index(name)])
            st = STUDIES[name][1](settings[name], rng, folder)
            st.seconds = time.perf_counter() - start
            results.append(st)
            done.add()
    graded = [c for st in results for c in st.checks if c["passed"] is not None]
    summary = {
        "kind": KIND,
        "quick": quick,
        "num_checks": sum(len(st.checks) for st in results),
        "num_graded": len(graded),
        "num_passed": sum(c["passed"] for c in graded),
        "studies": {st.name: {"title": st.title, "seconds": round(st.seconds, 2), "settings": st.settings,
                              "checks": st.checks, "measurements": st.measurements,
                              "figures": [f for f, _ in st.figures]} for st in results},
    }
    atomic_write_json(folder / "summary.json", summary)
    atomic_write_json(folder / "config.json", {"config": cfg, "resolved": {k: st.as_dict() for k, st in settings.items()}})
    atomic_write_json(folder / "provenance.json", prov)
    atomic_write_text(folder / "report.md", _render(results, prov, quick))
    run.mark(complete=True)
    return summary
