r"""Study 1, distance to failure: from a good triple (Q, K, V0), the smallest perturbation
:math:`\Delta` of V (relative Frobenius norm :math:`\rho = \|\Delta\|_F/\|V_0\|_F`) that makes the
tokens stop approaching <= 3 parallel hyperplanes, against the smallest one that breaks
Definition 4.1. Both are found by Adam on an exact (L1) penalty:

* clustering: :math:`\rho + \mu\,\mathrm{relu}(\varepsilon - H(V_0+\Delta))/\varepsilon`, with
  :math:`H` the soft maximum over tokens of the distance of :math:`\varphi_1^*(z_i(T))` to
  :math:`\{a, 0, b\}` (:func:`attnflow.geometry.hyperplane_distances`, :math:`\varphi_1^*` the unit
  real dual eigenvector of the perturbed V, lengths in units of the fixed initial diameter);
  clustering has failed when :math:`H \ge \varepsilon` at the horizon T;
* Def 4.1: :math:`\rho + \mu\,\mathrm{relu}(m(V_0+\Delta) + \delta)/\delta`,
  :math:`m = \min(\text{condition1}/\|V_0\|_F,\ \langle Q\varphi_1, K\varphi_1\rangle/(\|Q\|_F\|K\|_F))`
  (:func:`attnflow.geometry.good_triple_margins`); Def 4.1 fails when m < 0.

A local optimiser gives upper bounds on both distances. The verdicts are checked with the hard
tools: Def 4.1 by :func:`attnflow.spectral.check_good_triple` at the clustering-failure point,
clustering by H at the Def-4.1-failure point.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax

from .. import geometry as geo
from ..geometry.smooth import safe_norm
from ..observables import diameter
from .optimize import finite_guard, optimize
from .systems import final_tokens, num_layers, sample_good_triples

__all__ = ["hyperplane_residual", "run_failure"]


def hyperplane_residual(z, V, scale, temperature):
    r"""Soft :math:`\max_i \mathrm{dist}(\varphi_1^*(z_i), \{a, 0, b\})/s` with the unit real dual
    eigenvector of V (temperature :math:`\tau` for the levels, the per-token distance and the
    maximum over tokens).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.probe.failure import hyperplane_residual
        >>> z = jnp.array([[1.0, 5.0], [0.0, -2.0], [-2.0, 0.0]])
        >>> round(float(hyperplane_residual(z, jnp.diag(jnp.array([2.0, 1.0])), 1.0, 1e-4)), 3)
        0.0
    """
    _, _, dual = geo.leading_eigenpair_jax(V)
    w = jnp.real(dual)
    w = w / safe_norm(w)
    dist = geo.hyperplane_distances(z, w, scale, temperature)
    return geo.soft_max(dist, temperature)


def _relative_margin(Q, K, V, V0):
    m = geo.good_triple_margins(Q, K, V)
    return jnp.minimum(m.condition1 / jnp.linalg.norm(V0), m.qk / (jnp.linalg.norm(Q) * jnp.linalg.norm(K)))


def run_failure(config: dict, out, progress: bool = True, interrupt_after: int | None = None, fingerprint: str = ""):
    """Run study 1; returns (summary, markdown, figure names). See the module docstring."""
    from ..runio import atomic_save_figure

    sy, dy, fa, op = config["system"], config["dynamics"], config["failure"], config["optimizer"]
    layers = num_layers(dy["t1"], dy["dt"])
    Q, K, V0, x0 = (jnp.asarray(a) for a in sample_good_triples(config["seed"], sy["num_triples"], sy["d"], sy["n"], sy["min_gap"]))
    scale = jax.vmap(diameter)(x0)
    data = {"Q": Q, "K": K, "V0": V0, "x0": x0, "scale": scale}
    eps, tau, mu, delta = fa["threshold"], fa["temperature"], fa["penalty"], fa["def_margin"]

    def tokens(V, x):
        return final_tokens(x["Q"], x["K"], V, x["x0"], dt=dy["dt"], layers=layers)

    def loss_clustering(D, x):
        V, ok = finite_guard(x["V0"] + D, x["V0"])
        H = hyperplane_residual(tokens(V, x), V, x["scale"], tau)
        rho = safe_norm(D) / jnp.linalg.norm(x["V0"])
        loss = rho + mu * jax.nn.relu(eps - H) / eps
        return jnp.where(ok, loss, jnp.nan), {"H": H, "rho": rho, "margin": _relative_margin(x["Q"], x["K"], V, x["V0"])}

    def loss_def41(D, x):
        V, ok = finite_guard(x["V0"] + D, x["V0"])
        m = _relative_margin(x["Q"], x["K"], V, x["V0"])
        rho = safe_norm(D) / jnp.linalg.norm(x["V0"])
        loss = rho + mu * jax.nn.relu(m + delta) / delta
        H = hyperplane_residual(tokens(V, x), V, x["scale"], tau)
        return jnp.where(ok, loss, jnp.nan), {"H": H, "rho": rho, "margin": m}

    key = jax.random.key(config["seed"])
    D0 = op["init_scale"] * jax.random.normal(key, V0.shape, V0.dtype)
    opt = optax.adam(op["learning_rate"])
    ck = out / "checkpoints"
    results = {}
    for name, fn in (("clustering", loss_clustering), ("def41", loss_def41)):
        results[name] = optimize(fn, D0, data, optimizer=opt, num_steps=op["num_steps"],
                                 checkpoint=ck / f"{name}.npz", fingerprint=fingerprint + name,
                                 checkpoint_every=op["checkpoint_every"], progress=progress,
                                 desc=f"distance to failure ({name})", interrupt_after=interrupt_after)
    from ..spectral import check_good_triple

    rc, rd = results["clustering"], results["def41"]
    m0 = np.asarray(jax.vmap(lambda x: _relative_margin(x["Q"], x["K"], x["V0"], x["V0"]))(data))
    H0 = np.asarray(jax.jit(jax.vmap(lambda x: hyperplane_residual(tokens(x["V0"], x), x["V0"], x["scale"], tau)))(data))
    rows = []
    for b in range(V0.shape[0]):
        Vc = np.asarray(V0[b] + rc.params[b])
        Vd = np.asarray(V0[b] + rd.params[b])
        reached = bool(rc.aux["H"][b] >= 0.9 * eps)
        broke = bool(rd.aux["margin"][b] < 0)
        good_at_c = check_good_triple(np.asarray(Q[b]), np.asarray(K[b]), Vc).good
        clustered_at_d = bool(rd.aux["H"][b] < eps)
        rows.append({
            "triple": b, "margin0": float(m0[b]), "H0": float(H0[b]), "clustered_at_V0": bool(H0[b] < 0.5 * eps),
            "rho_clustering": float(rc.aux["rho"][b]), "H_at_clustering_point": float(rc.aux["H"][b]),
            "clustering_failure_reached": reached, "def41_holds_at_clustering_failure": bool(good_at_c),
            "rho_def41": float(rd.aux["rho"][b]), "margin_at_def41_point": float(rd.aux["margin"][b]),
            "def41_failure_reached": broke, "still_clustered_at_def41_failure": clustered_at_d,
            "V_clustering_failure": Vc.tolist(), "V_def41_failure": Vd.tolist(),
        })
    rows_all = rows
    # a triple not (clearly) clustered at t1 without perturbation says nothing about the distance to failure
    rows = [r for r in rows if r["clustered_at_V0"]]
    both = [r for r in rows if r["clustering_failure_reached"] and r["def41_failure_reached"]]
    ratio = np.array([r["rho_clustering"] / r["rho_def41"] for r in both])
    earlier = sum(r["clustering_failure_reached"] and r["def41_holds_at_clustering_failure"] for r in rows)
    later = sum(r["def41_failure_reached"] and r["still_clustered_at_def41_failure"] for r in rows)
    summary = {
        "study": "distance-to-failure", "triples_sampled": len(rows_all), "triples": len(rows), "layers": layers,
        "threshold": eps, "both_reached": len(both),
        "clustering_fails_while_def41_holds": int(earlier),
        "clustered_after_def41_fails": int(later),
        "median_ratio_rho_clustering_over_rho_def41": float(np.median(ratio)) if ratio.size else None,
        "rows": rows_all,
        "final_losses": {"clustering": rc.losses[-1].tolist() if len(rc.losses) else [],
                         "def41": rd.losses[-1].tolist() if len(rd.losses) else []},
    }
    figs = [atomic_save_figure(_histogram(rows, ratio), out / "distance_to_failure.png", dpi=110)]
    md = _markdown(summary, rows_all, config, figs)
    return summary, md, figs


def _histogram(rows, ratio):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    rc = [r["rho_clustering"] for r in rows if r["clustering_failure_reached"]]
    rd = [r["rho_def41"] for r in rows if r["def41_failure_reached"]]
    bins = np.linspace(0, max(rc + rd + [1e-3]) * 1.05, 16)
    axes[0].hist(rc, bins=bins, alpha=0.6, label="clustering lost")
    axes[0].hist(rd, bins=bins, alpha=0.6, label="Def 4.1 broken")
    axes[0].set_xlabel(r"$\|\Delta\|_F / \|V_0\|_F$")
    axes[0].set_ylabel("triples")
    axes[0].legend()
    if ratio.size:
        axes[1].hist(np.log10(ratio), bins=12, color="C2")
    axes[1].axvline(0.0, color="k", lw=0.8)
    axes[1].set_xlabel(r"$\log_{10}(\rho_\mathrm{clustering} / \rho_\mathrm{Def 4.1})$")
    m0 = [r["margin0"] for r in rows]
    axes[2].scatter(m0, [r["rho_clustering"] for r in rows], label="clustering lost")
    axes[2].scatter(m0, [r["rho_def41"] for r in rows], marker="x", label="Def 4.1 broken")
    axes[2].set_xlabel("relative Def 4.1 margin of $V_0$")
    axes[2].set_ylabel(r"$\rho$")
    axes[2].legend()
    fig.tight_layout()
    return fig


def _markdown(summary, rows, config, figs):
    eps = config["failure"]["threshold"]
    lines = [
        "## Distance to failure (Def 4.1 vs clustering)",
        "",
        f"{summary['triples_sampled']} Ginibre-based good triples (d = {config['system']['d']}, n = {config['system']['n']}), "
        f"{summary['layers']} Euler layers of dt = {config['dynamics']['dt']} (rescaled picture). Clustering counts as lost "
        f"when the soft hyperplane residual at the horizon is >= {eps} (units of the initial diameter). "
        "Distances are upper bounds (local optimisation). "
        f"{summary['triples']} of the triples are clearly clustered at the horizon without perturbation "
        "(H0 < threshold / 2); "
        "the counts below are over those.",
        "",
        f"* both failures reached for {summary['both_reached']} of {summary['triples']} triples; "
        f"median rho_clustering / rho_Def4.1 = {summary['median_ratio_rho_clustering_over_rho_def41']}",
        f"* clustering lost while Def 4.1 still holds (checked with check_good_triple): "
        f"**{summary['clustering_fails_while_def41_holds']}** triples (clustering fails *earlier*)",
        f"* still clustered at the point where Def 4.1 fails: **{summary['clustered_after_def41_fails']}** triples "
        "(clustering fails *later*)",
        "",
        "| triple | H0 | Def 4.1 margin of V0 | rho clustering | H there | Def 4.1 there | rho Def 4.1 | margin there | tokens there |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['triple']} | {r['H0']:.3g} | {r['margin0']:.3g} | {r['rho_clustering']:.3g} | {r['H_at_clustering_point']:.3g} | "
            f"{'holds' if r['def41_holds_at_clustering_failure'] else 'fails'} | {r['rho_def41']:.3g} | "
            f"{r['margin_at_def41_point']:.3g} | {'clustered' if r['still_clustered_at_def41_failure'] else 'not clustered'} |"
        )
    lines += ["", *[f"![{f}]({f})" for f in figs], ""]
    return "\n".join(lines)
