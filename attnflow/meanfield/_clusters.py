r"""Cluster counts without an n x n graph: sorted gaps on the circle, occupied cells on :math:`S^2`.

* **Circle** (:func:`circle_cluster_count`): sort the angles; consecutive particles (cyclically,
  the last one followed by the first) closer than an angle :math:`\delta` belong to one cluster,
  so the clusters are the arcs between the gaps larger than :math:`\delta`: their number
  (1 when no gap exceeds :math:`\delta`). This is exactly the number of connected components of the
  graph :math:`i\sim j \iff \langle x_i, x_j\rangle \ge \cos\delta`
  (:func:`attnflow.observables.clusters_above` with threshold :math:`\cos\delta`), for
  :math:`0 < \delta < \pi`, in O(n log n).
* **Sphere** :math:`S^2` (:func:`sphere_cluster_count`): the histogram of the equal-area z/phi grid
  (:func:`~attnflow.meanfield.sphere_histogram`); a cell is *occupied* when it holds at least
  ``min_mass`` of the measure; the clusters are the connected components of the occupied cells,
  two cells being neighbours when they touch (the 8 around a cell, periodic in phi; all cells
  of the top row, and all of the bottom row, meet at a pole and are neighbours of one another).
  O(n + cells x sweeps). It agrees with the O(n^2) count of ``clusters_above`` when the clusters
  are smaller than a cell and further apart than two cells' diameters, and it ignores stray
  particles lighter than ``min_mass`` (the graph count counts each of them).
* **Exact on** :math:`S^{d-1}`: :func:`attnflow.observables.sphere_clusters`, the components of the threshold
  graph themselves with the clusters' geometry, from cubes that are cliques of the graph (no n x n graph).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from .. import _validate as v
from .._x64 import keeps_float64
from ..errors import InputError
from ._measures import _angles, _sphere_histogram, _tokens, check_points

__all__ = ["circle_cluster_count", "circle_clusters", "sphere_cluster_count", "grid_components"]


@keeps_float64
def circle_cluster_count(points: Float[Array, "n *two"], max_gap) -> Int[Array, ""]:
    r"""Number of clusters on the circle: arcs separated by gaps larger than ``max_gap`` (radians, in (0, pi)).

    See also:
        :func:`attnflow.geometry.soft_cluster_count` of the tokens :math:`(\cos\theta_j, \sin\theta_j)`, smooth
        in the angles: this count is piecewise constant in the tokens, so its gradient is 0 wherever it exists
        (``jax.grad`` returns 0, not an error).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.meanfield import circle_cluster_count
        >>> int(circle_cluster_count(jnp.array([0.0, 0.01, 6.28, 2.0, 2.02, 4.0]), 0.1))  # 6.28 ~ 0 across 2 pi
        3
    """
    check_points(points)
    v.check_positive("max_gap", max_gap, "the largest gap inside a cluster, in radians")
    if v.is_concrete(max_gap) and not float(max_gap) < math.pi:
        raise InputError(f"max_gap must be an angle in (0, pi) radians (the largest gap inside a cluster), "
                         f"got {max_gap!r}.")
    return _circle_count(points, max_gap)


@jax.jit
def _circle_gaps(points, max_gap):
    theta = jnp.sort(_angles(points))
    gaps = jnp.diff(theta, append=theta[:1] + 2 * math.pi)
    return jnp.sum(gaps > max_gap).astype(jnp.int32)


def _circle_count(points, max_gap):
    return jnp.maximum(_circle_gaps(points, max_gap), 1)


@keeps_float64
def circle_gaps(points: Float[Array, "n *two"], max_gap) -> Int[Array, ""]:
    r"""Number of gaps larger than ``max_gap`` (radians) between circularly consecutive tokens: 0 for a cloud
    that covers the circle without such a gap (not yet clustered), else its number of clusters
    (:func:`circle_cluster_count`, which counts such a cloud as 1). O(n log n).

    See also:
        :func:`attnflow.geometry.soft_cluster_count` of the tokens, smooth in the angles: this count is
        piecewise constant in the tokens, so its gradient is 0 wherever it exists (``jax.grad`` returns 0, not
        an error).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.meanfield import circle_gaps
        >>> int(circle_gaps(jnp.linspace(0, 6.2, 100), 0.3)), int(circle_gaps(jnp.array([0.0, 0.01, 3.0]), 0.3))
        (0, 2)
    """
    check_points(points)
    v.check_positive("max_gap", max_gap, "the largest gap inside a cluster, in radians")
    return _circle_gaps(points, max_gap)


def grid_components(occupied, *, periodic_columns: bool = True, pole_rows: bool = True) -> Int[Array, "Z P"]:
    r"""Label of every cell of a (Z, P) grid: the smallest flat index in its connected component of
    occupied cells (-1 for empty cells).

    Neighbours: the 8 cells around a cell (columns periodic when ``periodic_columns``); with
    ``pole_rows`` every cell of row 0 is a neighbour of every other cell of row 0, and likewise for
    the last row (they meet at a pole). Labels spread to neighbours, with a pointer jump per
    sweep, until nothing changes.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.meanfield._clusters import grid_components
        >>> occ = jnp.array([[0, 0, 0, 0], [1, 0, 0, 1], [0, 0, 1, 0], [0, 0, 0, 0]], bool)
        >>> grid_components(occ, pole_rows=False).tolist()   # (1, 3) ~ (1, 0) across the seam, ~ (2, 2)
        [[-1, -1, -1, -1], [4, -1, -1, 4], [-1, -1, 4, -1], [-1, -1, -1, -1]]
    """
    v.check_array("occupied", occupied, "a boolean grid (Z, P)", ranks=(2,), nonempty=True)
    return _grid_components(jnp.asarray(occupied, bool), bool(periodic_columns), bool(pole_rows))


@functools.partial(jax.jit, static_argnames=("periodic_columns", "pole_rows"))
def _grid_components(occupied, periodic_columns: bool, pole_rows: bool):
    rows, cols = occupied.shape
    big = jnp.int32(rows * cols)
    start = jnp.where(occupied, jnp.arange(rows * cols, dtype=jnp.int32).reshape(rows, cols), big)

    def shifted(labels, dr, dc):
        if dc:
            labels = jnp.roll(labels, dc, axis=1) if periodic_columns else _shift(labels, dc, 1, big)
        return _shift(labels, dr, 0, big) if dr else labels

    def sweep(state):
        labels, _ = state
        new = labels
        for dr in (-1, 0, 1):
            for dc in (-1, 0, 1):
                if dr or dc:
                    new = jnp.minimum(new, shifted(labels, dr, dc))
        if pole_rows:
            new = new.at[0].set(jnp.minimum(new[0], jnp.min(jnp.where(occupied[0], new[0], big))))
            new = new.at[-1].set(jnp.minimum(new[-1], jnp.min(jnp.where(occupied[-1], new[-1], big))))
        new = jnp.where(occupied, new, big)
        flat = jnp.append(new.reshape(-1), big)
        new = jnp.where(occupied, flat[new], big)  # pointer jump: a label names an occupied cell of the component
        return new, jnp.any(new != labels)

    labels, _ = jax.lax.while_loop(lambda s: s[1], sweep, (start, jnp.asarray(True)))
    return jnp.where(occupied, labels, -1)


def _shift(a, offset: int, axis: int, fill):
    """``a`` shifted by ``offset`` along ``axis`` as ``jnp.roll`` does, but not periodic: vacated entries are ``fill``."""
    n = a.shape[axis]
    pad = [(0, 0)] * a.ndim
    pad[axis] = (offset, 0) if offset > 0 else (0, -offset)
    padded = jnp.pad(a, pad, constant_values=fill)
    begin = 0 if offset > 0 else -offset
    return jax.lax.slice_in_dim(padded, begin, begin + n, axis=axis)


@keeps_float64
def sphere_cluster_count(x: Float[Array, "n 3"], min_mass=0.01, *, num_z: int = 32, num_phi: int = 64
                         ) -> Int[Array, ""]:
    r"""Number of clusters on :math:`S^2`: connected components of the z/phi cells holding at least ``min_mass``.

    The rule and when it agrees with the graph count are in the module docstring. The default
    32 x 64 grid has cells of area :math:`4\pi/2048` (about 0.08 x 0.1 rad at the equator,
    0.36 rad from the pole to the edge of the polar rows).

    See also:
        :func:`attnflow.geometry.soft_cluster_count`, smooth in x: this count is piecewise constant in the
        tokens, so its gradient is 0 wherever it exists (``jax.grad`` returns 0, not an error).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.meanfield import sphere_cluster_count
        >>> x = jnp.array([[1.0, 0.0, 0.0], [1.0, 0.001, 0.0], [0.0, 0.0, 1.0], [-1.0, 0.0, 0.0]])
        >>> int(sphere_cluster_count(x, 0.1))
        3
    """
    v.check_real("min_mass", min_mass, "the least mass of an occupied cell, in (0, 1]", positive=True)
    x = _tokens(x, "tokens on the sphere S^2 (n, 3)")
    if x.shape[1] != 3:
        raise InputError(f"x must be tokens on S^2 (n, 3) for the z/phi grid, got shape {x.shape}.")
    num_z = v.check_int("num_z", num_z, meaning="the number of bins of z")
    num_phi = v.check_int("num_phi", num_phi, meaning="the number of azimuth bins")
    return _sphere_count(x, min_mass, num_z, num_phi)


@functools.partial(jax.jit, static_argnames=("num_z", "num_phi"))
def _sphere_count(x, min_mass, num_z: int, num_phi: int):
    masses = _sphere_histogram(x, None, num_z, num_phi)
    labels = _grid_components(masses >= min_mass, True, True)
    flat = jnp.arange(num_z * num_phi, dtype=jnp.int32).reshape(num_z, num_phi)
    return jnp.sum(labels == flat).astype(jnp.int32)


def circle_clusters(points: Float[Array, "n *two"], max_gap: float, min_mass: float = 0.0) -> dict:
    r"""The geometry of the clusters on the circle (host-side, vectorised, O(n log n)): the arcs between consecutive
    tokens (sorted, cyclically) further apart than ``max_gap`` radians, as in :func:`circle_cluster_count`, keeping
    those that hold at least ``min_mass`` of the tokens (lighter arcs, such as stray tokens left between clusters,
    are counted in ``stray``).

    Returns a dict: ``count`` (0 when no gap exceeds ``max_gap``: the cloud covers the circle, no clusters yet),
    ``positions`` (the circular mean angle of each cluster kept, in [0, 2 pi), sorted), ``masses`` (the fraction
    of the tokens in each), ``gaps`` (the angle from each cluster's position to the next one's, cyclically: they
    sum to 2 pi) and ``smallest_gap`` (NaN with fewer than two clusters), ``spread`` (the largest angular
    half-width of a kept cluster: its furthest token from its position) and ``stray`` (the mass of the arcs
    dropped). Non-finite points are refused.

    Example:
        >>> import numpy as np
        >>> from attnflow.meanfield import circle_clusters
        >>> theta = np.r_[np.full(3, 0.1), np.full(1, 2.0)] + np.array([0.0, 0.01, -0.01, 0.0])
        >>> c = circle_clusters(theta, 0.3)
        >>> c["count"], np.round(c["positions"], 3).tolist(), c["masses"].tolist(), round(c["smallest_gap"], 3)
        (2, [0.1, 2.0], [0.75, 0.25], 1.9)
        >>> circle_clusters(theta, 0.3, min_mass=0.5)["stray"]
        0.25
    """
    check_points(points)
    v.check_positive("max_gap", max_gap, "the largest gap inside a cluster, in radians")
    if not (isinstance(min_mass, (int, float)) and 0 <= min_mass <= 1):
        raise InputError(f"min_mass must be a fraction of the tokens in [0, 1], got {min_mass!r}.")
    raw = np.asarray(points, np.float64)  # on the host, in float64 whatever JAX's mode
    angles_in = raw if raw.ndim == 1 else np.arctan2(raw[:, 1], raw[:, 0])
    theta = np.sort(np.mod(angles_in, 2 * np.pi))
    n = theta.size
    if not np.all(np.isfinite(theta)):
        raise InputError("points must be finite: a non-finite token has no angle.")
    gaps = np.diff(np.r_[theta, theta[0] + 2 * np.pi])  # gap after token i
    cuts = np.flatnonzero(gaps > max_gap)
    if cuts.size == 0:
        return {"count": 0, "positions": np.zeros(0), "masses": np.zeros(0), "gaps": np.zeros(0),
                "smallest_gap": math.nan, "spread": math.nan, "stray": 0.0}
    # rotated so that the first cluster starts right after the first cut; cluster k ends at cut k + 1
    angles = theta[np.roll(np.arange(n), -(cuts[0] + 1))]
    starts = np.r_[0, np.mod(cuts[1:] - cuts[0], n)]
    sizes = np.diff(np.r_[starts, n])
    centres = np.mod(np.arctan2(np.add.reduceat(np.sin(angles), starts), np.add.reduceat(np.cos(angles), starts)),
                     2 * np.pi)
    offsets = np.abs(np.angle(np.exp(1j * (angles - np.repeat(centres, sizes)))))
    widths = np.maximum.reduceat(offsets, starts)
    keep = sizes >= min_mass * n
    order = np.argsort(centres[keep])
    positions, masses = centres[keep][order], (sizes[keep] / n)[order]
    between = np.diff(np.r_[positions, positions[0] + 2 * np.pi]) if positions.size else np.zeros(0)
    return {"count": int(positions.size), "positions": positions, "masses": masses, "gaps": between,
            "smallest_gap": float(between.min()) if positions.size > 1 else math.nan,
            "spread": float(widths[keep].max()) if positions.size else math.nan,
            "stray": float(sizes[~keep].sum() / n)}
