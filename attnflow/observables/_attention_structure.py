r"""Structure of an attention matrix P (n, n), row-stochastic.

* :func:`numerical_rank` -- number of singular values above ``tol * sigma_max``.
* :func:`boolean_distance` -- distance to the nearest Boolean row-stochastic matrix
  (each row a unit vector :math:`e_k`). In the entrywise max-norm the nearest one puts
  row i on :math:`k = \arg\max_j P_{ij}` and the distance is
  :math:`\max_i (1 - \max_j P_{ij})`.
* :func:`leaders` -- the columns that receive the mass (row maxima).
* :func:`off_leader_mass` -- per row :math:`1 - \max_j P_{ij}`.
* :func:`double_log_slope` -- slope of :math:`\log(-\log m(t))` in t: a positive
  slope means doubly exponential decay :math:`m(t) \approx e^{-c e^{\kappa t}}`.
"""

from __future__ import annotations

import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from .. import _validate as v
from .._x64 import keeps_float64
from ..errors import InputError

__all__ = [
    "numerical_rank",
    "boolean_distance",
    "leaders",
    "off_leader_mass",
    "double_log_slope",
]


@keeps_float64
@v.jit_entry
def numerical_rank(P: Float[Array, "n n"], tol: float = 1e-6) -> Int[Array, ""]:
    r"""Numerical rank: :math:`\#\{k : \sigma_k > \text{tol}\cdot\sigma_1\}`.

    See also:
        :func:`attnflow.geometry.soft_rank` (an absolute threshold ``temperature * scale``), smooth in P: this
        count is piecewise constant in the tokens, so its gradient is 0 wherever it exists (``jax.grad`` returns
        0, not an error).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.observables import numerical_rank
        >>> int(numerical_rank(jnp.array([[1.0, 0.0], [1.0, 0.0]])))
        1
    """
    v.check_square("P", P, "an attention matrix (n, n); vmap for a batch")
    v.check_real("tol", tol, "the threshold relative to the largest singular value, a real scalar")
    s = jnp.linalg.svd(P, compute_uv=False)
    return jnp.sum(s > tol * s[0]).astype(jnp.int32)


@keeps_float64
@v.jit_entry
def boolean_distance(P: Float[Array, "n n"]) -> Float[Array, ""]:
    r"""Max-norm distance of P to the nearest Boolean row-stochastic matrix:
    :math:`\max_i (1 - \max_j P_{ij})`.

    See also:
        :func:`attnflow.geometry.boolean_distance_soft`, smooth in P (this max of maxima has a gradient that
        jumps where the leading entry of the worst row changes).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.observables import boolean_distance
        >>> round(float(boolean_distance(jnp.array([[0.9, 0.1], [0.0, 1.0]]))), 6)  # float32: ~7 digits
        0.1
    """
    v.check_square("P", P, "an attention matrix (n, n); vmap for a batch")
    return jnp.max(off_leader_mass(P))


@keeps_float64
@v.jit_entry
def off_leader_mass(P: Float[Array, "n n"]) -> Float[Array, " n"]:
    r"""Mass of each row outside its leader column: :math:`1 - \max_j P_{ij}`
    (computed as the sum of the non-maximal entries, accurate below machine epsilon).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.observables import off_leader_mass
        >>> off_leader_mass(jnp.array([[0.75, 0.25], [0.5, 0.5]])).tolist()
        [0.25, 0.5]
    """
    v.check_square("P", P, "an attention matrix (n, n); vmap for a batch")
    k = jnp.argmax(P, axis=-1)
    mask = jnp.arange(P.shape[-1])[None, :] != k[:, None]
    return jnp.sum(jnp.where(mask, P, 0), axis=-1)


@keeps_float64
@v.jit_entry
def leaders(P: Float[Array, "n n"], threshold: float = 0.5) -> Bool[Array, " n"]:
    r"""Leader columns: j is a leader when :math:`P_{ij} > \text{threshold}` for some row i
    (with the default 1/2, each row has at most one leader).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.observables import leaders
        >>> leaders(jnp.array([[0.9, 0.1, 0.0], [0.8, 0.1, 0.1], [0.0, 0.1, 0.9]])).tolist()
        [True, False, True]
    """
    v.check_square("P", P, "an attention matrix (n, n); vmap for a batch")
    v.check_real("threshold", threshold, "the mass that makes a leader, a real scalar")
    return jnp.any(P > threshold, axis=0)


@keeps_float64
@v.jit_entry
def double_log_slope(
    ts: Float[Array, " T"], mass: Float[Array, " T"], lo: float = 1e-250, hi: float = 0.1
) -> Float[Array, ""]:
    r"""Least-squares slope of :math:`\log(-\log m(t))` against t, over the times where
    ``lo < m(t) < hi`` (NaN when fewer than 3 such times). Doubly exponential decay
    :math:`m \approx e^{-c e^{\kappa t}}` gives slope :math:`\kappa`; exponential decay
    gives a slope tending to 0.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.observables import double_log_slope
        >>> ts = jnp.linspace(0.0, 3.0, 31)
        >>> round(float(double_log_slope(ts, jnp.exp(-0.5 * jnp.exp(2.0 * ts)))), 6)
        2.0
    """
    if v.check_array("ts", ts, "save times (T,)", ranks=(1,), nonempty=True) != v.check_array("mass", mass, "values (T,)", ranks=(1,), nonempty=True):
        raise InputError(f"ts and mass must have one shape (T,), got {ts.shape} and {mass.shape}.")
    for name, bound in (("lo", lo), ("hi", hi)):
        v.check_real(name, bound, "a bound on the mass, a real scalar")
    ok = (mass > lo) & (mass < hi)
    safe = jnp.where(ok, mass, 0.5)
    y = jnp.log(-jnp.log(safe))
    w = ok.astype(ts.dtype)
    cnt = jnp.sum(w)
    tm = jnp.sum(w * ts) / jnp.maximum(cnt, 1)
    ym = jnp.sum(w * y) / jnp.maximum(cnt, 1)
    cov = jnp.sum(w * (ts - tm) * (y - ym))
    var = jnp.sum(w * (ts - tm) ** 2)
    slope = cov / jnp.where(var > 0, var, 1)
    return jnp.where((cnt >= 3) & (var > 0), slope, jnp.nan)
