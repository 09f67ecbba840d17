r"""The attention kernels: the one max-subtracted softmax and every path that computes attention with it.

* dense and fused: :func:`attend` (``impl="dense"``, ``"fused"`` through ``jax.nn.dot_product_attention``,
  ``"chunked"``, or ``"auto"``: :func:`select_impl`), :func:`attend_with_row_sums` (the output and the
  softmax's row sums), :func:`softmax`, :func:`scores`, :func:`attention_matrix`, masks
  (:func:`causal_mask`, :func:`mask_array`);
* fused: :func:`flash_attend`, the same online softmax as one Pallas kernel (Triton on GPU, interpret
  mode elsewhere), with :class:`FlashConfig` its tile sizes;
* positions: :class:`Positions` (the ALiBi bias :math:`-\lambda|i - j|/n` and rotary positions, the
  ``positions`` argument of :func:`attend` and of the attention flows), :func:`as_positions`,
  :func:`alibi_bias`, :func:`alibi_slopes`, :func:`rotate`;
* tiled: :func:`chunked_attend`, the blocked online softmax in O(n d) memory with its own VJP, and
  :func:`tiled_logsumexp`, its log-sum-exp per query (sums over pairs of a kernel without an n x n matrix);
* the circle's Fourier maths: :mod:`attnflow.kernels.fourier` (the O(n K) path of unit tokens in the plane).
* the sphere's harmonic maths: :mod:`attnflow.kernels.sphere` (the O(n L^2) path of unit tokens on S^2 for
  Q^T K = beta I, from the Funk-Hecke expansion of e^{beta <x, y>}) and :mod:`attnflow.kernels.hypersphere`
  (the same on S^(d-1) for every d >= 3: Gegenbauer series, Gelfand-Tsetlin harmonics, O(n H)).

The flows (:mod:`attnflow.dynamics`) call these kernels; none of them knows about a field.

Example:
    >>> import jax, jax.numpy as jnp
    >>> from attnflow.kernels import attend, chunked_attend
    >>> q, k, v = jax.random.normal(jax.random.key(0), (3, 50, 4))
    >>> bool(jnp.allclose(attend(q, k, v, impl="dense"), chunked_attend(q, k, v, chunk_size=16), atol=1e-5))
    True
"""

from .._lazy import lazy_names as _lazy_names

#: public name -> the module that defines it, imported on first use (PEP 562): importing one light part of the
#: package (a constant, a host-side function) does not import the others and what they need
_LAZY = {
    "fourier": ".fourier",
    "hypersphere": ".hypersphere",
    "sphere": ".sphere",
    **dict.fromkeys(("CHUNK_THRESHOLD", "GPU_CHUNK", "GPU_CHUNK_THRESHOLD", "GPU_FLASH_THRESHOLD", "IMPLS",
                     "NORMALISATIONS", "attend", "attend_with_row_sums", "attention_matrix", "causal_mask",
                     "check_mask", "flash_preferred", "fused_is_exact", "held_scores", "mask_array",
                     "project_qk", "scores", "select_impl", "softmax"), "._attention"),
    **dict.fromkeys(("FLASH_DEFAULT", "FlashConfig", "flash_attend"), "._flash"),
    **dict.fromkeys(("POSITION_KINDS", "Positions", "alibi_bias", "alibi_slopes", "as_positions", "rotate"),
                    "._positions"),
    **dict.fromkeys(("DEFAULT_CHUNK", "blocks_at_once", "chunked_attend", "tiled_logsumexp"), "._tiled"),
}

__getattr__, __dir__ = _lazy_names(__name__, _LAZY, globals())

__all__ = [
    "softmax", "scores", "project_qk", "attention_matrix", "attend", "attend_with_row_sums", "select_impl",
    "held_scores", "fused_is_exact", "causal_mask", "check_mask", "mask_array", "NORMALISATIONS", "IMPLS",
    "CHUNK_THRESHOLD", "GPU_CHUNK", "GPU_CHUNK_THRESHOLD", "chunked_attend", "tiled_logsumexp", "blocks_at_once",
    "DEFAULT_CHUNK", "fourier", "hypersphere", "flash_attend", "FlashConfig", "FLASH_DEFAULT",
    "flash_preferred", "GPU_FLASH_THRESHOLD", "Positions", "as_positions", "alibi_bias", "alibi_slopes", "rotate",
    "POSITION_KINDS",
]
