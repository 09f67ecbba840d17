"""Figures of the probe studies (``attnflow probe``): the best configuration found beyond
Q^T K > 0, the distances to failure of clustering and of Definition 4.1, and sensitivity maps
d(a, b)/dV.
"""

from __future__ import annotations

import numpy as np

from ._checks import Inputs
from ._style import colorbar, colours, finite, label, legend

__all__ = ["beyond_pd_tokens", "failure_distances", "sensitivity_maps"]


def beyond_pd_tokens(x0, horizons: list[dict], A, *, fig=None):
    """Initial tokens and the rescaled tokens z(t) at every horizon (first two coordinates) of
    the best non-positive-definite Q^T K found with V = I.

    Args:
        x0: ``(n, d)`` initial tokens.
        horizons: dicts with ``t``, ``status`` (``"ok"`` or not), ``tokens`` (n, d),
            ``num_clusters``, ``boundary``, ``interior``; a horizon whose status is not ok is
            an empty panel saying so.
        A: the ``(d, d)`` matrix Q^T K (its symmetric part's smallest eigenvalue is in the title).
        fig: Figure to draw in (default: a new one).

    Returns:
        The Figure.

    Example:
        >>> import numpy as np
        >>> import attnflow.plot as ap
        >>> x0 = np.random.default_rng(0).normal(size=(5, 2))
        >>> h = [{"t": 1.0, "status": "ok", "tokens": x0, "num_clusters": 2, "boundary": 1, "interior": 0},
        ...      {"t": 2.0, "status": "nonfinite"}]
        >>> len(ap.beyond_pd_tokens(x0, h, -np.eye(2)).axes)
        3
    """
    import matplotlib.pyplot as plt

    check = Inputs("beyond_pd_tokens")
    x0 = check.array("x0", x0, ("n", "d"))
    if x0.shape[1] < 2:
        check.fail(f"x0 has d = {x0.shape[1]}, expected tokens of dimension d >= 2 (two coordinates are drawn).")
    A = check.array("A", A, ("d", "d"))
    horizons = check.fields("horizons", check.sequence("horizons", horizons), ("t", "status"))
    for i, h in enumerate(horizons):
        if h["status"] == "ok":
            check.fields(f"horizons[{i}]", [h], ("tokens", "num_clusters", "boundary", "interior"))
            check.array(f"horizons[{i}]['tokens']", h["tokens"], ("n", "d"))
    k = len(horizons)
    if fig is None:
        fig = plt.figure(figsize=(3.3 * (k + 1), 3.6), layout="constrained")
    axes = fig.subplots(1, k + 1, squeeze=False)[0]
    ok0 = np.all(np.isfinite(x0[:, :2]), axis=1)
    axes[0].scatter(x0[ok0, 0], x0[ok0, 1], s=12, color=colours(1)[0])
    label(axes[0], "$x_1$", "$x_2$", "$x(0)$" + (f"\n{int((~ok0).sum())} non-finite token(s) not shown" if (~ok0).any() else ""))
    c = colours(4)[3]
    for ax, h in zip(axes[1:], horizons):
        if h["status"] != "ok":
            ax.text(0.5, 0.5, "not finite:\nnothing to show", ha="center", va="center", transform=ax.transAxes)
            ax.set_xticks([])
            ax.set_yticks([])
            label(ax, "$z_1$", "$z_2$", f"$z(t = {h['t']:.3g})$: not finite")
            continue
        z = np.asarray(h["tokens"], float)
        ok = np.all(np.isfinite(z[:, :2]), axis=1)
        ax.scatter(z[ok, 0], z[ok, 1], s=14, color=c, label="tokens $z_i$")
        ax.scatter([0], [0], marker="+", c="k", s=50, label="origin")
        label(ax, "$z_1$", "$z_2$", f"$z(t = {h['t']:.3g})$: {h['num_clusters']} clusters,\n"
              f"{h['boundary'] + h['interior']} not at a vertex/0")
    lam = float(np.linalg.eigvalsh(0.5 * (np.asarray(A) + np.asarray(A).T))[0])
    fig.suptitle(f"best non-PD $Q^\\top K$ found ($V = I$), $\\lambda_{{\\min}}$(sym) = {lam:.3g}", fontsize="medium")
    return fig


def failure_distances(rows: list[dict], ratio, *, fig=None):
    """Distances to failure: histograms of the smallest radius at which clustering is lost and
    at which Definition 4.1 breaks, of their ratio, and both against V_0's Def 4.1 margin.

    Args:
        rows: one dict per triple with ``rho_clustering``, ``rho_def41`` (None: not reached)
            and ``margin0``; a row whose ``status`` is given and is not ``"ok"`` (an excluded
            triple) is left out and counted in the figure's title.
        ratio: rho_clustering / rho_Def4.1 of the triples where both were reached.
        fig: Figure to draw in (default: a new one).

    Returns:
        The Figure.

    Example:
        >>> import attnflow.plot as ap
        >>> rows = [{"rho_clustering": 0.1, "rho_def41": 0.2, "margin0": 0.3},
        ...         {"rho_clustering": None, "rho_def41": 0.4, "margin0": 0.1}]
        >>> fig = ap.failure_distances(rows, [0.5])
        >>> fig.axes[1].get_ylabel()
        'triples'
    """
    import matplotlib.pyplot as plt

    check = Inputs("failure_distances")
    given = check.fields("rows", check.sequence("rows", rows), ("rho_clustering", "rho_def41", "margin0"))
    ratio = check.array("ratio", ratio, ("ratio",), empty=True)
    rows = [r for r in given if r.get("status", "ok") == "ok"]
    excluded = len(given) - len(rows)
    if fig is None:
        fig = plt.figure(figsize=(13.5, 3.9), layout="constrained")
    axes = fig.subplots(1, 3, squeeze=True)
    c_cl, c_def, c_ratio = colours(3)

    def vals(key):
        v = finite([np.nan if r[key] is None else r[key] for r in rows])
        return v[np.isfinite(v) & (v > 0)]

    rc, rd = vals("rho_clustering"), vals("rho_def41")
    edges = np.log10(np.unique(np.concatenate([rc, rd]))) if rc.size + rd.size else np.zeros(1)
    bins = np.unique(np.round(np.concatenate([edges - 0.15, edges[-1:] + 0.15]), 6))
    if bins.size < 2:
        bins = np.array([-0.15, 0.15])
    axes[0].hist(np.log10(rc), bins=bins, alpha=0.6, color=c_cl, label=f"clustering lost ({rc.size})")
    axes[0].hist(np.log10(rd), bins=bins, alpha=0.6, color=c_def, label=f"Def 4.1 broken ({rd.size})")
    label(axes[0], r"$\log_{10} \|\Delta\|_F / \|V_0\|_F$" "\n(smallest radius of the ladder)", "triples",
          f"{len(rows) - rc.size} / {len(rows) - rd.size} triple(s) never reached (not shown)"
          if rc.size < len(rows) or rd.size < len(rows) else None)
    legend(axes[0])
    r = finite(ratio)
    r = r[np.isfinite(r) & (r > 0)]
    if r.size:
        axes[1].hist(np.log10(r), bins=12, color=c_ratio)
    axes[1].axvline(0.0, color="k", lw=0.8, label="equal radii")
    lo, hi = axes[1].get_xlim()
    axes[1].set_xlim(min(lo, -0.5), max(hi, 0.5))
    label(axes[1], r"$\log_{10}(\rho_{\mathrm{clustering}} / \rho_{\mathrm{Def\,4.1}})$", "triples",
          None if r.size else "no triple reached both failures")
    m0 = finite([r_["margin0"] for r_ in rows])
    for key, marker, colour, name in (("rho_clustering", "o", c_cl, "clustering lost"),
                                      ("rho_def41", "x", c_def, "Def 4.1 broken")):
        y = finite([np.nan if r_[key] is None else r_[key] for r_ in rows])
        ok = np.isfinite(y) & np.isfinite(m0) & (y > 0)
        axes[2].scatter(m0[ok], y[ok], marker=marker, color=colour, label=name)
    y_all = np.concatenate([rc, rd])
    if y_all.size and y_all.max() / y_all.min() > 100:
        axes[2].set_yscale("log")
    from matplotlib.ticker import MaxNLocator

    for ax in axes[:2]:
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    label(axes[2], "relative Def 4.1 margin of $V_0$", r"$\rho$ (radius of the first failure)")
    legend(axes[2])
    if excluded:
        fig.suptitle(f"{excluded} of {len(given)} triple(s) excluded (status not ok), not shown"
                     + ("" if rows else ": no triple to draw"), fontsize="medium")
    return fig


def sensitivity_maps(G, S, *, title: str | None = None, fig=None):
    """Sensitivity of the two hyperplane levels (a, b) to V: the gradients da/dV, db/dV
    (diverging colours, symmetric limits) and their moduli in V's eigenbasis.

    Args:
        G: ``(2, d, d)`` gradients (non-finite entries masked and noted).
        S: ``(2, k, k)`` the gradients in the eigenbasis of V's ``k`` leading modes (complex; their
            moduli are drawn; ``k = d`` when every mode is kept).
        title: figure title (e.g. the system's name).
        fig: Figure to draw in (default: a new one).

    Returns:
        The Figure.

    Example:
        >>> import numpy as np
        >>> import attnflow.plot as ap
        >>> G = np.random.default_rng(0).normal(size=(2, 3, 3))
        >>> len(ap.sensitivity_maps(G, G, title="toy").axes)
        8
    """
    import matplotlib.pyplot as plt
    from matplotlib.colors import Normalize

    check = Inputs("sensitivity_maps")
    G = check.array("G", G, (2, "d", "d"))
    S = np.abs(check.array("S", S, (2, "k", "k"), dtype=complex))
    if fig is None:
        fig = plt.figure(figsize=(15.5, 3.6), layout="constrained")
    axes = fig.subplots(1, 4, squeeze=True)
    panels = [(G[0], "$da/dV$", False), (G[1], "$db/dV$", False),
              (S[0], "$|da/dV|$ in eigenbasis", True), (S[1], "$|db/dV|$ in eigenbasis", True)]
    for ax, (M, name, eig) in zip(axes, panels):
        M = finite(np.real(M))
        bad = ~np.isfinite(M)
        lim = float(np.nanmax(np.abs(M))) if (~bad).any() else 1.0
        lim = lim or 1.0
        ax.set_facecolor("0.8")
        im = ax.imshow(np.ma.masked_invalid(M), cmap="viridis" if eig else "RdBu_r",
                       norm=Normalize(0 if eig else -lim, lim), interpolation="nearest")
        d = M.shape[0]
        if d <= 16:
            ax.set_xticks(range(d), [str(i + 1) for i in range(d)])
            ax.set_yticks(range(d), [str(i + 1) for i in range(d)])
        label(ax, "$k$ (eigenvector)" if eig else "column of $V$", "$j$" if eig else "row of $V$",
              name + (f"\n{int(bad.sum())} non-finite entries masked (grey)" if bad.any() else ""))
        colorbar(im, ax, name.replace(" in eigenbasis", ""))
    if title:
        fig.suptitle(title, fontsize="medium")
    return fig
