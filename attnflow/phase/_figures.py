"""The phase job's figures, drawn from plain arrays (NumPy and :mod:`attnflow.plot` only, no JAX), so that
the job can hand them to figure worker processes (:class:`attnflow.plot._workers.FigureWorkers`) while it
writes its files. Each function saves one figure and returns the names of the files it wrote.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

#: the panels of the first figure: (observable, colour-bar label, log colour scale)
MAPS = (("pairs_clustered", "fraction of pairs clustered", False),
        ("clusters", "clusters (mean)", True),
        ("energy", r"$2\beta e^{-\beta} E_\beta$ (mean)", False),
        ("span", "dimension of the span (mean)", False))
#: the panels' titles, where they say more than the colour-bar label
TITLES = {"energy": r"energy $E_\beta$ over its one-cluster value $e^\beta / 2\beta$"}


def theory_label(label: str, n: int, d: int) -> str:
    """The legend ``label`` of the equiangular model's line, qualified: exact where an equiangular cloud of n
    tokens exists on :math:`S^{d-1}` (n <= d: a regular simplex or less) and stays one under the flow, a
    heuristic otherwise (the line then reads the cloud's mean inner product as if it were equiangular).

    Example:
        >>> from attnflow.phase._figures import theory_label
        >>> theory_label("equiangular model reaches 0.999", 32, 2)
        'equiangular model reaches 0.999: heuristic (n > d)'
        >>> theory_label("equiangular model reaches 0.9", 3, 3)
        'equiangular model reaches 0.9: exact (n <= d)'
    """
    return f"{label}: " + ("exact (n <= d)" if n <= d else "heuristic (n > d)")


def heat_maps(path: Path, grids: dict, beta, t, *, log_t: bool, overlay, title: str, n: int | None = None,
              d: int | None = None) -> list[str]:
    r"""The 2 x 2 panels of :data:`MAPS` over (beta, t) (:func:`attnflow.plot.phase_diagram`: heat maps, or
    curves per beta on a coarse beta grid): ``grids[name]`` (len(beta), len(t)) cell means; the energy drawn
    relative to its largest value :math:`e^\beta / (2\beta)` (comparable across beta); ``overlay``:
    ``(t, beta, threshold)`` of the equiangular model's line on the first panel, or None, labelled
    exact or heuristic from the group's ``n`` and ``d`` (:func:`theory_label`), in a legend below the panels.

    Example:
        >>> import tempfile, pathlib
        >>> import numpy as np
        >>> from attnflow.phase._figures import MAPS, heat_maps
        >>> grids = {name: np.random.default_rng(0).uniform(1, 2, (3, 4)) for name, _, _ in MAPS}
        >>> heat_maps(pathlib.Path(tempfile.mkdtemp()) / "p.png", grids, [1.0, 2.0, 3.0], [0, 1, 2, 3],
        ...           log_t=False, overlay=([1.5, 2.5], [1.0, 2.0], "theory"), title="a phase diagram", n=8, d=2)
        ['p.png']
    """
    from .. import plot as ap
    from ..errors import InputError

    line = None
    if overlay is not None:
        if n is None or d is None:
            raise InputError("heat_maps: overlay was given without the group's n and d, expected both, which "
                             "say whether the equiangular line is exact (n <= d) or a heuristic (n > d).")
        line = (overlay[0], overlay[1], theory_label(str(overlay[2]), int(n), int(d)))
    fig, axes = ap.new_figure(2, 2, panel=(5.2, 4.0))
    for ax, (name, label, log) in zip(axes.ravel(), MAPS):
        values = np.asarray(grids[name], float)
        if name == "energy":
            b = np.asarray(beta, float)[:, None]
            values = values * 2 * b * np.exp(-b)
        ap.phase_diagram(values, beta=beta, t=t, ax=ax, log_color=log, log_t=log_t, label=label,
                         overlay=line if name == "pairs_clustered" else None, title=TITLES.get(name, label),
                         show_legend=False)
    # one legend for the figure, under all the panels: the betas of the curves (coarse grids), the overlay
    handles, labels = axes[0, 0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="outside lower center", ncol=min(len(handles), 5), fontsize="small",
                   frameon=False)
    fig.suptitle(title)
    return ap.save(fig, path, close=True)


def curves(path: Path, frac, lo, hi, beta, t, at, title: str) -> list[str]:
    """The fraction of clustered pairs against beta at the times ``at``, with its interval [lo, hi].

    Example:
        >>> import tempfile, pathlib
        >>> import numpy as np
        >>> from attnflow.phase._figures import curves
        >>> f = np.linspace(0, 1, 12).reshape(3, 4)
        >>> curves(pathlib.Path(tempfile.mkdtemp()) / "c.png", f, f - 0.1, f + 0.1, [1.0, 2.0, 3.0],
        ...        [0.0, 1.0, 2.0, 3.0], [1.0, 3.0], "curves")
        ['c.png']
    """
    from .. import plot as ap

    ax = ap.curves_at_fixed_t(frac, beta=beta, t=t, at=at, lo=lo, hi=hi, title=title)
    return ap.save(ax.figure, path, close=True)


def staircase(path: Path, t, energy, clusters, title: str) -> list[str]:
    """The energy of a few systems against log t with their cluster counts (the metastable staircase).

    Example:
        >>> import tempfile, pathlib
        >>> import numpy as np
        >>> from attnflow.phase._figures import staircase
        >>> t = np.linspace(0, 5, 6)
        >>> staircase(pathlib.Path(tempfile.mkdtemp()) / "s.png", t, np.ones((2, 6)), np.ones((2, 6)), "steps")
        ['s.png']
        >>> staircase(pathlib.Path(tempfile.mkdtemp()) / "s.png", t, np.ones((0, 6)), np.ones((0, 6)), "none finite")
        ['s.png']
    """
    from .. import plot as ap

    if np.size(energy) == 0:  # no finite system at this beta: the figure says so instead of staying blank
        fig, ax = ap.new_axes(figsize=(6.0, 3.8))
        ax.text(0.5, 0.5, "no finite system at this beta: no staircase to draw", ha="center", va="center",
                transform=ax.transAxes)
        ax.set_axis_off()
        ax.set_title(title, fontsize="medium")
        return ap.save(fig, path, close=True)
    ax = ap.staircase(t, energy, clusters=clusters, title=title)
    return ap.save(ax.figure, path, close=True)


def lifetimes(path: Path, meta: dict, fit: dict, title: str) -> list[str]:
    """The first metastable plateau's median lifetime against beta (``meta``: the group's metastability
    columns), with its quartiles, the censored medians open and the fit of log T against beta.

    Example:
        >>> import tempfile, pathlib
        >>> import numpy as np
        >>> from attnflow.phase._figures import lifetimes
        >>> meta = {"beta": np.array([1.0, 2.0]), "median": np.array([3.0, 5.0]), "q25": np.array([2.0, 4.0]),
        ...         "q75": np.array([4.0, 6.0]), "median_censored": np.array([False, True])}
        >>> lifetimes(pathlib.Path(tempfile.mkdtemp()) / "l.png", meta, {"slope": None, "by_count": []}, "T")
        ['l.png']
    """
    from .. import plot as ap

    ax = ap.lifetime_vs_beta(meta["beta"], meta["median"], q25=meta["q25"], q75=meta["q75"],
                             censored=np.asarray(meta["median_censored"]).astype(bool), fit=fit,
                             by_count=fit.get("by_count", []), title=title)
    return ap.save(ax.figure, path, close=True)


def noise_curves(path: Path, sigma, beta, order, lo, hi, floor: float, title: str) -> list[str]:
    r"""The order parameter :math:`r = |\frac1n\sum_i u_i|` at the last checkpoint against the noise sigma, one
    curve per beta with its interval (``order``, ``lo``, ``hi``: (len(beta), len(sigma))), and the finite-n floor
    :math:`1/\sqrt n` of n independent uniform directions (:math:`E r^2 = 1/n`) as a dotted line.

    Example:
        >>> import tempfile, pathlib
        >>> import numpy as np
        >>> from attnflow.phase._figures import noise_curves
        >>> r = np.array([[0.9, 0.5, 0.2], [0.95, 0.8, 0.3]])
        >>> noise_curves(pathlib.Path(tempfile.mkdtemp()) / "o.png", [0.0, 0.5, 1.0], [2.0, 4.0], r, r - 0.05,
        ...                r + 0.05, 0.18, "order")
        ['o.png']
    """
    from .. import plot as ap

    fig, ax = ap.new_axes(figsize=(5.6, 4.0))
    sigma = np.asarray(sigma, float)
    for b, colour, r, a, z in zip(beta, ap.colours(len(beta)), np.asarray(order, float), np.asarray(lo, float),
                                  np.asarray(hi, float)):
        ax.plot(sigma, r, "o-", color=colour, ms=3.5, label=rf"$\beta$ = {b:g}")
        ax.fill_between(sigma, a, z, color=colour, alpha=0.2, lw=0)
    ax.axhline(floor, color="0.4", ls=":", lw=1, label=r"$1/\sqrt{n}$: rms $r$ of n uniform directions")
    ax.set_ylim(0, 1.02)
    ax.set_xlabel(r"noise $\sigma$")
    ax.set_ylabel(r"order parameter $|\frac{1}{n}\sum_i u_i|$ at $t_1$")
    ax.set_title(title, fontsize="medium")
    ap.legend(ax, max_inside=6)
    return ap.save(fig, path, close=True)
