r"""Study 3, sensitivity map: derivatives of the Thm 4.2 hyperplane levels
:math:`a = \min_i \varphi_1^*(z_i(T))`, :math:`b = \max_i \varphi_1^*(z_i(T))` with respect to V,
for Ginibre-based good triples.

The levels are the soft min / max (:func:`attnflow.geometry.hyperplane_levels`, temperature
:math:`\tau` times the initial diameter) of :math:`\varphi_1^*(z_i)`, :math:`\varphi_1^*` the
dual leading eigenvector of V normalised by :math:`\varphi_1^*(\varphi_1) = 1`, so the total
derivative includes the eigenvector's (exact for simple :math:`\lambda_1`). Each gradient
:math:`G = da/dV` is also shown in V's eigenbasis: a perturbation :math:`dV = X E X^{-1}`
changes a by :math:`\sum_{jk} E_{jk} S_{jk}` with :math:`S = X^T G X^{-T}`, so :math:`|S_{jk}|`
is the sensitivity to coupling eigen-direction k into j (:math:`S_{11}` to moving
:math:`\lambda_1` itself). Every gradient is checked against a central difference along a
random direction (float64).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .. import geometry as geo
from ..observables import diameter
from .systems import final_tokens, num_layers, sample_good_triples

__all__ = ["levels_of", "run_sensitivity"]


def levels_of(Q, K, V, x0, scale, *, dt, layers, temperature):
    r"""(a, b): soft levels of :math:`\varphi_1^*(z_i)` after ``layers`` Euler layers.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.probe.sensitivity import levels_of
        >>> a, b = levels_of(jnp.eye(2), jnp.eye(2), jnp.diag(jnp.array([1.0, 0.5])), jnp.eye(2), 1.0,
        ...                  dt=0.1, layers=5, temperature=1e-3)
        >>> bool(a < b)
        True
    """
    _, _, dual = geo.leading_eigenpair_jax(V)
    s = final_tokens(Q, K, V, x0, dt=dt, layers=layers) @ jnp.real(dual)
    a, b = geo.hyperplane_levels(s, scale, temperature)
    return jnp.stack([a, b])


def run_sensitivity(config: dict, out, progress: bool = True, interrupt_after: int | None = None, fingerprint: str = ""):
    """Run study 3; returns (summary, markdown, figure names). See the module docstring."""
    from tqdm.auto import tqdm

    from ..runio import atomic_save_figure

    sy, dy, lv, ch = config["system"], config["dynamics"], config["levels"], config["check"]
    layers = num_layers(dy["t1"], dy["dt"])
    Q, K, V, x0 = (jnp.asarray(a) for a in sample_good_triples(config["seed"], sy["num_triples"], sy["d"], sy["n"], sy["min_gap"]))
    rng = np.random.default_rng(config["seed"] + 1)
    f = jax.jit(lambda Q, K, V, x0, s: levels_of(Q, K, V, x0, s, dt=dy["dt"], layers=layers, temperature=lv["temperature"]))
    jac = jax.jit(jax.jacrev(lambda V, Q, K, x0, s: f(Q, K, V, x0, s)))
    rows, figs = [], []
    for b in tqdm(range(V.shape[0]), desc="sensitivity map", disable=not progress, leave=False):
        s = diameter(x0[b])
        G = np.asarray(jac(V[b], Q[b], K[b], x0[b], s))  # (2, d, d): da/dV, db/dV
        w, X, _ = geo.eig_sorted(V[b])
        X = np.asarray(X)
        S = np.stack([X.T @ G[i] @ np.linalg.inv(X).T for i in range(2)])
        U = rng.normal(size=V[b].shape)
        h = ch["fd_step"]
        fd = (np.asarray(f(Q[b], K[b], V[b] + h * U, x0[b], s)) - np.asarray(f(Q[b], K[b], V[b] - h * U, x0[b], s))) / (2 * h)
        an = np.einsum("kij,ij->k", G, U)
        rel = float(np.max(np.abs(an - fd)) / max(float(np.max(np.abs(fd))), 1e-2))
        ab = np.asarray(f(Q[b], K[b], V[b], x0[b], s))
        rows.append({"triple": b, "a": float(ab[0]), "b": float(ab[1]), "lambda": np.asarray(w).tolist(),
                     "da_dV": G[0].tolist(), "db_dV": G[1].tolist(),
                     "abs_S_a": np.abs(S[0]).tolist(), "abs_S_b": np.abs(S[1]).tolist(),
                     "fd_rel_error": rel})
        figs.append(atomic_save_figure(_figure(G, S, b), out / f"sensitivity_{b}.png", dpi=110))
    worst = max(r["fd_rel_error"] for r in rows)
    summary = {"study": "sensitivity", "triples": len(rows), "layers": layers, "rows": rows,
               "max_fd_rel_error": worst, "fd_check_passed": bool(worst <= ch["fd_tolerance"])}
    return summary, _markdown(summary, config, figs), figs


def _figure(G, S, b):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(13, 3.2))
    panels = [(G[0], "da/dV"), (G[1], "db/dV"), (np.abs(S[0]), "|da/dV| in eigenbasis"), (np.abs(S[1]), "|db/dV| in eigenbasis")]
    for ax, (M, title) in zip(axes, panels):
        lim = float(np.max(np.abs(M))) or 1.0
        im = ax.imshow(M, cmap="RdBu_r" if "eig" not in title else "viridis",
                       vmin=-lim if "eig" not in title else 0, vmax=lim)
        ax.set_title(title, fontsize=9)
        fig.colorbar(im, ax=ax, shrink=0.8)
        d = M.shape[0]
        ax.set_xticks(range(d), [str(i + 1) for i in range(d)])
        ax.set_yticks(range(d), [str(i + 1) for i in range(d)])
        ax.set_xlabel("k (eigenvector)" if "eig" in title else "column")
        ax.set_ylabel("j" if "eig" in title else "row")
    fig.suptitle(f"triple {b}")
    fig.tight_layout()
    return fig


def _markdown(summary, config, figs):
    lines = [
        "## Sensitivity map d(a, b)/dV",
        "",
        f"{summary['triples']} Ginibre-based good triples (d = {config['system']['d']}, n = {config['system']['n']}), "
        f"{summary['layers']} Euler layers of dt = {config['dynamics']['dt']}. Central-difference check along a random "
        f"direction: worst relative error {summary['max_fd_rel_error']:.2e} "
        f"({'passed' if summary['fd_check_passed'] else 'FAILED'}, tolerance {config['check']['fd_tolerance']}).",
        "",
        "| triple | a | b | lambda_1 | largest abs(da/dV) in eigenbasis (j, k) | largest abs(db/dV) in eigenbasis (j, k) |",
        "|---|---|---|---|---|---|",
    ]
    for r in summary["rows"]:
        Sa, Sb = np.asarray(r["abs_S_a"]), np.asarray(r["abs_S_b"])
        ja, jb = np.unravel_index(np.argmax(Sa), Sa.shape), np.unravel_index(np.argmax(Sb), Sb.shape)
        lam1 = r["lambda"][0]
        lines.append(f"| {r['triple']} | {r['a']:.4g} | {r['b']:.4g} | {np.real(lam1):.4g} | "
                     f"{Sa[ja]:.3g} at {tuple(int(i) + 1 for i in ja)} | {Sb[jb]:.3g} at {tuple(int(i) + 1 for i in jb)} |")
    lines += ["", "A real attention head (real-models issue) is not included yet.", "",
              *[f"![{f}]({f})" for f in figs], ""]
    return "\n".join(lines)
