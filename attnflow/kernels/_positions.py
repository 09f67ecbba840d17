r"""Positions in the attention kernel: additive score biases (ALiBi) and rotary positions (RoPE).

Token i sits at position :math:`p_i = o + i` (``offset`` o, default 0). Two ways of telling the
softmax where tokens sit, each an option of :class:`Positions`:

* **ALiBi** (``alibi=``:math:`\lambda \ge 0`): the scores get the additive bias

  .. math::  b_{ij} = -\frac{\lambda}{n}\,|i - j|, \qquad s_{ij} = q_i\cdot k_j + b_{ij},

  n the number of keys. It is symmetric; with the causal mask (j <= i) it is the causal
  form :math:`b_{ij} = -\lambda (i - j)/n`. The tiled path builds each tile's bias from its indices,
  so memory stays O(n d); :math:`\lambda` is a differentiable leaf.
* **Rotary** (``rotary=``base b > 0): queries and keys of even width r are rotated pair by pair,
  coordinates (2k, 2k + 1) by the angle :math:`p\,\theta_k`, :math:`\theta_k = b^{-2k/r}` (k < r/2):

  .. math::  \tilde q_i = R(p_i)\,q_i, \quad \tilde k_j = R(p_j)\,k_j, \qquad
             \tilde q_i\cdot\tilde k_j = q_i^T R(p_j - p_i)\,k_j,

  so the scores depend on the positions only through :math:`p_j - p_i` (shifting every position
  changes nothing).

Both can be combined; the causal mask stays the ``mask`` argument of :func:`~attnflow.attend`.
"""

from __future__ import annotations

from collections.abc import Mapping

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from .. import _validate as v
from ..errors import InputError

__all__ = ["Positions", "as_positions", "alibi_bias", "alibi_slopes", "rotate", "POSITION_KINDS"]

#: the kinds of positions a string or mapping may name (:func:`as_positions`), with their default
#: parameter (the ALiBi slope, the rotary base)
POSITION_KINDS = {"alibi": 1.0, "rotary": 10000.0}


class Positions(eqx.Module):
    r"""Where the tokens sit, as the attention kernel uses it: an ALiBi slope and/or a rotary base.

    Args:
        alibi: the slope :math:`\lambda \ge 0` of the bias :math:`-\lambda |i - j|/n` (None: no bias), or one
            slope per head (shape (H,), e.g. :func:`alibi_slopes`) for a field with H heads; a pytree leaf, so
            ``jax.grad`` and ``jax.vmap`` reach it.
        rotary: the base b > 0 of the rotary frequencies :math:`\theta_k = b^{-2k/r}` (None: no rotation;
            static).
        offset: the position of the first token, :math:`p_i = o + i` (static; the scores do not depend on it).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.kernels import Positions, attend
        >>> q = k = jnp.zeros((3, 2)); v = jnp.array([[0.0], [1.0], [2.0]])
        >>> out = attend(q, k, v, mask="causal", positions=Positions(alibi=3.0))
        >>> [round(float(o), 4) for o in out[:, 0]]  # weights e^{-(i - j)} over j <= i
        [0.0, 0.7311, 1.5752]
    """

    alibi: Float[Array, ""] | float | None
    rotary: float | None = eqx.field(static=True)
    offset: float = eqx.field(static=True)

    def __init__(self, alibi=None, rotary=None, offset=0.0):
        if alibi is not None:
            _check_slope(alibi)
            if isinstance(alibi, (list, tuple)):  # one slope per head, given as numbers: one array leaf
                alibi = np.asarray(alibi, dtype=np.float64)
        if rotary is not None:
            rotary = v.check_number("rotary", rotary, "the base of the rotary frequencies base^(-2k/r)", low=0)
        self.alibi = alibi
        self.rotary = rotary
        self.offset = v.check_number("offset", offset, "the position of the first token")

    @property
    def empty(self) -> bool:
        """True when neither a bias nor a rotation is asked for."""
        return self.alibi is None and self.rotary is None

    @property
    def heads(self) -> int | None:
        """The number of heads of a per-head slope (shape (H,)), else None."""
        shape = None if self.alibi is None else v.shape_of("alibi", self.alibi)
        return shape[0] if shape else None


def _check_slope(slope, per_head: bool = True) -> None:
    """The ALiBi slope: a real scalar (or, with ``per_head``, a vector of one per head), finite and >= 0 when
    concrete."""
    meaning = "the ALiBi slope lambda of the bias -lambda |i - j| / n"
    want = "a finite real scalar >= 0" + (" or a vector of one per head" if per_head else "")
    shape = None if isinstance(slope, (str, bytes, bool, np.bool_)) else v.shape_of("alibi", slope)
    if shape is None or not (shape == () or (per_head and len(shape) == 1 and shape[0] >= 1)):
        raise InputError(f"alibi must be {want} ({meaning}), got {slope!r}.")
    if v.is_concrete(slope):
        arr = np.asarray(slope)
        if arr.dtype.kind not in "iuf" or not np.all(np.isfinite(arr)) or np.any(arr < 0):
            raise InputError(f"alibi must be {want} ({meaning}), got {arr.tolist()!r}.")


def alibi_slopes(heads: int) -> np.ndarray:
    r"""The per-head slopes of ALiBi (Press, Smith and Lewis 2022): :math:`m_h = 2^{-8h/H}`, h = 1..H, a
    geometric sequence from :math:`2^{-8/H}` down to :math:`2^{-8}` (float64).

    Their bias is :math:`-m_h|i - j|` per token of distance; attnflow's is :math:`-\lambda|i - j|/n`, so
    ``Positions(alibi=n * alibi_slopes(H))`` is theirs on n tokens, and ``Positions(alibi=c * alibi_slopes(H))``
    keeps the same profile over the context at every n.

    Example:
        >>> from attnflow.kernels import alibi_slopes
        >>> alibi_slopes(4).tolist()
        [0.25, 0.0625, 0.015625, 0.00390625]
    """
    heads = v.check_int("heads", heads, meaning="the number of attention heads")
    return 2.0 ** (-8.0 * np.arange(1, heads + 1) / heads)


def as_positions(spec) -> Positions | None:
    """A positions argument as a :class:`Positions` (None, or one with neither option, gives None).

    ``spec`` is None, a :class:`Positions`, a kind name (``"alibi"``: slope 1, ``"rotary"``: base 10000;
    :data:`POSITION_KINDS`) or a mapping of kind names to parameters (``{"alibi": 0.5, "rotary": 100.0}``,
    the form a configuration file holds), optionally with ``"offset"``.

    Example:
        >>> from attnflow.kernels import as_positions
        >>> as_positions({"alibi": 0.5}).alibi, as_positions("rotary").rotary
        (0.5, 10000.0)
    """
    if spec is None or isinstance(spec, Positions):
        return None if spec is None or spec.empty else spec
    want = (f"positions must be None, a Positions, one of {tuple(POSITION_KINDS)} or a mapping of them to "
            "their parameters")
    if isinstance(spec, str):
        if spec not in POSITION_KINDS:
            raise InputError(f"{want}, got the unknown kind {spec!r}.")
        return Positions(**{spec: POSITION_KINDS[spec]})
    if isinstance(spec, Mapping):
        unknown = [key for key in spec if key not in (*POSITION_KINDS, "offset")]
        if unknown:
            raise InputError(f"{want} (and 'offset'), got the unknown kind {unknown[0]!r}.")
        return as_positions(Positions(**spec))
    raise InputError(f"{want}, got an object of type {type(spec).__name__}.")


def alibi_tile(slope, rows: Int[Array, " a"], cols: Int[Array, " b"], n_keys: int, dtype) -> Float[Array, "a b"]:
    r"""The bias :math:`-\frac{\lambda}{n}|i - j|` of query indices ``rows`` and key indices ``cols`` (one tile, or
    the whole matrix): the one formula of the dense and tiled paths."""
    distance = jnp.abs(rows[:, None] - cols[None, :]).astype(dtype)
    return (-jnp.asarray(slope, dtype) / n_keys) * distance


def alibi_bias(n_q: int, n_k: int, slope: float | Float[Array, ""] = 1.0, dtype=None) -> Float[Array, "n_q n_k"]:
    r"""The dense ALiBi bias :math:`b_{ij} = -\frac{\lambda}{n_k}|i - j|` (queries i < n_q, keys j < n_k).

    For pictures and checks: :func:`~attnflow.attend` with ``positions=Positions(alibi=slope)`` adds it
    without building this matrix on the tiled path.

    Example:
        >>> from attnflow.kernels import alibi_bias
        >>> alibi_bias(3, 3, 1.5).tolist()
        [[-0.0, -0.5, -1.0], [-0.5, -0.0, -0.5], [-1.0, -0.5, -0.0]]
    """
    _check_slope(slope, per_head=False)
    dtype = jnp.result_type(float) if dtype is None else dtype
    return alibi_tile(slope, jnp.arange(n_q), jnp.arange(n_k), n_k, dtype)


def rotate(x: Float[Array, "n r"], base: float = 10000.0, offset: float = 0.0) -> Float[Array, "n r"]:
    r"""Rotary positions: row i of ``x`` (even width r) with each pair of coordinates (2k, 2k + 1) rotated by
    the angle :math:`p_i\theta_k`, :math:`p_i = o + i`, :math:`\theta_k = b^{-2k/r}`.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.kernels import rotate
        >>> y = rotate(jnp.array([[1.0, 0.0], [1.0, 0.0]]), base=10.0, offset=jnp.pi / 2)  # angles pi/2, pi/2 + 1
        >>> [[round(float(a), 4) + 0.0 for a in row] for row in y]
        [[0.0, 1.0], [-0.8415, 0.5403]]
    """
    shape = v.check_array("x", x, "rows to rotate (n, r)", ranks=(2,))
    if shape[1] % 2:
        raise InputError(f"rotary positions rotate pairs of coordinates, so the query/key width must be even, "
                         f"got width {shape[1]}.")
    x = v.as_float(x)
    half = shape[1] // 2
    theta = jnp.asarray(base, x.dtype) ** (-2.0 * jnp.arange(half, dtype=x.dtype) / shape[1])
    angle = (jnp.asarray(offset, x.dtype) + jnp.arange(shape[0], dtype=x.dtype))[:, None] * theta  # (n, r/2)
    cos, sin = jnp.cos(angle), jnp.sin(angle)
    even, odd = x[:, 0::2], x[:, 1::2]
    return jnp.stack([even * cos - odd * sin, even * sin + odd * cos], axis=-1).reshape(shape)
