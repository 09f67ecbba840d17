r"""Animated GIF of a token cloud, with frames placed where the cloud moves.

The dynamics often settle early (a cluster forms by t = 3 of a run to t = 12); frames evenly
spaced in t would then mostly show a still picture. :func:`frame_indices` spaces frames by the
cloud's own progress, the cumulative arc length

.. math:: L_k = \sum_{m < k} \lVert z(t_{m+1}) - z(t_m) \rVert_F ,

so equal steps of :math:`L` put the frames where the motion is.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ._checks import Inputs
from ._style import label, new_axes
from ._trajectories import draw_overlay, limits, masked_note, unpack, view, with_note

__all__ = ["frame_indices", "animate"]

_SPACINGS = ("progress", "log", "uniform")


def frame_indices(ts, states, frames: int = 40, spacing: str = "progress") -> np.ndarray:
    r"""Save indices of at most ``frames`` animation frames, first and last save included.

    Args:
        ts: save times (T,).
        states: the cloud (T, n, d) (only "progress" reads it).
        frames: the most frames wanted (>= 2).
        spacing: "progress" (equal steps of the cumulative arc length
            :math:`\sum_k \lVert z(t_{k+1}) - z(t_k)\rVert_F`; a step with non-finite entries
            counts as no motion; a cloud that does not move falls back to "uniform"), "log"
            (log-spaced :math:`t - t_0`) or "uniform" (evenly spaced t).

    Returns:
        Sorted unique indices (int array); fewer than ``frames`` where several targets fall on
        one save.

    Example:
        >>> import numpy as np
        >>> from attnflow.plot import frame_indices
        >>> ts = np.linspace(0, 10, 101)
        >>> z = np.minimum(ts, 2.0)[:, None, None] * np.ones((1, 3, 2))  # stops moving at t = 2
        >>> idx = frame_indices(ts, z, frames=10)
        >>> bool(np.all(ts[idx[:-1]] <= 2.0)), int(idx[-1])
        (True, 100)
    """
    check = Inputs("frame_indices")
    t = check.array("ts", ts, ("T",))
    T = len(t)
    frames = int(frames)
    if frames < 2:
        check.fail(f"frames is {frames}, expected at least 2 (the first and the last save).")
    if spacing not in _SPACINGS:
        check.fail(f"spacing is {spacing!r}, expected one of {_SPACINGS}.")
    if spacing == "progress":
        states = check.array("states", states, ("T", "n", "d"), ("T", "n"), ("T",))
    if T <= frames:
        return np.arange(T)
    if spacing == "progress":
        z = np.asarray(states, float).reshape(T, -1)
        step = np.linalg.norm(np.diff(z, axis=0), axis=1)
        step = np.where(np.isfinite(step), step, 0.0)
        arc = np.concatenate([[0.0], np.cumsum(step)])
        if arc[-1] > 0:
            targets = np.linspace(0.0, arc[-1], frames)
            idx = np.searchsorted(arc, targets, side="left")
            idx = np.clip(idx, 0, T - 1)
            return np.unique(np.concatenate([[0], idx, [T - 1]]))
        spacing = "uniform"
    if spacing == "log":
        tau = t - t[0]
        first = tau[1] if tau[1] > 0 else np.min(tau[tau > 0])
        targets = np.concatenate([[0.0], np.geomspace(first, tau[-1], frames - 1)])
        idx = np.searchsorted(tau, targets, side="left")
    else:
        idx = np.searchsorted(t, np.linspace(t[0], t[-1], frames), side="left")
    return np.unique(np.concatenate([[0], np.clip(idx, 0, T - 1), [T - 1]]))


def animate(data, path: str | os.PathLike, *, ts=None, system: int = 0, frames: int = 40,
            spacing: str = "progress", overlay: str | None = None, phi_dual=None, subspace=None, fps: int = 8,
            title: str | None = None) -> str:
    """Write an animated GIF of one system's cloud (2-d; d > 2 projected on the final cloud's two
    leading principal directions) and return its file name.

    Each frame shows the cloud at one save (:func:`frame_indices`), its faded path so far, the
    overlay of the current cloud ("hull", "hyperplanes" with ``phi_dual``, "subspace"), and its t
    in the title. Written atomically with matplotlib's PillowWriter.

    Args:
        data: a :class:`attnflow.Simulation` or states (T, n, d) / (B, T, n, d), d >= 2.
        path: the GIF's path.
        ts: save times (T,) (default: the Simulation's, else the save index).
        system: which system of a batch.
        frames: the most frames.
        spacing: how frames are spaced (see :func:`frame_indices`).
        overlay, phi_dual, subspace: as in :func:`attnflow.plot.trajectories`.
        fps: frames per second.
        title: text before each frame's "t = ...".

    Returns:
        The file name written.

    Example:
        >>> import tempfile, pathlib
        >>> import numpy as np
        >>> import attnflow.plot as ap
        >>> z = np.random.default_rng(0).normal(size=(6, 4, 2)).cumsum(0)
        >>> ap.animate(z, pathlib.Path(tempfile.mkdtemp()) / "cloud.gif", frames=3, overlay="hull")
        'cloud.gif'
    """
    import matplotlib.pyplot as plt
    from matplotlib.animation import FuncAnimation, PillowWriter

    from ..runs import atomic_path

    t, z, symbol = unpack(data, ts, system, function="animate")
    if z.shape[-1] < 2:
        Inputs("animate").fail(f"states has d = {z.shape[-1]}, expected clouds of dimension d >= 2 "
                               "(for d = 1, attnflow.plot.trajectories draws each coordinate against t).")
    if overlay == "hyperplanes" and phi_dual is None:
        Inputs("animate").fail('phi_dual is None, expected the dual leading eigenvector (d,) with overlay="hyperplanes".')
    note = masked_note(z)
    z = np.where(np.isfinite(z), z, np.nan)
    idx = frame_indices(t, z, frames, spacing)
    v = view(z, 2, symbol)
    u = v(z)
    lo, hi = limits(u)
    fig, ax = new_axes(None, figsize=(4.4, 4.4))
    path = Path(path)

    def draw(k):
        ax.clear()
        for i in range(u.shape[1]):
            ax.plot(u[: k + 1, i, 0], u[: k + 1, i, 1], lw=0.6, color="0.75")
        draw_overlay(ax, v, z[k], overlay, phi_dual=phi_dual, subspace=subspace, lo=lo, hi=hi)
        ax.scatter(u[k, :, 0], u[k, :, 1], s=16, color="#0072B2", zorder=3)
        ax.set_xlim(lo[0], hi[0])
        ax.set_ylim(lo[1], hi[1])
        ax.set_aspect("equal", adjustable="box")
        head = f"{title}, t = {t[k]:.3g}" if title else f"t = {t[k]:.3g}"
        label(ax, v.labels[0], v.labels[1], with_note(head, note))

    anim = FuncAnimation(fig, draw, frames=[int(k) for k in idx], blit=False)
    try:
        with atomic_path(path) as tmp:
            anim.save(tmp, writer=PillowWriter(fps=fps))
    finally:
        plt.close(fig)
    return path.name
