r"""Token paths :math:`t \mapsto z_i(t)` in the plane or in space, with the limit geometries overlaid.

The overlays are the limit sets of the paper's theorems: the convex hull of the final cloud
(polytope vertices, Thm 3.1), the hyperplanes :math:`\{\varphi_1^* z = a\}, \{\varphi_1^* z = 0\},
\{\varphi_1^* z = b\}` through the final cloud (Thm 4.2), and a subspace through the origin
(the factor of a polytope x subspace limit, Thm 5.1).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import InputError
from ._checks import Inputs
from ._style import colours, finite, label, legend, new_axes

__all__ = ["trajectories"]

_OVERLAYS = (None, "hull", "hyperplanes", "subspace")
_OVERLAY_COLOUR = "#D55E00"


# ------------------------------------------------------------------------------------------------
# data
def unpack(data, ts=None, system: int = 0, function: str = "trajectories"):
    """``(ts (T,), states (T, n, d), symbol)`` of one system from a Simulation or an array.

    ``data``: a :class:`attnflow.Simulation` (batched or not) or an array (T, n, d) / (B, T, n, d);
    ``ts`` (T,) or (B, T) overrides the Simulation's times (default for arrays: the save index).
    ``symbol`` is "x" for the raw picture, else "z". Shapes that disagree, or an empty input, are refused
    (:class:`~attnflow.errors.InputError`, naming ``function``).
    """
    return _unpack(Inputs(function), data, ts, system)


def _unpack(check, data, ts, system: int):
    symbol = "z"
    if hasattr(data, "states") and hasattr(data, "ts"):
        symbol = "x" if getattr(data, "picture", "rescaled") == "raw" else "z"
        ts = data.ts if ts is None else ts
        data = data.states
    z = check.array("states", data, ("T", "n"), ("T", "n", "d"), ("B", "T", "n", "d"))
    if z.ndim == 4:
        if not -z.shape[0] <= int(system) < z.shape[0]:
            check.fail(f"system is {system}, expected an index into the batch of {z.shape[0]} systems.")
        z = z[system]
    if z.ndim == 2:  # (T, n): one coordinate
        z = z[..., None]
    if ts is None:
        t = np.arange(z.shape[0], dtype=float)
    else:
        t = check.array("ts", ts, ("T",), ("B", "T"))
        if t.ndim == 2:
            t = t[system]
    return t, z, symbol


def masked_note(values) -> str:
    """A title note for the non-finite entries of ``values`` ("" when all are finite)."""
    bad = int(np.size(values) - np.count_nonzero(np.isfinite(values)))
    return "" if bad == 0 else f"({bad} non-finite value{'s' if bad > 1 else ''} masked)"


def with_note(title: str | None, note: str) -> str | None:
    if not note:
        return title
    return f"{title}\n{note}" if title else note


@dataclass
class View:
    """Drawing coordinates u of a cloud: z = center + basis u (identity for d <= 3)."""

    center: np.ndarray
    basis: np.ndarray
    labels: list[str]

    def __call__(self, z):
        return (np.asarray(z, float) - self.center) @ self.basis

    def normal(self, phi):
        """The level sets {phi . z = c} met with the drawn plane: {n . u = c - phi . center}."""
        phi = np.asarray(phi, float)
        return self.basis.T @ phi, float(phi @ self.center)


def view(z: np.ndarray, dims: int, symbol: str) -> View:
    """Identity coordinates when d <= dims, else the ``dims`` leading principal directions of the final cloud."""
    d = z.shape[-1]
    if d <= dims:
        return View(np.zeros(d), np.eye(d), [f"${symbol}_{k + 1}$" for k in range(d)])
    zf = z[-1][np.all(np.isfinite(z[-1]), axis=-1)]
    if len(zf) == 0:
        zf = np.zeros((1, d))
    center = zf.mean(axis=0)
    _, s, vt = np.linalg.svd(zf - center, full_matrices=True)
    var = np.zeros(d)
    var[: len(s)] = s**2
    share = var / var.sum() if var.sum() > 0 else var
    labels = [f"PC {k + 1} of final ${symbol}$ ({100 * share[k]:.0f}%)" for k in range(dims)]
    return View(center, vt[:dims].T, labels)


def limits(u: np.ndarray):
    """Padded per-axis limits of the finite entries of u (..., k)."""
    flat = u.reshape(-1, u.shape[-1])
    flat = flat[np.all(np.isfinite(flat), axis=1)]
    if len(flat) == 0:
        return -np.ones(u.shape[-1]), np.ones(u.shape[-1])
    lo, hi = flat.min(axis=0), flat.max(axis=0)
    pad = 0.08 * max(float(np.max(hi - lo)), 1e-12)
    return lo - pad, hi + pad


# ------------------------------------------------------------------------------------------------
# overlays
def hull_segments(p: np.ndarray) -> list[np.ndarray]:
    """Edges of the convex hull of a cloud p (n, k), as (2, k) segments (inside its affine span)."""
    from ..observables import affine_hull

    p = p[np.all(np.isfinite(p), axis=1)]
    if len(p) < 2:
        return []
    h = affine_hull(p)
    r = h.basis.shape[1]
    if r == 0:
        return []
    if r == 1:
        v = p[h.vertices]
        return [v[:2]] if len(v) >= 2 else []
    from scipy.spatial import ConvexHull

    hull = ConvexHull((p - h.center) @ h.basis)
    segs = set()
    for simplex in hull.simplices:
        for a in range(len(simplex)):
            for b in range(a + 1, len(simplex)):
                segs.add(tuple(sorted((int(simplex[a]), int(simplex[b])))))
    return [p[list(s)] for s in sorted(segs)]


def _line_in_box(normal, level, lo, hi):
    """The segment of {normal . u = level} (u in R^2) inside the box [lo, hi], or None."""
    nrm = float(np.dot(normal, normal))
    if nrm == 0 or not np.isfinite(level):
        return None
    c = level * normal / nrm
    tangent = np.array([-normal[1], normal[0]]) / np.sqrt(nrm)
    span = 2.0 * float(np.linalg.norm(hi - lo)) + float(np.linalg.norm(c - (lo + hi) / 2))
    return np.stack([c - span * tangent, c + span * tangent])


def _plane_patch(ax, normal, level, lo, hi, **style):
    """Draw {normal . u = level} (u in R^3) as a translucent square around the box's centre."""
    nrm = float(np.dot(normal, normal))
    if nrm == 0 or not np.isfinite(level):
        return
    mid = (lo + hi) / 2
    c = mid - (mid @ normal - level) * normal / nrm  # the plane's point nearest the box centre
    _, _, vt = np.linalg.svd(normal[None, :])
    half = 0.45 * float(np.max(hi - lo))
    a, b = np.meshgrid(np.linspace(-half, half, 2), np.linspace(-half, half, 2))
    pts = c + a[..., None] * vt[1] + b[..., None] * vt[2]
    ax.plot_surface(pts[..., 0], pts[..., 1], pts[..., 2], alpha=0.15, linewidth=0, **style)


def draw_overlay(ax, v: View, zf: np.ndarray, overlay, *, phi_dual=None, subspace=None, lo=None, hi=None) -> None:
    """Draw ``overlay`` of the cloud zf (n, d) into ``ax`` in the coordinates of ``v``."""
    if overlay not in _OVERLAYS:
        raise InputError(f"overlay is {overlay!r}, expected one of {_OVERLAYS}.")
    k = v.basis.shape[1]
    if overlay == "hull":
        for j, seg in enumerate(hull_segments(v(zf))):
            ax.plot(*seg.T, color=_OVERLAY_COLOUR, lw=1.1, label="final hull" if j == 0 else None)
    elif overlay == "hyperplanes":
        if phi_dual is None:
            raise InputError('phi_dual is None, expected the dual leading eigenvector (d,) with overlay="hyperplanes".')
        phi = np.asarray(phi_dual, float)
        s = zf @ phi
        s = s[np.isfinite(s)]
        if s.size == 0:
            return
        normal, offset = v.normal(phi)
        for level, ls, name in ((s.min(), "-", r"$\varphi^* z = a, b$"), (0.0, ":", r"$\varphi^* z = 0$"), (s.max(), "-", None)):
            if k == 2:
                seg = _line_in_box(normal, level - offset, lo, hi)
                if seg is not None:
                    ax.plot(*seg.T, color=_OVERLAY_COLOUR, ls=ls, lw=1.0, label=name)
            elif k == 3 and level != 0.0:
                _plane_patch(ax, normal, level - offset, lo, hi, color=_OVERLAY_COLOUR)
        if k == 3:
            ax.plot([], [], color=_OVERLAY_COLOUR, lw=4, alpha=0.3, label=r"$\varphi^* z = a, b$")
    elif overlay == "subspace":
        if subspace is None:
            raise InputError('subspace is None, expected a (d, r) basis with overlay="subspace".')
        S = np.asarray(subspace, float)
        S = S[:, None] if S.ndim == 1 else S
        S = v.basis.T @ S  # directions in drawing coordinates
        origin = v(np.zeros(len(v.center)))
        q, r_ = np.linalg.qr(S)
        rank = int(np.sum(np.abs(np.diag(r_)) > 1e-12 * max(1.0, float(np.abs(r_).max())))) if S.size else 0
        span = float(np.linalg.norm(hi - lo)) + float(np.linalg.norm(origin - (lo + hi) / 2))
        if rank == 0:
            ax.plot(*origin, marker="+", color=_OVERLAY_COLOUR, ms=10, label="subspace {0}")
        elif rank == 1 or (rank == 2 and k == 3):
            if rank == 1:
                pts = np.stack([origin - span * q[:, 0], origin + span * q[:, 0]])
                ax.plot(*pts.T, color=_OVERLAY_COLOUR, ls="--", lw=1.0, label="subspace")
            else:
                a, b = np.meshgrid(np.linspace(-span, span, 2), np.linspace(-span, span, 2))
                pts = origin + a[..., None] * q[:, 0] + b[..., None] * q[:, 1]
                ax.plot_surface(pts[..., 0], pts[..., 1], pts[..., 2], color=_OVERLAY_COLOUR, alpha=0.15, linewidth=0)
                ax.plot([], [], color=_OVERLAY_COLOUR, lw=4, alpha=0.3, label="subspace")


def set_limits(ax, lo, hi, k: int) -> None:
    ax.set_xlim(lo[0], hi[0])
    ax.set_ylim(lo[1], hi[1])
    if k == 3:
        ax.set_zlim(lo[2], hi[2])
    elif k == 2:
        ax.set_aspect("equal", adjustable="box")


# ------------------------------------------------------------------------------------------------
def trajectories(data, *, ts=None, system: int = 0, ax=None, overlay: str | None = None, phi_dual=None,
                 subspace=None, tokens=None, title: str | None = None, ylabel: str | None = None,
                 show_legend: bool = True):
    r"""Token paths of one system, with start (hollow) and end (filled) markers.

    d = 1: each coordinate against t. d = 2, 3: paths in the plane / in space (a 3-d Axes is made
    for d = 3 unless ``ax`` is a 2-d Axes). d > 3 (or d = 3 into a 2-d ``ax``): the paths projected
    on the leading principal directions of the final cloud, named so in the axis labels.
    Non-finite entries are masked (the path breaks) and counted in the title.

    Args:
        data: a :class:`attnflow.Simulation` or states (T, n, d) / (B, T, n, d).
        ts: save times (T,) (default: the Simulation's, else the save index).
        system: which system of a batch.
        ax: Axes to draw into (default: a new figure).
        overlay: None, "hull" (edges of the convex hull of the final cloud), "hyperplanes" (the
            level sets :math:`\varphi^* z = \min, 0, \max` over the final cloud; needs ``phi_dual``)
            or "subspace" (the span of ``subspace`` through the origin).
        phi_dual: (d,) dual leading eigenvector for "hyperplanes".
        subspace: (d, r) basis for "subspace".
        tokens: indices of the tokens to draw (default: all).
        title: the Axes title.
        ylabel: y label when d = 1 (default "z").
        show_legend: draw the legend (paths, start, end, overlay).

    Returns:
        The Axes drawn into.

    Example:
        >>> import numpy as np
        >>> import attnflow.plot as ap
        >>> z = np.random.default_rng(0).normal(size=(5, 4, 2)).cumsum(0)
        >>> ax = ap.trajectories(z, ts=np.linspace(0, 1, 5), overlay="hull")
        >>> ax.get_xlabel(), ax.get_ylabel()
        ('$z_1$', '$z_2$')
    """
    check = Inputs("trajectories")
    t, z, symbol = _unpack(check, data, ts, system)
    if overlay not in _OVERLAYS:
        check.fail(f"overlay is {overlay!r}, expected one of {_OVERLAYS}.")
    if overlay == "hyperplanes":
        if phi_dual is None:
            check.fail('phi_dual is None, expected the dual leading eigenvector (d,) with overlay="hyperplanes".')
        check.array("phi_dual", phi_dual, ("d",))
    if overlay == "subspace":
        if subspace is None:
            check.fail('subspace is None, expected a (d, r) basis with overlay="subspace".')
        check.array("subspace", subspace, ("d",), ("d", "r"), empty=True)
    if tokens is not None:
        idx = check.array("tokens", tokens, ("k",), dtype=int)
        if np.any((idx < -z.shape[1]) | (idx >= z.shape[1])):
            check.fail(f"tokens holds indices outside 0..{z.shape[1] - 1}, expected indices of the {z.shape[1]} tokens.")
        z = z[:, idx]
    note = masked_note(z)
    z = finite(z)
    T, n, d = z.shape
    if d == 1:
        fig, ax = new_axes(ax, figsize=(5.5, 3.8))
        cols = colours(n) if n <= 8 else ["#0072B2"] * n
        for i in range(n):
            ax.plot(t, z[:, i, 0], lw=0.9, color=cols[i])
        label(ax, "$t$", ylabel or f"${symbol}$", with_note(title, note))
        return ax
    if ax is None:
        dims = 3 if d == 3 else 2
        fig, ax = new_axes(None, figsize=(5.2, 4.8), projection="3d" if dims == 3 else None)
    else:
        dims = 3 if hasattr(ax, "zaxis") and d >= 3 else 2
    v = view(z, dims, symbol)
    u = v(z)  # (T, n, dims)
    lo, hi = limits(u)
    for i in range(n):
        ax.plot(*u[:, i].T, lw=0.7, color="0.6", alpha=0.8, label="paths" if i == 0 else None)
    ax.scatter(*u[0].T, s=14, facecolors="none", edgecolors="0.35", linewidths=0.8, label="start")
    ax.scatter(*u[-1].T, s=22, color="#0072B2", zorder=3, label=f"end (t = {t[-1]:.3g})")
    draw_overlay(ax, v, z[-1], overlay, phi_dual=phi_dual, subspace=subspace, lo=lo, hi=hi)
    set_limits(ax, lo, hi, dims)
    if dims == 3:
        label(ax, v.labels[0], v.labels[1], with_note(title, note), zlabel=v.labels[2])
    else:
        label(ax, v.labels[0], v.labels[1], with_note(title, note))
    if show_legend:  # outside the box in 3-d, where "best" would still cover the view
        legend(ax, max_inside=5 if dims == 2 else 0)
    return ax
