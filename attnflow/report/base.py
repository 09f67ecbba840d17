"""Building blocks of the reproduction report: checks, case results, the run context,
and the batched simulation + diagnostics every case shares."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

import equinox as eqx

from .. import _validate as v
from ..dynamics import AttentionFlow, DiscreteRescaledFlow, RescaledFlow
from ..integrate import raise_if_failed, solve_euler, solve_ode
from ..observables import boolean_distance, diameter, num_clusters, numerical_rank
from .reference import growth_rate, trajectory_defect

__all__ = ["Check", "CaseResult", "Context", "Run", "run_case_sim", "library_field", "defect_check", "fmt",
           "CASES", "register"]


def fmt(x: Any, digits: int = 3) -> str:
    """Short human format for numbers in the report table."""
    if isinstance(x, (bool, np.bool_)):
        return str(bool(x))
    if isinstance(x, (int, np.integer)):
        return str(int(x))
    if isinstance(x, (float, np.floating)):
        x = float(x)
        if math.isnan(x):
            return "nan"
        if x == 0 or 1e-3 <= abs(x) < 1e4:
            return f"{x:.{digits}g}"
        return f"{x:.{max(1, digits - 1)}e}"
    if isinstance(x, dict):
        return ", ".join(f"{k} = {fmt(v, digits)}" for k, v in x.items())
    if isinstance(x, (list, tuple, np.ndarray)):
        return "[" + ", ".join(fmt(v, digits) for v in list(x)) + "]"
    return str(x)


@dataclass
class Check:
    """One row of the report: a predicted quantity against the observed one.

    ``passed`` is None for a measurement the paper states without a threshold ("info");
    ``margin`` is positive when passing (how far from the threshold, in the check's units).
    """

    case: str
    name: str
    hypotheses: str
    predicted: str
    observed: str
    passed: bool | None
    margin: float
    note: str = ""

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class CaseResult:
    """What one case produced; built by the runner from the case's :func:`register` entry (the
    name is stated once). ``error`` holds the reason when the case could not finish."""

    name: str
    title: str
    theorem: str
    hypotheses: list[dict] = field(default_factory=list)  # {"text", "holds", "value"}
    checks: list[Check] = field(default_factory=list)
    figures: list[tuple[str, str]] = field(default_factory=list)  # (file, caption)
    notes: list[str] = field(default_factory=list)
    settings: dict = field(default_factory=dict)
    seconds: float = 0.0
    systems: list[dict] = field(default_factory=list)  # one row per simulated system (tidy table)
    error: str | None = None  # why the case stopped (exception type and message), None when it finished

    def record(self, run: "Run") -> None:
        """Add one row per simulated system of ``run`` to the tidy table ``systems.csv``."""
        B, T, n, d = run.z.shape
        for b in range(B):
            self.systems.append({
                "case": self.name, "run": b, "n": n, "d": d, "t1": float(run.ts[-1]), "saves": T,
                "clusters_t0": int(run.clusters[b, 0]), "clusters_t1": int(run.clusters[b, -1]),
                "rank_P_t1": int(run.rank[b, -1]), "dist_P_boolean_t1": float(run.boolean[b, -1]),
                "max_norm_z_t1": float(np.max(np.linalg.norm(run.z[b, -1], axis=-1))),
                "max_norm_x_t1": float(np.max(np.linalg.norm(run.x[b, -1], axis=-1))),
            })

    def hyp(self, text: str, holds: bool, value: Any = None) -> None:
        self.hypotheses.append({"text": text, "holds": bool(holds), "value": value})

    def hyp_text(self) -> str:
        return "; ".join(f"{h['text']} [{'ok' if h['holds'] else 'FAILS'}]" for h in self.hypotheses)

    def check(self, name: str, predicted: str, observed: str, passed: bool | None, margin: float,
              note: str = "") -> None:
        self.checks.append(Check(self.name, name, self.hyp_text(), predicted, observed,
                                 None if passed is None else bool(passed), float(margin), note))


def library_field(Q, K, V, *, picture: str, method: str, dt: float | None, num_layers: int):
    """The vector field attnflow integrates for a picture and method (the default
    ``Context.field_factory``): :class:`~attnflow.AttentionFlow` (raw), :class:`~attnflow.RescaledFlow`
    (rescaled) or :class:`~attnflow.DiscreteRescaledFlow` (rescaled Euler layers).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.report.base import library_field
        >>> I = jnp.eye(2)
        >>> type(library_field(I, I, I, picture="rescaled", method="tsit5", dt=None, num_layers=1)).__name__
        'RescaledFlow'
    """
    if picture == "raw":
        return AttentionFlow(Q, K, V)
    if method == "euler":
        return DiscreteRescaledFlow(Q, K, V)  # the layer grid (dt, layers) is bound by the stepper
    return RescaledFlow(Q, K, V)


@dataclass
class Context:
    """Everything a case needs: its resolved settings, the seed, the figure folder, and the
    vector field to integrate (``field_factory``, default :func:`library_field`; the mutation
    tests pass a wrong one). ``figures=False`` skips drawing."""

    name: str
    settings: dict  # global settings overlaid with the case's table
    out: Path
    quick: bool
    seed: int
    field_factory: Callable = library_field
    figures: bool = True

    def __getitem__(self, key: str) -> Any:
        return self.settings[key]


@dataclass
class Run:
    """A batched simulation as NumPy arrays: ts (T,), z/x (B, T, n, d), P (B, T, n, n),
    and the per-save diagnostics clusters / boolean / rank (B, T)."""

    ts: np.ndarray
    z: np.ndarray
    x: np.ndarray
    P: np.ndarray
    clusters: np.ndarray
    boolean: np.ndarray
    rank: np.ndarray
    picture: str = "rescaled"
    method: str = "tsit5"
    dt: float | None = None
    Q: np.ndarray | None = None
    K: np.ndarray | None = None
    V: np.ndarray | None = None
    dtype: str = "float64"


@jax.jit
def _diagnostics(z, P, rel_tol, rank_tol):
    """Per save: clusters (tolerance rel_tol x the run's initial diameter), dist(P, Boolean), rank P."""

    def member(zb, Pb):
        s0 = diameter(zb[0])
        return jax.vmap(lambda zz, pp: (num_clusters(zz, rel_tol, s0), boolean_distance(pp),
                                        numerical_rank(pp, rank_tol)))(zb, Pb)

    return jax.vmap(member)(z, P)


@eqx.filter_jit
def _solve(dyn, x0, ts, *, method, dt, num_layers, rtol, atol, max_steps):
    if method == "euler":
        dyn = dyn.on_grid(dt, 0.0, num_layers)  # tokens / attention below need the grid too
        one = lambda y0: solve_euler(dyn, y0, dt=dt, num_steps=num_layers)
    else:
        one = lambda y0: solve_ode(dyn, y0, t0=0.0, t1=ts[-1], ts=ts, rtol=rtol, atol=atol, max_steps=max_steps)
    traj = jax.vmap(one)(x0)
    tok = jax.vmap(jax.vmap(dyn.tokens))(traj.ts, traj.ys)
    P = jax.vmap(jax.vmap(dyn.attention))(traj.ts, traj.ys)
    return traj, tok, P


_TOL = {"float32": (1e-5, 1e-6), "float64": (1e-9, 1e-11)}  # rtol, atol of the adaptive solves


def run_case_sim(ctx: Context, x0, Q, K, V, *, t1: float, picture: str = "rescaled", method: str = "tsit5",
                 dt: float | None = None, num_saves: int | None = None) -> Run:
    """Integrate ``ctx.field_factory``'s field for the batch x0 (B, n, d) with shared weights
    (Tsit5 with saves on a uniform grid, or Euler layers saving every layer). The raw tokens and
    P at every save come from the same field object (its ``tokens`` and ``attention``), so the
    diagnostics see the dynamics that produced the trajectory. A failed solve raises
    :class:`~attnflow.SolverError` / :class:`~attnflow.NonFiniteError` with the time."""
    dtype = jnp.float64 if ctx["dtype"] == "float64" else jnp.float32
    num_layers = v.check_layers("t1", t1, "dt", dt) if method == "euler" else 1
    Qj, Kj, Vj = (jnp.asarray(np.asarray(a), dtype) for a in (Q, K, V))
    dyn = ctx.field_factory(Qj, Kj, Vj, picture=picture, method=method, dt=dt, num_layers=num_layers)
    T = int(num_saves or ctx["num_saves"])
    ts = jnp.linspace(0.0, float(t1), T, dtype=dtype)
    rtol, atol = _TOL[ctx["dtype"]]
    traj, tok, P = _solve(dyn, jnp.asarray(np.asarray(x0), dtype), ts, method=method,
                          dt=None if dt is None else float(dt), num_layers=num_layers, rtol=rtol, atol=atol,
                          max_steps=int(ctx["max_steps"]))
    raise_if_failed(traj, what=f"the {picture} {method} solve of case {ctx.name}")
    ts = np.asarray(traj.ts)[0]
    z, x, P = (np.asarray(a, np.float64) for a in (traj.ys, tok, P))
    ncl, bd, rk = (np.asarray(a) for a in _diagnostics(jnp.asarray(z), jnp.asarray(P),
                                                         float(ctx["rel_tol"]), float(ctx["rank_tol"])))
    return Run(ts, z, x, P, ncl, bd, rk, picture=picture, method=method, dt=dt, Q=np.asarray(Q, np.float64),
               K=np.asarray(K, np.float64), V=np.asarray(V, np.float64), dtype=ctx["dtype"])


def defect_tolerance(dtype: str) -> float:
    """Relative tolerance of :func:`defect_check`: 1e-6 in float64 (the solves run at rtol 1e-9;
    their dense output and the re-integration at rtol 1e-10 add ~1e-8 per saved interval; measured
    values in docs/report.md), 1e-3 in float32 (solves at rtol 1e-5, states rounded at 6e-8)."""
    return 1e-6 if dtype == "float64" else 1e-3


def defect_check(res: "CaseResult", run: Run, *, intervals: int = 12) -> None:
    """The universal check: the saved trajectory solves the paper's equation (SPEC section 1), with
    the field written out independently (:mod:`attnflow.report.reference`). Tolerance: relative to
    the initial size max_i|y_i(0)| times the rate at which the state may grow,
    e^{rate t} (:func:`~attnflow.report.reference.growth_rate`)."""
    defect, t_at = trajectory_defect(run.ts, run.z, run.Q, run.K, run.V, picture=run.picture, method=run.method,
                                     dt=run.dt, intervals=intervals)
    size0 = np.max(np.linalg.norm(run.z[:, 0], axis=-1), axis=-1)  # (B,)
    rate = growth_rate(run.V, run.picture)
    rel = defect / (size0[:, None] * np.exp(rate * t_at)[None, :])
    rel = np.where(np.isfinite(rel), rel, np.inf)
    tol = defect_tolerance(run.dtype)
    worst = float(rel.max())
    where = float(t_at[np.unravel_index(np.argmax(rel), rel.shape)[1]])
    step = "layer" if run.method == "euler" else f"interval (of {rel.shape[1]} checked)"
    res.check("solves the paper's equation", f"each {step} re-computed from the saved state with SPEC 1's field "
              f"(written independently) lands on the next saved state within {tol:g} x max|y(0)| e^({rate:.3g} t)",
              f"worst relative defect {fmt(worst)} (at t = {fmt(where)})", worst <= tol,
              float(np.log10(tol) - np.log10(max(worst, 1e-300))),
              note="margin in decades; e^(rate t): the fastest growth the linear part allows "
                   "(raw: Re lambda_1; rescaled: -min Re mu)")


CASES: dict[str, tuple[str, str, Callable[[Context, CaseResult], None]]] = {}


#: the layer step of each case that runs the Euler stepper (its t1 must be a whole number of them)
EULER_STEPS: dict[str, float] = {}


def register(name: str, title: str, theorem: str, *, euler_dt: float | None = None):
    """Decorator adding a case function ``fn(ctx, res)`` to :data:`CASES` (in report order). The
    runner builds ``res = CaseResult(name, title, theorem)``; the case fills it in. A case that
    runs Euler layers names their step ``euler_dt`` (:data:`EULER_STEPS`), so that its t1 is
    checked before any work."""

    def wrap(fn):
        CASES[name] = (title, theorem, fn)
        if euler_dt is not None:
            EULER_STEPS[name] = euler_dt
        return fn

    return wrap
