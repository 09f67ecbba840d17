"""The phase job's figures, drawn from plain arrays (NumPy and :mod:`attnflow.plot` only, no JAX), so that
the job can hand them to figure worker processes (:class:`attnflow.plot._workers.FigureWorkers`) while it
writes its files. Each function saves one figure and returns the names of the files it wrote.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

#: the heat maps of the first figure: (observable, colour-bar label, log colour scale)
MAPS = (("pairs_clustered", "fraction of pairs clustered", False),
        ("clusters", "clusters (mean)", True),
        ("energy", "E_beta / e^beta / (2 beta) (mean; 1: one cluster)", False),
        ("span", "dimension of the span (mean)", False))


def heat_maps(path: Path, grids: dict, beta, t, *, log_t: bool, overlay, title: str) -> list[str]:
    """The 2 x 2 heat maps of :data:`MAPS` over (beta, t): ``grids[name]`` (len(beta), len(t)) cell means;
    the energy drawn relative to its largest value :math:`e^\\beta / (2\\beta)` (comparable across beta);
    ``overlay``: ``(t, beta, label)`` of a line on the first map, or None.

    Example:
        >>> import tempfile, pathlib
        >>> import numpy as np
        >>> from attnflow.phase._figures import MAPS, heat_maps
        >>> grids = {name: np.random.default_rng(0).uniform(1, 2, (3, 4)) for name, _, _ in MAPS}
        >>> heat_maps(pathlib.Path(tempfile.mkdtemp()) / "p.png", grids, [1.0, 2.0, 3.0], [0, 1, 2, 3],
        ...           log_t=False, overlay=None, title="a phase diagram")
        ['p.png']
    """
    from .. import plot as ap

    fig, axes = ap.new_figure(2, 2, panel=(5.2, 4.0))
    for ax, (name, label, log) in zip(axes.ravel(), MAPS):
        values = np.asarray(grids[name], float)
        if name == "energy":
            b = np.asarray(beta, float)[:, None]
            values = values * 2 * b * np.exp(-b)
        ap.phase_diagram(values, beta=beta, t=t, ax=ax, log_color=log, log_t=log_t, label=label,
                         overlay=overlay if name == "pairs_clustered" else None, title=label)
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
    """
    from .. import plot as ap

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
