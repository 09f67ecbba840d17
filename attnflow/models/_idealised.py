r"""The paper's idealised dynamics run with ONE real head's weights, shared across layers.

For a head :math:`(Q_h, K_h, V_h, \beta, b_q, b_k, b_v)` (see :mod:`attnflow.models._heads`) the
layer stepper of SPEC 1.3 with :math:`\Delta t = 1` (a residual, attention-only, weight-shared
transformer, as ALBERT shares its layer):

.. math:: x_i[k+1] = x_i[k] + \sum_j P_{ij}[k]\,(V_h x_j[k] + b_v),\qquad
          P_{ij}[k] = \mathrm{softmax}_j\,\beta\langle Q_h x_i[k] + b_q, K_h x_j[k] + b_k\rangle,

started from the model's own embedding output :math:`x[0]`. Unlike the real model it has no
feed-forward block, no LayerNorm, no other heads and no output bias :math:`b_O`. Every head
of every parameter layer is run as one batch of independent systems by
:func:`attnflow.simulate` (``batch="weights"``).
"""

from __future__ import annotations

import jax
import numpy as np
from jaxtyping import Array, Float

from .._simulation import simulate
from ..integrate import RESULTS
from .._weights import AttentionWeights

__all__ = ["idealised_runs", "as_system_batch"]


def as_system_batch(weights: AttentionWeights) -> AttentionWeights:
    """Flatten the named ("layer", "head") axes of per-head weights into a leading axis of
    independent systems (S*H), one head each, for ``simulate(..., batch="weights")``.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow import AttentionWeights
        >>> from attnflow.models._idealised import as_system_batch
        >>> w = AttentionWeights(jnp.ones((2, 3, 1, 4)), jnp.ones((2, 3, 1, 4)), jnp.ones((2, 3, 4, 4)),
        ...                      axes=("layer", "head"))
        >>> b = as_system_batch(w)
        >>> b.axes, b.V.shape, b.beta.shape
        ((), (6, 4, 4), (6,))
    """
    lead = len(weights.axes)
    flat = lambda a: None if a is None else a.reshape((-1,) + a.shape[lead:])
    make = lambda Q, K, V, beta, qb, kb, vb: AttentionWeights(Q, K, V, beta, q_bias=qb, k_bias=kb, v_bias=vb)
    w = weights
    return jax.vmap(make)(*(flat(a) for a in (w.Q, w.K, w.V, w.beta, w.q_bias, w.k_bias, w.v_bias)))


def idealised_runs(
    weights: AttentionWeights, x0: Float[Array, "n d"], num_layers: int, dtype: str = "float64", mask=None
) -> tuple[Float[Array, "*lead L1 n d"], Float[Array, "*lead L n n"], Array]:
    r"""Tokens :math:`x[0..L]` (``*lead``, L+1, n, d) and attention matrices :math:`P[0..L-1]`
    (``*lead``, L, n, n) of the weight-shared Euler stepper (dt = 1) for every head of
    ``weights`` (leading axes ``*lead`` named by ``weights.axes``, e.g. ("layer", "head")), each
    head alone, all from the same x0 (``mask``: None or a boolean (n, n) attention mask, e.g. to
    exclude padding as keys); and a (``*lead``) flag, True where the run stayed finite
    (a run that overflows is reported, not raised: ``simulate(throw=False)``).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow import AttentionWeights
        >>> from attnflow.models._idealised import idealised_runs
        >>> I = jnp.eye(2)[None]
        >>> xs, Ps, ok = idealised_runs(AttentionWeights(I, I, I, axes=("head",)), jnp.eye(2), 3)
        >>> xs.shape, Ps.shape, ok.tolist()
        ((1, 4, 2, 2), (1, 3, 2, 2), [True])
    """
    lead = tuple(weights.Q.shape[: len(weights.axes)])
    sim = simulate(x0, as_system_batch(weights), t1=float(num_layers), method="euler", dt=1.0,
                   return_attention=True, dtype=dtype, batch="weights", throw=False, mask=mask)
    xs = sim.tokens.reshape(lead + sim.tokens.shape[1:])
    Ps = sim.attention[:, :-1].reshape(lead + (num_layers,) + sim.attention.shape[2:])
    ok = np.asarray(sim.result) == RESULTS.successful  # on the host: the codes are int64 when made in float64
    return xs, Ps, ok.reshape(lead)
