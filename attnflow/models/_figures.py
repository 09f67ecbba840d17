"""Figures of ``attnflow track`` (matplotlib, Agg backend). Each function writes one PNG
atomically and returns its file name.

Colours of Definition 4.1 (by the eigenvalue of largest modulus of V_h): green = good triple
(both conditions), orange = condition (1) only (<Q phi, K phi> <= 0), red = complex lambda_1,
purple = real lambda_1 <= 0 or not simple.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from ..runio import atomic_save_figure  # noqa: E402

__all__ = ["STATUS_COLOURS", "eigenvalue_panels", "side_by_side", "real_head_maps", "idealised_vs_spectrum"]

STATUS_COLOURS = {"good": "tab:green", "cond1": "tab:orange", "complex": "tab:red", "real<0": "tab:purple"}
STATUS_LABELS = {"good": "good triple (Def 4.1)", "cond1": "Def 4.1(1) only", "complex": "lambda_1 complex",
                 "real<0": "lambda_1 real, not > 0 / not simple"}


def _save(fig, path: Path) -> str:
    return atomic_save_figure(fig, path, dpi=90, bbox_inches="tight")


def _legend(ax):
    for status, colour in STATUS_COLOURS.items():
        ax.scatter([], [], c=colour, s=40, label=STATUS_LABELS[status])
    ax.legend(fontsize=7, loc="best")


def _eigen_axes(ax, spectra, rows, title):
    for lam, r in zip(spectra, rows):
        ax.scatter(lam.real, lam.imag, s=4, c="0.7")
    for lam, r in zip(spectra, rows):
        ax.scatter([r.lambda1_re], [r.lambda1_im], s=45, c=STATUS_COLOURS[r.status], edgecolors="k", linewidths=0.5)
        ax.annotate(str(r.head), (r.lambda1_re, r.lambda1_im), fontsize=6, xytext=(3, 3), textcoords="offset points")
    ax.axhline(0, c="k", lw=0.4)
    ax.axvline(0, c="k", lw=0.4)
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("Re")
    ax.set_ylabel("Im")


def eigenvalue_panels(spectra: dict, rows: list, path: Path) -> str:
    """One panel per parameter layer: every head's non-zero eigenvalues of V_h (grey) and its
    lambda_1 (large, coloured by Def 4.1, labelled with the head index)."""
    layers = sorted({r.layer for r in rows})
    cols = min(3, len(layers))
    nrows = -(-len(layers) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4.2 * cols, 3.8 * nrows), squeeze=False)
    for ax, s in zip(axes.flat, layers):
        sel = [r for r in rows if r.layer == s]
        _eigen_axes(ax, [spectra[(s, r.head)] for r in sel], sel, f"layer {s}: eigenvalues of V_h")
    for ax in list(axes.flat)[len(layers):]:
        ax.axis("off")
    _legend(axes.flat[0])
    return _save(fig, path)


def side_by_side(rec: dict, row, spectrum: np.ndarray, tokens: list[str], path: Path) -> str:
    """The idealised dynamics of one head (shared across layers) next to the real model:
    spectrum of V_h, clusters, mean cosine, Booleanness against the layer, and the attention
    matrices of the last layer (real head vs idealised)."""
    s, h = row.layer, row.head
    L = rec["attentions"].shape[0]
    n = len(tokens)
    fig, axes = plt.subplots(2, 3, figsize=(15, 9))
    _eigen_axes(axes[0, 0], [spectrum], [row], f"V of layer {s} head {h}: lambda_1 = "
                + (f"{row.lambda1_re:.3g}" if row.lambda1_im == 0 else f"{row.lambda1_re:.3g}{row.lambda1_im:+.3g}i"))
    _legend(axes[0, 0])
    k = np.arange(L + 1)
    ax = axes[0, 1]
    ax.plot(k, rec["clusters"], "o-", label="real model")
    ax.plot(k, rec["ideal_clusters"][s, h], "s--", label=f"idealised, head {s}:{h} shared")
    ax.axhline(n, c="0.6", lw=0.8, ls=":", label="n tokens")
    ax.set_xlabel("layer")
    ax.set_ylabel("clusters of normalised tokens")
    ax.legend(fontsize=7)
    ax = axes[0, 2]
    ax.plot(k, rec["mean_cos"], "o-", label="real model")
    ax.plot(k, rec["ideal_mean_cos"][s, h], "s--", label="idealised")
    ax.set_xlabel("layer")
    ax.set_ylabel("mean pairwise cosine")
    ax.legend(fontsize=7)
    ax = axes[1, 0]
    ax.plot(k[:-1], rec["boolean"][:, h], "o-", label=f"real, head {h} of each layer")
    ax.plot(k[:-1], rec["ideal_boolean"][s, h], "s--", label="idealised")
    ax.set_xlabel("layer")
    ax.set_ylabel("distance to Boolean: max_i (1 - max_j P_ij)")
    ax.set_ylim(-0.02, 1.0)
    ax.legend(fontsize=7)
    # the real head's own layer when layers have their own weights, else (ALBERT) the last layer
    real_layer = s if rec["ideal_clusters"].shape[0] == L else L - 1
    for ax, P, title in ((axes[1, 1], rec["attentions"][real_layer, h], f"real P, layer {real_layer} head {h}"),
                         (axes[1, 2], rec["ideal_selected_attentions"][-1], f"idealised P, layer {L - 1}")):
        ax.imshow(P, vmin=0, vmax=1, cmap="viridis")
        ax.set_title(title, fontsize=9)
        if n <= 40:
            ax.set_xticks(range(n), tokens, rotation=90, fontsize=6)
            ax.set_yticks(range(n), tokens, fontsize=6)
    return _save(fig, path)


def real_head_maps(mean_rank: np.ndarray, mean_boolean: np.ndarray, n_mean: float, path: Path) -> str:
    """(L, H) heat maps of the real model's attention: mean numerical rank and mean Booleanness."""
    fig, axes = plt.subplots(1, 2, figsize=(12, 0.5 * mean_rank.shape[0] + 2.5))
    for ax, a, title in ((axes[0], mean_rank, f"mean numerical rank of P (mean n = {n_mean:.1f})"),
                         (axes[1], mean_boolean, "mean distance to Boolean")):
        im = ax.imshow(a, aspect="auto", cmap="magma")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
        fig.colorbar(im, ax=ax)
    return _save(fig, path)


def idealised_vs_spectrum(rows: list, final_cos: np.ndarray, final_clusters: np.ndarray, n_mean: float,
                          path: Path) -> str:
    """Every head's idealised run (mean over sentences, last layer) against Re lambda_1 of V_h,
    coloured by Def 4.1."""
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for r in rows:
        c = STATUS_COLOURS[r.status]
        axes[0].scatter(r.lambda1_re, final_cos[r.layer, r.head], c=c, s=30, edgecolors="k", linewidths=0.4)
        axes[1].scatter(r.lambda1_re, final_clusters[r.layer, r.head] / n_mean, c=c, s=30, edgecolors="k",
                        linewidths=0.4)
    axes[0].set_ylabel("idealised: mean pairwise cosine, last layer")
    axes[1].set_ylabel("idealised: clusters / tokens, last layer")
    for ax in axes:
        ax.set_xlabel("Re lambda_1 of V_h (eigenvalue of largest modulus)")
        ax.axvline(0, c="k", lw=0.4)
    _legend(axes[0])
    return _save(fig, path)
