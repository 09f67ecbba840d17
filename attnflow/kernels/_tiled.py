r"""Memory-efficient attention: blocked online softmax that never builds the n x n matrix.

For queries q (n, r), keys k (n', r) and values v (n', e) it computes

.. math::  o_i = \sum_j \frac{e^{s_{ij}}}{\sum_l e^{s_{il}}}\, v_j, \qquad s_{ij} = q_i\cdot k_j,

one (query block) x (key block) tile at a time. Per query row it carries the running
maximum :math:`m_i`, the running denominator :math:`\ell_i = \sum_j e^{s_{ij} - m_i}` and
the running numerator :math:`a_i = \sum_j e^{s_{ij}-m_i} v_j`; when a tile raises the
maximum to :math:`m_i'` the old sums are multiplied by :math:`e^{m_i - m_i'}` (the
"online softmax"). The result is exact (same max-subtracted softmax as the dense
path, summed in a different order), working memory is O(tile + n (r + e)).

Reverse-mode derivatives use a custom VJP that recomputes the tiles from the saved
log-sum-exp :math:`L_i = m_i + \log \ell_i` (so the backward pass is also O(n d) in
memory): with :math:`P_{ij} = e^{s_{ij} - L_i}`, :math:`D_i = g_i\cdot o_i`,

.. math::  \bar v_j = \sum_i P_{ij} g_i,\quad
           \bar s_{ij} = P_{ij}(g_i\cdot v_j - D_i),\quad
           \bar q_i = \sum_j \bar s_{ij} k_j,\quad \bar k_j = \sum_i \bar s_{ij} q_i.

Positions: an ALiBi slope :math:`\lambda` adds :math:`b_{ij} = -\lambda|i - j|/n'` to every score, built per
tile from the tile's query and key indices (never an n x n' bias); its gradient
:math:`\bar\lambda = -\sum_{ij}\bar s_{ij}|i - j|/n'` is summed tile by tile in the backward pass. Rotary
positions rotate q and k before the tiles (:func:`attnflow.kernels.rotate`).

Masks: ``mask=None`` (every key), ``"causal"`` (query i sees keys j <= i; the tile's mask
is computed from indices, so memory stays O(n d) at any n), or a boolean array
(n, n') (True = may attend). A row with no admissible key returns 0.

Unnormalised attention (``normalisation="mean"``, :math:`\frac1{n'}\sum_j e^{s_{ij}} v_j`) is
the same pass: :math:`o_i\, e^{L_i}/n'`. The kernel returns :math:`L` as a differentiable
output (its cotangent adds :math:`\bar L_i P_{ij}` to :math:`\bar s_{ij}`).

Forward-mode (``jax.jvp``) is not available through this path (a JAX limitation of
``custom_vjp``); use ``impl="dense"`` for forward-mode derivatives.
"""

from __future__ import annotations

import functools
import numbers

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from .. import _cache
from . import _positions

__all__ = ["chunked_attend", "tiled_logsumexp", "blocks_at_once", "DEFAULT_CHUNK"]

#: default tile edge (queries and keys) on CPU; 512 x 512 tiles keep XLA:CPU matmuls efficient, and
#: both passes work on several blocks at once (:func:`blocks_at_once`)
DEFAULT_CHUNK = 512


def _pad_rows(a: Array, total: int) -> Array:
    extra = total - a.shape[0]
    return a if extra == 0 else jnp.pad(a, ((0, extra), (0, 0)))


def _blocks(a: Array, size: int) -> Array:
    nb = -(-a.shape[0] // size)
    return _pad_rows(a, nb * size).reshape(nb, size, a.shape[1])


def _tile(n: int, chunk: int) -> int:
    """Tile edge: ``chunk``, or n itself when n is smaller (no padding waste)."""
    return max(1, min(int(chunk), n))


def _key_mask(nk: int, kc: int) -> Array:
    nb = -(-nk // kc)
    return (jnp.arange(nb * kc) < nk).reshape(nb, kc)


def _index_blocks(n: int, c: int) -> Array:
    nb = -(-n // c)
    return jnp.arange(nb * c).reshape(nb, c)


def _mask_blocks(mask: Array | None, nq: int, nk: int, qc: int, kc: int) -> Array | None:
    """A boolean (nq, nk) mask cut into tiles (nbq, nbk, qc, kc) (padding is False)."""
    if mask is None:
        return None
    nbq, nbk = -(-nq // qc), -(-nk // kc)
    full = jnp.pad(mask, ((0, nbq * qc - nq), (0, nbk * kc - nk)))
    return full.reshape(nbq, qc, nbk, kc).transpose(0, 2, 1, 3)


def _tile_valid(kind, valid, qi_idx, kj_idx, mask_tile):
    """Admissible (query, key) pairs of one tile: real keys, and the mask."""
    ok = valid[None, :]
    if kind == "causal":
        ok = ok & (kj_idx[None, :] <= qi_idx[:, None])
    elif kind == "array":
        ok = ok & mask_tile
    return ok


def blocks_at_once(num_blocks: int, rows: int, cols: int, itemsize: int) -> int | None:
    """How many (rows x cols) tiles of ``itemsize``-byte numbers the ``lax.map`` over blocks
    processes together (its ``batch_size``; None: one): on XLA:CPU as many as fit in
    :data:`attnflow._cache.GROUP_BYTES` (one tile at a time leaves the cores idle between small
    matmuls; benchmarks/NOTES.md section 9); elsewhere one.

    Example:
        >>> import jax
        >>> from attnflow.kernels import blocks_at_once
        >>> jax.default_backend() != "cpu" or blocks_at_once(8, 512, 512, 4) == 4
        True
    """
    if jax.default_backend() != "cpu":
        return None
    k = min(num_blocks, _cache.GROUP_BYTES // max(1, rows * cols * itemsize))
    return int(k) if k > 1 else None


def _safe_lse(m, l):
    """log-sum-exp per row; rows with no admissible key get +inf (their P is 0)."""
    return jnp.where(l > 0, m + jnp.log(jnp.where(l > 0, l, 1)), jnp.inf)


def _scores(qi, kj, qi_idx, kj_idx, slope, n_keys):
    """One tile's scores q_i . k_j, plus the ALiBi bias -slope |i - j| / n_keys from the indices when a slope is given."""
    s = qi @ kj.T
    return s if slope is None else s + _positions.alibi_tile(slope, qi_idx, kj_idx, n_keys, s.dtype)


def _forward(q, k, v, qc, kc, kind, mask, slope=None):
    """Blocked online-softmax forward: returns (out (n, e), lse (n,))."""
    nq, nk = q.shape[0], k.shape[0]
    dtype = q.dtype
    qb, qidx = _blocks(q, qc), _index_blocks(nq, qc)
    kb, vb = _blocks(k, kc), _blocks(v, kc)
    valid_keys, kidx = _key_mask(nk, kc), _index_blocks(nk, kc)
    mb = _mask_blocks(mask, nq, nk, qc, kc) if kind == "array" else jnp.zeros((qb.shape[0], kb.shape[0], 1, 1), bool)
    neg_inf = jnp.asarray(-jnp.inf, dtype)

    def per_query_block(args):
        qi, qi_idx, mrow = args

        def body(carry, tile):
            m, l, acc = carry
            kj, vj, valid, kj_idx, mtile = tile
            ok = _tile_valid(kind, valid, qi_idx, kj_idx, mtile)
            s = jnp.where(ok, _scores(qi, kj, qi_idx, kj_idx, slope, nk), neg_inf)
            m_new = jnp.maximum(m, jnp.max(s, axis=-1))
            if kind == "array":
                # a row may have no admissible key yet (m = -inf): keep every exponent finite
                m_ref = jnp.where(jnp.isfinite(m_new), m_new, 0)
                scale = jnp.where(jnp.isfinite(m), jnp.exp(m - m_ref), 0)
                p = jnp.where(ok, jnp.exp(s - m_ref[:, None]), 0)
            else:
                # the first key tile holds key 0, admissible for every query (also when causal),
                # so m is finite from the first tile on; exp(-inf - m) = 0 handles the rest
                scale = jnp.exp(m - m_new)
                p = jnp.exp(s - m_new[:, None])
            l = l * scale + jnp.sum(p, axis=-1)
            acc = acc * scale[:, None] + p @ vj
            return (m_new, l, acc), None

        init = (
            jnp.full((qc,), -jnp.inf, dtype),
            jnp.zeros((qc,), dtype),
            jnp.zeros((qc, v.shape[1]), dtype),
        )
        (m, l, acc), _ = jax.lax.scan(body, init, (kb, vb, valid_keys, kidx, mrow))
        return acc / jnp.where(l > 0, l, 1)[:, None], _safe_lse(m, l)

    out, lse = jax.lax.map(per_query_block, (qb, qidx, mb), batch_size=blocks_at_once(qb.shape[0], qc, kc, dtype.itemsize))
    out = out.reshape(-1, v.shape[1])[:nq]
    lse = lse.reshape(-1)[:nq]
    return out, lse


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4, 5))
def _attend(q, k, v, qc, kc, kind, mask, slope):
    """(softmax attention output, log-sum-exp of the admissible scores per query); ``slope``: the ALiBi slope or None."""
    return _forward(q, k, v, qc, kc, kind, mask, slope)


def _attend_fwd(q, k, v, qc, kc, kind, mask, slope):
    out, lse = _forward(q, k, v, qc, kc, kind, mask, slope)
    return (out, lse), (q, k, v, out, lse, mask, slope)


def _attend_bwd(qc, kc, kind, res, cotangents):
    q, k, v, out, lse, mask, *rest = res
    slope = rest[0] if rest else None
    g, g_lse = cotangents
    nq, nk = q.shape[0], k.shape[0]
    dtype = q.dtype
    # d lse_i / d s_ij = P_ij: the lse cotangent enters as  s_bar += P_ij g_lse_i,
    # i.e. D_i -> D_i - g_lse_i below
    D = jnp.sum(g * out, axis=-1) - g_lse
    qb, gb, qidx = _blocks(q, qc), _blocks(g, qc), _index_blocks(nq, qc)
    # padded query rows carry g = 0 and D = 0, hence contribute nothing below
    lseb = _blocks(lse[:, None], qc)[..., 0]
    Db = _blocks(D[:, None], qc)[..., 0]
    kb, vb, kidx = _blocks(k, kc), _blocks(v, kc), _index_blocks(nk, kc)
    valid_keys = _key_mask(nk, kc)
    mb = _mask_blocks(mask, nq, nk, qc, kc) if kind == "array" else jnp.zeros((qb.shape[0], kb.shape[0], 1, 1), bool)

    def probs(qi, qi_idx, lse_i, kj, valid, kj_idx, mtile):
        ok = _tile_valid(kind, valid, qi_idx, kj_idx, mtile)
        return jnp.where(ok, jnp.exp(_scores(qi, kj, qi_idx, kj_idx, slope, nk) - lse_i[:, None]), jnp.zeros((), dtype))

    def per_key_block(args):  # dk, dv (and the slope's share) of one key block: scan over query blocks
        kj, vj, valid, kj_idx, mcol = args

        def body(carry, tile):
            dk, dv = carry[:2]
            qi, gi, lse_i, D_i, qi_idx, mtile = tile
            p = probs(qi, qi_idx, lse_i, kj, valid, kj_idx, mtile)
            dv = dv + p.T @ gi
            ds = p * (gi @ vj.T - D_i[:, None])
            dk = dk + ds.T @ qi
            if slope is None:
                return (dk, dv), None
            # d b_ij / d slope = -|i - j| / nk: the bias tile at slope 1
            return (dk, dv, carry[2] + jnp.sum(ds * _positions.alibi_tile(1.0, qi_idx, kj_idx, nk, dtype))), None

        init = (jnp.zeros_like(kj), jnp.zeros_like(vj)) + (() if slope is None else (jnp.zeros((), dtype),))
        out, _ = jax.lax.scan(body, init, (qb, gb, lseb, Db, qidx, mcol))
        return out

    def per_query_block(args):  # dq of one query block: scan over key blocks
        qi, gi, lse_i, D_i, qi_idx, mrow = args

        def body(dq, tile):
            kj, vj, valid, kj_idx, mtile = tile
            p = probs(qi, qi_idx, lse_i, kj, valid, kj_idx, mtile)
            ds = p * (gi @ vj.T - D_i[:, None])
            return dq + ds @ kj, None

        dq, _ = jax.lax.scan(body, jnp.zeros_like(qi), (kb, vb, valid_keys, kidx, mrow))
        return dq

    at_once = lambda num_blocks: blocks_at_once(num_blocks, qc, kc, dtype.itemsize)
    dk, dv, *dslope = jax.lax.map(per_key_block, (kb, vb, valid_keys, kidx, jnp.swapaxes(mb, 0, 1)),
                                  batch_size=at_once(kb.shape[0]))
    dq = jax.lax.map(per_query_block, (qb, gb, lseb, Db, qidx, mb), batch_size=at_once(qb.shape[0]))
    dq = dq.reshape(-1, q.shape[1])[:nq]
    dk = dk.reshape(-1, k.shape[1])[:nk]
    dv = dv.reshape(-1, v.shape[1])[:nk]
    if slope is None:
        return dq, dk, dv, None, None
    dslope = jnp.sum(dslope[0]).astype(jnp.result_type(slope))
    return dq, dk, dv, None, jnp.reshape(dslope, jnp.shape(slope))


_attend.defvjp(_attend_fwd, _attend_bwd)


def chunked_attend(
    q: Float[Array, "n r"],
    k: Float[Array, "n2 r"],
    v: Float[Array, "n2 e"],
    *,
    chunk_size: int | tuple[int, int] = DEFAULT_CHUNK,
    mask: str | Array | None = None,
    normalisation: str = "softmax",
    positions=None,
) -> Float[Array, "n e"]:
    r"""Exact :math:`\mathrm{softmax}(q k^T)\, v` in O(n (r + e) + c^2) memory (online softmax).

    ``chunk_size`` is the tile edge c (or a pair: query tile, key tile). Rows need
    not be a multiple of it (the last tile is padded and masked). jit-, vmap- and
    reverse-mode-differentiable (custom VJP, also O(n d) memory). ``normalisation="mean"``:
    :math:`\frac1{n_2}\sum_j e^{q_i\cdot k_j} v_j` instead (unnormalised attention). ``positions``: as for
    :func:`~attnflow.attend` (the ALiBi bias built per tile from indices, rotary positions applied to q and k first).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from attnflow.kernels import chunked_attend
        >>> q, k, v = jax.random.normal(jax.random.key(0), (3, 100, 4))
        >>> dense = jax.nn.softmax(q @ k.T, axis=-1) @ v
        >>> bool(jnp.allclose(chunked_attend(q, k, v, chunk_size=32), dense, atol=1e-5))
        True
    """
    qc, kc = (chunk_size, chunk_size) if isinstance(chunk_size, numbers.Integral) else tuple(chunk_size)
    if not all(isinstance(c, numbers.Integral) and c >= 1 for c in (qc, kc)):
        from ..errors import InputError

        raise InputError(f"chunk_size must be a positive int or a pair of them (query, key tiles), got {chunk_size!r}.")
    qc, kc = _tile(q.shape[0], qc), _tile(k.shape[0], kc)
    positions = _positions.as_positions(positions)
    slope = None if positions is None else positions.alibi
    if positions is not None and positions.rotary is not None:
        q, k = (_positions.rotate(a, positions.rotary, positions.offset) for a in (q, k))
    if mask is None or isinstance(mask, str):
        out, lse = _attend(q, k, v, int(qc), int(kc), "causal" if mask == "causal" else "none", None, slope)
    else:
        mask = jnp.broadcast_to(jnp.asarray(mask, bool), (q.shape[0], k.shape[0]))
        out, lse = _attend(q, k, v, int(qc), int(kc), "array", mask, slope)
    if normalisation == "softmax":
        return out
    if normalisation != "mean":
        from ..errors import InputError

        raise InputError(f"normalisation must be 'softmax' or 'mean', got {normalisation!r}.")
    finite = jnp.isfinite(lse)  # a row with no admissible key has lse = inf and output 0
    scale = jnp.where(finite, jnp.exp(jnp.where(finite, lse, 0) - jnp.log(k.shape[0])), 0)
    return out * scale[:, None]


def tiled_logsumexp(
    q: Float[Array, "n r"],
    k: Float[Array, "m r"],
    *,
    chunk_size: int | tuple[int, int] = DEFAULT_CHUNK,
) -> Float[Array, " n"]:
    r"""Per query, :math:`L_i = \log\sum_j e^{q_i\cdot k_j}`, in O((n + m) r + c^2) memory.

    The forward pass of the tiled online softmax (:func:`chunked_attend`) with one column of ones as
    values keeps only its running log-sum-exp: no n x m matrix is built, and :math:`L_i` is finite
    whenever it is representable. ``chunk_size`` is the tile edge c (or a pair: query tile, key tile);
    reverse-mode gradients recompute the tiles. Sums over pairs of a kernel :math:`e^{\kappa\langle x,
    y\rangle}` are ``jax.nn.logsumexp(tiled_logsumexp(kappa * x, y))`` (the mean field's energies and
    kernel distances).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from attnflow.kernels import tiled_logsumexp
        >>> q, k = jax.random.normal(jax.random.key(0), (2, 300, 3))
        >>> dense = jax.nn.logsumexp(q @ k.T, axis=1)
        >>> bool(jnp.allclose(tiled_logsumexp(q, k, chunk_size=64), dense, rtol=1e-6))
        True
    """
    qc, kc = (chunk_size, chunk_size) if isinstance(chunk_size, numbers.Integral) else tuple(chunk_size)
    if not all(isinstance(c, numbers.Integral) and c >= 1 for c in (qc, kc)):
        from ..errors import InputError

        raise InputError(f"chunk_size must be a positive int or a pair of them (query, key tiles), got {chunk_size!r}.")
    ones = jnp.ones((k.shape[0], 1), jnp.result_type(q, k))
    _, lse = _attend(q, k, ones, int(_tile(q.shape[0], qc)), int(_tile(k.shape[0], kc)), "none", None, None)
    return lse
