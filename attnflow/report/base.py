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

from ..observables import boolean_distance, diameter, num_clusters, numerical_rank
from ..simulation import simulate

__all__ = ["Check", "CaseResult", "Context", "Run", "run_case_sim", "fmt", "CASES", "register"]


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


@dataclass
class Context:
    """Everything a case needs: its resolved settings, an rng, the figure folder."""

    name: str
    settings: dict  # global settings overlaid with the case's table
    out: Path
    quick: bool
    seed: int

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


@jax.jit
def _diagnostics(z, P, rel_tol, rank_tol):
    """Per save: clusters (tolerance rel_tol x the run's initial diameter), dist(P, Boolean), rank P."""

    def member(zb, Pb):
        s0 = diameter(zb[0])
        return jax.vmap(lambda zz, pp: (num_clusters(zz, rel_tol, s0), boolean_distance(pp),
                                        numerical_rank(pp, rank_tol)))(zb, Pb)

    return jax.vmap(member)(z, P)


def run_case_sim(ctx: Context, x0, Q, K, V, *, t1: float, picture: str = "rescaled", method: str = "tsit5",
                 dt: float | None = None, num_saves: int | None = None) -> Run:
    """Simulate the batch (B, n, d) with shared weights, return arrays and diagnostics."""
    kw: dict = dict(t1=float(t1), picture=picture, method=method, dtype=ctx["dtype"], return_attention=True,
                    max_steps=int(ctx["max_steps"]))
    if method == "euler":
        kw["dt"] = float(dt)
    else:
        kw["num_saves"] = int(num_saves or ctx["num_saves"])
    x0 = np.asarray(x0)
    sim = simulate(x0, np.asarray(Q), np.asarray(K), np.asarray(V), batch="x0" if x0.ndim == 3 else None, **kw)
    ts = np.asarray(sim.ts)
    ts = ts[0] if ts.ndim == 2 else ts
    z, x, P = (np.asarray(a, np.float64) for a in (sim.states, sim.tokens, sim.attention))
    ncl, bd, rk = (np.asarray(a) for a in _diagnostics(jnp.asarray(z), jnp.asarray(P),
                                                         float(ctx["rel_tol"]), float(ctx["rank_tol"])))
    return Run(ts, z, x, P, ncl, bd, rk)


CASES: dict[str, tuple[str, str, Callable[[Context], CaseResult]]] = {}


def register(name: str, title: str, theorem: str):
    """Decorator adding a case function to :data:`CASES` (in report order)."""

    def wrap(fn):
        CASES[name] = (title, theorem, fn)
        return fn

    return wrap
