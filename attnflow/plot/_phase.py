"""Phase diagrams: a quantity on a (beta, t) grid as a heat map, and its curves against beta
at fixed times.

The grids may be non-uniform or log-spaced: cells are bounded by the midpoints of the
centres (geometric midpoints on a log axis). Non-finite cells are masked (drawn grey) and
counted in the title, never coloured as values.
"""

from __future__ import annotations

import numpy as np

from ._style import colorbar, colours, finite, legend, new_axes, plain_ticks
from ._style import label as _label  # ``label`` is also an argument of phase_diagram

__all__ = ["cell_edges", "curves_at_fixed_t", "phase_diagram"]


def cell_edges(centres, *, log: bool = False) -> np.ndarray:
    """Edges of the cells around strictly monotone ``centres``: midpoints inside, half a
    spacing beyond the ends (in log space when ``log``).

    Args:
        centres: ``(m,)`` strictly increasing or decreasing values (positive when ``log``).
        log: midpoints of the logarithms (geometric means).

    Returns:
        ``(m + 1,)`` edges.

    Example:
        >>> import numpy as np
        >>> cell_edges([0.0, 1.0, 3.0]).tolist()
        [-0.5, 0.5, 2.0, 4.0]
        >>> np.round(cell_edges([1.0, 100.0], log=True), 9).tolist()
        [0.1, 10.0, 1000.0]
    """
    c = np.asarray(centres, dtype=float)
    if c.ndim != 1 or c.size == 0 or not np.all(np.isfinite(c)):
        raise ValueError("centres must be a non-empty 1-d array of finite values.")
    if log:
        if np.any(c <= 0):
            raise ValueError("log-spaced centres must be positive.")
        return np.exp(cell_edges(np.log(c)))
    if c.size == 1:
        h = 0.5 * (abs(c[0]) or 1.0)
        return np.array([c[0] - h, c[0] + h])
    dc = np.diff(c)
    if not (np.all(dc > 0) or np.all(dc < 0)):
        raise ValueError("centres must be strictly monotone.")
    mid = 0.5 * (c[1:] + c[:-1])
    return np.concatenate([[c[0] - 0.5 * dc[0]], mid, [c[-1] + 0.5 * dc[-1]]])


def phase_diagram(values, *, beta, t, ax=None, log_color: bool = False, log_t: bool = False, log_beta: bool = False,
                  label: str = "fraction of pairs clustered", title: str | None = None, overlay=None,
                  vmin: float | None = None, vmax: float | None = None, cmap: str = "viridis"):
    """A heat map of ``values[i, j]`` at (``beta[i]``, ``t[j]``): beta on the y axis, t on x.

    Args:
        values: ``(len(beta), len(t))`` array; non-finite cells (and non-positive ones with
            ``log_color``) are masked and counted in the title.
        beta, t: the grid centres (any strictly monotone spacing).
        ax: Axes to draw on (default: a new figure).
        log_color: logarithmic colour scale.
        log_t, log_beta: logarithmic time / beta axis (cells bounded by geometric midpoints).
        label: colour-bar label.
        title: panel title.
        overlay: ``(t_curve, beta_curve, label)``: a curve drawn over the map (e.g. a
            predicted boundary), in the legend.
        vmin, vmax: colour limits; cmap: colour map.

    Returns:
        The Axes.

    Example:
        >>> import numpy as np
        >>> import attnflow.plot as ap
        >>> v = np.random.default_rng(0).random((3, 4))
        >>> ax = ap.phase_diagram(v, beta=[0.5, 1.0, 4.0], t=[1, 2, 5, 10], log_t=True)
        >>> ax.get_xlabel(), ax.get_ylabel()
        ('time t', 'beta (inverse temperature)')
    """
    from matplotlib.colors import LogNorm, Normalize

    b = np.asarray(beta, float)
    tt = np.asarray(t, float)
    V = finite(values)
    if V.shape != (b.size, tt.size):
        raise ValueError(f"values must have shape (len(beta), len(t)) = {(b.size, tt.size)}, got {V.shape}.")
    fig, ax = new_axes(ax, figsize=(5.6, 4.2))
    bad = ~np.isfinite(V)
    notes = []
    if log_color:
        nonpos = np.isfinite(V) & (V <= 0)
        if nonpos.any():
            notes.append(f"{int(nonpos.sum())} non-positive cell(s) masked for the log colour scale")
        bad |= nonpos
    if (~np.isfinite(V)).any():
        notes.insert(0, f"{int((~np.isfinite(V)).sum())} of {V.size} cells non-finite, masked (grey)")
    M = np.ma.masked_array(np.where(bad, 0.0, V), mask=bad)
    good = V[~bad]
    lo = vmin if vmin is not None else (float(good.min()) if good.size else (1.0 if log_color else 0.0))
    hi = vmax if vmax is not None else (float(good.max()) if good.size else (10.0 if log_color else 1.0))
    if hi <= lo:
        hi = lo * 10 if log_color else lo + 1.0
    norm = LogNorm(lo, hi) if log_color else Normalize(lo, hi)
    ax.set_facecolor("0.8")
    te, be = cell_edges(tt, log=log_t), cell_edges(b, log=log_beta)
    mesh = ax.pcolormesh(te, be, M, norm=norm, cmap=cmap, shading="flat")
    if log_t:
        ax.set_xscale("log")
    if log_beta:
        ax.set_yscale("log")
    ax.set_xlim(te.min(), te.max())
    ax.set_ylim(be.min(), be.max())
    plain_ticks(ax.xaxis)
    plain_ticks(ax.yaxis)
    colorbar(mesh, ax, label)
    if overlay is not None:
        ct, cb, cl = overlay
        ax.plot(ct, cb, color="w", lw=2.2)
        ax.plot(ct, cb, color="k", lw=1.1, ls="--", label=cl)
        ax.set_xlim(te.min(), te.max())
        ax.set_ylim(be.min(), be.max())
        # below the axes: never over the map, and no gap between the map and its colour bar
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), fontsize="small", frameon=False)
    _label(ax, "time t", "beta (inverse temperature)", "\n".join([x for x in (title, "; ".join(notes)) if x]))
    return ax


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
    b = np.asarray(beta, float)
    tt = np.asarray(t, float)
    V = finite(values)
    if V.shape != (b.size, tt.size):
        raise ValueError(f"values must have shape (len(beta), len(t)) = {(b.size, tt.size)}, got {V.shape}.")
    L = None if lo is None else finite(lo).reshape(V.shape)
    H = None if hi is None else finite(hi).reshape(V.shape)
    fig, ax = new_axes(ax)
    idx = list(dict.fromkeys(int(np.argmin(np.abs(tt - a))) for a in np.atleast_1d(at)))
    cs = colours(len(idx))
    missing = 0
    for c, j in zip(cs, idx):
        v = V[:, j]
        ok = np.isfinite(v)
        missing += int((~ok).sum())
        ax.plot(b[ok], v[ok], marker="o", ms=3, color=c, label=f"t = {tt[j]:g}")
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
    _label(ax, "beta (inverse temperature)", ylabel, "\n".join([x for x in (title, note) if x]))
    legend(ax)
    return ax

