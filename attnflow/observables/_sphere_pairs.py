r"""The pair statistics of :func:`~attnflow.observables.gram_statistics` for tokens in :math:`\mathbb{R}^3`,
without an n x n matrix: an octree of cubes and a k-d tree on the host, the energy from the sphere path's sums.

For the directions :math:`u_i = x_i/|x_i|` on :math:`S^2` an inner product is a chord,
:math:`|u_i - u_j|^2 = 2 - 2\langle u_i, u_j\rangle`, so the threshold graph
:math:`\langle u_i, u_j\rangle \ge \theta` joins the tokens within the chord :math:`r = \sqrt{2 - 2\theta}`:

* **pairs and clusters.** The tokens are sorted into cubes of edge :math:`c < r/\sqrt3`, whose diameter is below r:
  each cube's tokens are joined pairwise and form one connected piece. Two cubes can hold a joined pair only if
  they are at most two cubes apart along every axis; each such pair of occupied cubes is walked down an octree of
  halved cubes (a dual-tree count): two bounding balls farther apart than r hold no joined pair, two within r all
  of theirs, the others are split into their children or, once they hold at most :data:`PAIR_BY_PAIR` pairs,
  compared pair by pair with the dense graph's test ``<u_i, u_j> >= threshold``. The ordered pairs are the sum;
  the clusters are the components of the cubes joined by at least one pair. A collapsed cluster is one cube
  (counted from its size), a spread cloud costs about the pairs near the chord r;
* **the largest off-diagonal inner product** is that of each token's nearest other token (a k-d tree query);
* **the smallest** is :math:`\min_i f(u_i)` with :math:`f(a) = \min_j\langle a, u_j\rangle` (a k-d tree query of
  :math:`-a`), searched by groups: :math:`|f(a) - f(a')| \le |a - a'|`, so a group whose first token is above the
  best value by more than the group's diameter is dropped, the others are split in eight;
* **the mean off-diagonal inner product** is :math:`(|\sum_i u_i|^2 - \sum_i |u_i|^2)/(n(n-1))`;
* **the energy** :math:`\frac{1}{2\beta n^2}\sum_{ij} e^{\beta\langle u_i, u_j\rangle}` from the row sums
  :math:`D_i = \sum_j e^{\beta(\langle u_i, u_j\rangle - 1)}` of the sphere path
  (:func:`attnflow.kernels.sphere.harmonic_sums`, O(n L^2), exact to rounding at the degree of an upper bound of
  beta), or the caller's (the identity sphere's field computes them anyway).

The counts equal the dense ones (every undecided pair is the dense test on a float64 product; a box decides only
with a margin of :data:`CUBE_MARGIN` of r); the inner products and the energy agree to rounding. The host part
runs in float64 on the directions renormalised there, through :func:`jax.pure_callback` (traceable under jit and
vmap: the phase job's ``save_fn`` at large n; one call per cloud; measured at n = 10^5 on a 2-core AMD EPYC: 0.2-0.8
s a cloud, uniform or clustered, benchmarks/NOTES.md). Tokens of norm 0 have the direction 0, inner product 0 with
every token, as in the dense statistics.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .. import _validate as v
from .._x64 import keeps_float64
from ..errors import InputError
from ..kernels.sphere import HarmonicPlan, harmonic_sums
from ._clusters import directions
from ._pairs import DEFAULT_THRESHOLD, sphere_energy_from_row_sums

__all__ = ["sphere_gram_statistics"]

#: the cubes' edge is r / sqrt(3) times (1 - CUBE_MARGIN): a cube's diameter stays below the threshold's chord by
#: far more than the rounding of a chord (a few units of float64 rounding), so every pair in a cube is joined
CUBE_MARGIN = 1e-6
#: the largest threshold the cubes allow: its chord r = sqrt(2 - 2 theta) >= 1.4e-5 keeps the cubes' grid
#: (about 2 sqrt(3) / r cells along each axis) indexable by one int64
MAX_THRESHOLD = 1.0 - 1e-10
#: two cubes whose bounding balls straddle the chord r compare their pairs of tokens one by one (vectorised) up to
#: this many pairs; larger ones are split into their children
PAIR_BY_PAIR = 1024
#: inner products computed at once
PAIR_BATCH = 1 << 21
#: the farthest pair's groups of at most this many tokens query every token (larger ones split in eight)
QUERY_GROUP = 64


@keeps_float64
def sphere_gram_statistics(x: Float[Array, "n 3"], beta, threshold=DEFAULT_THRESHOLD, *, energy=None,
                           max_beta=None) -> dict:
    r"""The keys of :func:`~attnflow.observables.gram_statistics` (``pairs_clustered``, ``clusters``, ``energy``,
    ``ip_min``, ``ip_mean``, ``ip_max``) for tokens in :math:`\mathbb{R}^3` (n, 3), n >= 2, read on their
    directions, without an n x n matrix (module docstring): the pair statistics on the host (an octree of cubes and
    a k-d tree, about O(n log n) for clouds of clusters or of uniform tokens), the energy from the sphere path's
    sums in O(n L^2). Traceable (jit, vmap: one host call per cloud).

    ``energy``: the energy when the caller has it already (the identity sphere's row sums,
    :func:`sphere_energy_from_row_sums`); otherwise it is computed at the degree of ``max_beta``, an upper bound of
    beta (default beta itself, which must then be concrete). ``threshold`` in (0, :data:`MAX_THRESHOLD`].

    See also:
        :func:`circle_gram_statistics` in the plane; :func:`attnflow.geometry.soft_pair_fraction` for a
        differentiable ``pairs_clustered``: the counts here are piecewise constant in the tokens, so their gradient
        is 0 wherever it exists. The host's four numbers (the counts, the smallest and largest inner product) carry
        a zero derivative here (``jax.grad`` returns 0); the energy and the mean inner product are differentiable.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from attnflow.observables import gram_statistics, sphere_gram_statistics
        >>> x = jax.random.normal(jax.random.key(0), (400, 3))
        >>> u = x / jnp.linalg.norm(x, axis=1, keepdims=True)
        >>> fast, dense = sphere_gram_statistics(u, 2.0, 0.95), gram_statistics(u @ u.T, 2.0, 0.95)
        >>> int(fast["clusters"]) == int(dense["clusters"]), float(fast["pairs_clustered"] - dense["pairs_clustered"])
        (True, 0.0)
        >>> all(abs(float(fast[k] - dense[k])) < 1e-5 for k in ("energy", "ip_min", "ip_mean", "ip_max"))
        True
    """
    shape = v.check_array("x", x, "tokens (n, 3), at least two", ranks=(2,))
    if shape[1] != 3 or shape[0] < 2:
        raise InputError(f"x must be tokens (n, 3) in R^3, at least two, got shape {shape}; tokens in the plane "
                         "have circle_gram_statistics, other d the dense gram_statistics.")
    v.check_beta("beta", beta, "the inverse temperature of the energy", scalar=True)
    if v.is_traced(threshold) or not 0 < float(threshold) <= MAX_THRESHOLD:
        raise InputError(f"threshold must be a concrete inner product in (0, {MAX_THRESHOLD!r}] (the grid of cubes "
                         f"is built from its chord), got {threshold!r}.")
    if energy is None:
        if max_beta is None:
            if v.is_traced(beta):
                raise InputError("sphere_gram_statistics got a traced beta and no max_beta: give max_beta=, an upper "
                                 "bound of beta that fixes the sphere path's degree, or the energy itself.")
            max_beta = beta
        v.check_beta("max_beta", max_beta, "an upper bound of beta (it fixes the sphere path's degree)", scalar=True)
        if v.is_traced(max_beta):
            raise InputError(f"max_beta must be a concrete number (it fixes the sphere path's degree), got "
                             f"{max_beta!r}.")
        if v.is_concrete(beta) and float(np.asarray(beta)) > float(max_beta) * (1 + 1e-12):
            raise InputError(f"max_beta = {float(max_beta):.6g} is below beta = {float(np.asarray(beta)):.6g}; "
                             "raise it (it only sets the sphere path's degree).")
        max_beta = float(max_beta)
    return _sphere_statistics(v.as_float(x), beta, float(threshold), energy, max_beta)


def _sphere_statistics(x, beta, threshold: float, energy, max_beta) -> dict:
    u = directions(x)
    n, dtype = u.shape[0], u.dtype
    beta = jnp.asarray(beta, dtype)
    if energy is None:
        zero = ~jnp.any(u != 0, axis=1)
        east = jnp.eye(3, dtype=dtype)[0]
        unit = jnp.where(zero[:, None], east, u)  # the sphere path reads unit vectors: zero tokens put at e_1
        row_sums, _ = harmonic_sums(unit, beta, HarmonicPlan(max_beta, auto=False))
        energy = sphere_energy_from_row_sums(_zero_token_rows(u, zero, row_sums, beta), beta)
    # counts and extremes are piecewise constant or need no derivative here: the host call sees no tangent
    pairs, clusters, ip_min, ip_max = _on_host(lambda a: host_sphere_pairs(a, threshold), jax.lax.stop_gradient(u), 4)
    total = jnp.sum(u, axis=0)
    ip_mean = (jnp.sum(total * total) - jnp.sum(u * u)) / (n * (n - 1))
    return {"pairs_clustered": pairs / (n * (n - 1)), "clusters": clusters, "energy": jnp.asarray(energy, dtype),
            "ip_min": ip_min, "ip_mean": ip_mean, "ip_max": ip_max}


def _on_host(fn, u: Array, size: int) -> Array:
    """``fn(u)`` (NumPy float64, shape (size,)) called on the host through :func:`jax.pure_callback`, returned in u's
    dtype. Float64 arrays travel both ways as their bits in uint32 pairs: the callback runs on XLA's thread, where a
    float64 mode that the caller set for its own thread (``jax.enable_x64`` as a context) does not hold, and JAX
    would narrow float64 arguments and results to float32 there. (A program sharded over several CPU devices must
    not call it: the callback waits for its argument on the pool that runs the devices;
    :func:`attnflow.runs.callback_mesh`.)"""
    if u.dtype != jnp.float64:
        spec = jax.ShapeDtypeStruct((size,), u.dtype)
        return jax.pure_callback(lambda a: fn(np.asarray(a)).astype(u.dtype), spec, u, vmap_method="sequential")

    def host(bits):
        values = np.ascontiguousarray(np.asarray(bits, np.uint32)).view(np.float64)[..., 0]
        return np.ascontiguousarray(fn(values), np.float64).view(np.uint32).reshape(size, 2)

    spec = jax.ShapeDtypeStruct((size, 2), jnp.uint32)
    bits = jax.pure_callback(host, spec, jax.lax.bitcast_convert_type(u, jnp.uint32), vmap_method="sequential")
    return jax.lax.bitcast_convert_type(bits, jnp.float64)


def _zero_token_rows(u, zero, row_sums, beta):
    r"""The row sums :math:`D_i = \sum_j e^{\beta(\langle u_i, u_j\rangle - 1)}` where some directions are 0: the
    sphere path summed the k zero tokens as :math:`e_1`, so a unit row trades their k terms
    :math:`e^{\beta(u_{i1} - 1)}` for :math:`k e^{-\beta}` (their inner product is 0), and a zero row (every score
    0) is :math:`n e^{-\beta}`. O(n)."""
    k = jnp.sum(zero).astype(u.dtype)
    e = jnp.exp(-beta)
    unit_rows = row_sums - k * jnp.exp(beta * (u[:, 0] - 1)) + k * e
    return jnp.where(zero, u.shape[0] * e, unit_rows)


# -- the host part ------------------------------------------------------------------------------------------------


def host_sphere_pairs(u: np.ndarray, threshold: float) -> np.ndarray:
    r"""(ordered pairs :math:`i \ne j` with :math:`\langle u_i, u_j\rangle \ge \theta`, components of that graph,
    smallest and largest off-diagonal inner product) of directions u (n, 3) (rows of norm 1 or 0), in float64 on
    the host; NaN for all four where a direction is not finite.

    Example:
        >>> import numpy as np
        >>> from attnflow.observables._sphere_pairs import host_sphere_pairs
        >>> u = np.array([[1.0, 0, 0], [1.0, 0, 0], [0, 1.0, 0], [0, -1.0, 0]])
        >>> host_sphere_pairs(u, 0.99).tolist()
        [2.0, 3.0, -1.0, 1.0]
    """
    from scipy.spatial import cKDTree

    u = np.asarray(u, np.float64)
    n = u.shape[0]
    if not np.all(np.isfinite(u)):
        return np.full(4, np.nan)
    nonzero = np.any(u != 0, axis=1)
    w = u[nonzero]
    w = w / np.linalg.norm(w, axis=1, keepdims=True)
    m, zeros = w.shape[0], n - w.shape[0]
    if m < 2:  # zero tokens: inner product 0 with every token, so (threshold > 0) each is a cluster of its own
        return np.array([0.0, float(n), 0.0, 0.0])
    tree = cKDTree(w)
    # the closest pair: each token's nearest other (a duplicate is at chord 0)
    near, j = tree.query(w, k=2)
    i = int(np.argmin(near[:, 1]))
    top = float(w[i] @ w[j[i, 1]])
    bottom = _farthest_pair(w, tree)
    pairs, clusters = _threshold_graph(w, threshold)
    if zeros:
        top, bottom = max(top, 0.0), min(bottom, 0.0)
    return np.array([float(pairs), float(clusters + zeros), bottom, top])


def _spread_bits(k: np.ndarray) -> np.ndarray:
    """Every bit of 21-bit integers moved to every third place (for the Morton order of three axes)."""
    k = k.astype(np.uint64) & np.uint64(0x1FFFFF)
    for shift, mask in ((32, 0x1F00000000FFFF), (16, 0x1F0000FF0000FF), (8, 0x100F00F00F00F00F),
                        (4, 0x10C30C30C30C30C3), (2, 0x1249249249249249)):
        k = (k | (k << np.uint64(shift))) & np.uint64(mask)
    return k


class _Octree:
    r"""Unit rows w (m, 3) sorted in the Morton order of a grid of cubes of edge ``edge / 2**depth``, so that the
    cubes of every coarser grid (edge ``edge / 2**k``, k = 0..depth, with the same origin) are runs of the sorted
    rows, each cube's eight children runs inside its own. Per level k: ``starts[k]`` (K_k + 1,) the runs,
    ``mid[k]`` (K_k, 3) and ``radius[k]`` (K_k,) the balls around the bounding boxes of their rows (centre and half
    diagonal), ``children[k]`` (K_k + 1,) the range of
    level k + 1 cubes inside each cube; ``keys0`` (K_0, 3) the integer coordinates of the level-0 cubes."""

    def __init__(self, w: np.ndarray, edge: float):
        # the finest level: at most 21 bits per axis for the grid over [-2, 2]^3 (the rows lie in [-1, 1]^3)
        depth = int(max(0, min(12, math.floor(math.log2(2.0 ** 20 * edge / 4.0)))))
        keys = np.floor((w + 2.0) / (edge / 2.0 ** depth)).astype(np.int64)
        code = _spread_bits(keys[:, 0]) | (_spread_bits(keys[:, 1]) << np.uint64(1)) | (
            _spread_bits(keys[:, 2]) << np.uint64(2))
        order = np.argsort(code, kind="stable")
        self.rows, code = w[order], code[order]
        self.starts, self.mid, self.radius, self.children = [], [], [], []
        for k in range(depth + 1):
            level = code >> np.uint64(3 * (depth - k))
            starts = np.concatenate([[0], np.flatnonzero(level[1:] != level[:-1]) + 1, [len(level)]])
            self.starts.append(starts)
            lo = np.minimum.reduceat(self.rows, starts[:-1], axis=0)
            hi = np.maximum.reduceat(self.rows, starts[:-1], axis=0)
            self.mid.append((lo + hi) / 2)
            self.radius.append(np.sqrt(np.sum((hi - lo) ** 2, axis=1)) / 2)
        for k in range(depth):
            self.children.append(np.searchsorted(self.starts[k + 1], self.starts[k]))
        self.depth = depth
        self.keys0 = keys[order][self.starts[0][:-1]] >> depth

    def sizes(self, k: int) -> np.ndarray:
        return np.diff(self.starts[k])

    def neighbours(self) -> tuple[np.ndarray, np.ndarray]:
        """Every pair (a, b) of occupied level-0 cubes at most two apart along each axis, each pair once."""
        span = self.keys0.max(axis=0) + 3
        linear = (self.keys0[:, 0] * span[1] + self.keys0[:, 1]) * span[2] + self.keys0[:, 2]
        order = np.argsort(linear)
        ordered = linear[order]
        count = linear.size
        first, second = [], []
        for a, b, c in ((a, b, c) for a in range(-2, 3) for b in range(-2, 3) for c in range(-2, 3)
                        if (a, b, c) > (0, 0, 0)):
            shifted = linear + (a * span[1] + b) * span[2] + c
            at = np.minimum(np.searchsorted(ordered, shifted), count - 1)
            hit = ordered[at] == shifted
            first.append(np.flatnonzero(hit))
            second.append(order[at[hit]])
        return np.concatenate(first), np.concatenate(second)


def _threshold_graph(w: np.ndarray, threshold: float) -> tuple[int, int]:
    """(ordered pairs i != j with <w_i, w_j> >= theta, components of that graph) of unit rows w (m, 3).

    Cubes of diameter below the chord r are joined pieces. Occupied cubes at most two apart along every axis may
    hold joined pairs; each such pair of cubes is walked down the octree of cubes (a dual-tree count): two bounding
    balls farther apart than r hold no joined pair, two within r all of theirs, and the others are split into their
    children, or compared row by row once they are small. The components of the cubes joined by at least one pair
    are the graph's."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    r = math.sqrt(2.0 - 2.0 * threshold)
    tree = _Octree(w, r / math.sqrt(3.0) * (1.0 - CUBE_MARGIN))
    sizes0 = tree.sizes(0)
    within = int(np.sum(sizes0 * (sizes0 - 1)))
    count = sizes0.size
    if count == 1:
        return within, 1
    first, second = tree.neighbours()
    across = np.zeros(first.size, np.int64)
    owner = np.arange(first.size)
    a, b, k = first, second, 0
    while a.size:
        gap = np.sqrt(np.sum((tree.mid[k][a] - tree.mid[k][b]) ** 2, axis=1))
        reach = tree.radius[k][a] + tree.radius[k][b]
        near, far = gap - reach, gap + reach
        size_a, size_b = tree.sizes(k)[a], tree.sizes(k)[b]
        every = far < r * (1.0 - CUBE_MARGIN)
        across += np.bincount(owner[every], weights=(size_a * size_b)[every], minlength=across.size).astype(np.int64)
        open_ = ~every & (near <= r * (1.0 + CUBE_MARGIN))
        one_by_one = open_ & ((size_a * size_b <= PAIR_BY_PAIR) | (k == tree.depth))
        if np.any(one_by_one):
            across += np.bincount(owner[one_by_one], minlength=across.size, weights=_pairs_across(
                tree.rows, tree.starts[k], a[one_by_one], b[one_by_one], threshold)).astype(np.int64)
        split = open_ & ~one_by_one
        a, b, owner = _child_pairs(tree.children[k] if k < tree.depth else None, a[split], b[split], owner[split])
        k += 1
    joined = across > 0
    graph = coo_matrix((np.ones(int(joined.sum())), (first[joined], second[joined])), shape=(count, count))
    components, _ = connected_components(graph, directed=False)
    return within + 2 * int(across.sum()), int(components)


def _child_pairs(children, a, b, owner):
    """The pairs of children of the cube pairs (a[k], b[k]) (one level down), each with its owner."""
    if a.size == 0:
        return a, b, owner
    ca, cb = children[a], children[b]
    na, nb = children[a + 1] - ca, children[b + 1] - cb
    product = na * nb
    pair = np.repeat(np.arange(a.size), product)
    local = np.arange(int(product.sum())) - np.repeat(np.cumsum(product) - product, product)
    return ca[pair] + local // nb[pair], cb[pair] + local % nb[pair], owner[pair]


def _pairs_across(rows, starts, a, b, threshold) -> np.ndarray:
    """For each pair of cubes (a[k], b[k]) (runs ``starts`` of the sorted rows): how many of its pairs of rows have
    inner product >= theta, every pair compared; the pairs of cubes of the same two sizes at once (their rows as
    (pairs, size, 3) blocks), in batches of about :data:`PAIR_BATCH` inner products."""
    out = np.zeros(a.size, np.int64)
    size_a, size_b = np.diff(starts)[a], np.diff(starts)[b]
    shape = size_a.astype(np.int64) * (int(size_b.max()) + 1) + size_b
    order = np.argsort(shape, kind="stable")
    bounds = np.flatnonzero(np.diff(shape[order])) + 1
    for group in np.split(order, bounds):
        sa, sb = int(size_a[group[0]]), int(size_b[group[0]])
        if sa * sb > PAIR_BATCH:  # two large cubes at the finest level: their rows in slices
            width = max(1, PAIR_BATCH // sb)
            for k in group:
                rb = rows[starts[b[k]]:starts[b[k] + 1]]
                out[k] = sum(np.count_nonzero(rows[i:min(i + width, starts[a[k] + 1])] @ rb.T >= threshold)
                             for i in range(starts[a[k]], starts[a[k] + 1], width))
            continue
        step = PAIR_BATCH // (sa * sb)
        for lo in range(0, group.size, step):
            k = group[lo:lo + step]
            ra = rows[starts[a[k]][:, None] + np.arange(sa)]
            rb = rows[starts[b[k]][:, None] + np.arange(sb)]
            out[k] = np.count_nonzero(np.matmul(ra, rb.transpose(0, 2, 1)) >= threshold, axis=(1, 2))
    return out


def _farthest_pair(w: np.ndarray, tree) -> float:
    r"""The smallest inner product :math:`\min_{i \ne j}\langle w_i, w_j\rangle` of unit rows w, exactly: with
    :math:`f(a) = \min_j \langle a, w_j\rangle` (a k-d tree query of :math:`-a`), :math:`|f(a) - f(a')| \le
    |a - a'|`, so a group of rows whose first row has :math:`f` above the best value found by more than the
    group's diameter holds no better row. Groups are split in eight at their box's middle, level by level, and
    queried whole from :data:`QUERY_GROUP` rows down: a cloud of tight clusters asks a few hundred queries, a spread
    cloud every row (where each query is short)."""
    best = np.inf

    def query(rows: np.ndarray) -> np.ndarray:
        _, j = tree.query(-w[rows], k=1)
        return np.sum(w[rows] * w[j], axis=1)

    groups = [np.arange(w.shape[0])]
    while groups:
        whole = [g for g in groups if g.size <= QUERY_GROUP]
        if whole:
            best = min(best, float(np.min(query(np.concatenate(whole)))))
        split = [g for g in groups if g.size > QUERY_GROUP]
        if not split:
            break
        f = query(np.array([g[0] for g in split]))
        best = min(best, float(np.min(f)))
        groups = []
        for g, head in zip(split, f):
            pts = w[g]
            lo, hi = pts.min(axis=0), pts.max(axis=0)
            if np.all(hi == lo) or head - float(np.linalg.norm(hi - lo)) > best:
                continue  # rows equal to the first have its value; a group this far above the best has no better
            octant = (pts > (lo + hi) / 2) @ np.array([1, 2, 4])
            parts = [g[octant == o] for o in np.unique(octant)]
            if len(parts) == 1:  # a box too narrow to halve in floating point: every row queried
                best = min(best, float(np.min(query(g))))
            else:
                groups.extend(parts)
    return best
