r"""Pair statistics of a token cloud, for phase diagrams and metastability.

On the sphere (tokens of unit norm) two tokens are *clustered* when their inner product is
at least a threshold :math:`\theta` (default 0.999, i.e. an angle below about 2.6 degrees);
in :math:`\mathbb{R}^d` when their distance is at most a fixed radius. From the resulting
graph :math:`i \sim j`:

* :func:`pairs_clustered`: the fraction of the :math:`n(n-1)` ordered off-diagonal pairs that are
  clustered (1 for a single cluster, 0 for well-spread tokens);
* :func:`connected_components` / :func:`count_components`: the clusters as connected components
  of the graph, exact even when "clustered" is not transitive (the rank of a thresholded Gram
  matrix is not a cluster count then);
* :func:`interaction_energy`: :math:`E_\beta = \frac{1}{2\beta n^2}\sum_{i,j} e^{\beta\langle x_i, x_j\rangle}`,
  which the sphere flow increases;
* :func:`span_dimension`: the number of eigenvalues of the Gram matrix above a tolerance relative
  to its trace;
* :func:`inner_product_range`: the smallest and largest off-diagonal inner product.

All are pure JAX (jit / vmap / use as a ``save_fn``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from .. import _validate as v
from .._x64 import keeps_float64
from ._clusters import components_and_pairs, connected_components, pairwise_distances

#: The peers' statistic: inner products of at least 0.999 count as one cluster.
DEFAULT_THRESHOLD = 0.999
#: symmetric matrices up to this size count their eigenvalues with the pivot recurrence unrolled (no loop)
UNROLLED_PIVOTS = 4


def _tokens(x) -> Float[Array, "n d"]:
    v.check_array("x", x, "tokens (n, d); vmap for a batch", ranks=(2,), nonempty=True)
    return v.as_float(x)


def _graph(gram, threshold) -> Bool[Array, "n n"]:
    return (gram >= threshold) | jnp.eye(gram.shape[0], dtype=bool)


def _off_diagonal_entries(a: Array) -> Array:
    """The n(n-1) off-diagonal entries of a square (n, n) array as an (n - 1, n) view, without a mask.

    Row-major, entry (i, j) sits at i (n + 1) + (j - i) of the flattened array: dropping its first
    element and cutting rows of n + 1 puts every diagonal entry in the last column. XLA reads the
    view in place, so a reduction over it costs one pass over the matrix (a mask costs a second).
    """
    n = a.shape[0]
    return a.reshape(-1)[1:].reshape(n - 1, n + 1)[:, :n]


def _energy(gram, beta, top=None) -> Float[Array, ""]:
    """The interaction energy from the Gram matrix; ``top``: its largest entry, when the caller has it."""
    n = gram.shape[0]
    beta = jnp.asarray(beta, gram.dtype)
    top = jnp.max(gram) if top is None else top
    # logsumexp of beta G with its maximum beta max(G) (x -> beta x is increasing, also after rounding)
    shift = jax.lax.stop_gradient(beta * top)
    shift = jnp.where(jnp.isfinite(shift), shift, 0)
    log_sum = jnp.log(jnp.sum(jnp.exp(beta * gram - shift))) + shift
    return jnp.exp(log_sum - jnp.log(2 * beta * n * n))


@keeps_float64
def sphere_energy_from_row_sums(row_sums: Float[Array, " n"], beta) -> Float[Array, ""]:
    r"""The interaction energy of n tokens on the unit sphere from the row sums
    :math:`r_i = \sum_j e^{\beta\langle x_i, x_j\rangle - m_i}` of an attention step's max-shifted
    exponentials (:func:`attnflow.kernels.attend_with_row_sums` of :math:`(\beta x, x, x)`).

    On the unit sphere the row maximum is the diagonal, :math:`m_i = \beta |x_i|^2 = \beta`, so
    :math:`E_\beta = e^{\beta} \sum_i r_i / (2\beta n^2)`, in log form. Tokens of norm :math:`1 \pm \delta`
    put each :math:`m_i` within :math:`2\beta\delta` of :math:`\beta`: a relative error of at most
    :math:`2\beta\delta` (:math:`\delta` a few units of rounding for normalised tokens, 4e-15 at
    :math:`\beta = 9` in float64), the size of the rounding differences of :func:`interaction_energy` itself.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.kernels import attend_with_row_sums
        >>> from attnflow.observables import interaction_energy
        >>> from attnflow.observables import sphere_energy_from_row_sums
        >>> x = jnp.array([[1.0, 0.0], [0.6, 0.8], [0.0, -1.0]])
        >>> _, sums = attend_with_row_sums(3.0 * x, x, x)
        >>> bool(jnp.isclose(sphere_energy_from_row_sums(sums, 3.0), interaction_energy(x, 3.0), rtol=1e-6))
        True
    """
    n = row_sums.shape[0]
    beta = jnp.asarray(beta, row_sums.dtype)
    return jnp.exp(beta + jnp.log(jnp.sum(row_sums)) - jnp.log(2 * beta * n * n))


def _off_diagonal(gram) -> tuple[Array, Array, Array]:
    """Smallest, mean and largest off-diagonal entry (NaN for n = 1)."""
    n = gram.shape[0]
    if n == 1:
        nan = jnp.asarray(jnp.nan, gram.dtype)
        return nan, nan, nan
    off = _off_diagonal_entries(gram)
    return jnp.min(off), jnp.sum(off) / (n * (n - 1)), jnp.max(off)


@keeps_float64
def gram_statistics(gram: Float[Array, "n n"], beta, threshold=DEFAULT_THRESHOLD, *, energy=None) -> dict:
    r"""The pair statistics of one Gram matrix :math:`G_{ij} = \langle x_i, x_j\rangle`, formed once by the caller.

    Keys: ``pairs_clustered`` (:func:`pairs_clustered`), ``clusters`` (:func:`clusters_above`),
    ``energy`` (:func:`interaction_energy`), ``ip_min``, ``ip_mean``, ``ip_max`` (the smallest, mean
    and largest off-diagonal entry; :func:`inner_product_range`); counts as floats of G's dtype,
    so that the dict can be a ``save_fn`` output. ``energy``: the energy when the caller has it already
    (:func:`sphere_energy_from_row_sums`), instead of the exponentials of G.

    See also:
        :func:`attnflow.geometry.soft_pair_fraction` for a differentiable ``pairs_clustered``: this count is
        piecewise constant in the tokens, so its gradient is 0 wherever it exists (``jax.grad`` returns 0, not
        an error).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.observables import gram_statistics
        >>> x = jnp.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
        >>> s = gram_statistics(x @ x.T, 1.0)
        >>> round(float(s["pairs_clustered"]), 6), int(s["clusters"]), round(float(s["ip_mean"]), 6)
        (0.333333, 2, 0.333333)
    """
    n = gram.shape[0]
    labels, pairs = components_and_pairs(_graph(gram, threshold))  # both counts from one reading of the graph
    lo, mean, hi = _off_diagonal(gram)
    if energy is None:  # the log-sum-exp's shift: the largest diagonal entry bounds every entry of a Gram
        # matrix (|G_ij| <= |x_i| |x_j|, Cauchy-Schwarz), and it needs no pass over the off-diagonal entries
        energy = _energy(gram, beta, jnp.max(jnp.diagonal(gram)))
    return {"pairs_clustered": pairs.astype(gram.dtype) / max(n * (n - 1), 1),
            "clusters": _label_count(labels).astype(gram.dtype),
            "energy": jnp.asarray(energy, gram.dtype), "ip_min": lo, "ip_mean": mean, "ip_max": hi}


@keeps_float64
def similar_pairs(x: Float[Array, "n d"], threshold=DEFAULT_THRESHOLD) -> Bool[Array, "n n"]:
    r"""The graph :math:`i \sim j \iff \langle x_i, x_j\rangle \ge \theta` (the diagonal included).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.observables import similar_pairs
        >>> x = jnp.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
        >>> similar_pairs(x, 0.999).astype(int).tolist()
        [[1, 1, 0], [1, 1, 0], [0, 0, 1]]
    """
    x = _tokens(x)
    return _graph(x @ x.T, threshold)


@keeps_float64
def close_pairs(x: Float[Array, "n d"], radius) -> Bool[Array, "n n"]:
    r"""The graph :math:`i \sim j \iff |x_i - x_j| \le r` in :math:`\mathbb{R}^d` (``radius`` r: a fixed length).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.observables import close_pairs
        >>> close_pairs(jnp.array([[0.0], [0.05], [3.0]]), 0.1).astype(int).tolist()
        [[1, 1, 0], [1, 1, 0], [0, 0, 1]]
    """
    return pairwise_distances(_tokens(x)) <= radius


def pair_fraction(adjacent: Bool[Array, "n n"]) -> Float[Array, ""]:
    r"""Fraction of the :math:`n(n-1)` ordered pairs :math:`i \ne j` joined in ``adjacent`` (0 when n = 1).

    See also:
        :func:`attnflow.geometry.soft_pair_fraction`, smooth in the tokens, for the graph of
        :func:`similar_pairs`: this count is piecewise constant in the tokens, so its gradient is 0 wherever it
        exists (``jax.grad`` returns 0, not an error).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.observables import pair_fraction
        >>> round(float(pair_fraction(jnp.array([[1, 1, 0], [1, 1, 0], [0, 0, 1]], bool))), 6)  # 2 of 6
        0.333333
    """
    n = adjacent.shape[0]
    if n == 1:
        return jnp.zeros((), float)
    return jnp.sum(_off_diagonal_entries(adjacent)) / (n * (n - 1))


def count_components(adjacent: Bool[Array, "n n"]) -> Int[Array, ""]:
    """Number of connected components of ``adjacent`` (see :func:`connected_components`).

    See also:
        :func:`attnflow.geometry.soft_cluster_count`, smooth in the tokens: this count is piecewise constant in
        the tokens, so its gradient is 0 wherever it exists (``jax.grad`` returns 0, not an error).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.observables import count_components
        >>> int(count_components(jnp.eye(3, dtype=bool)))
        3
    """
    return _label_count(connected_components(adjacent))


def _label_count(labels: Int[Array, " n"]) -> Int[Array, ""]:
    """Number of components of :func:`connected_components`' labels (the nodes that are their own label)."""
    return jnp.sum(labels == jnp.arange(labels.shape[0])).astype(jnp.int32)


@keeps_float64
def pairs_clustered(x: Float[Array, "n d"], threshold=DEFAULT_THRESHOLD) -> Float[Array, ""]:
    r"""Fraction of ordered pairs :math:`i \ne j` with :math:`\langle x_i, x_j\rangle \ge \theta`.

    See also:
        :func:`attnflow.geometry.soft_pair_fraction` (same threshold, a width ``temperature``), smooth in x:
        this count is piecewise constant in the tokens, so its gradient is 0 wherever it exists (``jax.grad``
        returns 0, not an error).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.observables import pairs_clustered
        >>> x = jnp.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
        >>> round(float(pairs_clustered(x)), 6)   # 4 of the 12 ordered pairs
        0.333333
    """
    return pair_fraction(similar_pairs(x, threshold))


@keeps_float64
def clusters_above(x: Float[Array, "n d"], threshold=DEFAULT_THRESHOLD) -> Int[Array, ""]:
    r"""Number of clusters: connected components of :math:`\langle x_i, x_j\rangle \ge \theta`.

    See also:
        :func:`attnflow.geometry.soft_cluster_count` (for unit tokens, inner product :math:`\theta` is distance
        :math:`\sqrt{2 - 2\theta}`): this count is piecewise constant in the tokens, so its gradient is 0
        wherever it exists (``jax.grad`` returns 0, not an error).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.observables import clusters_above
        >>> int(clusters_above(jnp.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])))
        2
    """
    return count_components(similar_pairs(x, threshold))


@keeps_float64
def interaction_energy(x: Float[Array, "n d"], beta) -> Float[Array, ""]:
    r""":math:`E_\beta(x) = \frac{1}{2\beta n^2}\sum_{i,j} e^{\beta\langle x_i, x_j\rangle}`, the energy the sphere flow climbs.

    Computed as :math:`\exp(\mathrm{logsumexp}_{ij}(\beta\langle x_i,x_j\rangle) - \log(2\beta n^2))`, so it is
    finite whenever the energy itself is representable; it is ``inf`` (never a wrong finite
    number) when it is not.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.observables import interaction_energy
        >>> x = jnp.array([[1.0, 0.0], [1.0, 0.0]])      # one cluster: E = e^beta / (2 beta)
        >>> round(float(interaction_energy(x, 2.0)), 5), round(float(jnp.exp(2.0) / 4), 5)
        (1.84726, 1.84726)
    """
    x = _tokens(x)
    v.check_beta("beta", beta, "the inverse temperature of the energy", scalar=True)
    return _energy(x @ x.T, beta)


def _tridiagonal(a: Float[Array, "m m"]) -> tuple[Float[Array, " m"], Float[Array, " m1"]]:
    r"""Diagonal and subdiagonal of a tridiagonal :math:`T = H^\top a H` (Householder reflections, pure jnp).

    Step k reflects the entries below the diagonal of column k onto one, :math:`P = I - 2vv^\top`:
    with :math:`p = a v` and :math:`w = p - (v^\top p)\, v`, :math:`PaP = a - 2vw^\top - 2wv^\top`
    (backward stable, as LAPACK's ``sytrd``). Written with masks instead of shrinking slices, so one
    ``fori_loop`` body serves every step, under vmap as well. No LAPACK call: a batched LAPACK kernel on
    several XLA:CPU devices can deadlock the shared thread pool (:func:`attnflow.sweep.needs_per_system_loop`).
    """
    m = a.shape[0]
    index = jnp.arange(m)

    def reflect(k, a):
        x = jnp.where(index > k, a[:, k], 0)
        head = a[k + 1, k]
        alpha = -jnp.where(head >= 0, 1.0, -1.0).astype(a.dtype) * jnp.sqrt(jnp.sum(x * x))
        v = x - alpha * (index == k + 1)
        norm = jnp.sqrt(jnp.sum(v * v))
        v = jnp.where(norm > 0, v / jnp.where(norm > 0, norm, 1), 0)
        p = a @ v
        w = p - jnp.dot(v, p) * v
        return a - 2 * (jnp.outer(v, w) + jnp.outer(w, v))

    if m > 2:  # (a loop of no steps would still be traced and compiled)
        a = jax.lax.fori_loop(0, m - 2, reflect, a)
    return jnp.diagonal(a), jnp.diagonal(a, offset=-1)


def _eigenvalues_above(a: Float[Array, "m m"], tau) -> Int[Array, ""]:
    r"""Number of eigenvalues of the symmetric matrix ``a`` above ``tau``, without computing them.

    ``a`` is reduced to a tridiagonal T (:func:`_tridiagonal`; no eigenvectors are formed); by
    Sylvester's law of inertia the count is that of the positive pivots :math:`q_i` of
    :math:`T - \tau I = LDL^\top`, :math:`q_1 = t_{11} - \tau`,
    :math:`q_i = t_{ii} - \tau - t_{i,i-1}^2 / q_{i-1}` (the Sturm count of bisection eigensolvers,
    backward stable: exact for a matrix within rounding of ``a``, as eigenvalues from ``eigvalsh`` are).
    A pivot below the tiny safe minimum counts as not positive.
    """
    m = a.shape[0]
    if m == 1:
        return (a[0, 0] > tau).astype(jnp.int32)
    diag, off = _tridiagonal(a)  # m = 2: already tridiagonal (no reflection)
    squares = jnp.concatenate([jnp.zeros(1, a.dtype), off * off])
    pivmin = jnp.finfo(a.dtype).tiny * jnp.maximum(1.0, jnp.max(squares))

    def pivot(q, entry):
        t, b2 = entry
        q = t - tau - b2 / q
        q = jnp.where(jnp.abs(q) < pivmin, -pivmin, q)
        return q, q > 0

    _, positive = jax.lax.scan(pivot, jnp.ones((), a.dtype), (diag, squares), unroll=m <= UNROLLED_PIVOTS)
    return jnp.sum(positive).astype(jnp.int32)


@keeps_float64
def span_dimension(x: Float[Array, "n d"], rel_tol: float = 1e-6) -> Int[Array, ""]:
    r"""Dimension of the span of the tokens: eigenvalues of the Gram matrix above ``rel_tol`` times its trace.

    Uses the smaller of the Gram matrix :math:`X X^\top` (n x n) and :math:`X^\top X` (d x d), which have
    the same non-zero eigenvalues (n = 32 tokens in d = 128: a 32 x 32 matrix instead of 128 x 128), and
    counts its eigenvalues above the tolerance without computing them (a Sturm count of its tridiagonal
    form: a few times cheaper than ``eigvalsh``, which forms eigenvectors on CPU); the tolerance is
    relative to the trace :math:`\sum_i |x_i|^2`, a fixed scale (n for tokens on the unit sphere). A zero
    cloud has dimension 0.

    See also:
        :func:`attnflow.geometry.soft_rank` of ``x @ x.T`` with ``temperature=rel_tol`` and ``scale`` the trace,
        smooth in x: this count is piecewise constant in the tokens, so its gradient is 0 wherever it exists
        (``jax.grad`` returns 0, not an error).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.observables import span_dimension
        >>> int(span_dimension(jnp.array([[1.0, 0.0, 0.0], [2.0, 0.0, 0.0], [0.0, 1.0, 0.0]])))
        2
    """
    x = _tokens(x)
    v.check_positive("rel_tol", rel_tol, "the tolerance relative to the trace, a finite positive scalar")
    trace = jnp.sum(x * x)
    gram = x @ x.T if x.shape[0] < x.shape[1] else x.T @ x
    return _eigenvalues_above(gram, rel_tol * trace) * (trace > 0)


@keeps_float64
def inner_product_range(x: Float[Array, "n d"]) -> Float[Array, " 2"]:
    r"""``[min, max]`` of :math:`\langle x_i, x_j\rangle` over pairs :math:`i \ne j` (``[nan, nan]`` when n = 1).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.observables import inner_product_range
        >>> inner_product_range(jnp.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])).tolist()
        [-1.0, 0.0]
    """
    x = _tokens(x)
    lo, _, hi = _off_diagonal(x @ x.T)
    return jnp.stack([lo, hi])
