r"""What the probes simulate: Ginibre-based good triples, and the final rescaled tokens of the
layer stepper (Remark 3.4's exact discrete rescaling, so the Thm 4.2 / 3.1 geometry is read in
the z picture), differentiable in every weight.
"""

from __future__ import annotations

import numpy as np
from jaxtyping import Array, Float

from .._validate import check_layers
from ..errors import InputError
from ..fields import build_field
from ..integrate import solve_euler
from .._weights import AttentionWeights

__all__ = ["sample_good_triples", "final_tokens", "num_layers"]


def num_layers(t1: float, dt: float) -> int:
    """Number of Euler layers covering [0, t1] with step dt (``dynamics.t1`` / ``dynamics.dt``
    must be a whole number >= 1 of layers, both finite and > 0).

    Example:
        >>> from attnflow.probe._systems import num_layers
        >>> num_layers(6.0, 0.05)
        120
    """
    return check_layers("dynamics.t1", t1, "dynamics.dt", dt)


#: draws the rejection sampling of :func:`sample_good_triples` may make per triple asked for: a condition that
#: fewer than one draw in this many meets stops the search with a sentence instead of running on
DRAWS_PER_TRIPLE = 1000


def sample_good_triples(seed: int, num: int, d: int, n: int, min_gap: float, max_tries: int | None = None):
    r"""``num`` triples (Q, K, V) with i.i.d. :math:`N(0, 1/d)` entries (scaled real Ginibre)
    that satisfy Definition 4.1 with :math:`|\lambda_1| - |\lambda_2| \ge` ``min_gap``
    (rejection sampling with :func:`attnflow.spectral.check_good_triple`), and token clouds
    x0 (num, n, d) with :math:`N(0, 1)` entries. A pure function of the seed.

    At most ``max_tries`` draws (default :data:`DRAWS_PER_TRIPLE` per triple); a draw whose V has a modulus
    gap below ``min_gap`` (its eigenvalues by ``numpy.linalg.eigvals``, with a margin of 1e-6 for rounding)
    is rejected before the full check. Raises :class:`~attnflow.errors.InputError` when the draws run out.

    Example:
        >>> from attnflow.probe._systems import sample_good_triples
        >>> Q, K, V, x0 = sample_good_triples(0, 2, 3, 5, 0.1)
        >>> V.shape, x0.shape
        ((2, 3, 3), (2, 5, 3))
    """
    from ..spectral import check_good_triple

    max_tries = DRAWS_PER_TRIPLE * num if max_tries is None else max_tries
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(max_tries):
        Q, K, V = (rng.normal(size=(d, d)) / np.sqrt(d) for _ in range(3))
        moduli = np.sort(np.abs(np.linalg.eigvals(V)))[::-1]
        if len(moduli) > 1 and moduli[0] - moduli[1] < min_gap - 1e-6 * max(1.0, moduli[0]):
            continue  # the full check would find the same gap below min_gap
        c = check_good_triple(Q, K, V)
        if c.good and c.gap >= min_gap:
            out.append((Q, K, V, rng.normal(size=(n, d))))
            if len(out) == num:
                break
    else:
        raise InputError(f"system.min_gap = {min_gap:g}: only {len(out)} of the {num} good triples (Def 4.1 with "
                         f"|lambda_1| - |lambda_2| >= {min_gap:g}, d = {d}) turned up in {max_tries} draws, fewer than "
                         f"one in {max_tries // max(num, 1)}; lower system.min_gap or system.num_triples.")
    return tuple(np.stack(a) for a in zip(*out))


def final_tokens(
    Q: Float[Array, "m d"], K: Float[Array, "m d"], V: Float[Array, "d d"], x0: Float[Array, "n d"],
    *, dt: float, layers: int, beta=1.0, biases=None,
) -> Float[Array, "n d"]:
    r"""Rescaled tokens :math:`z[L] = R^{-L} x[L]` after L forward-Euler layers of step dt
    (:math:`R = I + \Delta t V`), via :class:`~attnflow.DiscreteRescaledFlow` (exact, Remark 3.4);
    scores :math:`\beta\langle Qx_i + b_q, Kx_j + b_k\rangle`, values :math:`Vx_j + b_v` with
    ``biases = (b_q, b_k, b_v)`` (None: no biases).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.probe._systems import final_tokens
        >>> z = final_tokens(jnp.eye(2), jnp.eye(2), jnp.eye(2), jnp.eye(2), dt=0.5, layers=4)
        >>> z.shape
        (2, 2)
    """
    qb, kb, vb = (None, None, None) if biases is None else biases
    flow = build_field("attention", AttentionWeights(Q, K, V, beta, q_bias=qb, k_bias=kb, v_bias=vb), picture="rescaled",
                       stepper="euler", attention_impl="dense")  # the exact discrete rescaling
    return solve_euler(flow, x0, dt=dt, num_steps=layers, save_every=layers).ys[-1]
