r"""Soft counts: effective number of clusters of a configuration and effective rank of P.

Both are measured against a **fixed** scale that the caller chooses (the initial
configuration's diameter, or a number), never against the current cloud: a count relative to
the current spread is scale-invariant, so an optimiser can "create" clusters inside one
collapsed cluster by shrinking it (seen: 15 hyperplane levels inside a cloud of diameter 0.01).
With a fixed scale, a collapsing cloud counts as one cluster.

* :func:`soft_cluster_count` relaxes :func:`attnflow.observables.num_clusters` (connected
  components at distance :math:`\tau s`).
* :func:`soft_rank` relaxes :func:`attnflow.observables.numerical_rank` (singular values above
  a threshold).
* :func:`soft_pair_fraction` relaxes :func:`attnflow.observables.pairs_clustered` (the fraction
  of ordered pairs whose inner product is at least a threshold).

The hard counts are piecewise constant in the tokens, so ``jax.grad`` of them is 0 wherever it
exists; differentiate these instead.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from .. import _validate as v
from .._x64 import keeps_float64
from ..errors import InputError

__all__ = ["soft_cluster_count", "soft_rank", "soft_pair_fraction"]


@keeps_float64
def soft_cluster_count(
    y: Float[Array, "n d"], scale, temperature: float = 0.05
) -> Float[Array, ""]:
    r"""Effective number of clusters :math:`N_\mathrm{eff} = \sum_i 1 / \sum_j K_{ij}`,
    :math:`K_{ij} = \exp\!\big(-|y_i - y_j|^2 / (2 h^2)\big)`, width :math:`h = \tau s`
    (``temperature`` :math:`\tau`, **fixed** ``scale`` s).

    Hard quantity: the number of clusters (:func:`attnflow.observables.num_clusters` with
    ``rel_tol`` :math:`\approx\tau`, ``scale`` s). When the tokens sit in groups of sizes
    :math:`m_c` whose spread is :math:`\ll h` and whose separation :math:`\delta \gg h`, every
    token of group c has :math:`\sum_j K_{ij} \approx m_c`, so :math:`N_\mathrm{eff}\approx\sum_c m_c/m_c`
    = the number of groups. As :math:`\tau\to 0` it converges to the number of distinct points,
    with error at most :math:`n^2 e^{-\delta^2/(2h^2)}` (:math:`\delta` the smallest nonzero
    distance). Smooth in y (squared distances, no square root).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.geometry import soft_cluster_count
        >>> y = jnp.array([[0.0, 0.0], [0.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
        >>> round(float(soft_cluster_count(y, scale=1.0, temperature=0.05)), 6)
        3.0
        >>> round(float(soft_cluster_count(1e-3 * y, scale=1.0, temperature=0.05)), 3)  # collapsed
        1.0
    """
    v.check_array("y", y, "tokens (n, d); vmap for a batch", ranks=(2,), nonempty=True)
    v.check_positive("temperature", temperature, "a relative temperature, a finite positive scalar")
    v.check_positive("scale", scale, "the unit of length, a finite positive scalar")
    y = v.as_float(y)
    h = jnp.asarray(temperature, y.dtype) * jnp.asarray(scale, y.dtype)
    diff = y[:, None, :] - y[None, :, :]
    sq = jnp.sum(diff * diff, axis=-1)
    kernel = jnp.exp(-sq / (2 * h * h))
    return jnp.sum(1.0 / jnp.sum(kernel, axis=1))


@keeps_float64
def soft_rank(
    P: Float[Array, "n n"], temperature: float = 1e-3, scale=1.0
) -> Float[Array, ""]:
    r"""Effective rank :math:`\sum_k \sigma_k^2 / (\sigma_k^2 + c)`, :math:`c = (\tau s)^2`,
    computed without an SVD as :math:`\mathrm{tr}\big(G (G + cI)^{-1}\big)`, :math:`G = PP^T`
    (smooth even where singular values repeat or vanish).

    Hard quantity: the number of singular values above :math:`\tau s`
    (:func:`attnflow.observables.numerical_rank` uses the threshold ``tol`` times
    :math:`\sigma_1`; for a row-stochastic P, :math:`\sigma_1 \ge 1`, so the default fixed
    ``scale = 1`` is the natural absolute unit of P). Each singular value contributes
    :math:`\approx 1` when :math:`\sigma_k \gg \tau s` and :math:`\approx 0` when
    :math:`\sigma_k \ll \tau s`; as :math:`\tau \to 0` the sum tends to rank(P) with error
    at most :math:`\mathrm{rank}(P)\,c/\sigma_{\min>0}^2`. The solve's condition number is
    :math:`\sigma_1^2/c`: in float32 keep :math:`\tau s \gtrsim 10^{-3}`.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.geometry import soft_rank
        >>> P = jnp.array([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])   # Boolean, rank 2
        >>> round(float(soft_rank(P, temperature=1e-3)), 4)
        2.0
    """
    shape = v.check_array("P", P, "an attention matrix (n, n); vmap for a batch", ranks=(2,), nonempty=True)
    if shape[0] != shape[1]:
        raise InputError(f"P must be square (n, n), got shape {shape}.")
    v.check_positive("temperature", temperature, "a relative temperature, a finite positive scalar")
    v.check_positive("scale", scale, "the unit of P, a finite positive scalar")
    P = v.as_float(P)
    c = (jnp.asarray(temperature, P.dtype) * jnp.asarray(scale, P.dtype)) ** 2
    G = P @ P.T
    n = G.shape[0]
    return jnp.trace(jnp.linalg.solve(G + c * jnp.eye(n, dtype=P.dtype), G))


@keeps_float64
def soft_pair_fraction(x: Float[Array, "n d"], threshold=0.999, temperature: float = 1e-3) -> Float[Array, ""]:
    r"""Soft fraction of clustered pairs
    :math:`\frac{1}{n(n-1)}\sum_{i\ne j}\sigma\big((\langle x_i, x_j\rangle - \theta)/\tau\big)`, with the
    logistic :math:`\sigma(u) = 1/(1 + e^{-u})`, threshold :math:`\theta` and width (``temperature``)
    :math:`\tau`, in the units of the inner products (1 for tokens on the unit sphere).

    Hard quantity: :func:`attnflow.observables.pairs_clustered`, the fraction of ordered pairs
    :math:`i \ne j` with :math:`\langle x_i, x_j\rangle \ge \theta`. Each pair is off by
    :math:`1/(1 + e^{|\langle x_i, x_j\rangle - \theta|/\tau}) \le e^{-\delta/\tau}`, so the error is at
    most :math:`e^{-\delta/\tau}` with :math:`\delta = \min_{i\ne j}|\langle x_i, x_j\rangle - \theta|`
    (a pair exactly at the threshold counts 1/2). Smooth in x: its gradient is
    :math:`\partial/\partial x_i = \frac{2}{n(n-1)}\sum_{j\ne i} \sigma'(\cdot)\, x_j/\tau`; 0 for n = 1.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from attnflow.geometry import soft_pair_fraction
        >>> from attnflow.observables import pairs_clustered
        >>> x = jnp.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.6, 0.8]])
        >>> round(float(soft_pair_fraction(x, 0.9, temperature=1e-3)), 6), round(float(pairs_clustered(x, 0.9)), 6)
        (0.166667, 0.166667)
        >>> jax.grad(lambda x: soft_pair_fraction(x, 0.5, temperature=0.1))(x).shape
        (4, 2)
    """
    v.check_array("x", x, "tokens (n, d); vmap for a batch", ranks=(2,), nonempty=True)
    v.check_real("threshold", threshold, "the inner product from which two tokens are clustered")
    v.check_positive("temperature", temperature, "the width of the step in units of the inner product, "
                     "a finite positive scalar")
    x = v.as_float(x)
    n = x.shape[0]
    if n == 1:
        return jnp.zeros((), x.dtype)
    gram = x @ x.T
    step = jax.nn.sigmoid((gram - jnp.asarray(threshold, x.dtype)) / jnp.asarray(temperature, x.dtype))
    return jnp.sum(jnp.where(jnp.eye(n, dtype=bool), 0, step)) / (n * (n - 1))
