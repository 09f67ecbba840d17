r"""Clusters of a configuration: connected components of the graph
:math:`i \sim j \iff |y_i - y_j| \le \tau`, with :math:`\tau = \text{rel\_tol}\cdot s`
relative to the configuration's scale :math:`s` (its diameter, or a scale you pass).

Pure JAX (jit/vmap-able), exact (:func:`connected_components`): up to 32 nodes, bit sets of reachable
nodes squared a fixed :math:`\lceil\log_2(n-1)\rceil` times; above, labels spread to neighbours until
nothing changes; each sweep costs :math:`O(n^2)`, a pointer jump per sweep shortens long chains, and the number of sweeps is
at most the largest hop distance inside a cluster (a few for clustered configurations), so n = 1024 costs about what one attention matrix does.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from .. import _validate as v
from .._x64 import keeps_float64

__all__ = [
    "pairwise_distances",
    "diameter",
    "directions",
    "cluster_labels",
    "num_clusters",
    "cluster_tolerance",
    "connected_components",
]


@keeps_float64
@v.jit_entry
def pairwise_distances(y: Float[Array, "n d"]) -> Float[Array, "n n"]:
    r"""Euclidean distances :math:`|y_i - y_j|` (exactly 0 on the diagonal).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.observables import pairwise_distances
        >>> float(pairwise_distances(jnp.array([[0.0, 0.0], [3.0, 4.0]]))[0, 1])
        5.0
    """
    v.check_array("y", y, "tokens (n, d); vmap for a batch", ranks=(2,), nonempty=True)
    y = v.as_float(y)
    diff = y[:, None, :] - y[None, :, :]
    sq = jnp.sum(diff * diff, axis=-1)
    # sqrt has an infinite derivative at 0: guard the diagonal (and exact ties).
    safe = jnp.where(sq > 0, sq, jnp.ones_like(sq))
    return jnp.where(sq > 0, jnp.sqrt(safe), jnp.zeros_like(sq))


@keeps_float64
@v.jit_entry
def diameter(y: Float[Array, "n d"]) -> Float[Array, ""]:
    r""":math:`\max_{i,j} |y_i - y_j|`.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.observables import diameter
        >>> float(diameter(jnp.array([[0.0], [1.0], [3.0]])))
        3.0
    """
    return jnp.max(pairwise_distances(y))


@keeps_float64
@v.jit_entry
def directions(x: Float[Array, "n d"]) -> Float[Array, "n d"]:
    r"""Directions :math:`x_i / |x_i|` (a zero token stays 0).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.observables import directions
        >>> directions(jnp.array([[0.0, 4.0], [0.0, 0.0]])).tolist()
        [[0.0, 1.0], [0.0, 0.0]]
    """
    v.check_array("x", x, "tokens (n, d); vmap for a batch", ranks=(2,), nonempty=True)
    norm = jnp.linalg.norm(x, axis=-1, keepdims=True)
    return jnp.where(norm > 0, x / jnp.where(norm > 0, norm, 1), 0 * x)


#: graphs of at most this many nodes take the bit-set closure of :func:`connected_components` (one uint32 per node)
BITSET_MAX_NODES = 32


def _neighbour_bits(adjacent: Bool[Array, "n n"]) -> Array:
    """Row i of a symmetric graph of n <= 32 nodes as a bit set (one uint32: bit j set when j ~ i)."""
    index = jnp.arange(adjacent.shape[0], dtype=jnp.uint32)
    bits = jnp.left_shift(jnp.uint32(1), index)
    return jnp.sum(jnp.where(adjacent, bits[:, None], jnp.uint32(0)), axis=0, dtype=jnp.uint32)  # distinct bits


def _closure_labels(reach: Array) -> Int[Array, " n"]:
    r"""Component labels of a symmetric graph of n <= 32 nodes (given as :func:`_neighbour_bits`, the diagonal
    set) by repeated squaring of its reachability.

    Node i's reach is a bit set (one uint32); :math:`\lceil\log_2(n-1)\rceil` rounds of
    :math:`R_i \leftarrow \bigcup_{j \in R_i} R_j` double the path length covered, so the last holds i's
    whole component, and its lowest set bit is the label. A fixed number of rounds, no data-dependent
    loop: under ``vmap`` every member does the same work, which XLA runs without a batched ``while``.
    """
    n = reach.shape[0]
    index = jnp.arange(n, dtype=jnp.uint32)
    for _ in range(math.ceil(math.log2(n - 1)) if n > 2 else 0):
        member = (jnp.right_shift(reach[None, :], index[:, None]) & 1).astype(bool)  # [j, i]: j in R_i
        reach = jax.lax.reduce(jnp.where(member, reach[:, None], jnp.uint32(0)), jnp.uint32(0), jax.lax.bitwise_or,
                               (0,))
    lowest = reach & (~reach + jnp.uint32(1))
    return jax.lax.population_count(lowest - jnp.uint32(1)).astype(jnp.int32)


def connected_components(adjacent: Bool[Array, "n n"]) -> Int[Array, " n"]:
    r"""Label of every node: the smallest index in its connected component of ``adjacent`` (symmetric).

    Exact for any symmetric graph, transitive or not. Up to :data:`BITSET_MAX_NODES` nodes: the closure
    of bit sets by repeated squaring (:math:`\lceil\log_2(n-1)\rceil` rounds of :math:`O(n^2)` bit
    operations). Larger graphs: labels spread to neighbours (each node takes the smallest label among
    its neighbours and itself), followed by one pointer jump :math:`\ell_i \leftarrow \ell_{\ell_i}` per
    sweep, until nothing changes; each sweep costs :math:`O(n^2)`. Both read the graph by columns
    (column i equals row i of a symmetric graph): a reduction over the leading axis runs in vector
    lanes on CPU, several times faster than one over each short row.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.observables import connected_components
        >>> chain = jnp.array([[1, 1, 0, 0], [1, 1, 1, 0], [0, 1, 1, 0], [0, 0, 0, 1]], bool)
        >>> connected_components(chain).tolist()   # 0 ~ 1 ~ 2 although 0 and 2 are not joined
        [0, 0, 0, 3]
    """
    return components_and_pairs(adjacent)[0]


def components_and_pairs(adjacent: Bool[Array, "n n"]) -> tuple[Int[Array, " n"], Int[Array, ""]]:
    """:func:`connected_components` of ``adjacent`` (symmetric) and the number of ordered pairs i != j it
    joins, from one reading of the graph: up to :data:`BITSET_MAX_NODES` nodes the pairs are the set bits
    of the rows the closure starts from (a popcount per row, no second pass over the n x n graph).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.observables._clusters import components_and_pairs
        >>> chain = jnp.array([[1, 1, 0, 0], [1, 1, 1, 0], [0, 1, 1, 0], [0, 0, 0, 1]], bool)
        >>> labels, pairs = components_and_pairs(chain)
        >>> labels.tolist(), int(pairs)
        ([0, 0, 0, 3], 4)
    """
    n = adjacent.shape[0]
    adjacent = adjacent | jnp.eye(n, dtype=bool)
    if n <= BITSET_MAX_NODES:
        rows = _neighbour_bits(adjacent)
        return _closure_labels(rows), jnp.sum(jax.lax.population_count(rows).astype(jnp.int32)) - n
    big = jnp.int32(n)

    def sweep(state):
        labels, _ = state
        new = jnp.min(jnp.where(adjacent, labels[:, None], big), axis=0)
        new = new[new]  # labels never exceed their node's index, so the jump stays in the component
        return new, jnp.any(new != labels)

    labels, _ = jax.lax.while_loop(lambda s: s[1], sweep, (jnp.arange(n, dtype=jnp.int32), jnp.asarray(True)))
    return labels, jnp.sum(adjacent, dtype=jnp.int32) - n


@keeps_float64
@v.jit_entry
def cluster_tolerance(y: Float[Array, "n d"], rel_tol: float = 1e-2, scale=None) -> Float[Array, ""]:
    r"""The absolute threshold :math:`\tau = \text{rel\_tol}\cdot s`, with
    :math:`s` = ``scale`` or, by default, the diameter of ``y`` (floored at the tiny
    positive number of its dtype so that a collapsed configuration is one cluster).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.observables import cluster_tolerance
        >>> round(float(cluster_tolerance(jnp.array([[0.0], [2.0]]), rel_tol=0.1)), 6)  # float32: ~7 digits
        0.2
    """
    v.check_array("y", y, "tokens (n, d); vmap for a batch", ranks=(2,), nonempty=True)
    v.check_positive("rel_tol", rel_tol, "the cluster tolerance relative to the scale, a finite positive scalar")
    if scale is not None:
        v.check_positive("scale", scale, "the unit of length, a finite positive scalar")
    y = v.as_float(y)
    s = diameter(y) if scale is None else jnp.asarray(scale, y.dtype)
    return rel_tol * jnp.maximum(s, jnp.finfo(y.dtype).tiny)


@keeps_float64
@v.jit_entry
def cluster_labels(
    y: Float[Array, "n d"], rel_tol: float = 1e-2, scale=None
) -> Int[Array, " n"]:
    r"""Cluster label of every token: the smallest index in its connected component
    under :math:`|y_i - y_j| \le` :func:`cluster_tolerance`.

    See also:
        :func:`attnflow.geometry.soft_cluster_count`, smooth in y: labels are piecewise constant in the tokens,
        so their gradient is 0 wherever it exists (``jax.grad`` returns 0, not an error).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.observables import cluster_labels
        >>> y = jnp.array([[0.0, 0.0], [1.0, 0.0], [0.001, 0.0], [1.0, 0.002]])
        >>> cluster_labels(y, rel_tol=0.01).tolist()
        [0, 1, 0, 1]
    """
    v.check_array("y", y, "tokens (n, d); vmap for a batch", ranks=(2,), nonempty=True)
    tau = cluster_tolerance(y, rel_tol, scale)
    return connected_components(pairwise_distances(y) <= tau)


@keeps_float64
@v.jit_entry
def num_clusters(y: Float[Array, "n d"], rel_tol: float = 1e-2, scale=None) -> Int[Array, ""]:
    r"""Number of clusters (connected components, see :func:`cluster_labels`).

    See also:
        :func:`attnflow.geometry.soft_cluster_count` (``temperature`` :math:`\approx` ``rel_tol``, the same
        fixed ``scale``), smooth in y: this count is piecewise constant in the tokens, so its gradient is 0
        wherever it exists (``jax.grad`` returns 0, not an error).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.observables import num_clusters
        >>> int(num_clusters(jnp.array([[0.0], [0.0001], [1.0], [2.0]])))
        3
    """
    labels = cluster_labels(y, rel_tol, scale)
    return jnp.sum(labels == jnp.arange(y.shape[0])).astype(jnp.int32)
