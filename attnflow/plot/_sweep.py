"""Figures of sweeps: fractions with confidence intervals, means with error bars, prediction
cross-tables and bar charts.

A table is a run folder (its ``table.csv``), a CSV or JSON file, a dict of columns or a list
of rows (dicts). Per-system tables (one row per system, a boolean column such as ``cond1``)
are aggregated by the functions; summary tables (one row per group, with ``<column>_ci`` or
``<column>_se`` beside the value) are drawn as given.
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import numpy as np

from ._checks import Inputs
from ._style import colorbar, colours, finite, label, legend, new_axes, plain_ticks

__all__ = ["bars_with_spread", "crosstab", "fraction_vs_d", "predicted_vs_observed", "read_table", "sweep_fractions",
           "sweep_means"]


def _parse(v: str):
    low = v.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    try:
        return float(v)
    except ValueError:
        return v


def read_table(table) -> dict[str, np.ndarray]:
    """A table as a dict of NumPy columns.

    Args:
        table: a run folder (reads ``table.csv``), a ``.csv`` or ``.json`` file (a list of rows,
            or a summary with ``"groups"``), a dict of columns or a list of rows.

    Returns:
        ``{column: array}``; a number column's missing entries (a JSON null: a number that was not finite) NaN.

    Example:
        >>> read_table([{"d": 2, "cond1": True}, {"d": 4, "cond1": False}])["d"].tolist()
        [2, 4]
        >>> read_table([{"slope": 0.5}, {"slope": None}])["slope"].tolist()
        [0.5, nan]
    """
    return _columns(Inputs("read_table"), table)


def _columns(check, table) -> dict[str, np.ndarray]:
    """:func:`read_table` with the checks of the function ``check`` names: columns of one length, at least one row."""
    cols = _read(check, table)
    if not cols:
        check.fail("table is empty (no columns), expected a table with at least one column and one row.")
    lengths = {k: len(v) if np.ndim(v) else 1 for k, v in cols.items()}
    for k, v in cols.items():
        check.bind("rows", lengths[k], f"table column {k!r}")
    return cols


def _read(check, table) -> dict[str, np.ndarray]:
    if isinstance(table, (str, os.PathLike)):
        path = Path(table)
        if path.is_dir():
            path = path / "table.csv"
        if path.suffix == ".json":
            data = json.loads(path.read_text())
            return _read(check, data["groups"] if isinstance(data, dict) and "groups" in data else data)
        with open(path, newline="") as f:
            rows = [{k: _parse(v) for k, v in r.items()} for r in csv.DictReader(f)]
        return _read(check, rows)
    if isinstance(table, dict):
        return {k: np.asarray(v) for k, v in table.items()}
    rows = check.sequence("table", table)
    if not all(isinstance(r, dict) for r in rows):
        check.fail("table is a sequence whose entries are not all dicts, expected a list of rows (dicts).")
    keys = list(dict.fromkeys(k for r in rows for k in r))
    out = {}
    for k in keys:
        vals = [r.get(k) for r in rows]
        if any(v is None for v in vals) and all(v is None or _number(v) for v in vals):
            vals = [np.nan if v is None else v for v in vals]  # a missing number (JSON's null): NaN
        try:
            out[k] = np.asarray(vals)
        except ValueError:  # ragged
            out[k] = np.asarray(vals, dtype=object)
    return out


def _number(v) -> bool:
    return isinstance(v, (int, float, np.number)) and not isinstance(v, (bool, np.bool_))


def _has(check, cols: dict, names) -> None:
    missing = [c for c in names if c not in cols]
    if missing:
        check.fail(f"table lacks the column(s) {missing}, expected them among its columns {sorted(cols)}.")


def _wilson(k: int, n: int, confidence: float) -> tuple[float, float]:
    from ..stats import wilson_interval

    return wilson_interval(k, n, confidence)


def _is_indicator(a: np.ndarray) -> bool:
    a = np.asarray(a)
    if a.dtype == bool:
        return True
    if a.dtype.kind in "iuf" and a.size:
        vals = a[np.isfinite(a.astype(float))]
        return vals.size > 0 and bool(np.all((vals == 0) | (vals == 1)))
    return False


def _groups(cols, by):
    if by is None or by not in cols:
        return [(None, np.ones(len(next(iter(cols.values()))), bool))]
    g = np.asarray(cols[by]).astype(str)
    return [(name, g == name) for name in dict.fromkeys(g.tolist())]


def _x_axis(ax, xs, log_x):
    xs = np.asarray(xs, float)
    xs = xs[np.isfinite(xs)]
    from matplotlib.ticker import FixedLocator, NullFormatter, NullLocator

    if log_x is None:
        uniq = np.unique(xs)
        ratios = uniq[1:] / uniq[:-1] if uniq.size > 1 and uniq.min() > 0 else np.ones(1)
        geometric = uniq.size >= 3 and ratios.min() > 1.5 and ratios.max() / ratios.min() < 1.5
        # more than two decades, or a geometric grid (2, 4, 8, ...) spanning more than one
        log_x = bool(uniq.size and uniq.min() > 0 and (uniq.max() / uniq.min() > 100
                                                       or (geometric and uniq.max() / uniq.min() >= 8)))
    if log_x:
        pow2 = bool(np.all(np.log2(xs) == np.round(np.log2(xs))))
        ax.set_xscale("log", base=2 if pow2 else 10)
        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_minor_formatter(NullFormatter())
    uniq = np.unique(xs)
    if 0 < uniq.size <= 12:
        ax.xaxis.set_major_locator(FixedLocator(uniq))
        ax.set_xticks(uniq, [f"{v:g}" for v in uniq])
    else:
        plain_ticks(ax.xaxis, log_too=True)


def _y_axis(ax, lo, hi, *, log_y=None):
    from matplotlib.ticker import NullFormatter, NullLocator

    v = np.concatenate([np.ravel(lo), np.ravel(hi)]).astype(float)
    v = v[np.isfinite(v)]
    if log_y is None:
        log_y = bool(v.size and v.min() > 0 and v.max() / v.min() > 100)
    if log_y:
        ax.set_yscale("log")
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.yaxis.set_minor_locator(NullLocator())
    else:
        plain_ticks(ax.yaxis)


def _reference(ax, value, name, *, horizontal=True):
    """A reference line, with the limits extended so that it lies inside them."""
    if value is None:
        return
    if horizontal:
        ax.axhline(value, color="0.35", lw=0.9, ls=":", label=name, zorder=1)
        lo, hi = ax.get_ylim()
    else:
        ax.axvline(value, color="0.35", lw=0.9, ls=":", label=name, zorder=1)
        lo, hi = ax.get_xlim()
    if not lo < value < hi:
        pad = 0.05 * (max(hi, value) - min(lo, value) or 1.0)
        lo, hi = min(lo, value - pad), max(hi, value + pad)
        if ax.get_yscale() == "log" if horizontal else ax.get_xscale() == "log":
            lo = min(ax.get_ylim()[0] if horizontal else ax.get_xlim()[0], value / 1.2)
            hi = max(ax.get_ylim()[1] if horizontal else ax.get_xlim()[1], value * 1.2)
        (ax.set_ylim if horizontal else ax.set_xlim)(lo, hi)


def _note(ax, title, notes):
    notes = [n for n in notes if n]
    full = "\n".join([t for t in (title,) if t] + (["; ".join(notes)] if notes else []))
    if full:
        ax.set_title(full, fontsize="medium")


def _aggregate(cols, x, y, sel, confidence):
    """Per x value: (x, fraction, lo, hi) of an indicator column over the rows ``sel``."""
    xs = np.asarray(cols[x], float)[sel]
    ys = np.asarray(cols[y], float)[sel]
    out = []
    for xv in np.unique(xs[np.isfinite(xs)]):
        v = ys[(xs == xv) & np.isfinite(ys)]
        if not v.size:
            out.append((xv, np.nan, np.nan, np.nan))
            continue
        k, n = int(v.sum()), int(v.size)
        lo, hi = _wilson(k, n, confidence)
        out.append((xv, k / n, lo, hi))
    return np.array(out, float).reshape(-1, 4)


def sweep_fractions(table, *, x: str = "d", y="cond1", by: str | None = "ensemble", labels: dict | None = None,
                    confidence: float = 0.95, reference: float | None = None, reference_label: str | None = None,
                    band: bool = False, log_x: bool | None = None, ylabel: str = "fraction of systems",
                    xlabel: str | None = None, ax=None, title: str | None = None):
    """Fractions with their confidence intervals against ``x``, one series per group and column.

    A boolean (0 / 1) column ``y`` of a per-system table is aggregated: fraction k / n and
    Wilson interval at ``confidence``. A column of fractions is drawn with its ``<y>_ci``
    column (pairs lo, hi) when there is one. Points without a value are left out and counted
    in the title.

    Args:
        table: see :func:`read_table`.
        x: column on the x axis.
        y: column, or a list of columns, of indicators or fractions.
        by: column whose values split the rows into series (ignored when absent).
        labels: ``{column: legend label}``.
        confidence: level of the Wilson intervals of aggregated columns.
        reference: a y value drawn as a dotted line (kept inside the y range).
        reference_label: its legend label.
        band: shaded bands instead of error bars.
        log_x: log x axis (default: when ``x`` spans more than two decades).
        ylabel: y-axis label; xlabel: x-axis label (default ``x``).
        ax: Axes to draw on; title: panel title.

    Returns:
        The Axes.

    Example:
        >>> import numpy as np
        >>> import attnflow.plot as ap
        >>> rng = np.random.default_rng(0)
        >>> t = {"d": np.repeat([2, 4, 8], 20), "cond1": rng.random(60) < 0.5}
        >>> ax = ap.sweep_fractions(t, reference=0.14)
        >>> bool(ax.get_ylim()[0] <= 0.14 <= ax.get_ylim()[1])
        True
    """
    check = Inputs("sweep_fractions")
    cols = _columns(check, table)
    ys = [y] if isinstance(y, str) else check.sequence("y", y)
    _has(check, cols, [x, *ys])
    fig, ax = new_axes(ax)
    labels = labels or {}
    series = [(g, sel, col) for g, sel in _groups(cols, by) for col in ys]
    cs = colours(len(series))
    markers = "os^Dvx*P"
    missing = 0
    lows, highs = [], []
    for i, (g, sel, col) in enumerate(series):
        if _is_indicator(cols[col]):
            a = _aggregate(cols, x, col, sel, confidence)
            xv, f, lo, hi = a.T
        else:
            xv = np.asarray(cols[x], float)[sel]
            f = finite(cols[col])[sel].astype(float)
            ci = cols.get(col + "_ci")
            if ci is not None:
                ci = np.array([(np.nan, np.nan) if c is None else c for c in ci[sel]], float).reshape(-1, 2)
                lo, hi = finite(ci[:, 0]), finite(ci[:, 1])
            else:
                lo = hi = f
        ok = np.isfinite(f) & np.isfinite(xv)
        missing += int((~ok).sum())
        order = np.argsort(xv[ok])
        xv, f, lo, hi = (np.asarray(a)[ok][order] for a in (xv, f, lo, hi))
        name = labels.get(col, col)
        lab = name if g is None else f"{g}: {name}"
        if band:
            ax.plot(xv, f, marker=markers[i % len(markers)], color=cs[i], label=lab, ms=4)
            ax.fill_between(xv, lo, hi, color=cs[i], alpha=0.2, lw=0)
        else:
            err = [np.maximum(f - np.where(np.isfinite(lo), lo, f), 0), np.maximum(np.where(np.isfinite(hi), hi, f) - f, 0)]
            ax.errorbar(xv, f, yerr=err, marker=markers[i % len(markers)], color=cs[i], capsize=3, ms=4, label=lab,
                        ls="-" if i % 2 == 0 else "--")
        lows.append(lo)
        highs.append(hi)
    _x_axis(ax, cols[x], log_x)
    _y_axis(ax, np.concatenate(lows) if lows else [], np.concatenate(highs) if highs else [], log_y=False)
    lo, hi = ax.get_ylim()
    ax.set_ylim(max(lo, -0.02), min(hi, 1.02))
    _reference(ax, reference, reference_label)
    label(ax, xlabel or x, ylabel)
    ci_note = f"bars: {100 * confidence:.0f}% Wilson intervals" if any(_is_indicator(cols[c]) for c in ys) else None
    _note(ax, title, [ci_note, f"{missing} point(s) without a finite value not shown" if missing else None])
    legend(ax)
    return ax


def sweep_means(table, *, x: str = "d", y: str = "mean_num_real", se: str | None = "mean_num_real_se",
                by: str | None = "ensemble", z: float = 1.96, curve=None, log_x: bool | None = None,
                log_y: bool | None = None, ylabel: str | None = None, xlabel: str | None = None, ax=None,
                title: str | None = None):
    """Means with ``z`` standard-error bars against ``x``, one series per group, and an
    optional reference curve.

    A per-system table (several rows per x value) is aggregated (mean, standard error); a
    summary table is drawn with its ``se`` column.

    Args:
        table: see :func:`read_table`.
        x, y: columns on the axes; se: standard-error column of a summary table.
        by: column splitting the rows into series.
        z: half-width of the bars in standard errors (1.96: 95%).
        curve: ``(x_values, y_values, label)`` drawn as a black line.
        log_x, log_y: log axes (default: when the values span more than two decades).
        ylabel, xlabel: axis labels (default: the column names).
        ax: Axes to draw on; title: panel title.

    Returns:
        The Axes.

    Example:
        >>> import numpy as np
        >>> import attnflow.plot as ap
        >>> rows = [{"d": d, "mean_num_real": np.sqrt(d), "mean_num_real_se": 0.1} for d in (2, 4, 8)]
        >>> ax = ap.sweep_means(rows, curve=([2, 8], [1.5, 2.8], "asymptotic"))
        >>> ax.get_yscale()
        'linear'
    """
    from ..stats import standard_error

    check = Inputs("sweep_means")
    cols = _columns(check, table)
    _has(check, cols, [x, y])
    if curve is not None:
        if not (isinstance(curve, (tuple, list)) and len(curve) == 3):
            check.fail(f"curve must be a tuple (x_values, y_values, label), got {type(curve).__name__}.")
        check.array("curve's x_values", curve[0], ("curve",))
        check.array("curve's y_values", curve[1], ("curve",))
    fig, ax = new_axes(ax)
    groups = _groups(cols, by)
    cs = colours(len(groups))
    missing = 0
    lows, highs = [], []
    for i, (g, sel) in enumerate(groups):
        xs = np.asarray(cols[x], float)[sel]
        vs = finite(cols[y])[sel]
        if len(np.unique(xs)) < len(xs):
            pts = []
            for xv in np.unique(xs[np.isfinite(xs)]):
                v = vs[(xs == xv) & np.isfinite(vs)]
                missing += int(np.sum((xs == xv) & ~np.isfinite(vs)))
                pts.append((xv, v.mean() if v.size else np.nan, standard_error(v)))
            xs, m, s = np.array(pts, float).reshape(-1, 3).T
        else:
            m = vs
            s = finite(cols[se])[sel] if se and se in cols else np.full(len(xs), np.nan)
            missing += int((~np.isfinite(m)).sum())
        ok = np.isfinite(m) & np.isfinite(xs)
        order = np.argsort(xs[ok])
        xs, m, s = xs[ok][order], m[ok][order], np.nan_to_num(s[ok][order], nan=0.0)
        ax.errorbar(xs, m, yerr=z * s, fmt="o", ms=4, capsize=3, color=cs[i],
                    label="measured" if g is None else f"{g}: measured")
        lows.append(m - z * s)
        highs.append(m + z * s)
    if curve is not None:
        cx, cy, cl = curve
        ax.plot(cx, cy, "k-", lw=1, label=cl)
        lows.append(np.asarray(cy, float))
        highs.append(np.asarray(cy, float))
    _x_axis(ax, cols[x], log_x)
    _y_axis(ax, np.concatenate(lows) if lows else [], np.concatenate(highs) if highs else [], log_y=log_y)
    label(ax, xlabel or x, ylabel or y)
    _note(ax, title, [f"bars: +/- {z:g} standard errors",
                      f"{missing} value(s) without a finite value not shown" if missing else None])
    legend(ax)
    return ax


def fraction_vs_d(summary: dict, *, fig=None, reference: float | None = 0.14):
    """The spectral sweep's figure: how often Definition 4.1(1) holds, against d (largest
    modulus vs largest real part), and the mean number of real eigenvalues.

    Args:
        summary: the spectral sweep's summary (``"groups"``: one row per ensemble and d) or
            any table with those columns.
        fig: Figure to draw in (default: a new one).
        reference: the paper's fraction at d = 128, drawn as a reference line (None: none).

    Returns:
        The Figure.

    Example:
        >>> import attnflow.plot as ap
        >>> g = [{"ensemble": "ginibre", "d": d, "frac_cond1": f, "frac_cond1_ci": [f - 0.05, f + 0.05],
        ...       "frac_cond1_real_part": f / 2, "frac_cond1_real_part_ci": [f / 2 - 0.05, f / 2 + 0.05],
        ...       "mean_num_real": 1 + d ** 0.5, "mean_num_real_se": 0.1} for d, f in ((2, 0.7), (8, 0.4))]
        >>> len(ap.fraction_vs_d({"groups": g}).axes)
        2
    """
    import matplotlib.pyplot as plt

    check = Inputs("fraction_vs_d")
    groups = summary["groups"] if isinstance(summary, dict) and "groups" in summary else summary
    cols = _columns(check, groups)
    _has(check, cols, ["d", "frac_cond1", "frac_cond1_real_part", "mean_num_real"])
    if fig is None:
        fig = plt.figure(figsize=(11.5, 4.4), layout="constrained")
    axes = fig.subplots(1, 2, squeeze=True)
    sweep_fractions(cols, y=["frac_cond1", "frac_cond1_real_part"],
                    labels={"frac_cond1": "largest modulus (Def 4.1)", "frac_cond1_real_part": "largest real part"},
                    reference=reference, reference_label=None if reference is None else f"paper: {reference:g} at d = 128",
                    xlabel="dimension d",
                    ylabel="fraction of V", ax=axes[0], title="top eigenvalue real, positive, simple" + (
                        f"\nbars: {100 * summary['confidence']:.0f}% Wilson intervals"
                        if isinstance(summary, dict) and "confidence" in summary else ""))
    curve = None
    if "ensemble" in cols and np.any(cols["ensemble"].astype(str) == "ginibre"):
        ds = np.asarray(cols["d"], float)[cols["ensemble"].astype(str) == "ginibre"]
        dd = np.geomspace(ds.min(), ds.max(), 100)
        curve = (dd, np.sqrt(2 * dd / np.pi) + 0.5, r"Ginibre: $\sqrt{2d/\pi} + 1/2$")
    sweep_means(cols, curve=curve, ylabel="E[number of real eigenvalues]", xlabel="dimension d", ax=axes[1],
                title="real eigenvalues of V")
    return fig


def crosstab(counts, *, rows, cols, ax=None, normalise: str | None = "row", log_color: bool = False,
             xlabel: str = "observed", ylabel: str = "predicted", title: str | None = None):
    """A table of counts as a heat map: colour = count (or share of its row / column), the
    count written in every non-empty cell, and a labelled colour bar.

    Args:
        counts: ``(len(rows), len(cols))`` counts (non-finite cells are masked and noted).
        rows, cols: the category names.
        ax: Axes to draw on.
        normalise: ``"row"``, ``"column"`` or None (raw counts).
        log_color: logarithmic colour scale (raw counts only).
        xlabel, ylabel, title: labels.

    Returns:
        The Axes.

    Example:
        >>> import attnflow.plot as ap
        >>> ax = ap.crosstab([[3, 1], [0, 5]], rows=["a", "b"], cols=["x", "y"])
        >>> ax.get_ylabel()
        'predicted'
    """
    from matplotlib.colors import LogNorm, Normalize

    check = Inputs("crosstab")
    rows = check.sequence("rows", rows, "rows")
    cols = check.sequence("cols", cols, "cols")
    M = finite(check.array("counts", counts, ("rows", "cols")))
    if normalise not in ("row", "column", None):
        check.fail(f'normalise is {normalise!r}, expected "row", "column" or None.')
    fig, ax = new_axes(ax, figsize=(1.2 * len(cols) + 2.5, 0.5 * len(rows) + 2.2))
    bad = ~np.isfinite(M)
    if normalise == "row":
        C = M / np.maximum(np.nansum(M, 1, keepdims=True), 1)
        what = "share of the row"
    elif normalise == "column":
        C = M / np.maximum(np.nansum(M, 0, keepdims=True), 1)
        what = "share of the column"
    else:
        C = M
        what = "count"
    norm = None
    if log_color and normalise is None:
        pos = C[np.isfinite(C) & (C > 0)]
        norm = LogNorm(vmin=pos.min() if pos.size else 1, vmax=pos.max() if pos.size else 10)
        C = np.where(C > 0, C, np.nan)
    elif normalise:
        norm = Normalize(0, 1)
    ax.set_facecolor("0.9")
    im = ax.imshow(np.ma.masked_invalid(C), cmap="Blues", norm=norm, aspect="auto")
    for i in range(M.shape[0]):
        for j in range(M.shape[1]):
            if np.isfinite(M[i, j]) and M[i, j]:
                val = C[i, j] if np.isfinite(C[i, j]) else 0
                ax.text(j, i, f"{int(M[i, j])}", ha="center", va="center", fontsize=8,
                        color="white" if norm is not None and norm(val) > 0.6 else "black")
    ax.set_xticks(range(len(cols)), cols, rotation=30, ha="right", fontsize=8)
    ax.set_yticks(range(len(rows)), rows, fontsize=8)
    colorbar(im, ax, what)
    label(ax, xlabel, ylabel)
    _note(ax, title, [f"{int(bad.sum())} non-finite cell(s) masked (grey)" if bad.any() else None])
    return ax


def bars_with_spread(values, *, labels, lo=None, hi=None, series=None, reference: float | None = None,
                     reference_label: str | None = None, horizontal: bool = False, value_label: str = "value",
                     category_label: str = "", limits: tuple[float, float] | None = None, ax=None,
                     title: str | None = None):
    """Bars (one group per label, one bar per series) with optional spread whiskers ``lo``/``hi``.

    Missing values (None, NaN, inf) get no bar: an "n/a" mark sits at their place and the
    title counts them. With several series the legend goes outside the axes, never over bars.

    Args:
        values: ``(k,)`` or ``(s, k)`` values (s series, k labels).
        labels: the k category names.
        lo, hi: lower / upper ends of the whiskers, shaped like ``values``.
        series: the s series names (legend).
        reference: a value drawn as a dotted line across the bars (kept inside the range).
        reference_label: its legend label.
        horizontal: horizontal bars (long labels).
        value_label: label of the value axis; category_label: of the category axis.
        limits: value-axis limits (the reference line extends them if needed).
        ax: Axes to draw on; title: panel title.

    Returns:
        The Axes.

    Example:
        >>> import attnflow.plot as ap
        >>> ax = ap.bars_with_spread([1.0, None, 3.0], labels=["a", "b", "c"], value_label="rate (1/s)")
        >>> "1 bar(s) without a value" in ax.get_title()
        True
    """
    check = Inputs("bars_with_spread")
    labels = check.sequence("labels", labels, "labels")

    def _none_to_nan(a):
        a = np.asarray(a, dtype=object)
        return np.where(np.equal(a, None), np.nan, a) if a.size else a

    raw = check.array("values", _none_to_nan(values), ("labels",), ("series", "labels"))
    V = finite(np.atleast_2d(raw))
    s, k = V.shape
    check.sizes["series"] = s
    shape = ("labels",) if raw.ndim == 1 else ("series", "labels")
    lo = None if lo is None else check.array("lo", _none_to_nan(lo), shape)
    hi = None if hi is None else check.array("hi", _none_to_nan(hi), shape)
    if series is not None:
        series = check.sequence("series", series, "series")
    size = (6.5, max(2.5, 0.28 * k * max(1, s) / 1.5 + 1.5)) if horizontal else (max(5.0, 0.45 * k + 1.5), 4.2)
    fig, ax = new_axes(ax, figsize=size)
    names = list(series) if series is not None else [None] * s
    cs = colours(s)
    width = 0.8 / s
    pos = np.arange(k, dtype=float)
    bar = ax.barh if horizontal else ax.bar
    L = None if lo is None else finite(np.atleast_2d(np.asarray(lo, float)))
    H = None if hi is None else finite(np.atleast_2d(np.asarray(hi, float)))
    for i in range(s):
        p = pos - 0.4 + width * (i + 0.5)
        v = V[i]
        ok = np.isfinite(v)
        err = None
        if L is not None or H is not None:
            lo_i = L[i] if L is not None else v
            hi_i = H[i] if H is not None else v
            err = np.vstack([np.nan_to_num(np.maximum(v - lo_i, 0)), np.nan_to_num(np.maximum(hi_i - v, 0))])[:, ok]
        kw = {"xerr" if horizontal else "yerr": err, "capsize": 2} if err is not None else {}
        bar(p[ok], v[ok], width * 0.95, color=cs[i], label=names[i], **kw)
        for q in p[~ok]:
            if horizontal:
                ax.text(0, q, " n/a", va="center", ha="left", fontsize=6, color="0.3")
            else:
                ax.text(q, 0, "n/a", va="bottom", ha="center", fontsize=6, color="0.3", rotation=90)
    if horizontal:
        ax.set_yticks(pos, labels, fontsize=7 if k > 8 else 8)
        ax.invert_yaxis()
        if limits:
            ax.set_xlim(*limits)
        label(ax, value_label, category_label or "")
    else:
        ax.set_xticks(pos, labels, rotation=90 if k > 6 or max(map(len, map(str, labels))) > 8 else 0,
                      fontsize=6 if k > 12 else 8)
        if limits:
            ax.set_ylim(*limits)
        label(ax, category_label or "", value_label)
    plain_ticks(ax.xaxis if horizontal else ax.yaxis, log_too=True)
    _reference(ax, reference, reference_label, horizontal=not horizontal)
    n_missing = int((~np.isfinite(V)).sum())
    _note(ax, title, [f"{n_missing} bar(s) without a value (n/a)" if n_missing else None])
    if any(n for n in names) or reference_label:
        legend(ax, max_inside=0)
    return ax


def predicted_vs_observed(summary: dict, *, fig=None, geometries=None, observed=None):
    """The dynamics sweep's figure: predicted vs observed geometry (counts, row-normalised
    colour) and, per group, the fraction of good triples and of agreement.

    Args:
        summary: the dynamics sweep's summary (``crosstab_predicted_observed``, ``groups``).
        fig: Figure to draw in (default: a new one).
        geometries, observed: the category orders (default: as they appear in the summary).

    Returns:
        The Figure.

    Example:
        >>> import attnflow.plot as ap
        >>> s = {"crosstab_predicted_observed": {"points": {"points": 4, "none": 1}},
        ...      "groups": [{"v_ensemble": "ginibre", "qk_ensemble": "pd", "d": 2, "frac_good": 0.5,
        ...                  "frac_consistent_where_predicted": None}]}
        >>> len(ap.predicted_vs_observed(s).axes)
        3
    """
    import matplotlib.pyplot as plt

    check = Inputs("predicted_vs_observed")
    check.mapping("summary", summary, ("crosstab_predicted_observed", "groups"))
    ct = check.mapping("summary['crosstab_predicted_observed']", summary["crosstab_predicted_observed"], ())
    if not ct:
        check.fail("summary['crosstab_predicted_observed'] is empty, expected counts of at least one prediction.")
    groups = check.fields("summary['groups']", check.sequence("summary['groups']", summary["groups"]),
                          ("v_ensemble", "qk_ensemble", "d", "frac_good", "frac_consistent_where_predicted"))
    preds = [p for p in (geometries or list(ct)) if p in ct]
    obs = list(observed) if observed is not None else list(dict.fromkeys(o for p in preds for o in ct[p]))
    if fig is None:
        fig = plt.figure(figsize=(14, max(4.5, 0.3 * len(groups) + 2.5)), layout="constrained")
    ax0, ax1 = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.0, 1.2]})
    M = np.array([[ct[p].get(o, 0) for o in obs] for p in preds], float).reshape(len(preds), len(obs))
    crosstab(M, rows=preds, cols=obs, ax=ax0, title="predicted vs observed (colour: share of the row; counts)")
    labels = [f"{r['v_ensemble']}/{r['qk_ensemble']}/d={r['d']}" for r in groups]
    vals = [[r["frac_good"] for r in groups], [r["frac_consistent_where_predicted"] for r in groups]]
    bars_with_spread(vals, labels=labels, series=["good triple (Def 4.1)",
                                                  "observed = predicted (where a prediction exists)"],
                     horizontal=True, value_label="fraction of systems", category_label="V / Q^T K ensemble, d",
                     limits=(0, 1), ax=ax1)
    return fig
