"""Figures of the reproduction report, drawn by :mod:`attnflow.plot` and saved into the report folder.

Every function takes NumPy arrays of ONE simulated system and a path, writes the figure with
:func:`attnflow.plot.save` (every format of the surrounding :func:`attnflow.plot.figure_formats`)
and returns the file name report.md links (the PNG when written).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .. import plot

__all__ = ["trajectories", "attention_maps", "cluster_boolean", "levels", "animation"]


def _save(ax_or_fig, path: Path) -> str:
    fig = getattr(ax_or_fig, "figure", ax_or_fig)
    names = plot.save(fig, Path(path).with_suffix(".png"), close=True)
    return next((n for n in names if n.endswith(".png")), names[0])


def trajectories(path: Path, ts, z, *, title: str, overlay: str | None = None, phi_dual=None,
                 coords=None, ylabel: str = "$z$") -> str:
    """Token paths (:func:`attnflow.plot.trajectories`); ``coords`` picks <= 3 coordinates to draw."""
    z = np.asarray(z, np.float64)
    if coords is not None:
        z = z[..., list(coords)]
        phi_dual = None if phi_dual is None else np.asarray(phi_dual)[list(coords)]
    return _save(plot.trajectories(z, ts=ts, title=title, overlay=overlay, phi_dual=phi_dual, ylabel=ylabel), path)


def attention_maps(path: Path, ts, P, ranks, *, title: str) -> str:
    """P(t) at four times, tokens ordered by leader, one colour bar (:func:`attnflow.plot.attention_maps`)."""
    return _save(plot.attention_maps(P, ts=ts, ranks=ranks, title=title), path)


def cluster_boolean(path: Path, ts, ncl, bdist, *, title: str, xlabel: str = "$t$") -> str:
    """Cluster count (left) and distance of P to Boolean (right), one thin line per run."""
    return _save(plot.cluster_series(ts, clusters=ncl, boolean_distance=bdist, title=title, xlabel=xlabel), path)


def levels(path: Path, ts, s, *, title: str, ylabel: str = r"$\varphi_1^*(z_i)$", xlabel: str = "$t$",
           labels=None) -> str:
    """Per-token series against time (:func:`attnflow.plot.levels`)."""
    return _save(plot.levels(ts, s, title=title, ylabel=ylabel, xlabel=xlabel, labels=labels), path)


def animation(path: Path, ts, z, *, title: str, overlay: str | None, phi_dual=None, frames: int = 40,
              fps: int = 8) -> str:
    """Animated GIF, frames spaced by the cloud's progress (:func:`attnflow.plot.animate`)."""
    return plot.animate(z, path, ts=ts, title=title, overlay=overlay, phi_dual=phi_dual, frames=frames, fps=fps)
