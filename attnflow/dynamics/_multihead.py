r"""Several attention heads (SPEC section 3, open problem): the sum over heads, and when it rescales.

With H heads, each with its own :math:`(Q_h, K_h, V_h, \beta_h)`,

.. math::  \dot x_i = \sum_{h=1}^H \sum_j P^h_{ij}\, V_h x_j, \qquad
           P^h_{ij} = \mathrm{softmax}_j(\beta_h \langle Q_h x_i, K_h x_j\rangle),

and the layer stepper is its forward-Euler step. Multi-head weights are one
:class:`~attnflow.AttentionWeights` with ``axes=("head",)`` (arrays (H, m, d)); every
attention field (:class:`~attnflow.AttentionFlow` and the rescaled ones) vmaps its one
``attend`` call over that axis and sums, so nothing here re-implements attention.

**When the rescaled picture exists.** Put :math:`S = \sum_h V_h` and :math:`z = e^{-tS} x`.
Then :math:`\dot z_i = e^{-tS} \sum_h \sum_j P^h_{ij} V_h e^{tS} z_j - S z_i`, which is
:math:`\sum_h \sum_j P^h_{ij} V_h (z_j - z_i)` (the paper's form, one term per head) exactly
when every :math:`V_h` commutes with S; all :math:`V_h` equal (a common V, S = H V) is the
main case. The same condition makes the discrete rescaling :math:`z[k] = (I + \Delta t S)^{-k} x[k]`
exact, with drift :math:`\sum_h \sum_j P^h_{ij} (I + \Delta t S)^{-1} V_h (z_j - z_i)`.
:func:`rescaling_generator` returns S and refuses heads that do not commute with it.
"""

from __future__ import annotations

import numpy as np
from jaxtyping import Array, Float

from .. import _validate as v
from ..errors import InputError
from .._weights import AttentionWeights

__all__ = ["rescaling_generator", "heads_commute", "COMMUTE_RTOL"]

#: heads count as commuting with S = sum_h V_h when ||V_h S - S V_h||_F <= COMMUTE_RTOL ||V_h||_F ||S||_F.
#: The commutator of matrices that commute exactly but were formed in floating point is a
#: rounding error of size ~ d eps ||V_h|| ||S||; 1e-10 allows d up to ~1e5 in float64 and
#: still rejects any genuine non-commutation above 1e-10 relative (float32 inputs are
#: checked after conversion to float64).
COMMUTE_RTOL = 1e-10


def heads_commute(V: Float[Array, "H d d"], rtol: float = COMMUTE_RTOL) -> bool:
    r"""Whether every :math:`V_h` commutes with :math:`S = \sum_h V_h` (to ``rtol``, relative).

    Example:
        >>> import numpy as np
        >>> from attnflow.dynamics._multihead import heads_commute
        >>> A = np.array([[2.0, 1.0], [0.0, 1.0]])
        >>> heads_commute(np.stack([A, A @ A])), heads_commute(np.stack([A, A.T]))
        (True, False)
    """
    Vh = np.asarray(V, np.float64)
    S = Vh.sum(axis=0)
    comm = np.linalg.norm(Vh @ S - S @ Vh, axis=(-2, -1))
    scale = np.linalg.norm(Vh, axis=(-2, -1)) * np.linalg.norm(S)
    return bool(np.all(comm <= rtol * scale))


def rescaling_generator(weights: AttentionWeights, who: str = "the rescaled picture") -> Float[Array, "d d"]:
    r"""The matrix S of the rescaling :math:`z = e^{-tS}x`: V for one head, :math:`\sum_h V_h` for several.

    For several heads each :math:`V_h` must commute with S (e.g. all equal); otherwise there
    is no rescaled form and an :class:`~attnflow.InputError` says so. The check runs on
    concrete weights; traced weights (inside ``jit``) are trusted.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow import AttentionWeights
        >>> from attnflow.dynamics import rescaling_generator
        >>> I = jnp.eye(2)
        >>> w = AttentionWeights.stack([AttentionWeights(I, I, I)] * 3, axis="head")
        >>> rescaling_generator(w).tolist()
        [[3.0, 0.0], [0.0, 3.0]]
    """
    if "head" not in weights.axes:
        return weights.V
    if v.is_concrete(weights.V) and not heads_commute(weights.V):
        raise InputError(
            f"{who} needs one value matrix for all heads: with S = sum_h V_h it exists only when every V_h "
            f"commutes with S (e.g. all V_h equal), and these {weights.num_heads} heads' V_h do not; use the raw "
            "picture (AttentionFlow) for heads with different V_h."
        )
    return weights.V.sum(axis=0)
