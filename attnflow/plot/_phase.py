"""Phase diagrams: a quantity on a (beta, t) grid as a heat map, and its curves against beta
at fixed times.

The grids may be non-uniform or log-spaced: cells are bounded by the midpoints of the
centres (geometric midpoints on a log axis). Non-finite cells are masked (drawn grey) and
counted in the title, never coloured as values. A grid with fewer than :data:`COARSE_BETAS`
values of beta is drawn as one curve against t per beta: bands that wide would show cell
edges that are artefacts of the midpoints, not measurements.
"""

from __future__ import annotations

import numpy as np

from ._checks import Inputs
from ._style import colorbar, colours, finite, legend, log_ticks, new_axes, plain_ticks
from ._style import label as _label  # ``label`` is also an argument of phase_diagram

__all__ = ["COARSE_BETAS", "cell_edges", "curves_at_fixed_t", "phase_diagram"]

#: grids with fewer values of beta than this are drawn as curves, one per beta
COARSE_BETAS = 8
#: the axis labels of the phase figures
BETA_LABEL = r"inverse temperature $\beta$"
T_LABEL = "time $t$"


def cell_edges(centres, *, log: bool = False, lower: float | None = None) -> np.ndarray:
    """Edges of the cells around strictly monotone ``centres``: midpoints inside, half a
    spacing beyond the ends (in log space when ``log``), none below ``lower``.

    Args:
        centres: ``(m,)`` strictly increasing or decreasing values (positive when ``log``).
        log: midpoints of the logarithms (geometric means).
        lower: the smallest value an edge may take (e.g. 0 for a time or an inverse
            temperature, whose axis then never runs below 0).

    Returns:
        ``(m + 1,)`` edges.

    Example:
        >>> import numpy as np
        >>> cell_edges([0.0, 1.0, 3.0]).tolist()
        [-0.5, 0.5, 2.0, 4.0]
        >>> cell_edges([0.0, 1.0, 3.0], lower=0.0).tolist()
        [0.0, 0.5, 2.0, 4.0]
        >>> np.round(cell_edges([1.0, 100.0], log=True), 9).tolist()
        [0.1, 10.0, 1000.0]
    """
    check = Inputs("cell_edges")
    c = check.array("centres", centres, ("m",))
    if not np.all(np.isfinite(c)):
        check.fail(f"centres holds {int(np.sum(~np.isfinite(c)))} non-finite value(s), expected finite centres.")
    if log and np.any(c <= 0):
        check.fail(f"centres has a non-positive value ({float(c.min()):g}), expected positive centres with log=True.")
    dc = np.diff(c)
    if c.size > 1 and not (np.all(dc > 0) or np.all(dc < 0)):
        check.fail("centres is not strictly monotone, expected strictly increasing or decreasing centres.")
    edges = np.exp(_edges(np.log(c))) if log else _edges(c)
    return edges if lower is None else np.maximum(edges, lower)


def _edges(c: np.ndarray) -> np.ndarray:
    if c.size == 1:
        h = 0.5 * (abs(c[0]) or 1.0)
        return np.array([c[0] - h, c[0] + h])
    dc = np.diff(c)
    mid = 0.5 * (c[1:] + c[:-1])
    return np.concatenate([[c[0] - 0.5 * dc[0]], mid, [c[-1] + 0.5 * dc[-1]]])


def _grid(function: str, values, beta, t, **bands):
    """``(check, values, beta, t, bands)``: the (len(beta), len(t)) arrays of a phase figure, checked."""
    check = Inputs(function)
    b = check.array("beta", beta, ("beta",))
    tt = check.array("t", t, ("t",))
    V = finite(check.array("values", values, ("beta", "t")))
    out = {k: None if v is None else finite(check.array(k, v, ("beta", "t"))) for k, v in bands.items()}
    return check, V, b, tt, out


def phase_diagram(values, *, beta, t, ax=None, log_color: bool = False, log_t: bool = False, log_beta: bool = False,
                  label: str = "fraction of pairs clustered", title: str | None = None, overlay=None,
                  vmin: float | None = None, vmax: float | None = None, cmap: str = "viridis",
                  curves: bool | None = None, show_legend: bool = True):
    r"""A quantity on the (beta, t) grid: a heat map of ``values[i, j]`` at (``beta[i]``, ``t[j]``),
    :math:`\beta` on the y axis and t on x, or, on a coarse grid, one curve against t per beta.

    Args:
        values: ``(len(beta), len(t))`` array; non-finite cells (and non-positive ones with
            ``log_color``) are masked and counted in the title.
        beta, t: the grid centres (any strictly monotone spacing).
        ax: Axes to draw on (default: a new figure).
        log_color: logarithmic colour scale (the y axis of the curves).
        log_t, log_beta: logarithmic time / beta axis (cells bounded by geometric midpoints).
        label: colour-bar label (the y label of the curves).
        title: panel title.
        overlay: ``(t_curve, beta_curve, label)``: a curve drawn over the map (e.g. a
            predicted boundary), in the legend; on the curves, a marker on each beta's curve
            at its time.
        vmin, vmax: colour limits; cmap: colour map.
        curves: draw curves (True) or a heat map (False); default: curves when there are fewer
            than :data:`COARSE_BETAS` betas.
        show_legend: draw the legend: of the curves' betas and the overlay outside the axes on
            the right, of the overlay on a heat map below the axes (False: none; the caller may
            gather the Axes' legend entries, e.g. into one legend for a whole figure).

    Returns:
        The Axes.

    Example:
        >>> import numpy as np
        >>> import attnflow.plot as ap
        >>> v = np.random.default_rng(0).random((8, 4))
        >>> ax = ap.phase_diagram(v, beta=np.linspace(0.5, 4.0, 8), t=[1, 2, 5, 10], log_t=True)
        >>> ax.get_xlabel(), ax.get_ylabel()
        ('time $t$', 'inverse temperature $\\beta$')
        >>> len(ap.phase_diagram(v[:3], beta=[0.5, 1.0, 4.0], t=[1, 2, 5, 10]).lines)   # coarse: a curve per beta
        3
    """
    check, V, b, tt, _ = _grid("phase_diagram", values, beta, t)
    if overlay is not None:
        if not (isinstance(overlay, (tuple, list)) and len(overlay) == 3):
            check.fail(f"overlay must be a tuple (t_curve, beta_curve, label), got {type(overlay).__name__}.")
        check.array("overlay's t_curve", overlay[0], ("overlay",), empty=True)
        check.array("overlay's beta_curve", overlay[1], ("overlay",), empty=True)
    for name, c in (("beta", b), ("t", tt)):
        if not np.all(np.isfinite(c)):
            check.fail(f"{name} holds non-finite values, expected finite grid centres.")
    if curves is None:
        curves = b.size < COARSE_BETAS
    fig, ax = new_axes(ax, figsize=(5.6, 4.2))
    bad = ~np.isfinite(V)
    notes = []
    if log_color:
        nonpos = np.isfinite(V) & (V <= 0)
        if nonpos.any():
            notes.append(f"{int(nonpos.sum())} non-positive {'point' if curves else 'cell'}(s) masked for the log scale")
        bad |= nonpos
    if (~np.isfinite(V)).any():
        what = "points non-finite, not shown" if curves else "cells non-finite, masked (grey)"
        notes.insert(0, f"{int((~np.isfinite(V)).sum())} of {V.size} {what}")
    if curves:
        _curves_over_t(ax, np.where(bad, np.nan, V), b, tt, overlay, log_color=log_color, log_t=log_t, vmin=vmin,
                       vmax=vmax, ylabel=label)
    else:
        _heat_map(ax, np.where(bad, np.nan, V), b, tt, overlay, log_color=log_color, log_t=log_t,
                  log_beta=log_beta, vmin=vmin, vmax=vmax, cmap=cmap, label=label, show_legend=show_legend)
    full = "\n".join([x for x in (title, "; ".join(notes)) if x])
    if curves:
        _label(ax, T_LABEL, label, full)
        if show_legend:
            legend(ax, max_inside=0)
    else:
        _label(ax, T_LABEL, BETA_LABEL, full)
    return ax


def _heat_map(ax, V, b, tt, overlay, *, log_color, log_t, log_beta, vmin, vmax, cmap, label, show_legend):
    from matplotlib.colors import LogNorm, Normalize

    bad = ~np.isfinite(V)
    M = np.ma.masked_array(np.where(bad, 0.0, V), mask=bad)
    good = V[~bad]
    lo = vmin if vmin is not None else (float(good.min()) if good.size else (1.0 if log_color else 0.0))
    hi = vmax if vmax is not None else (float(good.max()) if good.size else (10.0 if log_color else 1.0))
    if hi <= lo:
        hi = lo * 10 if log_color else lo + 1.0
    norm = LogNorm(lo, hi) if log_color else Normalize(lo, hi)
    ax.set_facecolor("0.8")
    # t and beta are >= 0: the end cells stop at 0 instead of running the axis below it
    te = cell_edges(tt, log=log_t, lower=None if log_t or tt.min() < 0 else 0.0)
    be = cell_edges(b, log=log_beta, lower=None if log_beta or b.min() < 0 else 0.0)
    mesh = ax.pcolormesh(te, be, M, norm=norm, cmap=cmap, shading="flat")
    if log_t:
        ax.set_xscale("log")
    if log_beta:
        ax.set_yscale("log")
    ax.set_xlim(te.min(), te.max())
    ax.set_ylim(be.min(), be.max())
    plain_ticks(ax.xaxis)
    plain_ticks(ax.yaxis)
    cbar = colorbar(mesh, ax, label)
    if log_color:
        log_ticks(cbar.ax.yaxis)
    if overlay is not None:
        ct, cb, cl = overlay
        ax.plot(ct, cb, color="w", lw=2.2)
        ax.plot(ct, cb, color="k", lw=1.1, ls="--", label=cl)
        ax.set_xlim(te.min(), te.max())
        ax.set_ylim(be.min(), be.max())
        if show_legend:  # below the axes: never over the map, and no gap between the map and its colour bar
            ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), fontsize="small", frameon=False)


def _curves_over_t(ax, V, b, tt, overlay, *, log_color, log_t, vmin, vmax, ylabel):
    cs = colours(b.size)
    for i, c in enumerate(cs):
        ok = np.isfinite(V[i]) & (tt > 0 if log_t else True)
        ax.plot(tt[ok], V[i, ok], color=c, lw=1.4, marker="o" if ok.sum() <= 12 else None, ms=3,
                label=rf"$\beta$ = {b[i]:.3g}")
    if overlay is not None:  # the overlay's time for each beta, as a marker on that beta's curve
        ct, cb, cl = (np.asarray(overlay[0], float), np.asarray(overlay[1], float), overlay[2])
        shown = 0
        for tk, bk in zip(ct, cb):
            i = int(np.argmin(np.abs(b - bk)))
            ok = np.isfinite(V[i])
            if not (np.isfinite(tk) and ok.sum() and np.isclose(b[i], bk, rtol=1e-9, atol=1e-12)):
                continue
            order = np.argsort(tt[ok])
            ax.plot([tk], [np.interp(tk, tt[ok][order], V[i, ok][order])], ls="", marker="D", ms=6, mfc=cs[i],
                    mec="k", mew=0.8, zorder=4)
            shown += 1
        # the legend's entry in no beta's colour; it says when no beta's time falls inside the run
        ax.plot([], [], ls="", marker="D", ms=6, mfc="w", mec="k", mew=0.8,
                label=cl if shown else f"{cl} (after the last checkpoint)")
    if log_t:
        ax.set_xscale("log")
    if log_color:
        ax.set_yscale("log")
        log_ticks(ax.yaxis)
    else:
        plain_ticks(ax.yaxis)
    plain_ticks(ax.xaxis)
    if vmin is not None or vmax is not None:
        ax.set_ylim(vmin, vmax)


def curves_at_fixed_t(values, *, beta, t, at, lo=None, hi=None, ax=None, log_beta: bool = False,
                      ylabel: str = "fraction of pairs clustered", title: str | None = None):
    """Curves of ``values[:, j]`` against beta at the grid times nearest to ``at``, with
    interval bands ``lo``/``hi`` when given.

    Args:
        values: ``(len(beta), len(t))`` array (non-finite points are left out, counted in the title).
        beta, t: the grid centres.
        at: times to draw (each snapped to the nearest grid time, named in the legend).
        lo, hi: lower / upper ends of the bands, shaped like ``values``.
        ax: Axes to draw on; log_beta: logarithmic beta axis.
        ylabel: y-axis label; title: panel title.

    Returns:
        The Axes.

    Example:
        >>> import numpy as np
        >>> import attnflow.plot as ap
        >>> v = np.random.default_rng(1).random((4, 3))
        >>> ax = ap.curves_at_fixed_t(v, beta=[0.1, 1, 2, 8], t=[1, 2, 4], at=[1, 4], lo=v - 0.1, hi=v + 0.1)
        >>> len(ax.get_lines())
        2
    """
    check, V, b, tt, bands = _grid("curves_at_fixed_t", values, beta, t, lo=lo, hi=hi)
    L, H = bands["lo"], bands["hi"]
    at = check.array("at", np.atleast_1d(np.asarray(at, dtype=object)), ("at",))
    fig, ax = new_axes(ax)
    idx = list(dict.fromkeys(int(np.argmin(np.abs(tt - a))) for a in at))
    cs = colours(len(idx))
    missing = 0
    for c, j in zip(cs, idx):
        v = V[:, j]
        ok = np.isfinite(v)
        missing += int((~ok).sum())
        ax.plot(b[ok], v[ok], marker="o", ms=3, color=c, label=f"$t$ = {tt[j]:g}")
        if L is not None or H is not None:
            lo_j = L[:, j] if L is not None else v
            hi_j = H[:, j] if H is not None else v
            okb = ok & np.isfinite(lo_j) & np.isfinite(hi_j)
            ax.fill_between(b[okb], lo_j[okb], hi_j[okb], color=c, alpha=0.2, lw=0)
    if log_beta:
        ax.set_xscale("log")
    plain_ticks(ax.xaxis)
    plain_ticks(ax.yaxis)
    note = f"{missing} non-finite point(s) not shown" if missing else None
    _label(ax, BETA_LABEL, ylabel, "\n".join([x for x in (title, note) if x]))
    legend(ax)
    return ax
