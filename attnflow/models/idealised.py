r"""The paper's idealised dynamics run with ONE real head's weights, shared across layers.

For a head :math:`(Q_h, K_h, V_h, \beta, b_q, b_k, b_v)` (see :mod:`attnflow.models.heads`) the
layer stepper of SPEC 1.3 with :math:`\Delta t = 1` (a residual, attention-only, weight-shared
transformer, as ALBERT shares its layer):

.. math:: x_i[k+1] = x_i[k] + \sum_j P_{ij}[k]\,(V_h x_j[k] + b_v),\qquad
          P_{ij}[k] = \mathrm{softmax}_j\,\beta\langle Q_h x_i[k] + b_q, K_h x_j[k] + b_k\rangle,

started from the model's own embedding output :math:`x[0]`. Unlike the real model it has no
feed-forward block, no LayerNorm, no other heads and no output bias :math:`b_O`.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from ..attention import attend, softmax
from ..dynamics import AbstractDynamics
from ..integrate import solve_euler
from ..weights import AttentionWeights

__all__ = ["HeadFlow", "idealised_run"]


class HeadFlow(AbstractDynamics):
    r"""One head with biases as a vector field:
    :math:`f(x)_i = \sum_j P_{ij}(V x_j + b_v)`, :math:`P = \mathrm{softmax}(\beta (xQ^T + b_q)(xK^T + b_k)^T)`.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.weights import AttentionWeights
        >>> from attnflow.models.idealised import HeadFlow
        >>> I = jnp.eye(2)
        >>> f = HeadFlow(AttentionWeights(I, I, I, v_bias=jnp.array([1.0, 0.0])))
        >>> f.vector_field(0.0, jnp.zeros((3, 2)), None).tolist()
        [[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]]
    """

    weights: AttentionWeights

    def _qkv(self, y):
        w = self.weights
        add = lambda u, b: u if b is None else u + b
        return w.beta * add(y @ w.Q.T, w.q_bias), add(y @ w.K.T, w.k_bias), add(y @ w.V.T, w.v_bias)

    def vector_field(self, t, y, args=None):
        q, k, v = self._qkv(y)
        return attend(q, k, v)

    def attention(self, t, y):
        q, k, _ = self._qkv(y)
        return softmax(q @ k.T, axis=-1)


@eqx.filter_jit
def idealised_run(
    weights: AttentionWeights, x0: Float[Array, "n d"], num_layers: int
) -> tuple[Float[Array, "L1 n d"], Float[Array, "L n n"]]:
    r"""Tokens :math:`x[0..L]` (L+1, n, d) and attention matrices :math:`P[0..L-1]` (L, n, n) of the
    weight-shared Euler stepper with one head (``weights`` with no leading axes; vmap over a
    stack of heads for many).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from attnflow.weights import AttentionWeights
        >>> from attnflow.models.idealised import idealised_run
        >>> I = jnp.eye(2)
        >>> xs, Ps = idealised_run(AttentionWeights(I, I, I), jnp.array([[1.0, 0.0], [0.0, 1.0]]), 3)
        >>> xs.shape, Ps.shape
        ((4, 2, 2), (3, 2, 2))
    """
    flow = HeadFlow(weights)
    traj = solve_euler(flow, x0, dt=1.0, num_steps=num_layers)
    Ps = jax.vmap(flow.attention)(traj.ts[:-1], traj.ys[:-1])
    return traj.ys, Ps
