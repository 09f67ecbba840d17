"""Figures of the mean-field study: the density in (theta, t) or on a Mollweide map of S^2, W1 against n, mode growth
against theory."""

from __future__ import annotations

import math

import numpy as np

from ._phase import cell_edges
from ._checks import Inputs
from ._style import colorbar, colours, finite, label, legend, new_axes, plain_ticks


def circle_density(density, *, t, ax=None, title: str | None = None, vmax: float | None = None,
                   cmap: str = "magma"):
    r"""A heat map of a density on the circle over time: ``density[j, g]`` at time ``t[j]`` on the cell
    centred at the angle :math:`\theta_g = 2\pi g / G` (the grid of :func:`attnflow.meanfield.circle_grid`;
    a histogram of :func:`attnflow.meanfield.circle_histogram` divided by its bin width).

    The colour is the density against the uniform measure's :math:`1/(2\pi)`, so 1 is uniform;
    non-finite entries are masked and counted in the title.

    Example:
        >>> import numpy as np
        >>> import attnflow.plot as ap
        >>> rho = np.ones((5, 16)) / (2 * np.pi)
        >>> ax = ap.circle_density(rho, t=np.linspace(0, 1, 5))
        >>> ax.get_xlabel(), ax.get_ylabel()
        ('time $t$', 'angle $\\theta$')
    """
    check = Inputs("circle_density")
    tt = check.array("t", t, ("t",))
    D = finite(check.array("density", density, ("t", "G"))) * (2 * math.pi)
    fig, ax = new_axes(ax, figsize=(5.6, 3.8))
    bad = ~np.isfinite(D)
    M = np.ma.masked_array(np.where(bad, 0.0, D), mask=bad)
    h = 2 * math.pi / D.shape[1]
    theta_edges = np.linspace(-h / 2, 2 * math.pi - h / 2, D.shape[1] + 1)
    hi = vmax if vmax is not None else (float(np.nanmax(np.where(bad, np.nan, D))) if (~bad).any() else 1.0)
    ax.set_facecolor("0.8")
    mesh = ax.pcolormesh(cell_edges(tt, lower=0.0 if tt.min() >= 0 else None), theta_edges, M.T, cmap=cmap, vmin=0.0, vmax=max(hi, 1.0), shading="flat")
    ax.set_yticks([0, math.pi / 2, math.pi, 3 * math.pi / 2, 2 * math.pi], ["0", "π/2", "π", "3π/2", "2π"])
    plain_ticks(ax.xaxis)
    colorbar(mesh, ax, "density / uniform")
    note = f"{int(bad.sum())} non-finite entries masked" if bad.any() else None
    label(ax, "time $t$", r"angle $\theta$", "\n".join(x for x in (title, note) if x) or None)
    return ax


def sphere_density_map(density, *, z=None, phi=None, ax=None, title: str | None = None, vmax: float | None = None,
                       cmap: str = "magma", log: bool = False, colorbar_label: bool = True):
    r"""A density on :math:`S^2` as a Mollweide map (an equal-area projection: a cluster's area on the map is its
    area on the sphere). ``density[r, c]`` is the value at the height ``z[r]`` (:math:`z = \cos\theta = x_3`) and
    the azimuth ``phi[c]`` (:math:`\mathrm{atan2}(x_2, x_1)` in :math:`[0, 2\pi)`, drawn as the longitude
    :math:`\phi - \pi`); the defaults are the cell centres of :func:`attnflow.meanfield.sphere_histogram` (equal
    bins of z from the south pole, equal bins of phi from 0: divide its masses by the cell area
    :math:`4\pi/(ZP)`); the nodes of :func:`attnflow.meanfield.sphere_grid` (z from the north pole down) are
    given as ``z=grid.z, phi=grid.phi``. The colour is the density against the uniform :math:`1/(4\pi)`, so 1 is
    uniform; non-finite entries are masked and counted in the title. ``log``: a logarithmic colour scale from 0.1
    (for clustered clouds, whose empty cells are drawn black, as are masked ones). ``ax`` must have the Mollweide projection
    (``ap.new_figure(projection="mollweide")``); None makes one. Returns the Axes (its mesh is ``ax.collections[0]``);
    ``colorbar_label=False`` leaves the colour bar to the caller (one for several maps: ``fig.colorbar(mesh, ...)``).

    Example:
        >>> import numpy as np
        >>> import attnflow.plot as ap
        >>> ax = ap.sphere_density_map(np.ones((8, 16)) / (4 * np.pi))
        >>> ax.name
        'mollweide'
    """
    check = Inputs("sphere_density_map")
    D = finite(check.array("density", density, ("Z", "P"))) * (4 * math.pi)
    nz, nphi = D.shape
    zz = (-1 + (np.arange(nz) + 0.5) * 2 / nz) if z is None else check.array("z", z, ("Z",))
    pp = (np.arange(nphi) + 0.5) * 2 * math.pi / nphi if phi is None else check.array("phi", phi, ("P",))
    if np.any(np.abs(zz) > 1) or np.any(np.diff(pp) <= 0):
        check.fail("z must lie in [-1, 1] and phi must increase.")
    order = np.argsort(zz)
    zz, D = zz[order], D[order]
    z_edges = np.clip(cell_edges(zz, lower=-1.0), -1, 1)
    z_edges[0], z_edges[-1] = -1.0, 1.0
    lon_edges = cell_edges(pp, lower=0.0) - math.pi
    lon_edges[0], lon_edges[-1] = max(lon_edges[0], -math.pi), min(lon_edges[-1], math.pi)
    # each cell drawn as sub-cells (at least 36 x 72 in all): the projection bends the cells' sides, which a
    # quadrilateral of four corners would cut straight across (grey slivers at the poles)
    fr, fc = -(-36 // nz), -(-72 // nphi)
    refine = lambda e, f: np.concatenate([np.linspace(a, b, f, endpoint=False) for a, b in zip(e[:-1], e[1:])]
                                         + [e[-1:]])  # noqa: E731
    lat_edges = np.arcsin(refine(z_edges, fr))
    lon_edges = refine(lon_edges, fc)
    D = np.repeat(np.repeat(D, fr, axis=0), fc, axis=1)
    if ax is None:
        import matplotlib.pyplot as plt

        fig = plt.figure(figsize=(5.6, 3.2), layout="constrained")
        ax = fig.add_subplot(projection="mollweide")
    if ax.name != "mollweide":
        check.fail(f"ax must have the Mollweide projection (new_figure(projection='mollweide')), got {ax.name!r}.")
    bad = ~np.isfinite(D)
    M = np.ma.masked_array(np.where(bad, 0.0, D), mask=bad)
    hi = vmax if vmax is not None else (float(np.max(M)) if (~bad).any() else 1.0)
    ax.set_facecolor("0.8")
    if log:
        import matplotlib.pyplot as plt
        from matplotlib.colors import LogNorm

        # empty cells (0, which a logarithm masks) black like the cells below 0.1
        scale = {"norm": LogNorm(vmin=0.1, vmax=max(hi, 10.0)),
                 "cmap": plt.get_cmap(cmap).with_extremes(bad="black", under="black")}
    else:
        scale = {"vmin": 0.0, "vmax": max(hi, 1.0), "cmap": cmap}
    mesh = ax.pcolormesh(lon_edges, lat_edges, M, shading="flat", **scale)
    ax.set_xticklabels([])
    ax.grid(True, color="0.6", lw=0.4)
    if colorbar_label:
        colorbar(mesh, ax, "density / uniform" + (" (log)" if log else ""))
    note = f"{int(bad.sum())} non-finite entries masked" if bad.any() else None
    if title or note:
        ax.set_title("\n".join(x for x in (title, note) if x), fontsize="small")
    return ax


def distance_vs_n(n, distances, *, times, fits=None, ax=None, title: str | None = None,
                  ylabel: str = "$W_1$(particles, PDE)"):
    """``distances[i, s, j]`` (n ``n[i]``, seed s, time ``times[j]``) on log-log axes: each seed a dot,
    the mean a line, one colour per time; ``fits`` (one dict per time with ``rate``, ``lo``, ``hi``)
    in the legend. Non-finite or non-positive values are left out and counted in the title.

    Example:
        >>> import numpy as np
        >>> import attnflow.plot as ap
        >>> w = np.random.default_rng(0).random((3, 2, 2)) / np.sqrt([[[100]], [[400]], [[1600]]])
        >>> ax = ap.distance_vs_n([100, 400, 1600], w, times=[0.0, 1.0])
        >>> ax.get_xscale(), ax.get_yscale()
        ('log', 'log')
    """
    check = Inputs("distance_vs_n")
    nn = check.array("n", n, ("n",))
    times = check.array("times", times, ("times",))
    W = finite(check.array("distances", distances, ("n", "seeds", "times")))
    if fits is not None and len(check.sequence("fits", fits, "times")) != len(times):
        check.fail(f"fits has {len(fits)} entries, expected one per time ({len(times)}).")
    fig, ax = new_axes(ax, figsize=(5.2, 3.8))
    ok = np.isfinite(W) & (W > 0)
    for j, (t, c) in enumerate(zip(times, colours(len(times)))):
        for s in range(W.shape[1]):
            keep = ok[:, s, j]
            ax.plot(nn[keep], W[keep, s, j], ".", color=c, alpha=0.5)
        mean = np.array([W[i, ok[i, :, j], j].mean() if ok[i, :, j].any() else np.nan for i in range(nn.size)])
        fit = (fits or [None] * len(times))[j]
        text = f"t = {t:g}"
        if fit and fit.get("rate") is not None:
            text += f": $n^{{-{fit['rate']:.2f}}}$ [{fit['lo']:.2f}, {fit['hi']:.2f}]"
        ax.plot(nn, mean, "-", color=c, label=text)
    ref = nn ** -0.5 * np.nanmax(np.where(ok, W, np.nan)[0]) * math.sqrt(nn[0]) if ok[0].any() else None
    if ref is not None:
        ax.plot(nn, ref, "k:", lw=1, label="$n^{-1/2}$")
    ax.set_xscale("log")
    ax.set_yscale("log")
    note = f"{int((~ok).sum())} non-finite or zero value(s) left out" if (~ok).any() else None
    label(ax, "particles $n$", ylabel, "\n".join(x for x in (title, note) if x) or None)
    legend(ax)
    return ax


def growth_vs_prediction(k, predicted, measured, *, lo=None, hi=None, names=None, ax=None, title: str | None = None,
                         mode: str = "k"):
    r"""Growth rates of the Fourier modes k: the prediction :math:`\lambda_k` as a line, each
    measurement (``measured`` (M, K), one row per method named in ``names``) as points with their
    intervals ``lo`` / ``hi``. Non-finite measurements are left out and counted in the title.
    ``mode="l"``: the modes are harmonic degrees l on :math:`S^2` (the labels say so).

    Example:
        >>> import numpy as np
        >>> import attnflow.plot as ap
        >>> lam = np.array([0.3, 0.5, 0.2])
        >>> ax = ap.growth_vs_prediction([1, 2, 3], lam, [lam * 1.01, lam * 0.99], names=["particles", "PDE"])
        >>> ax.get_xlabel()
        'mode $k$'
    """
    check = Inputs("growth_vs_prediction")
    kk = check.array("k", k, ("K",))
    P = finite(check.array("predicted", predicted, ("K",)))
    raw = check.array("measured", measured, ("K",), ("M", "K"))
    M = np.atleast_2d(finite(raw))
    check.sizes["M"] = M.shape[0]
    shape = ("K",) if raw.ndim == 1 else ("M", "K")
    lo = None if lo is None else check.array("lo", lo, shape)
    hi = None if hi is None else check.array("hi", hi, shape)
    names = check.sequence("names", names, "M") if names is not None else [f"measured {i}" for i in range(M.shape[0])]
    fig, ax = new_axes(ax, figsize=(5.0, 3.6))
    if mode not in ("k", "l"):
        check.fail(f'mode must be "k" (Fourier modes) or "l" (harmonic degrees), got {mode!r}.')
    ax.plot(kk, P, "k-", lw=1.2, label=rf"linear theory $\lambda_{mode}$")
    left_out = 0
    for i, (row, name, c) in enumerate(zip(M, names, colours(M.shape[0]))):
        ok = np.isfinite(row)
        left_out += int((~ok).sum())
        shift = 0.08 * (i - (M.shape[0] - 1) / 2)
        if lo is not None and hi is not None:
            L, H = np.atleast_2d(finite(lo))[i], np.atleast_2d(finite(hi))[i]
            e = ok & np.isfinite(L) & np.isfinite(H)
            ax.errorbar(kk[e] + shift, row[e], yerr=[row[e] - L[e], H[e] - row[e]], fmt="none", ecolor=c, lw=1)
        ax.plot(kk[ok] + shift, row[ok], "o", color=c, ms=4, label=name)
    note = f"{left_out} non-finite rate(s) left out" if left_out else None
    label(ax, "mode $k$" if mode == "k" else "degree $l$", "growth rate",
          "\n".join(x for x in (title, note) if x) or None)
    legend(ax)
    return ax


def order_vs_noise(ratio, from_uniform, from_clustered=None, *, beta: float | None = None,
                   beta_star: float | None = None, ax=None, title: str | None = None):
    r"""The order parameter :math:`r = |\int\rho\,e^{i\theta}d\theta|` at a long time against the noise over its
    closed-form threshold, :math:`\sigma/\sigma_c` (:func:`attnflow.meanfield.noisy_transition`): from a nearly
    uniform start (circles) and from a clustered one (squares, dashed), the closed form at 1. A clustered start
    that stays ordered where the uniform one does not is the bistable range of a discontinuous transition.
    Non-finite values are left out (a gap in the curve) and counted in the title. The default title names beta
    and its side of ``beta_star`` when both are given.

    Example:
        >>> import numpy as np
        >>> import attnflow.plot as ap
        >>> ratio = np.array([0.9, 1.0, 1.1])
        >>> ax = ap.order_vs_noise(ratio, [0.6, 0.01, 0.0], [0.7, 0.6, 0.0], beta=4.0, beta_star=2.4469)
        >>> ax.get_title(), ax.get_xlabel()
        ('$\\beta$ = 4 (above $\\beta^*$)', '$\\sigma / \\sigma_c$')
    """
    check = Inputs("order_vs_noise")
    x = check.array("ratio", ratio, ("S",))
    curves = [("from a nearly uniform start", "o-", check.array("from_uniform", from_uniform, ("S",)))]
    if from_clustered is not None:
        curves.append(("from a clustered start", "s--", check.array("from_clustered", from_clustered, ("S",))))
    fig, ax = new_axes(ax, figsize=(5.0, 3.8))
    bad = 0
    for (name, style, y), colour in zip(curves, colours(2)):
        bad += int((~np.isfinite(y)).sum())
        ax.plot(x, np.where(np.isfinite(y), y, np.nan), style, color=colour, ms=4, label=name)
    ax.axvline(1.0, color="0.4", lw=1, label=r"closed form $\sigma_c$")
    ax.set_ylim(-0.02, 1.02)
    if title is None and beta is not None:
        side = "" if beta_star is None else (" (below $\\beta^*$)" if beta < beta_star else " (above $\\beta^*$)")
        title = f"$\\beta$ = {beta:g}{side}"
    note = f"{bad} non-finite values left out" if bad else None
    label(ax, r"$\sigma / \sigma_c$", "order parameter $r$", "\n".join(t for t in (title, note) if t) or None)
    legend(ax)
    return ax
