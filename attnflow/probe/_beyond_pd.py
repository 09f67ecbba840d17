r"""Study 2, beyond :math:`Q^TK > 0` (Section 12.1's open question): with V = I, search
non-positive-definite :math:`A = Q^TK` (Q = I, K = A, :math:`\|A\|_F` fixed so that shrinking the
interaction cannot help) for token configurations far from Thm 3.1's polytope-vertex clustering.

Objective (minimised by Adam from several random starts):
:math:`-N_\mathrm{eff}(z(T))/n + \mu\,\mathrm{relu}(\lambda_{\min}(\mathrm{sym}A)/\|A\|_F + \delta)`,
:math:`N_\mathrm{eff}` the soft cluster count at the **fixed** scale of the initial diameter
(:func:`attnflow.geometry.soft_cluster_count`; a collapsing cloud counts as one cluster, so the
search cannot game it), and the penalty keeping :math:`\lambda_{\min} \le -\delta\|A\|_F` (not PD).

The best start is then judged with the hard tools at the horizons T, 2T, 4T: number of clusters
and the class of every token (vertex of the hull / origin / boundary / interior,
:func:`attnflow.observables.classify_tokens`). A counterexample candidate is a configuration
whose non-vertex fraction does not decrease with the horizon; a fraction that decays is slow
convergence to the polytope pattern, not a counterexample.

The starts are independent problems but advance as one batched optimisation (one jitted step for
all of them, one checkpoint), and the judgement re-runs the best one: the study is one unit of work.
A multi-process launch (``attnflow probe --coordinator ... --num-processes P --process-id I``) runs it on
process 0 only; every other process returns at once, computing nothing (its command says so in one line).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax

from .. import geometry as geo
from ..observables import classify_tokens, diameter, num_clusters
from ._optimize import failure_reason, finite_guard, optimize
from ._config import BeyondPDConfig
from ._systems import final_tokens
from ._tables import fmt, write_rows

__all__ = ["normalised_qk", "run_beyond_pd"]


def normalised_qk(A_raw, norm):
    r""":math:`A = \text{norm}\cdot A_\mathrm{raw}/\|A_\mathrm{raw}\|_F`.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.probe._beyond_pd import normalised_qk
        >>> float(jnp.linalg.norm(normalised_qk(jnp.array([[3.0, 0.0], [4.0, 0.0]]), 2.0)))
        2.0
    """
    return norm * A_raw / jnp.linalg.norm(A_raw)


def run_beyond_pd(config: BeyondPDConfig, out, progress: bool = True, interrupt_after: int | None = None, fingerprint: str = "",
                  process_index: int = 0, process_count: int = 1, work: dict | None = None):
    """Run study 2; returns (summary, markdown, figure names), or None at once on a process other than 0 of a
    multi-process run (one batched optimisation: process 0 runs it; ``work``, when given, receives
    ``units_computed`` and ``units``). See the module docstring."""
    if work is not None:
        work.update(units_computed=int(process_index == 0), units=1,
                    note="beyond-pd is one batched optimisation, run by process 0")
    if process_index != 0:
        return None
    sy, dy, ob, op, ch = config.system, config.dynamics, config.objective, config.optimizer, config.check
    d, n, B = sy.d, sy.n, sy.num_starts
    layers = dy.layers
    key = jax.random.key(config.seed)
    kx, ka = jax.random.split(key)
    x0 = jax.random.normal(kx, (n, d), jnp.float64)  # one cloud shared by every start
    scale = diameter(x0)
    A0 = jax.random.uniform(ka, (B, d, d), jnp.float64, -1.0, 1.0)  # Section 12.1's U[-1, 1] entries
    eye = jnp.eye(d, dtype=jnp.float64)
    data = {"x0": jnp.broadcast_to(x0, (B, n, d)), "scale": jnp.full((B,), scale)}
    norm, tau, mu, delta = sy.qk_norm, ob.temperature, ob.penalty, ob.pd_margin

    def loss(A_raw, x):
        A_raw, ok = finite_guard(A_raw, eye)
        A = normalised_qk(A_raw, norm)
        z = final_tokens(eye, A, eye, x["x0"], dt=dy.dt, layers=layers)
        count = geo.soft_cluster_count(z, x["scale"], tau)
        lam = geo.qk_lambda_min(eye, A) / norm
        value = -count / n + mu * jax.nn.relu(lam + delta)
        return jnp.where(ok, value, jnp.nan), {"soft_count": count, "lambda_min_rel": lam}

    res = optimize(loss, A0, data, optimizer=optax.adam(op.learning_rate), num_steps=op.num_steps,
                   checkpoint=out / "checkpoints" / "beyond_pd.npz", fingerprint=fingerprint,
                   checkpoint_every=op.checkpoint_every, progress=progress, desc="beyond Q^T K > 0",
                   interrupt_after=interrupt_after)
    counts = np.asarray(res.aux["soft_count"])
    lams = np.asarray(res.aux["lambda_min_rel"])
    # a start whose loss, gradient, count or lambda_min is non-finite is excluded, never compared
    status = [failure_reason(int(k), op.num_steps) if k >= 0 else
              (None if np.isfinite(c) and np.isfinite(lam) else "its final soft count or lambda_min is not finite")
              for k, c, lam in zip(res.failed_at, counts, lams)]
    valid = np.array([st is None for st in status])
    admissible = valid & (np.where(valid, lams, np.inf) <= -0.5 * delta)  # clearly not PD
    pool = admissible if admissible.any() else valid
    best = int(np.argmax(np.where(pool, counts, -np.inf)))
    A_best = np.asarray(normalised_qk(res.params[best], norm))

    horizons = []
    for factor in ch.horizons:
        L = int(round(factor * layers))
        z = np.asarray(final_tokens(eye, jnp.asarray(A_best), eye, x0, dt=dy.dt, layers=L))
        h = {"horizon": factor, "t": L * dy.dt, "status": "ok", "num_clusters": None, "vertex": None, "origin": None,
             "boundary": None, "interior": None, "non_vertex_fraction": None, "tokens": z.tolist()}
        if not np.all(np.isfinite(z)):
            h["status"] = "excluded: the tokens are not finite at this horizon"
        else:
            cls = classify_tokens(z, rel_tol=ch.rel_tol, scale=float(scale))
            h.update({"num_clusters": int(num_clusters(jnp.asarray(z), ch.rel_tol, scale)),
                      "vertex": int(np.sum(cls == 0)), "origin": int(np.sum(cls == 1)),
                      "boundary": int(np.sum(cls == 2)), "interior": int(np.sum(cls == 3)),
                      "non_vertex_fraction": float(np.mean(cls >= 2))})
        horizons.append(h)
    fr = [h["non_vertex_fraction"] for h in horizons if h["status"] == "ok"]
    candidate = bool(fr[-1] > 0 and fr[-1] >= fr[0]) if fr else None
    first, last = (res.losses[k] if len(res.losses) else np.zeros(0) for k in (0, -1))
    starts = [{"start": b, "status": status[b] or "ok", "soft_count": float(counts[b]), "lambda_min_rel": float(lams[b]),
               "admissible": bool(admissible[b]), "best": b == best,
               "first_loss": float(first[b]) if first.size else None, "final_loss": float(last[b]) if last.size else None}
              for b in range(B)]
    summary = {
        "study": "beyond-pd", "starts": B, "starts_excluded": int(B - valid.sum()), "layers": layers, "best_start": best,
        "best_A": A_best.tolist(), "best_lambda_min_sym": float(np.linalg.eigvalsh(0.5 * (A_best + A_best.T))[0]),
        "best_soft_count": float(counts[best]), "soft_counts": counts.tolist(), "lambda_min_rel": lams.tolist(),
        "start_rows": starts,
        "horizons": [{k: v for k, v in h.items() if k != "tokens"} for h in horizons],
        "counterexample_candidate": candidate,
        "optimizer_steps": res.steps, "resumed_from_step": res.resumed_from,
        "final_losses": last.tolist(), "first_losses": first.tolist(),
    }
    from .. import plot as ap

    figs = ap.save(ap.beyond_pd_tokens(np.asarray(x0), horizons, A_best), out / "beyond_pd_best.png", dpi=110,
                   close=True)[:1]
    return summary, _markdown(summary, config, figs, out), figs


_START_COLUMNS = [
    ("start", "start", fmt), ("status", "status", fmt), ("soft_count", "soft count", fmt),
    ("lambda_min_rel", "lambda_min(sym Q^T K) / norm", fmt), ("admissible", "clearly not PD", fmt),
    ("best", "best", fmt), ("first_loss", "loss at the first step", fmt), ("final_loss", "loss at the last step", fmt),
]
_HORIZON_COLUMNS = [
    ("horizon", "horizon (x t1)", fmt), ("t", "t", fmt), ("status", "status", fmt), ("num_clusters", "clusters", fmt),
    ("vertex", "vertex", fmt), ("origin", "origin", fmt), ("boundary", "boundary", fmt), ("interior", "interior", fmt),
    ("non_vertex_fraction", "non-vertex fraction", fmt),
]


def _markdown(summary, config, figs, out):
    s = summary
    starts = write_rows(out / "starts.csv", s["start_rows"], _START_COLUMNS)
    horizons = write_rows(out / "horizons.csv", s["horizons"], _HORIZON_COLUMNS)
    finite = [r for r in s["start_rows"] if r["status"] == "ok" and r["first_loss"] is not None]
    if s["counterexample_candidate"] is None:
        verdict = "**no verdict**: the best configuration's tokens are non-finite at every horizon (table above)"
    elif s["counterexample_candidate"]:
        verdict = ("**counterexample candidate**: the fraction of tokens away from the hull vertices and 0 does not "
                   "decrease from the first to the last finite horizon (column non-vertex fraction)")
    else:
        verdict = ("**no counterexample found**: at the last finite horizon the best configuration's tokens are at hull "
                   "vertices or 0, or their non-vertex fraction decays with time (column non-vertex fraction; slow "
                   "convergence to the polytope pattern)")
    loss = ""
    if finite:
        loss = (f"Loss (-soft count / n + penalty), mean over the {len(finite)} starts with status ok (columns loss at "
                f"the first / last step): {np.mean([r['first_loss'] for r in finite]):.3g} at the first step, "
                f"{np.mean([r['final_loss'] for r in finite]):.3g} at the last.")
    return "\n".join([
        "## Beyond Q^T K > 0 (Section 12.1), V = I",
        "",
        f"{s['starts']} Adam searches over non-PD Q^T K (||Q^T K||_F = {config.system.qk_norm}, "
        f"d = {config.system.d}, n = {config.system.n}, {s['layers']} layers of dt = {config.dynamics.dt}) "
        "maximising the soft cluster count at the fixed initial scale; every start is a row of the first table "
        "(starts.csv), every horizon of the re-run a row of the second (horizons.csv).",
        "",
        f"Excluded (non-finite loss, gradient, count or lambda_min; never compared): {s['starts_excluded']} of "
        f"{s['starts']} starts (column status).",
        "",
        loss,
        "",
        f"Best start {s['best_start']} (column best): soft count {s['best_soft_count']:.3g} of n = {config.system.n}, "
        f"lambda_min(sym Q^T K) = {s['best_lambda_min_sym']:.3g}.",
        "",
        *starts,
        "",
        *horizons,
        "",
        verdict + ".",
        "",
        *[f"![{f}]({f})" for f in figs],
        "",
    ])
