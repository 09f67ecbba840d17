"""Figures of ``attnflow track``: a real model's tokens and attention, layer by layer, against
the idealised dynamics of its heads, and every head against the spectrum of its V_h.

Colours of Definition 4.1 (status of the eigenvalue of largest modulus of V_h):
:data:`attnflow.plot.STATUS_COLOURS`.
"""

from __future__ import annotations

import numpy as np

from ._spectrum import STATUS_COLOURS, STATUS_LABELS, _head_axes, _status_legend
from ._checks import Inputs
from ._style import colorbar, finite, label, legend

__all__ = ["flow_vs_spectrum", "head_maps", "model_vs_flow"]


def _plain_int_ticks(ax):
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))


def model_vs_flow(rec: dict, row, spectrum, tokens, *, fig=None):
    """One head's idealised dynamics (its weights shared by every layer) next to the real model:
    the spectrum of V_h; clusters, mean cosine and distance to Boolean against the layer; and
    the attention matrices of the real head and of the idealised run **at the same layer**
    (the head's own layer when layers have their own weights, else the last), on one colour bar.

    Args:
        rec: one sentence's record of ``attnflow track`` (``attentions`` (L, H, n, n),
            ``clusters``, ``mean_cos``, ``boolean``, ``ideal_clusters``, ``ideal_mean_cos``,
            ``ideal_boolean``, ``ideal_selected_attentions`` (L, n, n)).
        row: the head's :class:`attnflow.models.HeadAssumptions` (``layer``, ``head``, ...).
        spectrum: eigenvalues of its V_h.
        tokens: the n token strings.
        fig: Figure to draw in (default: a new one).

    Returns:
        The Figure.

    Example:
        >>> import numpy as np
        >>> from types import SimpleNamespace as R
        >>> import attnflow.plot as ap
        >>> rng = np.random.default_rng(0)
        >>> L, H, n = 2, 2, 3
        >>> P = rng.dirichlet(np.ones(n), size=(L, H, n))
        >>> rec = {"attentions": P, "clusters": np.array([3, 2, 1]), "mean_cos": np.array([.1, .5, .9]),
        ...        "boolean": rng.random((L, H)), "ideal_clusters": rng.integers(1, 4, (1, H, L + 1)),
        ...        "ideal_mean_cos": rng.random((1, H, L + 1)), "ideal_boolean": rng.random((1, H, L)),
        ...        "ideal_selected_attentions": P[:, 0]}
        >>> row = R(layer=0, head=1, lambda1_re=1.2, lambda1_im=0.0, status="good")
        >>> fig = ap.model_vs_flow(rec, row, np.array([1.2, 0.3]), ["a", "b", "c"])
        >>> [t for t in (a.get_title() for a in fig.axes) if t.startswith(("real P", "idealised P"))]
        ['real P, layer 1 head 1', 'idealised P, layer 1 (head 0:1 shared)']
    """
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    check = Inputs("model_vs_flow")
    check.mapping("rec", rec, ("attentions", "clusters", "mean_cos", "boolean", "ideal_clusters", "ideal_mean_cos",
                               "ideal_boolean", "ideal_selected_attentions"))
    check.fields("row", [row], ("layer", "head", "lambda1_re", "lambda1_im", "status"))
    tokens = check.sequence("tokens", tokens, "n")
    att = check.array("rec['attentions']", rec["attentions"], ("L", "H", "n", "n"))
    s, h = row.layer, row.head
    if not (0 <= h < att.shape[1]):
        check.fail(f"row.head is {h}, expected an index into the {att.shape[1]} heads of rec['attentions'].")
    check.sizes["L+1"] = att.shape[0] + 1
    check.array("rec['clusters']", rec["clusters"], ("L+1",))
    check.array("rec['mean_cos']", rec["mean_cos"], ("L+1",))
    check.array("rec['boolean']", rec["boolean"], ("L", "H"))
    check.array("rec['ideal_clusters']", rec["ideal_clusters"], ("S", "H", "L+1"))
    check.array("rec['ideal_mean_cos']", rec["ideal_mean_cos"], ("S", "H", "L+1"))
    check.array("rec['ideal_boolean']", rec["ideal_boolean"], ("S", "H", "L"))
    check.array("rec['ideal_selected_attentions']", rec["ideal_selected_attentions"], ("L", "n", "n"))
    if not (0 <= s < check.sizes["S"]):
        check.fail(f"row.layer is {s}, expected an index into the {check.sizes['S']} weight sets of the idealised runs.")
    spectrum = check.array("spectrum", spectrum, ("d",), dtype=complex)
    L = att.shape[0]
    n = len(tokens)
    if fig is None:
        fig = plt.figure(figsize=(15, 9.2), layout="constrained")
    axes = fig.subplots(2, 3)
    lam1 = f"{row.lambda1_re:.3g}" if row.lambda1_im == 0 else f"{row.lambda1_re:.3g}{row.lambda1_im:+.3g}i"
    _head_axes(axes[0, 0], [spectrum], [row], f"$V$ of layer {s} head {h}: $\\lambda_1$ = {lam1}")
    k = np.arange(L + 1)
    ax = axes[0, 1]
    ax.plot(k, rec["clusters"], "o-", label="real model")
    ax.plot(k, rec["ideal_clusters"][s, h], "s--", label=f"idealised, head {s}:{h} shared")
    ax.axhline(n, c="0.5", lw=0.8, ls=":", label=f"n = {n} tokens")
    lo, hi = ax.get_ylim()
    ax.set_ylim(min(lo, 0), max(hi, n + 0.5))
    label(ax, "layer", "clusters of normalised tokens")
    legend(ax)
    ax = axes[0, 2]
    ax.plot(k, rec["mean_cos"], "o-", label="real model")
    ax.plot(k, rec["ideal_mean_cos"][s, h], "s--", label="idealised")
    label(ax, "layer", "mean pairwise cosine")
    legend(ax)
    ax = axes[1, 0]
    ax.plot(k[:-1], rec["boolean"][:, h], "o-", label=f"real, head {h} of each layer")
    ax.plot(k[:-1], rec["ideal_boolean"][s, h], "s--", label="idealised")
    ax.set_ylim(-0.02, 1.0)
    label(ax, "layer", "distance to Boolean:\n" r"$\max_i (1 - \max_j P_{ij})$")
    legend(ax)
    for a in (axes[0, 1], axes[0, 2], axes[1, 0]):
        a.xaxis.set_major_locator(MaxNLocator(integer=True))
    # the same layer on both sides: the head's own layer when layers have their own weights,
    # else (one weight set shared by all layers, e.g. ALBERT) the last layer
    layer = s if np.asarray(rec["ideal_clusters"]).shape[0] == L else L - 1
    ideal = np.asarray(rec["ideal_selected_attentions"])
    pairs = ((axes[1, 1], att[layer, h], f"real P, layer {layer} head {h}"),
             (axes[1, 2], ideal[layer], f"idealised P, layer {layer} (head {s}:{h} shared)"))
    notes = []
    for ax, P, title in pairs:
        P = finite(P)
        bad = ~np.isfinite(P)
        ax.set_facecolor("0.8")
        im = ax.imshow(np.ma.masked_invalid(P), vmin=0, vmax=1, cmap="viridis")
        ax.set_title(title, fontsize="medium")
        if bad.any():
            notes.append(f"{title.split(',')[0]}: {int(bad.sum())} non-finite entries masked (grey)")
        if n <= 40:
            ax.set_xticks(range(n), tokens, rotation=90, fontsize=6)
            ax.set_yticks(range(n), tokens, fontsize=6)
        ax.set_xlabel("key token j")
        ax.set_ylabel("query token i")
    cbar = fig.colorbar(im, ax=[axes[1, 1], axes[1, 2]], shrink=0.9)
    cbar.set_label("attention weight $P_{ij}$")
    if notes:
        fig.suptitle("; ".join(notes), fontsize="small")
    _status_legend(fig)
    return fig


def head_maps(mean_rank, mean_boolean, *, n_mean: float, fig=None):
    """``(L, H)`` heat maps of the real model's attention: mean numerical rank of P and mean
    distance to a Boolean matrix, each with a labelled colour bar.

    Args:
        mean_rank, mean_boolean: ``(L, H)`` means over sentences (non-finite cells masked, noted).
        n_mean: mean number of tokens (in the title: the largest possible rank).
        fig: Figure to draw in (default: a new one).

    Returns:
        The Figure.

    Example:
        >>> import numpy as np
        >>> import attnflow.plot as ap
        >>> rng = np.random.default_rng(0)
        >>> fig = ap.head_maps(rng.random((3, 4)) * 5, rng.random((3, 4)), n_mean=5.0)
        >>> len(fig.axes)
        4
    """
    import matplotlib.pyplot as plt

    check = Inputs("head_maps")
    rank = finite(check.array("mean_rank", mean_rank, ("L", "H")))
    boolean = finite(check.array("mean_boolean", mean_boolean, ("L", "H")))
    if fig is None:
        fig = plt.figure(figsize=(12, 0.45 * rank.shape[0] + 2.8), layout="constrained")
    axes = fig.subplots(1, 2, squeeze=True)
    for ax, a, title, what in ((axes[0], rank, f"mean numerical rank of P (mean n = {n_mean:.1f})", "numerical rank"),
                               (axes[1], boolean, "mean distance to Boolean", r"$\max_i (1 - \max_j P_{ij})$")):
        bad = ~np.isfinite(a)
        ax.set_facecolor("0.8")
        im = ax.imshow(np.ma.masked_invalid(a), aspect="auto", cmap="magma", interpolation="nearest")
        if bad.any():
            title += f"\n{int(bad.sum())} non-finite cell(s) masked (grey)"
        label(ax, "head", "layer", title)
        _plain_int_ticks(ax)
        colorbar(im, ax, what)
    return fig


def flow_vs_spectrum(rows: list, final_cos, final_clusters, *, n_mean: float, fig=None):
    """Every head's idealised run (mean over sentences, last layer) against Re lambda_1 of its
    V_h, coloured by its Definition 4.1 status.

    Args:
        rows: :class:`attnflow.models.HeadAssumptions` of every head.
        final_cos, final_clusters: ``(layers, heads)`` mean pairwise cosine and number of
            clusters at the last layer (non-finite values are left out and counted).
        n_mean: mean number of tokens (clusters are shown per token).
        fig: Figure to draw in (default: a new one).

    Returns:
        The Figure.

    Example:
        >>> import numpy as np
        >>> from types import SimpleNamespace as R
        >>> import attnflow.plot as ap
        >>> rows = [R(layer=0, head=h, lambda1_re=h - 1.0, lambda1_im=0.0, status="good") for h in range(3)]
        >>> fig = ap.flow_vs_spectrum(rows, np.ones((1, 3)), np.ones((1, 3)), n_mean=4.0)
        >>> fig.axes[0].get_xlabel()
        'Re $\\\\lambda_1$ of $V_h$ (eigenvalue of largest modulus)'
    """
    import matplotlib.pyplot as plt

    check = Inputs("flow_vs_spectrum")
    rows = check.fields("rows", check.sequence("rows", rows), ("layer", "head", "lambda1_re", "status"))
    cos = finite(check.array("final_cos", final_cos, ("layers", "heads")))
    cl = finite(check.array("final_clusters", final_clusters, ("layers", "heads")))
    outside = [(r.layer, r.head) for r in rows if not (0 <= r.layer < cos.shape[0] and 0 <= r.head < cos.shape[1])]
    if outside:
        check.fail(f"rows names the heads {outside[:4]} outside final_cos's {cos.shape} (layers, heads), "
                   "expected every row's (layer, head) inside it.")
    if fig is None:
        fig = plt.figure(figsize=(12, 4.8), layout="constrained")
    axes = fig.subplots(1, 2, squeeze=True)
    for ax, a, what in ((axes[0], cos, "idealised: mean pairwise cosine, last layer"),
                        (axes[1], cl / n_mean, "idealised: clusters / tokens, last layer")):
        missing = 0
        for r in rows:
            v = a[r.layer, r.head]
            if not (np.isfinite(v) and np.isfinite(r.lambda1_re)):
                missing += 1
                continue
            ax.scatter(r.lambda1_re, v, c=STATUS_COLOURS.get(r.status, "k"), s=30, edgecolors="k", linewidths=0.4)
        ax.axvline(0, c="k", lw=0.4)
        lo, hi = ax.get_xlim()
        ax.set_xlim(min(lo, -0.05 * (hi - lo)), max(hi, 0.05 * (hi - lo)))
        label(ax, r"Re $\lambda_1$ of $V_h$ (eigenvalue of largest modulus)", what,
              f"{missing} head(s) without a finite value not shown" if missing else None)
    statuses = [s for s in STATUS_COLOURS if any(r.status == s for r in rows)] or list(STATUS_COLOURS)
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], ls="", marker="o", ms=7, mfc=STATUS_COLOURS[s], mec="k", mew=0.5) for s in statuses]
    fig.legend(handles, [STATUS_LABELS[s] for s in statuses], loc="outside lower center", ncol=len(handles),
               fontsize="small", frameon=False)
    return fig
