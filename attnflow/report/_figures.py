"""Figures of the reproduction report (matplotlib, Agg backend; PNG and animated GIF).

Every function takes NumPy arrays of ONE simulated system and a path, writes the file
atomically, and returns the file name.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from ..observables import affine_hull  # noqa: E402
from ..runio import atomic_path, atomic_save_figure  # noqa: E402

__all__ = ["trajectories", "attention_maps", "cluster_boolean", "levels", "animation"]


def _save(fig, path: Path) -> str:
    return atomic_save_figure(fig, path, dpi=90, bbox_inches="tight")


def _hull_segments(p: np.ndarray) -> list[np.ndarray]:
    """Edges of the convex hull of a 2-d or 3-d cloud, as (2, d) segments."""
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

    u = (p - h.center) @ h.basis
    hull = ConvexHull(u)
    segs = set()
    for simplex in hull.simplices:
        for a in range(len(simplex)):
            for b in range(a + 1, len(simplex)):
                segs.add(tuple(sorted((int(simplex[a]), int(simplex[b])))))
    return [p[list(s)] for s in segs]


def _draw_overlay(ax, zf, overlay, phi_dual, d, lim):
    if overlay == "hull":
        for seg in _hull_segments(zf):
            ax.plot(*seg.T, color="crimson", lw=1.2)
    elif overlay == "hyperplanes" and phi_dual is not None and d == 2:
        s = zf @ phi_dual
        normal = phi_dual / np.dot(phi_dual, phi_dual)
        tangent = np.array([-phi_dual[1], phi_dual[0]])
        tangent = tangent / np.linalg.norm(tangent)
        for level, style in ((s.min(), "-"), (0.0, ":"), (s.max(), "-")):
            c = level * normal
            pts = np.stack([c - 3 * lim * tangent, c + 3 * lim * tangent])
            ax.plot(*pts.T, color="crimson", ls=style, lw=1.0)


def _planes_3d(ax, zf, phi_dual):
    """The planes {phi^* z = a} and {phi^* z = b} through the final cloud, as translucent patches."""
    s = zf @ phi_dual
    normal = phi_dual / np.dot(phi_dual, phi_dual)
    _, _, vt = np.linalg.svd(phi_dual[None, :])
    t1, t2 = vt[1], vt[2]  # orthonormal basis of {v : phi^* v = 0}
    center = zf.mean(axis=0)
    half = 0.6 * max(float(np.ptp(zf, axis=0).max()), 1e-12)
    u, v = np.meshgrid(np.linspace(-half, half, 2), np.linspace(-half, half, 2))
    for level in (s.min(), s.max()):
        c = center - (center @ phi_dual) * normal + level * normal  # a point of the plane near the cloud
        pts = c[None, None, :] + u[..., None] * t1 + v[..., None] * t2
        ax.plot_surface(pts[..., 0], pts[..., 1], pts[..., 2], color="crimson", alpha=0.15, linewidth=0)


def _limits(z):
    lo, hi = np.min(z, axis=(0, 1)), np.max(z, axis=(0, 1))
    pad = 0.08 * max(float(np.max(hi - lo)), 1e-12)
    return lo - pad, hi + pad


def trajectories(path: Path, ts, z, *, title: str, overlay: str | None = None, phi_dual=None,
                 coords=None, ylabel: str = "z") -> str:
    """Token paths z_i(t) (d = 1: against t; d = 2, 3: in space) with the final hull or the
    hyperplanes {phi_1^* z = a, 0, b} overlaid. ``coords`` picks <= 3 coordinates to draw."""
    z = np.asarray(z, np.float64)
    if coords is not None:
        z = z[..., list(coords)]
    T, n, d = z.shape
    if d == 1:
        fig, ax = plt.subplots(figsize=(5.5, 4))
        ax.plot(ts, z[:, :, 0], lw=0.9)
        ax.set_xlabel("t")
        ax.set_ylabel(ylabel)
    elif d == 2:
        fig, ax = plt.subplots(figsize=(5, 5))
        for i in range(n):
            ax.plot(z[:, i, 0], z[:, i, 1], lw=0.7, color="0.55")
        ax.scatter(*z[0].T, s=10, color="0.3", label="start")
        ax.scatter(*z[-1].T, s=22, color="tab:blue", zorder=3, label="end")
        lo, hi = _limits(z)
        _draw_overlay(ax, z[-1], overlay, phi_dual, d, float(np.max(hi - lo)))
        ax.set_xlim(lo[0], hi[0])
        ax.set_ylim(lo[1], hi[1])
        ax.set_aspect("equal", adjustable="box")
        ax.legend(loc="best", fontsize=7)
    else:
        fig = plt.figure(figsize=(5.5, 5))
        ax = fig.add_subplot(projection="3d")
        for i in range(n):
            ax.plot(z[:, i, 0], z[:, i, 1], z[:, i, 2], lw=0.6, color="0.55")
        ax.scatter(*z[-1].T, s=18, color="tab:blue")
        if overlay == "hull":
            for seg in _hull_segments(z[-1]):
                ax.plot(*seg.T, color="crimson", lw=1.0)
        elif overlay == "hyperplanes" and phi_dual is not None:
            _planes_3d(ax, z[-1], np.asarray(phi_dual, np.float64))
    ax.set_title(title, fontsize=9)
    return _save(fig, path)


def attention_maps(path: Path, ts, P, ranks, *, title: str) -> str:
    """Heat maps of P(t) at (up to) four save times, each titled with its numerical rank."""
    P = np.asarray(P)
    T = len(ts)
    idx = sorted(set(np.linspace(0, T - 1, min(4, T)).round().astype(int).tolist()))
    fig, axes = plt.subplots(1, len(idx), figsize=(3.0 * len(idx), 3.0))
    axes = np.atleast_1d(axes)
    for ax, k in zip(axes, idx):
        ax.imshow(P[k], vmin=0, vmax=1, cmap="viridis")
        ax.set_title(f"t = {ts[k]:.3g}, rank {int(ranks[k])}", fontsize=8)
        ax.set_xticks([])
        ax.set_yticks([])
    fig.suptitle(title, fontsize=9)
    return _save(fig, path)


def cluster_boolean(path: Path, ts, ncl, bdist, *, title: str, xlabel: str = "t") -> str:
    """Cluster count (left axis) and distance of P to Boolean (right axis, log) against time,
    one thin line per initial configuration."""
    fig, ax = plt.subplots(figsize=(6, 3.6))
    ax.plot(ts, np.asarray(ncl).T, color="tab:blue", lw=1)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("clusters", color="tab:blue")
    ax2 = ax.twinx()
    b = np.clip(np.asarray(bdist, np.float64), 1e-300, None)
    ax2.semilogy(ts, b.T, color="tab:red", lw=1, ls="--")
    ax2.set_ylabel("dist(P, Boolean)", color="tab:red")
    ax.set_title(title, fontsize=9)
    return _save(fig, path)


def levels(path: Path, ts, s, *, title: str, ylabel: str = "phi_1^*(z_i)", xlabel: str = "t") -> str:
    """Projections against time (Thm 4.2: max non-increasing, min non-decreasing, 3 levels)."""
    fig, ax = plt.subplots(figsize=(6, 3.6))
    ax.plot(ts, np.asarray(s), lw=0.8)
    ax.axhline(0.0, color="k", lw=0.5, ls=":")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    return _save(fig, path)


def animation(path: Path, ts, z, *, title: str, overlay: str | None, phi_dual=None, frames: int = 40,
              fps: int = 8) -> str:
    """Animated GIF of a 2-d cloud with its current hull or hyperplanes (PillowWriter)."""
    from matplotlib.animation import FuncAnimation, PillowWriter

    z = np.asarray(z, np.float64)[..., :2]
    T = len(ts)
    idx = np.unique(np.linspace(0, T - 1, max(2, min(frames, T))).round().astype(int))
    lo, hi = _limits(z)
    fig, ax = plt.subplots(figsize=(4.2, 4.2))

    def draw(k):
        ax.clear()
        ax.set_xlim(lo[0], hi[0])
        ax.set_ylim(lo[1], hi[1])
        ax.set_aspect("equal", adjustable="box")
        _draw_overlay(ax, z[k], overlay, phi_dual, 2, float(np.max(hi - lo)))
        ax.scatter(*z[k].T, s=14, color="tab:blue")
        ax.set_title(f"{title}   t = {ts[k]:.2f}", fontsize=8)

    anim = FuncAnimation(fig, draw, frames=list(idx), blit=False)
    try:
        with atomic_path(path) as tmp:
            anim.save(tmp, writer=PillowWriter(fps=fps))
    finally:
        plt.close(fig)
    return path.name
