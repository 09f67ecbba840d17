r"""Quantities against time: cluster counts and Booleanness, per-token levels, curves over a parameter.

The y scale is chosen from the data: linear unless the finite positive values span more than
three decades, then logarithmic, with values below :data:`LOG_FLOOR` drawn at the floor (and
the title saying so), so that an axis never runs down to sub-normal numbers such as 1e-314.
"""

from __future__ import annotations

import numpy as np

from ._checks import Inputs
from ._style import colorbar, colours, finite, label, legend, new_axes
from ._trajectories import masked_note, with_note

__all__ = ["cluster_series", "levels", "series_by_parameter", "readable_scale", "LOG_FLOOR"]

#: smallest value a log axis shows (about float64 rounding relative to O(1) values)
LOG_FLOOR = 1e-16


def readable_scale(ax, values, *, decades: float = 3.0, floor: float = LOG_FLOOR, log=None):
    """Choose ``ax``'s y scale for ``values``; return ``(values to draw, note)``.

    Log when ``log`` is True, or (``log=None``) when every finite value is >= 0 and the finite
    positive ones, clipped below at ``floor``, span more than ``decades`` decades; then values
    below ``floor`` (zeros included) are drawn at ``floor`` and the note says so. Non-finite
    values are masked (NaN) and counted in the note.

    Example:
        >>> import numpy as np
        >>> import attnflow.plot as ap
        >>> fig, ax = ap.new_axes()
        >>> y, note = ap.readable_scale(ax, np.array([1.0, 1e-5, 1e-314, 0.0]))
        >>> ax.get_yscale(), float(np.nanmin(y)), note
        ('log', 1e-16, 'values < 1e-16 shown at 1e-16')
    """
    values = Inputs("readable_scale").array("values", values, ("N",), ("R", "N"))
    notes = [masked_note(values).strip("()")]
    y = finite(values)
    fin = y[np.isfinite(y)]
    pos = np.maximum(fin[fin > 0], floor) if fin.size else fin
    if log is None:
        log = bool(fin.size and np.all(fin >= 0) and pos.size and np.log10(pos.max() / pos.min()) > decades)
        if log and np.any(fin < floor):
            log = bool(np.log10(pos.max() / floor) > decades)
    if log and pos.size:
        low = np.isfinite(y) & (y < floor)
        if np.any(low):
            notes.append(f"values < {floor:g} shown at {floor:g}")
        y = np.where(low, floor, y)
        from matplotlib.ticker import LogLocator

        ax.set_yscale("log")
        ax.set_ylim(max(float(np.nanmin(y)), floor) / 2.0, float(np.nanmax(y)) * 2.0)
        ax.yaxis.set_major_locator(LogLocator(base=10, numticks=7))
    return y, "; ".join(n for n in notes if n)


def _rows(check, name, a) -> np.ndarray:
    """``a`` as (R, T): one row per run, one value per time."""
    a = check.array(name, a, ("T",), ("R", "T"))
    return a[None] if a.ndim == 1 else a


def cluster_series(ts, *, clusters=None, rank=None, boolean_distance=None, ax=None, title: str | None = None,
                   xlabel: str = "$t$"):
    r"""Cluster count and rank of P (left axis) and the distance of P to Boolean (right axis) against time.

    Each argument may hold one run (T,) or several (R, T) (one thin line each). The Booleanness
    distance :math:`\max_i (1 - \max_j P_{ij})` goes on a twin axis scaled by :func:`readable_scale`.

    Args:
        ts: save times (T,).
        clusters: number of clusters per save.
        rank: numerical rank of P per save.
        boolean_distance: distance of P to the nearest Boolean matrix per save.
        ax: Axes to draw into (default: a new figure); the twin axis is ``ax.right_axis``.
        title: the title.
        xlabel: the x label ("t", or "layer" when ts counts layers).

    Returns:
        The left Axes.

    Example:
        >>> import numpy as np
        >>> import attnflow.plot as ap
        >>> t = np.linspace(0, 5, 6)
        >>> ax = ap.cluster_series(t, clusters=[8, 5, 3, 3, 2, 2], boolean_distance=np.exp(-t**3))
        >>> ax.right_axis.get_ylabel()
        'dist(P, Boolean)'
    """
    check = Inputs("cluster_series")
    t = finite(check.array("ts", ts, ("T",)))
    if clusters is None and rank is None and boolean_distance is None:
        check.fail("clusters, rank and boolean_distance are all None, expected at least one series to draw.")
    series = {k: None if v is None else _rows(check, k, v)
              for k, v in (("clusters", clusters), ("rank", rank), ("boolean_distance", boolean_distance))}
    fig, ax = new_axes(ax, figsize=(6.0, 3.6))
    notes = []
    blue, red, green = "#0072B2", "#D55E00", "#009E73"
    for name, data, colour, ls in (("clusters", clusters, blue, "-"), ("rank P", rank, green, "-.")):
        if data is None:
            continue
        rows = series["clusters" if name == "clusters" else "rank"]
        notes.append(masked_note(rows).strip("()"))
        for r, row in enumerate(finite(rows)):
            ax.plot(t, row, color=colour, ls=ls, lw=1.0, alpha=0.8, label=name if r == 0 else None)
    left = " / ".join(n for n, d in (("clusters", clusters), ("rank P", rank)) if d is not None) or "count"
    ax.set_ylabel(left)
    from matplotlib.ticker import MaxNLocator

    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    if boolean_distance is not None:
        ax2 = ax.twinx()
        y, note = readable_scale(ax2, series["boolean_distance"])
        notes.append(note)
        for row in y:
            ax2.plot(t, row, color=red, ls="--", lw=1.0, alpha=0.8)
        ax2.set_ylabel("dist(P, Boolean)", color=red)
        ax2.tick_params(axis="y", colors=red)
        ax.plot([], [], color=red, ls="--", label="dist(P, Boolean) (right)")
        ax.right_axis = ax2
    else:
        ax.right_axis = None
    note = "; ".join(n for n in notes if n)
    label(ax, xlabel, left, with_note(title, note))
    legend(ax, max_inside=4)
    return ax


def levels(ts, s, *, ax=None, ylabel: str = r"$\varphi_1^*(z_i)$", title: str | None = None, xlabel: str = "$t$",
           labels=None, zero_line: bool = True):
    r"""Per-token levels :math:`\varphi_1^*(z_i(t))` (or any per-token series) against time.

    Thm 4.2: the maximum is non-increasing, the minimum non-decreasing, and the limits take at
    most three values a, 0, b.

    Args:
        ts: save times (T,).
        s: values (T,) or (T, n), one line per column.
        ax: Axes to draw into (default: a new figure).
        ylabel: the y label.
        title: the title.
        xlabel: the x label.
        labels: a legend entry per column (default: none).
        zero_line: draw the level 0 (dotted).

    Returns:
        The Axes.

    Example:
        >>> import numpy as np
        >>> import attnflow.plot as ap
        >>> t = np.linspace(0, 1, 5)
        >>> ax = ap.levels(t, np.outer(1 - t / 2, [1.0, -0.5, 0.2]))
        >>> ax.get_xlabel(), len(ax.lines)
        ('$t$', 4)
    """
    check = Inputs("levels")
    t = finite(check.array("ts", ts, ("T",)))
    raw = check.array("s", s, ("T",), ("T", "n"))
    y = finite(raw)
    y = y[:, None] if y.ndim == 1 else y
    if labels is not None:
        labels = check.sequence("labels", labels, "columns of s")
        if len(labels) != y.shape[1]:
            check.fail(f"labels has {len(labels)} entries, expected one per column of s ({y.shape[1]}).")
    note = masked_note(raw)
    fig, ax = new_axes(ax, figsize=(6.0, 3.6))
    k = y.shape[1]
    cols = colours(k) if (labels is not None or k <= 8) else ["#0072B2"] * k
    for j in range(k):
        ax.plot(t, y[:, j], lw=0.9, color=cols[j], alpha=0.9 if k <= 8 else 0.6,
                label=None if labels is None else str(labels[j]))
    if zero_line:
        ax.axhline(0.0, color="k", lw=0.5, ls=":")
    label(ax, xlabel, ylabel, with_note(title, note))
    legend(ax)
    return ax


def series_by_parameter(x, ys, labels=None, *, values=None, parameter: str | None = None, styles=None,
                        style_labels=None, ax=None, xlabel: str = "$t$", ylabel: str = "value",
                        title: str | None = None, log=None, marker: str | None = None):
    """Several curves y_k(x), one per setting, distinguishable however many there are.

    With numeric ``values`` (one per curve, e.g. beta) the curves are coloured by a colour map
    with a labelled colour bar; otherwise by :func:`colours` with a legend (outside the axes when
    long). ``styles`` (a line style per curve) with ``style_labels`` (style -> legend text) separate
    a second factor, e.g. causal vs full attention.

    Args:
        x: abscissa (N,).
        ys: a mapping label -> (N,) curve, or an array (K, N).
        labels: a label per curve when ``ys`` is an array.
        values: numeric parameter per curve (colour map and colour bar).
        parameter: the colour bar's label (e.g. "beta").
        styles: a matplotlib line style per curve.
        style_labels: legend text per line style.
        ax: Axes to draw into (default: a new figure).
        xlabel, ylabel, title: the labels.
        log: y scale: None chooses with :func:`readable_scale`, True / False forces it.
        marker: a marker for the points (e.g. "o" for a parameter sweep).

    Returns:
        The Axes.

    Example:
        >>> import numpy as np
        >>> import attnflow.plot as ap
        >>> t = np.linspace(0, 1, 4)
        >>> ax = ap.series_by_parameter(t, np.array([[3, 2, 1, 1], [3, 3, 2, 2]]), values=[1.0, 4.0],
        ...                             parameter="beta", ylabel="clusters")
        >>> ax.figure.axes[-1].get_ylabel()
        'beta'
    """
    check = Inputs("series_by_parameter")
    if isinstance(ys, dict):
        labels = list(ys) if labels is None else list(labels)
        ys = [ys[k] for k in ys]
    xs = finite(check.array("x", x, ("N",)))
    if not isinstance(ys, np.ndarray):
        for k, y in enumerate(check.sequence("ys", ys, "K")):
            check.array(f"ys[{k}]", y, ("N",))
    Y = finite(check.array("ys", ys, ("K", "N")))
    K = len(Y)
    for name, given in (("labels", labels), ("values", values), ("styles", styles)):
        if given is not None and len(check.sequence(name, given)) != K:
            check.fail(f"{name} has {len(list(given))} entries, expected one per curve ({K}).")
    fig, ax = new_axes(ax, figsize=(5.6, 3.6))
    Yd, note = readable_scale(ax, Y, log=log)
    if log is False:
        Yd = Y
    styles = list(styles) if styles is not None else ["-"] * K
    if values is not None:
        import matplotlib
        from matplotlib.colors import LogNorm, Normalize

        vals = np.asarray(values, float)
        positive = np.all(vals > 0) and vals.max() / vals.min() > 10
        norm = (LogNorm if positive else Normalize)(vmin=vals.min(), vmax=vals.max() if vals.max() > vals.min()
                                                    else vals.min() + 1)
        cmap = matplotlib.colormaps["viridis"]
        cols = [cmap(norm(v) * 0.92) for v in vals]
        for k in range(K):
            ax.plot(xs, Yd[k], color=cols[k], ls=styles[k], lw=1.2, marker=marker, ms=3)
        mappable = matplotlib.cm.ScalarMappable(norm=norm, cmap=cmap)
        cbar = colorbar(mappable, ax, parameter or "parameter")
        if len(vals) <= 12:
            cbar.set_ticks(vals)
            cbar.set_ticklabels([f"{v:g}" for v in vals])
        cbar.minorticks_off()
    else:
        cols = colours(K)
        for k in range(K):
            ax.plot(xs, Yd[k], color=cols[k], ls=styles[k], lw=1.2, marker=marker, ms=3,
                    label=None if labels is None or K == 1 else str(labels[k]))
    if style_labels:
        for style, text in style_labels.items():
            ax.plot([], [], color="0.3", ls=style, label=text)
    label(ax, xlabel, ylabel, with_note(title, note))
    legend(ax)
    return ax
