r"""Exact clusters of tokens on :math:`S^{d-1}` without an n x n graph (host-side, NumPy / SciPy).

:func:`sphere_clusters` finds the connected components of :math:`\langle u_i, u_j\rangle \ge \cos\delta` from cubes of
diameter :math:`2\sin(\delta/2)`, each a clique of the graph, linking neighbouring cubes through one exact pair check.
"""

from __future__ import annotations

import math

import numpy as np
from jaxtyping import Array, Float

from ..errors import InputError

__all__ = ["sphere_clusters"]


#: cell pairs whose point counts multiply to at most this are checked by one vectorised distance matrix;
#: larger pairs build a k-d tree of one cell
_BRUTE_PAIRS = 4096


def _linked_cells(u: np.ndarray, cell: np.ndarray, members: list, pairs: np.ndarray, radius: float) -> np.ndarray:
    """Of the candidate cell pairs (p, 2), those holding a point pair within ``radius`` (chord), exactly: a cell's
    points are all within ``radius`` of each other, so only one cross pair per cell pair is needed. Pairs of
    cells already joined through others are skipped (union-find over the cells)."""
    from scipy.spatial import cKDTree

    parent = np.arange(len(members))

    def find(a):
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    first = np.array([m[0] for m in members])
    # every pair's first points first (vectorised): exact for pairs of single points, a link for many others
    close = np.sum((u[first[pairs[:, 0]]] - u[first[pairs[:, 1]]]) ** 2, axis=1) <= radius**2
    linked = [pairs[close]]
    for a, b in pairs[close]:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[ra] = rb
    sizes = np.array([len(m) for m in members])
    trees = {}
    found = []
    for a, b in pairs[~close & ((sizes[pairs[:, 0]] > 1) | (sizes[pairs[:, 1]] > 1))]:
        ra, rb = find(a), find(b)
        if ra == rb:
            continue
        pa, pb = u[members[a]], u[members[b]]
        if len(pa) * len(pb) <= _BRUTE_PAIRS:
            hit = bool(np.any(np.sum((pa[:, None, :] - pb[None, :, :]) ** 2, axis=-1) <= radius**2))
        else:
            small, big, key = (pa, pb, b) if len(pa) <= len(pb) else (pb, pa, a)
            if key not in trees:
                trees[key] = cKDTree(big)
            hit = bool(np.isfinite(trees[key].query(small, k=1, distance_upper_bound=radius * (1 + 1e-12))[0]).any())
        if hit:
            parent[ra] = rb
            found.append((a, b))
    return np.concatenate(linked + [np.asarray(found, int).reshape(-1, 2)])


def sphere_clusters(points: Float[Array, "n d"], max_gap: float, min_mass: float = 0.0) -> dict:
    r"""The clusters of tokens on :math:`S^{d-1}` and their geometry without an n x n graph (host-side, float64):
    the connected components of :math:`i \sim j \iff \langle u_i, u_j\rangle \ge \cos\delta` (:math:`u_i = x_i/|x_i|`,
    ``max_gap`` :math:`\delta` in radians), exactly, keeping those that hold at least ``min_mass`` of the tokens.

    The directions are binned into cubes of edge :math:`r/\sqrt d` (:math:`r = 2\sin(\delta/2)`, the chord of
    :math:`\delta`): every cube is a clique of the graph, so the components are those of the occupied cubes, two cubes
    being linked when some pair of their points is within r (checked for the cube pairs that can hold one: one
    vectorised pass over a representative of each, then exact checks, brute force or a k-d tree, only where the
    cubes are not already joined). O(n log n) for clouds whose cubes hold few points or that have formed clusters;
    the memory is O(n). The same components as :func:`attnflow.observables.clusters_above` with threshold
    :math:`\cos\delta` on unit tokens, and the same labels as :func:`attnflow.observables.cluster_geometry`.

    Returns a dict: ``count`` (clusters kept), ``labels`` (n,) (0 .. count - 1 in the order of each cluster's first
    token, -1 for tokens of dropped clusters), ``positions`` (count, d) (mean directions), ``masses``,
    ``smallest_gap`` (the smallest angle between two positions, from a k-d tree; NaN with fewer than two clusters),
    ``spread`` (the largest angle from a kept token to its cluster's position) and ``stray`` (the mass dropped).
    Non-finite or zero tokens are refused.

    Example:
        >>> import numpy as np
        >>> from attnflow.observables import sphere_clusters
        >>> x = np.array([[0, 0, 1.0], [0, 0.01, 1], [1, 0, 0], [0, 1, 0], [0, 1, 0.001]])
        >>> c = sphere_clusters(x, 0.05)
        >>> c["count"], c["masses"].tolist(), c["labels"].tolist(), round(c["smallest_gap"], 4)
        (3, [0.4, 0.2, 0.4], [0, 0, 1, 2, 2], 1.5653)
    """
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components
    from scipy.spatial import cKDTree

    raw = np.asarray(points, np.float64)
    if raw.ndim != 2 or raw.shape[0] == 0 or raw.shape[1] < 2:
        raise InputError(f"points must be tokens (n, d) with n >= 1 and d >= 2, got shape {raw.shape}.")
    if not np.all(np.isfinite(raw)):
        raise InputError("points must be finite: a non-finite token has no direction.")
    norms = np.linalg.norm(raw, axis=1, keepdims=True)
    if np.any(norms == 0):
        raise InputError("points must be nonzero: the zero token has no direction on the sphere.")
    if not (isinstance(max_gap, (int, float)) and 0 < max_gap < math.pi):
        raise InputError(f"max_gap must be an angle in (0, pi) radians, got {max_gap!r}.")
    if not (isinstance(min_mass, (int, float)) and 0 <= min_mass <= 1):
        raise InputError(f"min_mass must be a fraction of the tokens in [0, 1], got {min_mass!r}.")
    u = raw / norms
    n, d = u.shape
    radius = 2 * math.sin(max_gap / 2)
    edge = radius / math.sqrt(d) * (1 - 1e-12)  # a cube's diameter stays within the radius after rounding
    keys = np.floor(u / edge).astype(np.int64)
    cells, cell = np.unique(keys, axis=0, return_inverse=True)
    cell = cell.reshape(-1)
    order = np.argsort(cell, kind="stable")
    members = np.split(order, np.flatnonzero(np.diff(cell[order])) + 1)
    # cube pairs that can hold two points within the radius: their corners' nearest distance is at most r
    reach = radius + edge * math.sqrt(d)
    pairs = cKDTree(cells * edge).query_pairs(reach, output_type="ndarray") if len(cells) > 1 else np.zeros((0, 2), int)
    gap = np.maximum(np.abs(cells[pairs[:, 0]] - cells[pairs[:, 1]]) - 1, 0) * edge
    pairs = pairs[np.sum(gap**2, axis=1) <= radius**2]
    links = _linked_cells(u, cell, members, pairs, radius)
    m = len(cells)
    graph = coo_matrix((np.ones(len(links)), (links[:, 0], links[:, 1])), shape=(m, m))
    _, comp = connected_components(graph, directed=False)
    raw_labels = comp[cell]
    # clusters numbered in the order of their first token
    labels = numbered_by_first_token(raw_labels)
    total = int(labels.max()) + 1
    counts = np.bincount(labels, minlength=total)
    keep = counts >= min_mass * n
    new_index = np.cumsum(keep) - 1
    labels = np.where(keep[labels], new_index[labels], -1)
    return {**cluster_summary(u, labels, int(keep.sum())), "stray": float(1 - counts[keep].sum() / n)}


def numbered_by_first_token(raw: np.ndarray) -> np.ndarray:
    """Component labels renumbered 0, 1, ... in the order of each component's first token."""
    _, first, inverse = np.unique(raw, return_index=True, return_inverse=True)
    return np.argsort(np.argsort(first))[inverse.reshape(-1)]


def cluster_summary(u: np.ndarray, labels: np.ndarray, count: int) -> dict:
    """The geometry of labelled clusters of unit directions u (n, d): ``positions`` (mean directions), ``masses``
    (fractions of all n tokens), ``smallest_gap`` (the smallest angle between two positions, from a k-d tree; NaN
    below two clusters) and ``spread`` (the largest angle from a token to its cluster's position); tokens labelled
    -1 belong to no cluster. Shared by :func:`sphere_clusters` and :func:`attnflow.observables.cluster_geometry`."""
    from scipy.spatial import cKDTree

    n, d = u.shape
    kept = labels >= 0
    sums = np.zeros((count, d))
    np.add.at(sums, labels[kept], u[kept])
    positions = sums / np.linalg.norm(sums, axis=1, keepdims=True)
    masses = np.bincount(labels[kept], minlength=count) / n
    if count >= 2:
        chord = cKDTree(positions).query(positions, k=2)[0][:, 1].min()
        smallest_gap = float(2 * np.arcsin(min(chord / 2, 1.0)))
    else:
        smallest_gap = math.nan
    cos_to_centre = np.clip(np.sum(u[kept] * positions[labels[kept]], axis=1), -1.0, 1.0)
    return {"count": count, "labels": labels, "positions": positions, "masses": masses,
            "smallest_gap": smallest_gap, "spread": float(np.arccos(cos_to_centre.min())) if count else math.nan}
