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
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax

from .. import geometry as geo
from ..observables import classify_tokens, diameter, num_clusters
from .optimize import finite_guard, optimize
from .systems import final_tokens, num_layers

__all__ = ["normalised_qk", "run_beyond_pd"]


def normalised_qk(A_raw, norm):
    r""":math:`A = \text{norm}\cdot A_\mathrm{raw}/\|A_\mathrm{raw}\|_F`.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.probe.beyond_pd import normalised_qk
        >>> float(jnp.linalg.norm(normalised_qk(jnp.array([[3.0, 0.0], [4.0, 0.0]]), 2.0)))
        2.0
    """
    return norm * A_raw / jnp.linalg.norm(A_raw)


def run_beyond_pd(config: dict, out, progress: bool = True, interrupt_after: int | None = None, fingerprint: str = ""):
    """Run study 2; returns (summary, markdown, figure names). See the module docstring."""
    from ..runio import atomic_save_figure

    sy, dy, ob, op, ch = config["system"], config["dynamics"], config["objective"], config["optimizer"], config["check"]
    d, n, B = sy["d"], sy["n"], sy["num_starts"]
    layers = num_layers(dy["t1"], dy["dt"])
    key = jax.random.key(config["seed"])
    kx, ka = jax.random.split(key)
    x0 = jax.random.normal(kx, (n, d), jnp.float64)  # one cloud shared by every start
    scale = diameter(x0)
    A0 = jax.random.uniform(ka, (B, d, d), jnp.float64, -1.0, 1.0)  # Section 12.1's U[-1, 1] entries
    eye = jnp.eye(d, dtype=jnp.float64)
    data = {"x0": jnp.broadcast_to(x0, (B, n, d)), "scale": jnp.full((B,), scale)}
    norm, tau, mu, delta = sy["qk_norm"], ob["temperature"], ob["penalty"], ob["pd_margin"]

    def loss(A_raw, x):
        A_raw, ok = finite_guard(A_raw, eye)
        A = normalised_qk(A_raw, norm)
        z = final_tokens(eye, A, eye, x["x0"], dt=dy["dt"], layers=layers)
        count = geo.soft_cluster_count(z, x["scale"], tau)
        lam = geo.qk_lambda_min(eye, A) / norm
        value = -count / n + mu * jax.nn.relu(lam + delta)
        return jnp.where(ok, value, jnp.nan), {"soft_count": count, "lambda_min_rel": lam}

    res = optimize(loss, A0, data, optimizer=optax.adam(op["learning_rate"]), num_steps=op["num_steps"],
                   checkpoint=out / "checkpoints" / "beyond_pd.npz", fingerprint=fingerprint,
                   checkpoint_every=op["checkpoint_every"], progress=progress, desc="beyond Q^T K > 0",
                   interrupt_after=interrupt_after)
    counts = np.asarray(res.aux["soft_count"])
    lams = np.asarray(res.aux["lambda_min_rel"])
    admissible = lams <= -0.5 * delta  # clearly not PD
    best = int(np.argmax(np.where(admissible, counts, -np.inf))) if admissible.any() else int(np.argmax(counts))
    A_best = np.asarray(normalised_qk(res.params[best], norm))

    horizons = []
    for factor in ch["horizons"]:
        L = int(round(factor * layers))
        z = np.asarray(final_tokens(eye, jnp.asarray(A_best), eye, x0, dt=dy["dt"], layers=L))
        cls = classify_tokens(z, rel_tol=ch["rel_tol"], scale=float(scale))
        horizons.append({
            "t": L * dy["dt"], "num_clusters": int(num_clusters(jnp.asarray(z), ch["rel_tol"], scale)),
            "vertex": int(np.sum(cls == 0)), "origin": int(np.sum(cls == 1)),
            "boundary": int(np.sum(cls == 2)), "interior": int(np.sum(cls == 3)),
            "non_vertex_fraction": float(np.mean(cls >= 2)), "tokens": z.tolist(),
        })
    fr = [h["non_vertex_fraction"] for h in horizons]
    candidate = bool(fr[-1] > 0 and fr[-1] >= fr[0])
    summary = {
        "study": "beyond-pd", "starts": B, "layers": layers, "best_start": best,
        "best_A": A_best.tolist(), "best_lambda_min_sym": float(np.linalg.eigvalsh(0.5 * (A_best + A_best.T))[0]),
        "best_soft_count": float(counts[best]), "soft_counts": counts.tolist(), "lambda_min_rel": lams.tolist(),
        "horizons": [{k: v for k, v in h.items() if k != "tokens"} for h in horizons],
        "counterexample_candidate": candidate,
        "optimizer_steps": res.steps, "resumed_from_step": res.resumed_from,
        "final_losses": res.losses[-1].tolist() if len(res.losses) else [],
        "first_losses": res.losses[0].tolist() if len(res.losses) else [],
    }
    figs = [atomic_save_figure(_figure(np.asarray(x0), horizons, A_best), out / "beyond_pd_best.png", dpi=110)]
    return summary, _markdown(summary, config, figs), figs


def _figure(x0, horizons, A):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    k = len(horizons)
    fig, axes = plt.subplots(1, k + 1, figsize=(3.4 * (k + 1), 3.3))
    axes[0].scatter(x0[:, 0], x0[:, 1], s=12)
    axes[0].set_title("x(0)")
    for ax, h in zip(axes[1:], horizons):
        z = np.asarray(h["tokens"])
        ax.scatter(z[:, 0], z[:, 1], s=14, c="C3")
        ax.scatter([0], [0], marker="+", c="k")
        ax.set_title(f"z(t={h['t']:.3g}): {h['num_clusters']} clusters,\n{h['boundary'] + h['interior']} not at a vertex/0",
                     fontsize=9)
    fig.suptitle(f"best non-PD Q^T K found (V = I), lambda_min(sym) = {np.linalg.eigvalsh(0.5 * (A + A.T))[0]:.3g}",
                 fontsize=10)
    fig.tight_layout()
    return fig


def _markdown(summary, config, figs):
    rows = ["| t | clusters | vertex | origin | boundary | interior |", "|---|---|---|---|---|---|"]
    rows += [f"| {h['t']:.3g} | {h['num_clusters']} | {h['vertex']} | {h['origin']} | {h['boundary']} | {h['interior']} |"
             for h in summary["horizons"]]
    verdict = ("**counterexample candidate**: the fraction of tokens away from the hull vertices and 0 does not "
               "decrease with the horizon" if summary["counterexample_candidate"] else
               "**no counterexample found**: at the longest horizon the best configuration's tokens are at hull vertices "
               "or 0, or their non-vertex fraction decays with time (slow convergence to the polytope pattern)")
    return "\n".join([
        "## Beyond Q^T K > 0 (Section 12.1), V = I",
        "",
        f"{summary['starts']} Adam searches over non-PD Q^T K (||Q^T K||_F = {config['system']['qk_norm']}, "
        f"d = {config['system']['d']}, n = {config['system']['n']}, {summary['layers']} layers of dt = {config['dynamics']['dt']}) "
        "maximising the soft cluster count at the fixed initial scale.",
        "",
        f"Loss (-soft count / n + penalty), mean over starts: {np.mean(summary['first_losses']):.3g} at the first step, "
        f"{np.mean(summary['final_losses']):.3g} at the last." if summary["first_losses"] else "",
        "",
        f"Best start {summary['best_start']}: soft count {summary['best_soft_count']:.3g} of n = {config['system']['n']}, "
        f"lambda_min(sym Q^T K) = {summary['best_lambda_min_sym']:.3g}.",
        "",
        *rows,
        "",
        verdict + ".",
        "",
        *[f"![{f}]({f})" for f in figs],
        "",
    ])
