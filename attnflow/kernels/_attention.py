r"""The attention kernel: one max-subtracted softmax, used by every dynamics.

For tokens stored as rows of an array ``x`` of shape (n, d) and weights Q, K of
shape (m, d), the attention matrix is

.. math::  P_{ij} = \frac{\exp(\beta \langle Q x_i, K x_j\rangle)}
                        {\sum_l \exp(\beta \langle Q x_i, K x_l\rangle)},

row-stochastic with positive entries. Scores grow like :math:`e^{2\lambda t}` along
the flow, so the softmax always subtracts the row maximum before exponentiating.

``attend(q, k, v)`` computes ``softmax(q k^T) v`` without keeping P; it is the one
hot spot of every vector field, and the place where faster implementations plug in.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float

from .. import _validate as v
from ..errors import InputError
from . import _flash, _positions, _tiled

__all__ = ["softmax", "scores", "project_qk", "attention_matrix", "attend", "select_impl", "CHUNK_THRESHOLD",
           "NORMALISATIONS", "flash_preferred", "GPU_FLASH_THRESHOLD"]

#: how the exponentiated scores are normalised: ``"softmax"`` divides by the row sum
#: :math:`\sum_l e^{s_l}` (row-stochastic P), ``"mean"`` by the number of keys n
#: (unnormalised attention, :math:`P_{ij} = e^{s_{ij}}/n`)
NORMALISATIONS = ("softmax", "mean")


def _check_normalisation(normalisation: str) -> None:
    if normalisation not in NORMALISATIONS:
        from ..errors import InputError

        raise InputError(f"normalisation must be one of {NORMALISATIONS}, got {normalisation!r}.")


def softmax(s: Float[Array, "... n"], axis: int = -1, where: Bool[Array, "... n"] | None = None,
            normalisation: str = "softmax") -> Float[Array, "... n"]:
    r"""Max-subtracted softmax along ``axis``: :math:`e^{s_j - \max s} / \sum_l e^{s_l - \max s}`.

    Finite for any finite input (scores of size 1e4 and beyond) and invariant to
    adding a constant to a row. ``where`` (boolean, broadcastable to ``s``) restricts the
    sum to the admissible entries (a mask); the others get probability 0, and a row with no
    admissible entry is all zeros (never NaN).

    ``normalisation="mean"`` gives unnormalised attention :math:`e^{s_j}/n` (n = the length
    of ``axis``, masked entries included; rows no longer sum to one), computed as
    :math:`e^{s_j - \max s}\, e^{\max s}/n` on the same path (it overflows where
    :math:`e^{\max s}` does, as the formula itself does).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow import softmax
        >>> p = softmax(jnp.array([[1e4, 1e4 - 1.0, 0.0]]))
        >>> bool(jnp.isclose(p.sum(), 1.0))
        True
    """
    _check_normalisation(normalisation)
    shape = v.check_array("s", s, "scores with the axis to normalise", min_rank=1)
    if isinstance(axis, bool) or not isinstance(axis, int) or not -len(shape) <= axis < len(shape) or not shape[axis]:
        raise InputError(f"axis must be an int naming a non-empty axis of s (shape {shape}), got {axis!r}.")
    if where is not None and not _broadcasts(v.shape_of("where", where), shape):
        raise InputError(f"where must be a boolean array broadcastable to the shape {shape} of s, "
                         f"got shape {v.shape_of('where', where)}.")
    s = v.as_float(s)
    e, total, s_max = _exponentials(s, axis, where)
    return _normalise(e, total, s_max, s.shape[axis], normalisation)


def _exponentials(s, axis: int = -1, where=None):
    """The pieces of a max-subtracted softmax along ``axis``: e = exp(s - max s) (0 where masked),
    the row sums (1 for a row with no admissible entry) and the row maxima (kept dims)."""
    if where is None:
        s_max = jax.lax.stop_gradient(jnp.max(s, axis=axis, keepdims=True))
        e = jnp.exp(s - s_max)
        total = jnp.sum(e, axis=axis, keepdims=True)
    else:
        where = jnp.broadcast_to(where, s.shape)
        s_max = jax.lax.stop_gradient(jnp.max(jnp.where(where, s, -jnp.inf), axis=axis, keepdims=True))
        s_max = jnp.where(jnp.isfinite(s_max), s_max, 0)
        e = jnp.where(where, jnp.exp(jnp.where(where, s - s_max, 0)), 0)
        total = jnp.sum(e, axis=axis, keepdims=True)
        total = jnp.where(total > 0, total, 1)
    return e, total, s_max


def _normalise(u, total, s_max, n: int, normalisation: str):
    """Rows of u (e itself, or e @ v) divided by the softmax denominator (``"softmax"``), or times
    e^{max s}/n (``"mean"``). Normalising e @ v (n x r) instead of e (n x n) is the same
    number up to rounding and costs n r divisions instead of n^2 (benchmarks/NOTES.md section 8)."""
    if normalisation == "mean":
        return u * (jnp.exp(s_max) / n)
    return u / total


def scores(
    x: Float[Array, "n d"],
    Q: Float[Array, "m d"],
    K: Float[Array, "m d"],
    beta: float | Float[Array, ""] = 1.0,
) -> Float[Array, "n n"]:
    r"""Attention scores :math:`S_{ij} = \beta \langle Q x_i, K x_j \rangle = \beta\, x_i^T Q^T K x_j`.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow import scores
        >>> scores(jnp.eye(2), jnp.eye(2), 2 * jnp.eye(2)).tolist()
        [[2.0, 0.0], [0.0, 2.0]]
    """
    _check_tokens_qk(x, Q, K, beta)
    q, k = project_qk(v.as_float(x), v.as_float(Q), v.as_float(K), beta)
    return q @ k.T


def _check_tokens_qk(x, Q, K, beta) -> None:
    """x (n, d), Q and K (m, d): real, finite when concrete; beta a finite real scalar."""
    xs = v.check_array("x", x, "tokens (n, d); vmap for a batch", ranks=(2,))
    for name, a in (("Q", Q), ("K", K)):
        shape = v.check_array(name, a, "an (m, d) matrix", ranks=(2,))
        if shape[1] != xs[1]:
            raise InputError(f"{name} must have shape (m, {xs[1]}) to act on tokens of dimension {xs[1]}, "
                             f"got {shape}.")
    if v.shape_of("Q", Q) != v.shape_of("K", K):
        raise InputError(f"Q and K must have the same shape (m, d), got Q {v.shape_of('Q', Q)} and "
                         f"K {v.shape_of('K', K)}.")
    v.check_real("beta", beta, "the inverse temperature, a finite real scalar")


def project_qk(
    x: Float[Array, "n d"],
    Q: Float[Array, "m d"],
    K: Float[Array, "m d"],
    beta: float | Float[Array, ""] = 1.0,
    q_bias: Float[Array, " m"] | None = None,
    k_bias: Float[Array, " m"] | None = None,
    project: bool = False,
) -> tuple[Float[Array, "n r"], Float[Array, "n r"]]:
    r"""Queries and keys with :math:`q_i \cdot k_j = \beta \langle Q x_i + b_q, K x_j + b_k\rangle`.

    Without biases the scores depend on (Q, K) only through :math:`A = Q^T K` (d x d), and
    whichever route costs fewer flops for these static shapes is taken: through A
    (:math:`q_i = \beta A^T x_i`, :math:`k_j = x_j`; m d^2 + n d^2 + n^2 d) or through
    the projections (:math:`q_i = \beta Q x_i`, :math:`k_j = K x_j`; 2 n m d + n^2 m). ``project=True``
    always takes the projections (rotary positions rotate :math:`Q x_i` and :math:`K x_j`, not
    :math:`A^T x_i` and :math:`x_j`).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.kernels import project_qk
        >>> x, Q, K = jnp.eye(2), jnp.eye(2), 2 * jnp.eye(2)
        >>> q, k = project_qk(x, Q, K, 0.5, project=True)
        >>> (q @ k.T).tolist(), k.tolist()
        ([[1.0, 0.0], [0.0, 1.0]], [[2.0, 0.0], [0.0, 2.0]])
    """
    m, d = Q.shape
    n = x.shape[0]
    if not project and q_bias is None and k_bias is None and m * d * d + n * d * d + n * n * d < 2 * n * m * d + n * n * m:
        A = Q.T @ K
        return beta * (x @ A), x
    q, k = x @ Q.T, x @ K.T
    if q_bias is not None:
        q = q + q_bias
    if k_bias is not None:
        k = k + k_bias
    return beta * q, k


def attention_matrix(
    x: Float[Array, "n d"],
    Q: Float[Array, "m d"],
    K: Float[Array, "m d"],
    beta: float | Float[Array, ""] = 1.0,
) -> Float[Array, "n n"]:
    r"""The attention matrix :math:`P = \mathrm{softmax}_{\text{rows}}(\beta\, x Q^T K x^T)`.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from attnflow import attention_matrix
        >>> x = jax.random.normal(jax.random.key(0), (5, 3))
        >>> P = attention_matrix(x, jnp.eye(3), jnp.eye(3))
        >>> bool(jnp.allclose(P.sum(axis=1), 1.0)) and bool((P > 0).all())
        True
    """
    return softmax(scores(x, Q, K, beta), axis=-1)


#: automatic selection: the chunked path is used when one system's score matrix
#: would hold at least this many entries (n_q * n_k); 1024^2 by default, where the tiled
#: path becomes faster than dense on CPU (benchmarks/NOTES.md sections 2 and 3).
CHUNK_THRESHOLD = 1024 * 1024
#: on GPU dense matmuls are cheap and loops are not: tile only when the scores of one
#: system would take ~1 GiB in float32, and use larger tiles
GPU_CHUNK_THRESHOLD = 16384 * 16384
GPU_CHUNK = 4096
IMPLS = ("auto", "dense", "chunked", "fused", "flash", "fourier", "harmonic")
_FUSED_DTYPES = ("float16", "bfloat16")  # what cuDNN flash attention computes exactly


def causal_mask(n_q: int, n_k: int) -> Bool[Array, "n_q n_k"]:
    """Boolean mask of causal attention: query i may attend to keys j <= i.

    Example:
        >>> from attnflow.kernels import causal_mask
        >>> causal_mask(3, 3).astype(int).tolist()
        [[1, 0, 0], [1, 1, 0], [1, 1, 1]]
    """
    return jnp.arange(n_k)[None, :] <= jnp.arange(n_q)[:, None]


def _broadcasts(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    """True when an array of ``shape`` broadcasts to ``target`` (without changing it)."""
    try:
        return np.broadcast_shapes(shape, target) == tuple(target)
    except ValueError:
        return False


def check_mask(mask, n_q: int | None = None, n_k: int | None = None) -> None:
    """Check a mask argument: None, ``"causal"``, or a boolean (or 0/1 integer) array of rank <= 2,
    broadcastable to (n_q, n_k) when those are given. Static: also runs under ``jit``."""
    if mask is None or (isinstance(mask, str) and mask == "causal"):
        return
    want = "mask must be None, 'causal' or a boolean array (n_q, n_k)"
    if isinstance(mask, (str, bytes)):
        raise InputError(f"{want}, got {mask!r}.")
    shape, dtype = v.shape_of("mask", mask), v.dtype_of(mask)
    if dtype.kind not in "biu" or len(shape) > 2:
        raise InputError(f"{want}, got an array of dtype {dtype} and shape {shape}.")
    if n_q is not None and not _broadcasts(shape, (n_q, n_k)):
        raise InputError(f"{want} with (n_q, n_k) = ({n_q}, {n_k}) here, got shape {shape}.")


def mask_array(mask, n_q: int, n_k: int) -> Bool[Array, "n_q n_k"] | None:
    """A mask argument (None, ``"causal"`` or a boolean array) as a boolean (n_q, n_k) array."""
    check_mask(mask, n_q, n_k)
    if mask is None:
        return None
    if isinstance(mask, str):
        return causal_mask(n_q, n_k)
    return jnp.broadcast_to(jnp.asarray(mask, bool), (n_q, n_k))


def _dense_attend(q, k, v, mask=None, normalisation="softmax", slope=None):
    where = mask_array(mask, q.shape[0], k.shape[0])
    if slope is not None:
        return _dense_biased_attend(q, k, v, where, slope, normalisation)
    if where is None:
        return _dense_softmax_attend(q, k, v, normalisation)
    return _dense_softmax_attend_masked(q, k, v, where, normalisation)


def _dense_biased_attend(q, k, v, where, slope, normalisation):
    r""":math:`\mathrm{softmax}(q k^T + b)\, v` with the ALiBi bias :math:`b_{ij} = -\lambda|i - j|/n_2`
    (:func:`attnflow.kernels.alibi_bias`); derivatives (also in :math:`\lambda`) by autodiff."""
    n_q, n_k = q.shape[0], k.shape[0]
    s = q @ k.T + _positions.alibi_tile(slope, jnp.arange(n_q), jnp.arange(n_k), n_k, q.dtype)
    e, total, s_max = _exponentials(s, -1, where)
    return _normalise(e @ v, total, s_max, n_k, normalisation)


def _dense_tangent(P, q, k, v, dq, dk, dv, normalisation):
    r"""Exact tangent of :math:`O = P v`, :math:`P = \mathrm{softmax}(q k^T)`:
    :math:`dO = dP\,v + P\,dv`, :math:`dP = P\odot(ds - \mathrm{rowsum}(P\odot ds))`,
    :math:`ds = dq\,k^T + q\,dk^T` (``"mean"``: :math:`dP = P\odot ds`). Masked entries have
    P = 0, so they get no tangent. Written as one linear map of (dq, dk, dv) whose only
    nonlinear residual is P: its transpose (reverse mode) is the lean backward pass
    (4 matmuls of size n^2 r, no exp), instead of autodiff through exp / sum / divide."""
    Pds = P * (dq @ k.T + q @ dk.T)
    dP = Pds - P * jnp.sum(Pds, axis=-1, keepdims=True) if normalisation == "softmax" else Pds
    return dP @ v + P @ dv


def _dense_forward(q, k, v, where, normalisation, with_P: bool = False):
    """P v with P = softmax(q k^T), normalised after the product (:func:`_normalise`); with
    ``with_P`` also P itself (the tangent's residual)."""
    e, total, s_max = _exponentials(q @ k.T, -1, where)
    norm = lambda u: _normalise(u, total, s_max, k.shape[0], normalisation)
    return (norm(e @ v), norm(e)) if with_P else norm(e @ v)


def attend_with_row_sums(q: Float[Array, "n r"], k: Float[Array, "n2 r"], v: Float[Array, "n2 e"],
                         normalisation: str = "softmax") -> tuple[Float[Array, "n e"], Float[Array, " n"]]:
    r"""The dense :func:`attend` (no mask) and the row sums :math:`r_i = \sum_j e^{s_{ij} - m_i}` of its
    max-shifted exponentials (:math:`s = q k^T`, :math:`m_i = \max_j s_{ij}`), computed together.

    With the row maxima known in advance (tokens of unit norm with :math:`q = \beta x`, :math:`k = x`:
    :math:`m_i = \beta` to rounding), :math:`\sum_j e^{s_{ij}} = e^{m_i} r_i` comes with the step for free;
    the maxima themselves are not returned, as asking XLA:CPU for them splits the softmax's fused loop
    (benchmarks/NOTES.md). For the phase job's energies; reverse-mode users call :func:`attend`.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.kernels import attend_with_row_sums
        >>> out, sums = attend_with_row_sums(jnp.zeros((2, 1)), jnp.zeros((2, 1)), jnp.array([[0.0], [2.0]]))
        >>> out.tolist(), sums.tolist()
        ([[1.0], [1.0]], [2.0, 2.0])
    """
    _check_normalisation(normalisation)
    _check_qkv(q, k, v)
    e, total, s_max = _exponentials(q @ k.T)
    return _normalise(e @ v, total, s_max, k.shape[0], normalisation), total[..., 0]


@functools.partial(jax.custom_jvp, nondiff_argnums=(3,))
def _dense_softmax_attend(q, k, v, normalisation):
    return _dense_forward(q, k, v, None, normalisation)


@_dense_softmax_attend.defjvp
def _dense_softmax_attend_jvp(normalisation, primals, tangents):
    q, k, v = primals
    out, P = _dense_forward(q, k, v, None, normalisation, with_P=True)
    return out, _dense_tangent(P, q, k, v, *tangents, normalisation)


@functools.partial(jax.custom_jvp, nondiff_argnums=(4,))
def _dense_softmax_attend_masked(q, k, v, where, normalisation):
    return _dense_forward(q, k, v, where, normalisation)


@_dense_softmax_attend_masked.defjvp
def _dense_softmax_attend_masked_jvp(normalisation, primals, tangents):
    q, k, v, where = primals
    dq, dk, dv, _ = tangents
    out, P = _dense_forward(q, k, v, where, normalisation, with_P=True)
    return out, _dense_tangent(P, q, k, v, dq, dk, dv, normalisation)


def _fused_attend(q, k, v, implementation=None, mask=None):
    """``jax.nn.dot_product_attention`` with scale 1 (zero-padding heads to one width)."""
    h = max(q.shape[-1], v.shape[-1])
    pad = lambda a: jnp.pad(a, ((0, 0), (0, h - a.shape[-1])))[:, None, :]  # (T, 1, H)
    causal = isinstance(mask, str) and mask == "causal"
    dense_mask = None if (mask is None or causal) else mask_array(mask, q.shape[0], k.shape[0])[None]
    out = jax.nn.dot_product_attention(pad(q), pad(k), pad(v), scale=1.0, implementation=implementation,
                                       is_causal=causal, mask=dense_mask)
    return out[:, 0, : v.shape[-1]]


def fused_is_exact(q, k, v) -> bool:
    """Whether the GPU's fused (cuDNN) kernel computes exactly our scale-1 attention here.

    cuDNN flash attention supports only half-precision inputs (and head width <= 128
    after padding); float32/float64 simulations therefore use the dense or chunked
    path, which are exact in their dtype.
    """
    return (
        jax.default_backend() == "gpu"
        and q.dtype.name in _FUSED_DTYPES
        and max(q.shape[-1], v.shape[-1]) <= 128
    )


#: on the GPU, float32 attention with at least this many scores per system takes the fused kernel
#: (``"flash"``) when its products are TF32x3 (JAX's default matmul precision): on an H200 at
#: (256 systems, n = 4096, d = 64) it ran one attention evaluation in 20.1 ms against 41.6 ms for the dense
#: path and 30.4 ms for PyTorch's fused SDPA; in IEEE float32 (``jax_default_matmul_precision="highest"``)
#: it took 57.8 ms, slower than the dense path, so that setting keeps the dense / tiled paths
#: (benchmarks/NOTES.md, the H200 section)
GPU_FLASH_THRESHOLD = 4096 * 4096


def flash_preferred(n_q: int, n_k: int, dtype, backend: str | None = None) -> bool:
    """Whether ``impl="auto"`` takes the fused kernel (``"flash"``) for these shapes and dtype on ``backend``
    (default: JAX's default backend): GPU, float32, ``n_q * n_k >= GPU_FLASH_THRESHOLD`` and TF32x3 products.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.kernels import flash_preferred
        >>> flash_preferred(4096, 4096, jnp.float32, "gpu"), flash_preferred(4096, 4096, jnp.float32, "cpu")
        (True, False)
    """
    backend = backend or jax.default_backend()
    return (backend == "gpu" and jnp.dtype(dtype) == jnp.float32 and n_q * n_k >= GPU_FLASH_THRESHOLD
            and _flash.resolved_precision(_flash.FLASH_DEFAULT.precision) == "tf32x3")


def select_impl(n_q: int, n_k: int, q=None, k=None, v=None) -> str:
    """The implementation ``impl="auto"`` picks for these (static) shapes.

    Example:
        >>> from attnflow.kernels import select_impl
        >>> select_impl(256, 256), select_impl(100_000, 100_000)
        ('dense', 'chunked')
    """
    if q is not None and fused_is_exact(q, k, v):
        return "fused"
    if q is not None and flash_preferred(n_q, n_k, q.dtype):
        return "flash"
    threshold = GPU_CHUNK_THRESHOLD if jax.default_backend() == "gpu" else CHUNK_THRESHOLD
    return "chunked" if n_q * n_k >= threshold else "dense"


def held_scores(n_q: int, n_k: int, itemsize: int = 4, impl: str = "auto") -> tuple[int, int]:
    """The block (rows, cols) of one (n_q, n_k) score matrix that :func:`attend` holds at once: all of it
    when dense (or fused), else one key tile times the query blocks the tiled path takes together
    (``impl="auto"`` as :func:`select_impl` picks from the shapes). Its size in bytes is
    ``rows * cols * itemsize``. The flows' Fourier path holds no score matrix, only O(n_q) numbers
    per mode: ``(n_q, 1)``.

    Example:
        >>> import jax
        >>> from attnflow.kernels import held_scores
        >>> held_scores(256, 256), jax.default_backend() != "cpu" or held_scores(4096, 4096, impl="chunked") == (2048, 512)
        ((256, 256), True)
    """
    impl = select_impl(n_q, n_k) if impl == "auto" else impl
    if impl == "fourier":
        return n_q, 1
    if impl == "flash":
        return min(n_q, _flash.FLASH_DEFAULT.block_q), min(n_k, _flash.FLASH_DEFAULT.block_k)
    if impl != "chunked":
        return n_q, n_k
    cols = min(n_k, _tiled.DEFAULT_CHUNK)
    rows = min(n_q, cols * (_tiled.blocks_at_once(-(-n_q // cols), cols, cols, int(itemsize)) or 1))
    return rows, cols


def _check_qkv(q, k, v_) -> None:
    """Static shape checks of attend: q (n, r), k (n2, r), v (n2, e), real arrays."""
    qs, ks, vs = (v.check_array(name, a, meaning, ranks=(2,)) for name, a, meaning in (
        ("q", q, "queries (n, r)"), ("k", k, "keys (n2, r)"), ("v", v_, "values (n2, e)")))
    if ks[1] != qs[1] or vs[0] != ks[0]:
        raise InputError(f"attend needs q (n, r), k (n2, r) and v (n2, e), got q {qs}, k {ks} and v {vs}.")


def attend(
    q: Float[Array, "n r"],
    k: Float[Array, "n2 r"],
    v: Float[Array, "n2 e"],
    *,
    impl: str = "auto",
    chunk_size: int | tuple[int, int] | None = None,
    mask: str | Bool[Array, "n n2"] | None = None,
    normalisation: str = "softmax",
    positions: _positions.Positions | str | dict | None = None,
) -> Float[Array, "n e"]:
    r"""Attention output :math:`\sum_j \mathrm{softmax}_j(q_i \cdot k_j)\, v_j` (scale 1).

    ``mask``: None (all keys), ``"causal"`` (query i attends to keys j <= i; the tiled path
    builds each tile's mask from indices, so memory stays O(n d)) or a boolean array
    broadcastable to (n, n2), True where query i may attend to key j; the softmax runs over
    the admissible keys only, and a row with none gives 0.

    ``impl`` (static, chosen from shapes only, so jit/vmap/grad see one branch):

    * ``"dense"``: materialise the (n, n2) scores, max-subtracted softmax, matmul.
    * ``"chunked"``: blocked online softmax (:func:`attnflow._tiled.chunked_attend`),
      memory O(n (r + e)) instead of O(n n2); same numbers to rounding.
    * ``"fused"``: ``jax.nn.dot_product_attention`` with scale 1 (cuDNN on GPU).
    * ``"flash"``: the online softmax as one Pallas kernel (:func:`~attnflow.kernels.flash_attend`;
      Triton on GPU, interpret mode elsewhere), exact in float32 and float64, masks None or ``"causal"``.
    * ``"auto"``: fused where it is exact (GPU, half precision), flash for float32 on the GPU at
      ``n * n2 >= GPU_FLASH_THRESHOLD`` with TF32x3 products (:func:`flash_preferred`), else chunked when
      ``n * n2 >= CHUNK_THRESHOLD`` (``GPU_CHUNK_THRESHOLD`` on GPU), else dense.
    * ``"fourier"``: not a kernel of ``attend``: the attention flows' O(n K) path for tokens on the
      circle (``attention_impl="fourier"`` of :class:`~attnflow.AttentionFlow` and
      :func:`~attnflow.dynamics.sphere_flow`, :mod:`attnflow.kernels.fourier`), which needs the weights'
      structure (:math:`\beta Q^T K` a scaled rotation), not only q and k; here it is an
      :class:`~attnflow.InputError`.
    * ``"harmonic"``: likewise the attention flows' O(n L^2) path for tokens on the sphere S^2
      (:math:`\beta Q^T K = c I`, :mod:`attnflow.kernels.sphere`); here an :class:`~attnflow.InputError`.

    ``positions``: where the tokens sit (:class:`~attnflow.kernels.Positions`, or its kind name / mapping,
    :func:`~attnflow.kernels.as_positions`): the ALiBi bias :math:`s_{ij} = q_i\cdot k_j - \lambda|i - j|/n_2`
    (with ``mask="causal"`` its causal form :math:`-\lambda(i - j)/n_2`; the tiled path builds it per tile from
    indices) and/or rotary positions (q_i and k_j rotated by :math:`p\,\theta_k`, :math:`\theta_k = b^{-2k/r}`,
    r even). The flash path takes both (its kernel adds the bias from each tile's indices, as the tiled path
    does; ``"auto"`` takes it for a bias where :func:`flash_preferred` says so: 4.2x the tiled path with a causal
    ALiBi bias on an NVIDIA H100); the fused path takes rotary positions but no bias.

    ``chunk_size``: tile edge of the chunked path (default 512 on CPU, 4096 on GPU).

    ``normalisation``: ``"softmax"`` (default) or ``"mean"``, unnormalised attention
    :math:`\frac1{n_2}\sum_j e^{q_i \cdot k_j} v_j` (see :func:`softmax`); the chunked path
    gets it from its log-sum-exp, the fused kernel has no such mode (``impl="auto"`` then
    picks dense or chunked).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow import attend
        >>> attend(jnp.zeros((2, 1)), jnp.zeros((2, 1)), jnp.array([[0.0], [2.0]])).tolist()
        [[1.0], [1.0]]
        >>> attend(jnp.zeros((2, 1)), jnp.zeros((2, 1)), jnp.array([[0.0], [2.0]]), impl="chunked").tolist()
        [[1.0], [1.0]]
        >>> attend(jnp.zeros((2, 1)), jnp.zeros((2, 1)), jnp.array([[0.0], [2.0]]), mask="causal").tolist()
        [[0.0], [1.0]]
        >>> attend(jnp.zeros((2, 1)), jnp.zeros((2, 1)), jnp.array([[0.0], [2.0]]), mask="causal",
        ...        normalisation="mean").tolist()
        [[0.0], [1.0]]
        >>> out = attend(jnp.zeros((2, 1)), jnp.zeros((2, 1)), jnp.array([[0.0], [2.0]]), positions={"alibi": 2.0})
        >>> [round(float(o), 4) for o in out[:, 0]]  # weights e^{-|i - j|} over both keys
        [0.5379, 1.4621]
    """
    if impl not in IMPLS:
        raise InputError(f"impl must be one of {IMPLS}, got {impl!r}.")
    if impl == "fourier":
        raise InputError("impl='fourier' is the attention flows' path for tokens on the circle (it needs beta Q^T K, "
                         "not only q and k): set attention_impl='fourier' on AttentionFlow or sphere_flow, or call "
                         "attnflow.kernels.fourier.circle_attention; attend takes 'auto', 'dense', 'chunked' or 'fused'.")
    if impl == "harmonic":
        raise InputError("impl='harmonic' is the attention flows' path for tokens on the sphere S^(d-1), d >= 3 (it "
                         "needs beta Q^T K = c I, not only q and k): set attention_impl='harmonic' on AttentionFlow, "
                         "sphere_flow or IdentitySphereFlow, or call attnflow.kernels.sphere.sphere_attention; attend "
                         "takes 'auto', 'dense', 'chunked' or 'fused'.")
    _check_normalisation(normalisation)
    _check_qkv(q, k, v)
    check_mask(mask, q.shape[0], k.shape[0])
    positions = _positions.as_positions(positions)
    if positions is not None and positions.heads is not None:
        raise InputError(f"attend computes one head, so its ALiBi slope is one scalar, got {positions.heads} slopes "
                         "(one per head): give them to a multi-head field (AttentionWeights with a 'head' axis), or "
                         "call attend once per head with its slope.")
    slope = None if positions is None else positions.alibi
    if positions is not None and positions.rotary is not None:
        q, k = (_positions.rotate(a, positions.rotary, positions.offset) for a in (q, k))
    if impl == "auto":
        impl = select_impl(q.shape[0], k.shape[0], *((q, k, v) if normalisation == "softmax" else ()))
        if impl == "flash" and mask is not None and not isinstance(mask, str):
            impl = "chunked"  # the fused kernel takes no mask array
        if impl == "fused" and slope is not None:
            # XLA's fused call takes no bias: the Pallas kernel where it is preferred (with a causal ALiBi bias it
            # ran 4.2x the tiled path on an NVIDIA H100, benchmarks/NOTES.md section 66), else tiled or dense
            impl = "flash" if flash_preferred(q.shape[0], k.shape[0], q.dtype) else select_impl(q.shape[0], k.shape[0])
    if impl == "dense":
        return _dense_attend(q, k, v, mask, normalisation, slope)
    if impl == "fused" and slope is not None:
        raise InputError("impl='fused' takes no ALiBi bias; use impl='flash', 'chunked' or 'dense' for positions with "
                         "alibi.")
    if impl == "fused":
        if normalisation != "softmax":
            raise InputError("impl='fused' computes softmax attention only; use 'dense' or 'chunked' for "
                             "normalisation='mean'.")
        return _fused_attend(q, k, v, "cudnn" if fused_is_exact(q, k, v) else None, mask)
    if impl == "flash":
        if mask is not None and not isinstance(mask, str):
            raise InputError("impl='flash' takes mask=None or 'causal'; for a boolean mask array use "
                             "impl='chunked' (or 'dense').")
        return _flash.flash_attend(q, k, v, mask=mask, normalisation=normalisation,
                                   positions=None if slope is None else _positions.Positions(alibi=slope))
    if chunk_size is None:
        chunk_size = GPU_CHUNK if jax.default_backend() == "gpu" else _tiled.DEFAULT_CHUNK
    return _tiled.chunked_attend(q, k, v, chunk_size=chunk_size, mask=mask, normalisation=normalisation,
                                 positions=None if slope is None else _positions.Positions(alibi=slope))
