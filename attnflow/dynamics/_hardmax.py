r"""The hardmax limit of self-attention (:math:`\beta \to \infty`): each token attends to its maximisers.

With scores :math:`s_{ij} = \langle Q x_i + b_q, K x_j + b_k\rangle`, the softmax
:math:`P^\beta_{ij} = e^{\beta s_{ij}}/\sum_l e^{\beta s_{il}}` tends, as :math:`\beta \to \infty`, to the
uniform weights on the set of maximisers of row i,

.. math::  H_{ij} = \frac{\mathbf 1[j \in M_i]}{|M_i|}, \qquad
           M_i = \{\, j : s_{ij} \ge \max_l s_{il} - \delta_i \,\}, \qquad
           \delta_i = \tau \max_l |s_{il}|,

at the rate :math:`|P^\beta_{ij} - H_{ij}| = O(e^{-\beta g_i})`, :math:`g_i` the gap between the best and the
second-best score of the row (exact ties stay tied at every beta: the limit gives them equal weights).
:math:`\tau` (``tie_tol``, default 64 units of rounding of the dtype) makes scores that are equal up to
rounding count as tied, so that tokens that coincide share the weight as they do at every finite beta; it
is relative, so the rule does not depend on the scale of the scores (and beta > 0 does not enter).
Masked keys are never maximisers; a row without an admissible key has no weight.

:class:`HardmaxFlow` is the field of the limit, in :math:`\mathbb R^d` or on the unit sphere (post-LN),

.. math::  \dot x_i = \sum_j H_{ij}(x)\,(V x_j + c) \quad(\text{raw}), \qquad
           \dot x_i = \sum_j H_{ij}(x)\,(V x_j + c - x_i) \quad(\text{centred}), \qquad
           \dot x_i = \mathrm{Proj}_{x_i^\perp}\Big(\sum_j H_{ij}(x)\,(V x_j + c)\Big) \quad(\text{sphere}).

The centred field with V = I, c = 0 is the continuous-time limit of the hardmax update read as a Frank-Wolfe
step over the convex hull of the tokens (Alcalde, Geshkovski, Ruiz-Balet, arXiv 2508.09628); it is also the
raw field with V = I in the coordinates :math:`z = e^{-t}x`, since H is unchanged when every token is
scaled by the same positive number. The field is piecewise constant in H, so it is discontinuous where the
set of maximisers changes: the Euler layer stepper is its natural integrator (adaptive solvers slow down at
every switch).

**Leaders** (:meth:`HardmaxFlow.leaders`). A token j is a *leader* when it is one of its own maximisers,
:math:`j \in M_j`; it *attracts* token i when :math:`j \in M_i`. For :math:`A = Q^\top K` symmetric positive
semi-definite (no biases), the paper shows that extending the hardmax rule to the whole convex hull
induces a Voronoi-type partition: the vertices are stationary, interior points stay in their initial cell and
each token moves along a straight line towards its cell's vertex, with (super-)exponential convergence
(for A negative semi-definite the tokens contract to one cluster instead). What is implemented and tested
here is the finite-configuration side of that picture for the centred field with V = I: a strict leader L is
stationary (:math:`\dot x_L = x_L - x_L = 0`); a token whose only maximiser is a leader L moves on the segment
towards it, :math:`x_i(t) = x_L + e^{-t}(x_i(0) - x_L)` (the scores :math:`\langle A y, x_j\rangle` are linear in
y, so L, the maximiser at both ends of the segment, stays the maximiser along it); and a configuration in
which every token sits on a leader is stationary. :meth:`HardmaxFlow.leaders` reports the leaders, whom
each token follows, and whether the field vanishes at a configuration.
"""

from __future__ import annotations

from typing import NamedTuple, final

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int

from .. import _validate as v
from ..errors import InputError
from ..kernels import check_mask, mask_array, project_qk
from .._weights import AttentionWeights
from ._attention_flows import as_weights
from ._base import AbstractAttentionDynamics
from ._normalised import tangent_projection

__all__ = ["HardmaxFlow", "HardmaxLeaders", "TIE_ULPS"]

#: the default tie tolerance in units of rounding of the dtype (:math:`\tau = 64\,\epsilon`)
TIE_ULPS = 64


class HardmaxLeaders(NamedTuple):
    """The leaders of a configuration under the hardmax rule (:meth:`HardmaxFlow.leaders`)."""

    #: (n,) token j is one of its own maximisers (j in M_j)
    leaders: Bool[Array, " n"]
    #: (n,) token j is a maximiser of some other token i != j
    attracts: Bool[Array, " n"]
    #: (n,) the first maximiser of each row (the token it follows; -1 for a row without admissible keys)
    follows: Int[Array, " n"]
    #: (n,) the number of maximisers of each row (> 1: a tie)
    ties: Int[Array, " n"]
    #: max_i |f_i(x)|, the largest speed of the field at the configuration
    residual: Float[Array, ""]
    #: residual <= tol: the configuration is stationary
    stationary: Bool[Array, ""]


@final
class HardmaxFlow(AbstractAttentionDynamics):
    r"""The hardmax (:math:`\beta = \infty`) self-attention field: each token attends uniformly to its maximisers.

    :math:`\dot x_i = \sum_j H_{ij}(x)(V x_j + c)`, with :math:`H_{ij} = 1/|M_i|` on the maximisers
    :math:`M_i = \{j : s_{ij} \ge \max_l s_{il} - \tau\max_l|s_{il}|\}` of the scores
    :math:`s_{ij} = \langle Q x_i + b_q, K x_j + b_k\rangle` (module docstring: ties, the rate of the limit).

    Args:
        Q: (m, d) query matrix, or an :class:`~attnflow.AttentionWeights` of one head (then omit K, V, beta).
        K: (m, d) key matrix.  V: (d, d) value matrix.
        beta: checked to be finite and > 0 like every field's, and otherwise unused (H does not depend on it).
        sphere: tokens on the unit sphere (post-LN): the drift projected onto the tangent space,
            :math:`\mathrm{Proj}_{x_i^\perp}`; step it with ``EulerStepper(..., shift=sphere_shift)``.
        centred: the drift :math:`\sum_j H_{ij}(V x_j + c) - x_i` (the Frank-Wolfe form; not with ``sphere``).
        tie_tol: :math:`\tau`, the relative tolerance of a tie, finite and >= 0 (default ``TIE_ULPS`` units of
            rounding of the computation's dtype; 0: exact ties only).
        mask: None, ``"causal"`` (token i attends to j <= i) or a boolean (n, n) array.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.dynamics import HardmaxFlow
        >>> x = jnp.array([[1.0, 0.0], [2.0, 0.0], [0.0, 1.0]])
        >>> f = HardmaxFlow(jnp.eye(2), jnp.eye(2), jnp.eye(2))
        >>> f.attention(0.0, x).tolist()       # rows 0 and 1 follow token 1, row 2 itself
        [[0.0, 1.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
        >>> f(0.0, x).tolist()
        [[2.0, 0.0], [2.0, 0.0], [0.0, 1.0]]
        >>> tied = jnp.array([[0.0, 1.0], [1.0, 1.0], [-1.0, 1.0]])   # row 0 scores 1, 1, 1: a three-way tie
        >>> [round(w, 4) for w in f.attention(0.0, tied)[0].tolist()]
        [0.3333, 0.3333, 0.3333]
    """

    weights: AttentionWeights
    mask: Bool[Array, "n n"] | None
    causal: bool = eqx.field(static=True)
    sphere: bool = eqx.field(static=True)
    centred: bool = eqx.field(static=True)
    #: the relative tie tolerance (None: TIE_ULPS units of rounding of the dtype)
    tie_tol: float | None = eqx.field(static=True)

    def __init__(self, Q, K=None, V=None, beta=1.0, *, sphere: bool = False, centred: bool = False,
                 tie_tol: float | None = None, mask=None):
        w = as_weights(Q, K, V, beta)
        v.check_beta("beta", w.beta)
        if w.axes:
            raise InputError(f"HardmaxFlow takes the weights of one head and one layer, got weights with the "
                             f"axes {w.axes}; select one with weights.head(h) or weights.layer(l).")
        if sphere and centred:
            raise InputError("HardmaxFlow takes sphere=True or centred=True, not both: on the sphere the tangent "
                             "projection already removes the -x_i of the centred drift.")
        if tie_tol is not None and not (isinstance(tie_tol, (int, float, np.floating)) and not isinstance(tie_tol, bool)
                                        and np.isfinite(tie_tol) and tie_tol >= 0):
            raise InputError(f"tie_tol must be a finite real number >= 0 (the relative tolerance of a tie), "
                             f"got {tie_tol!r}.")
        check_mask(mask)
        self.weights = w
        self.causal = isinstance(mask, str)
        self.mask = None if mask is None or isinstance(mask, str) else jnp.asarray(mask, bool)
        self.sphere, self.centred = bool(sphere), bool(centred)
        self.tie_tol = None if tie_tol is None else float(tie_tol)

    @property
    def state_dim(self) -> int:
        return self.weights.d

    def _scores(self, y):
        w = self.weights
        q, k = project_qk(y, w.Q, w.K, jnp.ones((), y.dtype), w.q_bias, w.k_bias)
        return q @ k.T

    def maximisers(self, y: Float[Array, "n d"]) -> Bool[Array, "n n"]:
        r"""The sets :math:`M_i` as a boolean (n, n) array: :math:`s_{ij} \ge \max_l s_{il} - \tau \max_l |s_{il}|`.

        Example:
            >>> import jax.numpy as jnp
            >>> from attnflow.dynamics import HardmaxFlow
            >>> HardmaxFlow(jnp.eye(2), jnp.eye(2), jnp.eye(2)).maximisers(jnp.array([[1.0, 0.0], [1.0, 0.0]])).tolist()
            [[True, True], [True, True]]
        """
        self.check_state(y)
        y = jnp.asarray(y, jnp.result_type(y, self.weights.dtype, float))
        s = self._scores(y)
        where = mask_array("causal" if self.causal else self.mask, y.shape[0], y.shape[0])
        if where is not None:
            s = jnp.where(where, s, -jnp.inf)
        top = jnp.max(s, axis=-1, keepdims=True)
        scale = jnp.max(jnp.where(jnp.isfinite(s), jnp.abs(s), 0), axis=-1, keepdims=True)
        tol = (TIE_ULPS * jnp.finfo(s.dtype).eps) if self.tie_tol is None else self.tie_tol
        return (s >= top - tol * scale) & jnp.isfinite(s)

    def attention(self, t, y) -> Float[Array, "n n"]:
        """The hardmax weights H (n, n): rows uniform on the maximisers (all zero without an admissible key)."""
        best = self.maximisers(y)
        count = best.sum(axis=-1, keepdims=True)
        return jnp.where(best, 1.0 / jnp.maximum(count, 1), 0).astype(jnp.result_type(y, self.weights.dtype, float))

    def vector_field(self, t, y, args=None):
        w = self.weights
        H = self.attention(t, y)
        values = y @ w.V.T if w.v_bias is None else y @ w.V.T + w.v_bias
        out = H @ values
        if self.centred:
            return out - y * H.sum(axis=-1, keepdims=True)
        return tangent_projection(y, out) if self.sphere else out

    def leaders(self, y: Float[Array, "n d"], tol=None) -> HardmaxLeaders:
        r"""The leaders of the configuration y and whether y is stationary (module docstring: the leaders picture).

        ``tol``: the largest speed :math:`\max_i |f_i(y)|` that counts as stationary (default
        :math:`\sqrt\epsilon\,\max(1, \max_i |V y_i|)`, :math:`\epsilon` the dtype's rounding unit).

        Example:
            >>> import jax.numpy as jnp
            >>> from attnflow.dynamics import HardmaxFlow
            >>> f = HardmaxFlow(jnp.eye(2), jnp.eye(2), jnp.eye(2), centred=True)
            >>> y = jnp.array([[2.0, 0.0], [2.0, 0.0], [0.0, 2.0], [0.5, 0.5]])
            >>> r = f.leaders(y)
            >>> r.leaders.tolist(), r.follows.tolist(), r.ties.tolist(), bool(r.stationary)
            ([True, True, True, False], [0, 0, 2, 0], [2, 2, 1, 3], False)
            >>> bool(f.leaders(y[:3]).stationary)                              # every token on a leader
            True
        """
        best = self.maximisers(y)
        n = best.shape[0]
        diagonal = jnp.eye(n, dtype=bool)
        speed = jnp.max(jnp.linalg.norm(self.vector_field(0.0, y), axis=-1))
        if tol is None:
            scale = jnp.max(jnp.linalg.norm(jnp.asarray(y, speed.dtype) @ self.weights.V.T, axis=-1))
            tol = jnp.sqrt(jnp.finfo(speed.dtype).eps) * jnp.maximum(1.0, scale)
        else:
            v.check_real("tol", tol, "the largest speed that counts as stationary, a real scalar >= 0")
        return HardmaxLeaders(
            leaders=jnp.any(best & diagonal, axis=-1),
            attracts=jnp.any(best & ~diagonal, axis=0),
            follows=jnp.where(best.any(axis=-1), jnp.argmax(best, axis=-1), -1),
            ties=best.sum(axis=-1),
            residual=speed,
            stationary=speed <= tol,
        )
