r"""The pair statistics of :func:`~attnflow.observables.gram_statistics` for tokens in the plane, without an n x n
matrix: O(n log n + n K) from their sorted angles and Fourier moments.

On the circle every pair statistic of the directions :math:`u_i = x_i/|x_i|` follows from their order:

* the largest off-diagonal inner product is that of the closest pair, a pair of circular neighbours;
* the smallest is that of the farthest pair: for each token, one of the two neighbours of its antipode
  :math:`\theta_i + \pi` in the sorted angles (a binary search);
* the threshold graph :math:`\langle u_i, u_j\rangle \ge \theta` joins the tokens within the angle
  :math:`\delta = \arccos\theta < \pi` of each other: its components are the arcs between circular gaps wider than
  :math:`\delta` (every neighbour gap tested by its inner product, as the dense graph tests each pair), one if there
  is at most one such gap; its ordered pairs are counted per token by two binary searches for
  :math:`\theta_i \pm \delta` in the sorted angles extended by :math:`\pm 2\pi`;
* the mean off-diagonal inner product is :math:`(|\sum_i u_i|^2 - \sum_i |u_i|^2)/(n(n-1))`;
* the energy :math:`\frac{1}{2\beta n^2}\sum_{ij} e^{\beta\langle u_i, u_j\rangle}` is
  :math:`\frac{e^\beta}{2\beta n^2}\big(c_0 n^2 + 2\sum_{m=1}^{K} c_m |S_m|^2\big)` with the power sums
  :math:`S_m = \sum_j e^{-im\theta_j}` of the Fourier path (:func:`attnflow.kernels.fourier.power_sums`) and :math:`c_m` the Fourier coefficients of :math:`e^{\beta(\cos\varphi - 1)}`
  (:func:`attnflow.kernels.fourier.kernel_coefficients`; exact to rounding for K =
  :func:`attnflow.kernels.fourier.fourier_modes` of beta).

The counts equal the dense ones except for pairs whose angle is within rounding of :math:`\delta` (the binary
searches compare angles, the dense graph inner products); the inner products and the energy agree to rounding
(tests: against :func:`~attnflow.observables.gram_statistics` on random and clustered clouds).
"""

from __future__ import annotations

import math

import jax.numpy as jnp
from jaxtyping import Array, Float

from .. import _validate as v
from .._x64 import keeps_float64
from ..errors import InputError
from ..kernels.fourier import kernel_coefficients, power_sums
from ._clusters import directions
from ._pairs import DEFAULT_THRESHOLD


@keeps_float64
def circle_gram_statistics(x: Float[Array, "n 2"], beta, threshold=DEFAULT_THRESHOLD, *, modes: int) -> dict:
    r"""The keys of :func:`~attnflow.observables.gram_statistics` (``pairs_clustered``, ``clusters``, ``energy``,
    ``ip_min``, ``ip_mean``, ``ip_max``) for tokens in the plane (n, 2), n >= 2, read on their directions, in
    O(n log n + n K) time and O(n + K) memory (module docstring). ``modes``: K of the energy's Fourier series (static;
    :func:`attnflow.kernels.fourier.fourier_modes` of an upper bound of beta makes it exact to rounding).
    Traceable (jit, vmap: a ``save_fn`` of the phase job at large n).

    See also:
        :func:`attnflow.geometry.soft_pair_fraction` for a differentiable ``pairs_clustered``: the counts here are
        piecewise constant in the tokens, so their gradient is 0 wherever it exists.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from attnflow.observables import circle_gram_statistics, gram_statistics
        >>> th = jax.random.uniform(jax.random.key(0), (300,)) * 6.2832
        >>> u = jnp.stack([jnp.cos(th), jnp.sin(th)], axis=1)
        >>> fast, dense = circle_gram_statistics(u, 2.0, 0.99, modes=16), gram_statistics(u @ u.T, 2.0, 0.99)
        >>> int(fast["clusters"]) == int(dense["clusters"]), float(fast["pairs_clustered"] - dense["pairs_clustered"])
        (True, 0.0)
        >>> all(abs(float(fast[k] - dense[k])) < 1e-5 for k in ("energy", "ip_min", "ip_mean", "ip_max"))
        True
    """
    shape = v.check_array("x", x, "tokens (n, 2) in the plane, at least two", ranks=(2,))
    if shape[1] != 2 or shape[0] < 2:
        raise InputError(f"x must be tokens (n, 2) in the plane, at least two, got shape {shape}.")
    v.check_beta("beta", beta, "the inverse temperature of the energy", scalar=True)
    modes = v.check_int("modes", modes, minimum=0, meaning="the Fourier modes of the energy")
    if v.is_concrete(threshold) and not -1 < float(threshold) < 1:
        raise InputError(f"threshold must be an inner product in (-1, 1), got {threshold!r}.")
    return _circle_statistics(v.as_float(x), beta, threshold, modes)


def _circle_statistics(x, beta, threshold, modes: int) -> dict:
    u = directions(x)
    n = u.shape[0]
    dtype = u.dtype
    threshold = jnp.asarray(threshold, dtype)
    theta = jnp.arctan2(u[:, 1], u[:, 0])
    order = jnp.argsort(theta)
    ts, us = theta[order], u[order]
    # circular neighbours: the closest pair, and the gaps that cut the threshold graph
    adjacent = jnp.sum(us * jnp.roll(us, -1, axis=0), axis=1)
    ip_max = jnp.max(adjacent)
    clusters = jnp.maximum(jnp.sum(adjacent < threshold), 1)
    # the farthest pair: the neighbours of each token's antipode
    two_pi = jnp.asarray(2 * math.pi, dtype)
    antipode = jnp.where(ts > 0, ts - math.pi, ts + math.pi)  # theta + pi, in (-pi, pi]
    right = jnp.searchsorted(ts, antipode) % n
    left = (right - 1) % n
    ip_min = jnp.minimum(jnp.min(jnp.sum(us * us[right], axis=1)), jnp.min(jnp.sum(us * us[left], axis=1)))
    # clustered ordered pairs: the tokens within delta of each, on the angles extended by -+ 2 pi
    delta = jnp.arccos(threshold)
    ext = jnp.concatenate([ts - two_pi, ts, ts + two_pi])
    counts = jnp.searchsorted(ext, ts + delta, side="right") - jnp.searchsorted(ext, ts - delta, side="left") - 1
    pairs = jnp.sum(jnp.minimum(counts, n - 1).astype(dtype))
    total = jnp.sum(u, axis=0)
    ip_mean = (jnp.sum(total * total) - jnp.sum(u * u)) / (n * (n - 1))
    # the energy from the Fourier moments
    beta = jnp.asarray(beta, dtype)
    c, _ = kernel_coefficients(beta, jnp.zeros((), dtype), modes)
    re, im = power_sums(u[:, 0], u[:, 1], modes + 1)  # S_0 .. S_K
    series = c[0] * n * n + 2 * jnp.sum(c[1:] * (re[1:] ** 2 + im[1:] ** 2))
    energy = jnp.exp(beta + jnp.log(series) - jnp.log(2 * beta * n * n))
    return {"pairs_clustered": pairs / (n * (n - 1)), "clusters": clusters.astype(dtype), "energy": energy,
            "ip_min": ip_min, "ip_mean": ip_mean, "ip_max": ip_max}
