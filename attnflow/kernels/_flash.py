r"""Fused attention: the online softmax of :mod:`attnflow.kernels._tiled` as one Pallas kernel.

For queries q (n, r), keys k (n', r) and values v (n', e) the kernel computes, per block of
``block_q`` queries (one program of the grid) and in a loop over blocks of ``block_k`` keys,

.. math::  m_i' = \max(m_i, \max_j s_{ij}),\quad
           \ell_i' = e^{m_i - m_i'}\ell_i + \sum_j e^{s_{ij} - m_i'},\quad
           a_i' = e^{m_i - m_i'} a_i + \sum_j e^{s_{ij} - m_i'} v_j,

with :math:`s_{ij} = q_i\cdot k_j` (scale 1), and writes :math:`o_i = a_i / \ell_i` and the
log-sum-exp :math:`L_i = m_i + \log\ell_i`. Scores, exponentials and the running sums stay in the
chip's registers and shared memory: one read of q, k and v per query block, one write of o. The
numbers are the tiled path's (the same max-subtracted softmax, summed in the same order within a
block). float64 is exact in float64. float32 products on the GPU use either three TF32 tensor-core
products per product (``precision="tf32x3"``: :math:`a b \approx a_h b_h + a_h b_l + a_l b_h` with
:math:`a = a_h + a_l` split into TF32 parts, an error of a few float32 ulps) or IEEE float32 arithmetic
(``"highest"``); the default ``"auto"`` follows JAX's matmul-precision setting (IEEE where it says
``"highest"``, TF32x3 otherwise, where XLA's own float32 matmuls take one TF32 product). On an H200 TF32x3
ran at 2.9x the speed of IEEE (benchmarks/NOTES.md), with relative errors 4.6e-6 and 2.4e-6 against float64
on the same check. Off the GPU all are IEEE.

On a GPU the kernel is compiled through Triton; on any other backend it runs in Pallas's
interpret mode (the same program executed by XLA, slow but exact), which is how its tests run on
CPU. Reverse mode reuses the tiled path's backward pass (:func:`attnflow.kernels._tiled._attend_bwd`)
from the saved log-sum-exp, so the gradient costs what the tiled path's does and stays O(n d) in
memory; forward mode is not available (a ``custom_vjp``), as for the tiled path.

Shapes need not be powers of two: rows are padded to whole blocks (padded keys are masked, padded
queries dropped) and head widths to a power of two of at least 16 (zero columns change no score).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from . import _positions, _tiled

__all__ = ["flash_attend", "FlashConfig", "FLASH_DEFAULT", "PRECISIONS"]

#: dot-product arithmetic of float32 inputs on the GPU: ``"tf32x3"`` three TF32 tensor-core products per
#: product (an error of a few float32 ulps), ``"highest"`` IEEE float32, ``"auto"`` IEEE where JAX's
#: ``jax_default_matmul_precision`` asks for it (``"highest"`` / ``"float32"``, also through
#: ``jax.default_matmul_precision``), else TF32x3 (JAX's own default lets XLA's float32 matmuls use one TF32
#: product); elsewhere all are IEEE
PRECISIONS = ("auto", "highest", "tf32x3")
#: values of ``jax_default_matmul_precision`` that ask for IEEE float32 products
_IEEE_SETTINGS = ("highest", "float32", "tensorfloat32_x3_never")


def resolved_precision(precision: str) -> str:
    """``"highest"`` or ``"tf32x3"``: ``"auto"`` read from JAX's matmul-precision setting at trace time.

    Example:
        >>> import jax
        >>> from attnflow.kernels._flash import resolved_precision
        >>> with jax.default_matmul_precision("highest"):
        ...     resolved_precision("auto")
        'highest'
    """
    if precision != "auto":
        return precision
    setting = jax.config.jax_default_matmul_precision
    return "highest" if setting is not None and str(setting).lower() in _IEEE_SETTINGS else "tf32x3"


@dataclasses.dataclass(frozen=True)
class FlashConfig:
    """Tile sizes and launch parameters of the fused kernel (static: part of the compiled program).

    ``block_q`` queries per program, ``block_k`` keys per loop step (powers of two, >= 16);
    ``num_warps`` and ``num_stages`` are Triton's launch width and software-pipelining depth;
    ``precision`` the arithmetic of float32 products on the GPU (:data:`PRECISIONS`).

    Example:
        >>> import jax
        >>> from attnflow.kernels import FlashConfig, flash_attend
        >>> q = jax.random.normal(jax.random.key(0), (40, 8))
        >>> flash_attend(q, q, q, config=FlashConfig(block_q=16, block_k=16, precision="highest")).shape
        (40, 8)
    """

    block_q: int = 128
    block_k: int = 32
    num_warps: int = 4
    num_stages: int = 3
    precision: str = "auto"

    def __post_init__(self):
        from ..errors import InputError

        for name in ("block_q", "block_k"):
            b = getattr(self, name)
            if isinstance(b, bool) or not isinstance(b, int) or b < 16 or b & (b - 1):
                raise InputError(f"{name} must be a power of two >= 16, got {b!r}.")
        for name in ("num_warps", "num_stages"):
            b = getattr(self, name)
            if isinstance(b, bool) or not isinstance(b, int) or b < 1:
                raise InputError(f"{name} must be a positive int, got {b!r}.")
        if self.precision not in PRECISIONS:
            raise InputError(f"precision must be one of {PRECISIONS}, got {self.precision!r}.")


#: the tiles and arithmetic ``impl="flash"`` uses: the fastest of the configurations timed on an H200
#: (benchmarks/NOTES.md)
FLASH_DEFAULT = FlashConfig()


def _pow2_at_least(n: int, floor: int = 16) -> int:
    return max(floor, 1 << max(0, int(n) - 1).bit_length())


def _dot_precision(dtype, precision: str, interpret: bool):
    if dtype == jnp.float32 and resolved_precision(precision) == "tf32x3" and not interpret:
        return jax.lax.DotAlgorithmPreset.TF32_TF32_F32_X3
    return (jax.lax.Precision.HIGHEST, jax.lax.Precision.HIGHEST)


#: length of the vector that carries the ALiBi coefficient -lambda / n' into the kernel (every entry the same; a
#: block of a power-of-two length >= 16, read with a max, which every backend lowers)
_COEF_BLOCK = 16


def _kernel(q_ref, k_ref, v_ref, *refs, n_keys: int, block_k: int, causal: bool, precision, biased: bool):
    r"""One query block: loop over key blocks with the online softmax; write o and L. ``biased``: the first of
    ``refs`` holds the ALiBi coefficient :math:`c = -\lambda/n'` and every score gains :math:`c|i - j|`."""
    coef_ref, o_ref, lse_ref = refs if biased else (None, *refs)
    q = q_ref[...]
    block_q = q.shape[0]
    dtype = q.dtype
    dot = functools.partial(jax.lax.dot_general, precision=precision, preferred_element_type=dtype)
    contract_last = (((1,), (1,)), ((), ()))
    contract_inner = (((1,), (0,)), ((), ()))
    first_query = _pl().program_id(0).astype(jnp.int32) * jnp.int32(block_q)
    rows = (first_query + jnp.arange(block_q, dtype=jnp.int32))[:, None]
    cols = jnp.arange(block_k, dtype=jnp.int32)[None, :]
    key_blocks = k_ref.shape[0] // block_k
    masked_tail = k_ref.shape[0] != n_keys
    coef = jnp.max(coef_ref[...]) if biased else None

    def body(j, carry):
        m, l, acc = carry
        start = j * block_k
        k = k_ref[_pl().ds(start, block_k), :]
        v = v_ref[_pl().ds(start, block_k), :]
        s = dot(q, k, contract_last)
        if biased:  # the tiled path's bias, -lambda |i - j| / n' from the indices of this tile
            s = s + coef * jnp.abs(rows - (start + cols)).astype(dtype)
        if causal or masked_tail:
            key = start + cols
            ok = key < n_keys
            if causal:
                ok = ok & (key <= rows)
            s = jnp.where(ok, s, -jnp.inf)
        m_new = jnp.maximum(m, jnp.max(s, axis=1))
        p = jnp.exp(s - m_new[:, None])
        scale = jnp.exp(m - m_new)
        l = scale * l + jnp.sum(p, axis=1)
        acc = scale[:, None] * acc + dot(p, v, contract_inner)
        return m_new, l, acc

    if causal:  # key blocks past the block's last query hold no admissible key
        upper = jnp.minimum(jnp.int32(key_blocks),
                            jax.lax.div(first_query + jnp.int32(block_q + block_k - 1), jnp.int32(block_k)))
    else:
        upper = jnp.int32(key_blocks)
    init = (jnp.full((block_q,), -jnp.inf, dtype), jnp.zeros((block_q,), dtype),
            jnp.zeros((block_q, v_ref.shape[1]), dtype))
    m, l, acc = jax.lax.fori_loop(jnp.int32(0), upper, body, init)
    # key 0 is admissible for every query (also when causal), so l >= 1 after the first block
    o_ref[...] = (acc / l[:, None]).astype(o_ref.dtype)
    lse_ref[...] = (m + jnp.log(l)).astype(lse_ref.dtype)


def _pl():
    from jax.experimental import pallas as pl

    return pl


def _forward(q, k, v, config: FlashConfig, causal: bool, interpret: bool, slope=None):
    """(o (n, e), lse (n,)) through the Pallas kernel, padding rows and head widths as needed; ``slope``: the ALiBi
    slope or None."""
    pl = _pl()
    nq, r = q.shape
    nk, e = v.shape
    dtype = q.dtype
    bq = min(config.block_q, _pow2_at_least(nq))
    bk = min(config.block_k, _pow2_at_least(nk))
    nq_pad, nk_pad = -(-nq // bq) * bq, -(-nk // bk) * bk
    r_pad, e_pad = _pow2_at_least(r), _pow2_at_least(e)
    pad = lambda a, rows, width: a if a.shape == (rows, width) else jnp.pad(
        a, ((0, rows - a.shape[0]), (0, width - a.shape[1])))
    qp, kp, vp = pad(q, nq_pad, r_pad), pad(k, nk_pad, r_pad), pad(v, nk_pad, e_pad)
    kernel = functools.partial(_kernel, n_keys=nk, block_k=bk, causal=causal, biased=slope is not None,
                               precision=_dot_precision(dtype, config.precision, interpret))
    inputs, coef_spec = (qp, kp, vp), []
    if slope is not None:
        inputs += (jnp.full((_COEF_BLOCK,), -jnp.asarray(slope, dtype) / nk, dtype),)
        coef_spec = [pl.BlockSpec((_COEF_BLOCK,), lambda i: (0,))]
    extra = {}
    if not interpret:
        from jax.experimental.pallas import triton as plgpu

        extra["compiler_params"] = plgpu.CompilerParams(num_warps=config.num_warps, num_stages=config.num_stages)
    out, lse = pl.pallas_call(
        kernel,
        grid=(nq_pad // bq,),
        in_specs=[pl.BlockSpec((bq, r_pad), lambda i: (i, 0)),
                  pl.BlockSpec((nk_pad, r_pad), lambda i: (0, 0)),
                  pl.BlockSpec((nk_pad, e_pad), lambda i: (0, 0)), *coef_spec],
        out_specs=[pl.BlockSpec((bq, e_pad), lambda i: (i, 0)), pl.BlockSpec((bq,), lambda i: (i,))],
        out_shape=[jax.ShapeDtypeStruct((nq_pad, e_pad), dtype), jax.ShapeDtypeStruct((nq_pad,), dtype)],
        interpret=interpret,
        name="attnflow_flash_attention",
        **extra,
    )(*inputs)
    return out[:nq, :e], lse[:nq]


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4, 5))
def _attend(q, k, v, config, causal, interpret, slope):
    """(softmax attention output, log-sum-exp per query), forward through the fused kernel; ``slope``: the ALiBi
    slope or None."""
    return _forward(q, k, v, config, causal, interpret, slope)


def _attend_fwd(q, k, v, config, causal, interpret, slope):
    out, lse = _forward(q, k, v, config, causal, interpret, slope)
    return (out, lse), (q, k, v, out, lse, None, slope)


def _attend_bwd(config, causal, interpret, res, cotangents):
    q, k = res[:2]
    chunk = _tiled.DEFAULT_CHUNK if interpret else 4096
    qc, kc = _tiled._tile(q.shape[0], chunk), _tiled._tile(k.shape[0], chunk)
    dq, dk, dv, _, dslope = _tiled._attend_bwd(int(qc), int(kc), "causal" if causal else "none", res, cotangents)
    return dq, dk, dv, dslope


_attend.defvjp(_attend_fwd, _attend_bwd)


def flash_attend(
    q: Float[Array, "n r"],
    k: Float[Array, "n2 r"],
    v: Float[Array, "n2 e"],
    *,
    mask: str | None = None,
    normalisation: str = "softmax",
    config: FlashConfig | None = None,
    interpret: bool | None = None,
    positions=None,
) -> Float[Array, "n e"]:
    r"""Exact :math:`\mathrm{softmax}(q k^T)\, v` (scale 1) in one fused kernel (FlashAttention's
    online softmax), O(n (r + e)) memory.

    ``mask``: None or ``"causal"`` (query i sees keys j <= i; key blocks past a query block's last
    query are skipped); boolean mask arrays take the tiled path (:func:`attend` with
    ``impl="chunked"``). ``normalisation="mean"``: :math:`\frac1{n_2}\sum_j e^{q_i\cdot k_j} v_j`, from the
    kernel's log-sum-exp. ``config``: tile sizes and launch parameters (:data:`FLASH_DEFAULT`).
    ``interpret``: run the kernel in Pallas's interpret mode (default: on every backend but the GPU).
    ``positions``: an ALiBi slope (:class:`~attnflow.kernels.Positions` with ``alibi``, rotary positions
    are applied by :func:`attend` before the kernel) adds :math:`-\lambda|i - j|/n_2` to every score inside the
    kernel, from the tile's indices, as the tiled path does.
    jit-, vmap- and reverse-mode-differentiable (the tiled path's backward pass; the slope too).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from attnflow.kernels import flash_attend
        >>> q, k, v = jax.random.normal(jax.random.key(0), (3, 100, 4))
        >>> dense = jax.nn.softmax(q @ k.T, axis=-1) @ v
        >>> bool(jnp.allclose(flash_attend(q, k, v), dense, atol=1e-5))
        True
    """
    from ..errors import InputError

    if mask is not None and not (isinstance(mask, str) and mask == "causal"):
        raise InputError("flash_attend takes mask=None or 'causal'; for a boolean mask array use "
                         "attend(..., impl='chunked').")
    if normalisation not in ("softmax", "mean"):
        raise InputError(f"normalisation must be 'softmax' or 'mean', got {normalisation!r}.")
    config = FLASH_DEFAULT if config is None else config
    if not isinstance(config, FlashConfig):
        raise InputError(f"config must be a FlashConfig, got {type(config).__name__}.")
    if interpret is None:
        interpret = jax.default_backend() != "gpu"
    dtype = jnp.result_type(q, k, v)
    if not jnp.issubdtype(dtype, jnp.floating):
        dtype = jnp.result_type(float)
    q, k, v = (jnp.asarray(a, dtype) for a in (q, k, v))
    positions = _positions.as_positions(positions)
    if positions is not None and (positions.rotary is not None or positions.heads is not None):
        raise InputError("flash_attend takes an ALiBi slope only (one head's scalar): rotary positions are "
                         "applied to q and k by attend(..., impl='flash') before the kernel.")
    slope = None if positions is None else positions.alibi
    out, lse = _attend(q, k, v, config, mask == "causal", bool(interpret), slope)
    if normalisation == "softmax":
        return out
    return out * jnp.exp(lse - jnp.log(k.shape[0]))[:, None]
