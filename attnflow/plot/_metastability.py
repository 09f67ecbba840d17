"""Metastability figures: the energy staircase of single systems, and plateau lifetimes against beta."""

from __future__ import annotations

import numpy as np

from ._checks import Inputs
from ._phase import BETA_LABEL
from ._style import colours, finite, label, legend, log_ticks, new_axes


def staircase(t, energy, *, clusters=None, ax=None, names=None, title: str | None = None):
    r"""Interaction energy against log t for a few systems (rows of ``energy``), the staircase of metastability.

    Args:
        t: (K,) checkpoint times (t = 0 is left out of the log axis).
        energy: (S, K) or (K,) energies of S systems.
        clusters: optional (S, K) cluster counts, drawn as steps on a right-hand axis.
        ax: Axes to draw on (default: a new figure).
        names: legend labels of the systems (default "system s").
        title: panel title.

    Returns:
        The Axes.

    Example:
        >>> import numpy as np
        >>> import attnflow.plot as ap
        >>> t = np.linspace(0, 100, 50)
        >>> e = 1 + np.cumsum(np.random.default_rng(0).random((2, 50)) > 0.9, axis=1)
        >>> ax = ap.staircase(t, e, clusters=4 - e)
        >>> ax.get_xscale(), ax.get_ylabel()
        ('log', 'interaction energy $E_\\beta$')
    """
    check = Inputs("staircase")
    tt = check.array("t", t, ("K",))
    E = np.atleast_2d(finite(check.array("energy", energy, ("K",), ("S", "K"))))
    check.sizes["S"] = E.shape[0]
    C = None if clusters is None else np.atleast_2d(finite(check.array("clusters", clusters, ("K",), ("S", "K"))))
    if C is not None and C.shape[0] != E.shape[0]:
        check.fail(f"clusters has {C.shape[0]} system(s), expected one row per system of energy ({E.shape[0]}).")
    names = check.sequence("names", names, "S") if names is not None else [f"system {s}" for s in range(E.shape[0])]
    keep = tt > 0
    fig, ax = new_axes(ax, figsize=(6.0, 3.8))
    cs = colours(E.shape[0])
    missing = 0
    for s in range(E.shape[0]):
        ok = keep & np.isfinite(E[s])
        missing += int((keep & ~np.isfinite(E[s])).sum())
        ax.plot(tt[ok], E[s, ok], color=cs[s], lw=1.4, label=names[s])
    ax.set_xscale("log")
    log_ticks(ax.xaxis, minor_decades=1.2)
    if C is not None:
        right = ax.twinx()
        for s in range(C.shape[0]):
            ok = keep & np.isfinite(C[s])
            right.step(tt[ok], C[s, ok], where="post", color=cs[s], lw=0.8, ls=":", alpha=0.9)
        right.set_ylabel("clusters (dotted)")
        right.yaxis.get_major_locator().set_params(integer=True)
    note = f"{missing} non-finite point(s) not shown" if missing else None
    label(ax, "time $t$ (log scale)", r"interaction energy $E_\beta$", "\n".join(x for x in (title, note) if x))
    legend(ax)  # with the clusters' twin axis: below the axes, never over either one's data
    return ax


def lifetime_vs_beta(beta, median, *, q25=None, q75=None, censored=None, fit=None, by_count=None, ax=None,
                     title: str | None = None):
    r"""Median lifetime of the first plateau against beta (log scale), quartile bars, censored cells open.

    Args:
        beta: (B,) inverse temperatures.
        median, q25, q75: (B,) lifetimes (NaN where a cell has no plateau: left out, counted in the title).
        censored: (B,) whether a cell's median is a lower bound (drawn as open markers).
        fit: ``{"slope", "intercept", ...}`` of log T = a + b beta (:func:`attnflow.phase.lifetime_slope`),
            drawn as a line when its slope is not None (over its ``betas`` when given).
        by_count: optional list of ``{"count", "median", "median_censored", "slope", "intercept", ...}``: the
            medians (B,) and fit of the systems whose first plateau has ``count`` clusters, drawn in their own
            colour (small markers, dotted fit line).
        ax: Axes to draw on; title: panel title.

    Returns:
        The Axes.

    Example:
        >>> import numpy as np
        >>> import attnflow.plot as ap
        >>> b = np.array([1.0, 2.0, 3.0])
        >>> two = {"count": 2, "median": np.exp(2 * b), "median_censored": [False] * 3, "slope": 2.0, "intercept": 0.0}
        >>> ax = ap.lifetime_vs_beta(b, np.exp(b), fit={"slope": 1.0, "intercept": 0.0}, by_count=[two])
        >>> ax.get_yscale(), ax.get_xlabel(), len(ax.lines)
        ('log', 'inverse temperature $\\beta$', 4)
    """
    check = Inputs("lifetime_vs_beta")
    b = check.array("beta", beta, ("B",))
    med = finite(check.array("median", median, ("B",)))
    q25 = None if q25 is None else check.array("q25", q25, ("B",))
    q75 = None if q75 is None else check.array("q75", q75, ("B",))
    cen = np.zeros(b.shape, bool) if censored is None else check.array("censored", censored, ("B",), dtype=bool)
    by_count = check.fields("by_count", check.sequence("by_count", by_count or [], empty=True),
                            ("count", "median", "slope", "intercept"))
    for k, part in enumerate(by_count):
        check.array(f"by_count[{k}]['median']", part["median"], ("B",))
    if fit and fit.get("slope") is not None:
        check.mapping("fit", fit, ("slope", "intercept"))
    ok = np.isfinite(med) & (med > 0)
    fig, ax = new_axes(ax, figsize=(8.2, 4.4) if by_count else (5.0, 3.8))
    shown = [med[ok]]
    if q25 is not None and q75 is not None:
        lo, hi = finite(q25), finite(q75)
        okb = ok & np.isfinite(lo) & np.isfinite(hi)
        ax.errorbar(b[okb], med[okb], yerr=[med[okb] - lo[okb], hi[okb] - med[okb]], fmt="none", ecolor="0.6",
                    lw=1, capsize=2)
    c = colours(2)
    ax.plot(b[ok & ~cen], med[ok & ~cen], "o", color=c[0], label="median lifetime")
    if (ok & cen).any():
        ax.plot(b[ok & cen], med[ok & cen], "o", mfc="none", color=c[0], label="median censored (lower bound)")
    for k, part in enumerate(by_count or []):
        colour = colours(len(by_count) + 2)[k + 2]
        med_c = finite(part["median"])
        cen_c = np.asarray(part.get("median_censored", np.zeros(b.shape, bool)), bool)
        ok_c = np.isfinite(med_c) & (med_c > 0)
        shown.append(med_c[ok_c])
        ax.plot(b[ok_c & ~cen_c], med_c[ok_c & ~cen_c], "s", ms=4, color=colour,
                label=rf"{part['count']} clusters: $e^{{{part['slope']:.2f}\,\beta}}$")
        if (ok_c & cen_c).any():
            ax.plot(b[ok_c & cen_c], med_c[ok_c & cen_c], "s", ms=4, mfc="none", color=colour)
        xs = np.asarray(part.get("betas") or b[ok_c], float)
        if xs.size:
            xs = np.linspace(xs.min(), xs.max(), 50)
            ax.plot(xs, np.exp(part["intercept"] + part["slope"] * xs), color=colour, ls=":")
    if fit and fit.get("slope") is not None:
        used = np.asarray(fit.get("betas") or b, float)
        xs = np.linspace(used.min(), used.max(), 50)
        interval = ""
        if fit.get("slope_lo") is not None:
            interval = f" [{fit['slope_lo']:.2f}, {fit['slope_hi']:.2f}]"
        ax.plot(xs, np.exp(fit["intercept"] + fit["slope"] * xs), color=c[1], ls="--",
                label=rf"$\log T$ = {fit['intercept']:.2f} + {fit['slope']:.2f}{interval} $\beta$")
    ax.set_yscale("log")
    values = np.concatenate(shown)
    if values.size:  # the fitted lines may run far beyond the data (extrapolated past censored cells)
        ax.set_ylim(values.min() / 3, values.max() * 3)
    log_ticks(ax.yaxis)
    missing = int((~ok).sum())
    note = f"{missing} cell(s) without a plateau not shown" if missing else None
    label(ax, BETA_LABEL, "first plateau lifetime (time $t$)", "\n".join(x for x in (title, note) if x))
    legend(ax, max_inside=3)
    return ax
