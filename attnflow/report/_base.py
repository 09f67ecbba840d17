"""Building blocks of the reproduction report: checks, case results, a case's settings and run
context, and the batched simulation + diagnostics every case shares (the field comes from
:mod:`attnflow.fields`, the integration from :mod:`attnflow.integrate`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

import equinox as eqx

from .._validate import check_layers
from ..fields import make_dynamics
from ..integrate import DEFAULT_TOLERANCES, EulerStepper, ODESolver, raise_if_failed
from ..observables import boolean_distance, diameter, num_clusters, numerical_rank
from ..runs import fmt as runs_fmt
from ._reference import trajectory_defect

__all__ = ["Check", "CaseResult", "CaseSettings", "CaseInfo", "Context", "Run", "run_case_sim", "defect_check",
           "defect_scale", "system_rows", "fmt", "case"]


def fmt(x: Any, digits: int = 3) -> str:
    """Short human format for numbers in the report table (:func:`attnflow.runs.fmt`).

    Example:
        >>> from attnflow.report._base import fmt
        >>> fmt(0.5), fmt(2e-5), fmt(True), fmt(None)
        ('0.5', '2.00e-05', 'True', 'None')
    """
    return runs_fmt(x, digits)


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

    def record(self, run: "Run", tag: str = "") -> None:
        """Add one row per simulated system of ``run`` to the tidy table ``systems.csv`` (its case
        column reads ``name:tag`` when a tag is given)."""
        self.systems.extend(system_rows(f"{self.name}:{tag}" if tag else self.name, run))

    def hyp(self, text: str, holds: bool, value: Any = None) -> None:
        self.hypotheses.append({"text": text, "holds": bool(holds), "value": value})

    def hyp_text(self) -> str:
        return "; ".join(f"{h['text']} [{'ok' if h['holds'] else 'FAILS'}]" for h in self.hypotheses)

    def check(self, name: str, predicted: str, observed: str, passed: bool | None, margin: float,
              note: str = "") -> None:
        self.checks.append(Check(self.name, name, self.hyp_text(), predicted, observed,
                                 None if passed is None else bool(passed), float(margin), note))


def system_rows(case: str, run: "Run") -> list[dict]:
    """The ``systems.csv`` rows of a batched run: per system its size, horizon, clusters at t0 and
    t1, rank and Booleanness of P(t1), largest token norms and the solver's accepted steps."""
    B, T, n, d = run.z.shape
    return [{"case": case, "run": b, "n": n, "d": d, "t1": float(run.ts[-1]), "saves": T,
             "clusters_t0": int(run.clusters[b, 0]), "clusters_t1": int(run.clusters[b, -1]),
             "rank_P_t1": int(run.rank[b, -1]), "dist_P_boolean_t1": float(run.boolean[b, -1]),
             "max_norm_z_t1": float(np.max(np.linalg.norm(run.z[b, -1], axis=-1))),
             "max_norm_x_t1": float(np.max(np.linalg.norm(run.x[b, -1], axis=-1))),
             "solver_steps": -1 if run.num_steps is None else int(run.num_steps[b])} for b in range(B)]


@dataclass(frozen=True)
class CaseSettings:
    """One case's resolved settings (the config's global keys overlaid by the case's table and,
    with ``--quick``, by ``[quick]``), checked by :mod:`attnflow.report._config`; the keys a case's
    table does not hold are None. Field order is the config's key order (:meth:`as_dict`).

    Example:
        >>> from attnflow.report import CaseSettings
        >>> s = CaseSettings("float64", 2, 0.02, 1e-6, 16, 16384, 0, n=8, t1=4.0)
        >>> s.n, s.as_dict()["t1"], "d" in s.as_dict()
        (8, 4.0, False)
    """

    dtype: str
    batch: int
    rel_tol: float
    rank_tol: float
    num_saves: int
    max_steps: int
    gif_frames: int
    n: int | None = None
    d: int | None = None
    eps: float | None = None
    t1: float | None = None
    x0_scale: float | None = None

    def as_dict(self) -> dict:
        """The settings that are set, in the config's order (as written to config.json)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}


@dataclass(frozen=True)
class Context:
    """Everything a case needs: its resolved settings, the seed, the figure folder, and the
    vector field to integrate: ``field_factory(Q, K, V, picture=, method=)``, by default the
    field registry's :func:`attnflow.fields.make_dynamics` (the layer grid is bound by the
    stepper; the mutation tests pass a wrong factory). ``figures=False`` skips drawing."""

    name: str
    settings: CaseSettings
    out: Path
    quick: bool
    seed: int
    field_factory: Callable = make_dynamics
    figures: bool = True


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
    num_steps: np.ndarray | None = None  # (B,) accepted solver steps (Euler: layers)


@jax.jit
def _diagnostics(z, P, rel_tol, rank_tol):
    """Per save: clusters (tolerance rel_tol x the run's initial diameter), dist(P, Boolean), rank P."""

    def member(zb, Pb):
        s0 = diameter(zb[0])
        return jax.vmap(lambda zz, pp: (num_clusters(zz, rel_tol, s0), boolean_distance(pp),
                                        numerical_rank(pp, rank_tol)))(zb, Pb)

    return jax.vmap(member)(z, P)


@eqx.filter_jit
def _solve(dyn, x0, integrator):
    """Every member of the batch x0 (B, n, d) through ``integrator`` (the Euler layer stepper or the
    ODE solver); the raw tokens and P at every save from the same (bound) field."""
    dyn = integrator.bind(dyn)  # tokens / attention below need the layer grid too
    traj = jax.vmap(lambda y0: integrator.solve(dyn, y0))(x0)
    tok = jax.vmap(jax.vmap(dyn.tokens))(traj.ts, traj.ys)
    P = jax.vmap(jax.vmap(dyn.attention))(traj.ts, traj.ys)
    return traj, tok, P


def run_case_sim(ctx: Context, x0, Q, K, V, *, t1: float, picture: str = "rescaled", method: str = "tsit5",
                 dt: float | None = None, num_saves: int | None = None) -> Run:
    """Integrate ``ctx.field_factory``'s field for the batch x0 (B, n, d) with shared weights
    (Tsit5 with saves on a uniform grid, or Euler layers saving every layer). The raw tokens and
    P at every save come from the same field object (its ``tokens`` and ``attention``), so the
    diagnostics see the dynamics that produced the trajectory. A failed solve raises
    :class:`~attnflow.SolverError` / :class:`~attnflow.NonFiniteError` with the time."""
    s = ctx.settings
    dtype = jnp.float64 if s.dtype == "float64" else jnp.float32
    Qj, Kj, Vj = (jnp.asarray(np.asarray(a), dtype) for a in (Q, K, V))
    dyn = ctx.field_factory(Qj, Kj, Vj, picture=picture, method=method)
    if method == "euler":
        integrator = EulerStepper(float(dt), check_layers("t1", t1, "dt", dt))
    else:
        ts = jnp.linspace(0.0, float(t1), int(num_saves or s.num_saves), dtype=dtype)
        rtol, atol = DEFAULT_TOLERANCES[s.dtype]
        integrator = ODESolver(0.0, ts[-1], ts=ts, rtol=rtol, atol=atol, max_steps=int(s.max_steps))
    traj, tok, P = _solve(dyn, jnp.asarray(np.asarray(x0), dtype), integrator)
    raise_if_failed(traj, what=f"the {picture} {method} solve of case {ctx.name}")
    ts = np.asarray(traj.ts)[0]
    z, x, P = (np.asarray(a, np.float64) for a in (traj.ys, tok, P))
    ncl, bd, rk = (np.asarray(a) for a in _diagnostics(jnp.asarray(z), jnp.asarray(P),
                                                         float(s.rel_tol), float(s.rank_tol)))
    return Run(ts, z, x, P, ncl, bd, rk, picture=picture, method=method, dt=dt, Q=np.asarray(Q, np.float64),
               K=np.asarray(K, np.float64), V=np.asarray(V, np.float64), dtype=s.dtype,
               num_steps=np.asarray(traj.num_steps).reshape(-1))


def defect_tolerance(dtype: str) -> float:
    """Relative tolerance of :func:`defect_check`: 1e-6 in float64 (the solves run at rtol 1e-9;
    their dense output and the re-integration at rtol 1e-10 add ~1e-8 per saved interval; measured
    values in docs/report.md), 1e-3 in float32 (solves at rtol 1e-5, states rounded at 6e-8)."""
    return 1e-6 if dtype == "float64" else 1e-3


def defect_scale(y_start, y_end, floor: float) -> np.ndarray:
    r"""The size a defect is measured against, per member and examined step: the state's own
    size :math:`\max_i |y_i|` at the larger end of the step, at least ``floor``. This is the
    scale the adaptive solver controls its error on (rtol |y| + atol, so ``floor`` = atol/rtol;
    0 for the layer stepper, whose recomputation is exact up to rounding). A bound from the
    linear part of the field alone is no scale: two tokens attending to each other separate at
    twice its rate, and a non-normal V adds its condition number.

    Example:
        >>> import numpy as np
        >>> from attnflow.report._base import defect_scale
        >>> y0, y1 = np.ones((1, 2, 3, 2)), 3 * np.ones((1, 2, 3, 2))
        >>> defect_scale(y0, y1, 0.01).round(3).tolist()
        [[4.243, 4.243]]
    """
    size = np.maximum(np.max(np.linalg.norm(y_start, axis=-1), axis=-1), np.max(np.linalg.norm(y_end, axis=-1), axis=-1))
    return np.maximum(size, max(float(floor), np.finfo(np.float64).tiny))


def defect_check(res: "CaseResult", run: Run, *, intervals: int = 12) -> None:
    """The universal check: the saved trajectory solves the paper's equation (SPEC section 1), with
    the field written out independently (:mod:`attnflow.report._reference`). Tolerance: relative to
    the state's own size over the examined step (:func:`defect_scale`)."""
    defect, k_at = trajectory_defect(run.ts, run.z, run.Q, run.K, run.V, picture=run.picture, method=run.method,
                                     dt=run.dt, intervals=intervals)
    if run.method == "euler":
        floor = 0.0
    else:
        rtol, atol = DEFAULT_TOLERANCES[run.dtype]
        floor = atol / rtol
    rel = defect / defect_scale(run.z[:, k_at], run.z[:, k_at + 1], floor)
    rel = np.where(np.isfinite(rel), rel, np.inf)
    tol = defect_tolerance(run.dtype)
    worst = float(rel.max())
    where = float(run.ts[k_at[np.unravel_index(np.argmax(rel), rel.shape)[1]] + 1])
    step = "layer" if run.method == "euler" else f"interval (of {rel.shape[1]} checked)"
    res.check("solves the paper's equation", f"each {step} re-computed from the saved state with SPEC 1's field "
              f"(written independently) lands on the next saved state within {tol:g} x the state's size "
              f"max_i|y_i|" + ("" if run.method == "euler" else f" (at least {floor:g}, the solver's atol/rtol)"),
              f"worst relative defect {fmt(worst)} (at t = {fmt(where)})", worst <= tol,
              float(np.log10(tol) - np.log10(max(worst, 1e-300))),
              note="margin in decades; the state's size: the larger of max_i|y_i| at the step's two ends, the "
                   "scale the adaptive solver controls its error on")


@dataclass(frozen=True)
class CaseInfo:
    """What the report states about a case: its name, title and theorem, and the layer step of a
    case that runs the Euler stepper (its t1 must be a whole number of them), else None."""

    name: str
    title: str
    theorem: str
    euler_dt: float | None = None


def case(name: str, title: str, theorem: str, *, euler_dt: float | None = None):
    """Decorator attaching :class:`CaseInfo` to a case function ``fn(ctx, res)`` (as ``fn.info``);
    it registers nothing: the report's cases and their order are listed in
    :mod:`attnflow.report._catalogue`. The runner builds ``res = CaseResult(name, title, theorem)``;
    the case fills it in.

    Example:
        >>> from attnflow.report._base import case
        >>> @case("demo", "A demo", "Thm 0", euler_dt=0.5)
        ... def demo(ctx, res):
        ...     pass
        >>> demo.info.euler_dt
        0.5
    """

    def wrap(fn):
        fn.info = CaseInfo(name, title, theorem, euler_dt)
        return fn

    return wrap
