r"""Hyperplanes (Thm 4.2): projections :math:`s_i = \varphi_1^*(z_i)` on the dual leading
eigenvector of V and their limit levels :math:`\{a, 0, b\}`.

* :func:`leading_vectors` -- :math:`\varphi_1, \varphi_1^*` of V (host, via
  :func:`attnflow.spectral.leading_eigenpair`), as arrays.
* :func:`projections` -- :math:`s_i = \varphi_1^* \cdot z_i` (jnp, batchable, a ``save_fn``).
* :func:`level_labels` / :func:`num_levels` -- 1-d clusters of the values (sorted gaps > tol).
* :func:`abz_levels` -- which of a = min, 0, b = max each value is closest to, the distance
  to that set, and how many of the three are used.
* :func:`extreme_monotonicity` -- largest increase of :math:`\max_i s_i` and largest decrease
  of :math:`\min_i s_i` between consecutive saves (both <= 0 under Thm 4.2).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from .. import _validate as v
from .._x64 import keeps_float64
from ..errors import InputError

__all__ = [
    "leading_vectors",
    "projections",
    "level_labels",
    "num_levels",
    "abz_levels",
    "extreme_monotonicity",
]


def leading_vectors(V) -> tuple[np.ndarray, np.ndarray, complex]:
    r"""(:math:`\varphi_1`, :math:`\varphi_1^*`, :math:`\lambda_1`) of V with
    :math:`\varphi_1^*\cdot\varphi_1 = 1`, :math:`\lambda_1` of largest modulus.

    Example:
        >>> import numpy as np
        >>> from attnflow.observables import leading_vectors
        >>> phi, dual, lam = leading_vectors(np.array([[2.0, 1.0], [0.0, 1.0]]))
        >>> round(float(dual @ phi), 12), lam.real
        (1.0, 2.0)
    """
    from ..spectral import leading_eigenpair

    e = leading_eigenpair(V)
    return e.phi, e.phi_dual, e.lambda1


@keeps_float64
@v.jit_entry
def projections(z: Float[Array, "n d"], phi_dual: Float[Array, " d"]) -> Float[Array, " n"]:
    r""":math:`s_i = \varphi_1^*(z_i)`.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.observables import projections
        >>> projections(jnp.array([[1.0, 2.0], [3.0, 4.0]]), jnp.array([1.0, 0.0])).tolist()
        [1.0, 3.0]
    """
    d = v.check_array("z", z, "tokens (n, d); vmap for a batch", ranks=(2,), nonempty=True)[1]
    if v.check_array("phi_dual", phi_dual, "a vector (d,)") != (d,):
        raise InputError(f"phi_dual must have shape ({d},) for tokens of dimension {d}, got {jnp.shape(phi_dual)}.")
    return z @ jnp.asarray(phi_dual, z.dtype)


@keeps_float64
@v.jit_entry
def level_labels(s: Float[Array, " n"], tol) -> Int[Array, " n"]:
    r"""Label of the 1-d cluster ("level") of every value: values sorted, a new level
    starts at every gap > tol; levels are numbered 0, 1, ... from the smallest.

    See also:
        :func:`attnflow.geometry.hyperplane_distances`, smooth in the values: labels are piecewise constant in
        the tokens, so their gradient is 0 wherever it exists (``jax.grad`` returns 0, not an error).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.observables import level_labels
        >>> level_labels(jnp.array([5.0, 0.0, 5.001, 0.0005, -3.0]), 0.01).tolist()
        [2, 1, 2, 1, 0]
    """
    v.check_array("s", s, "values (n,); vmap for a batch", ranks=(1,), nonempty=True)
    v.check_real("tol", tol, "the gap that separates two levels, a real scalar")
    order = jnp.argsort(s)
    gaps = jnp.diff(s[order]) > tol
    sorted_labels = jnp.concatenate([jnp.zeros((1,), jnp.int32), jnp.cumsum(gaps).astype(jnp.int32)])
    return jnp.zeros_like(sorted_labels).at[order].set(sorted_labels)


@keeps_float64
@v.jit_entry
def num_levels(s: Float[Array, " n"], tol) -> Int[Array, ""]:
    r"""Number of levels of :func:`level_labels`.

    See also:
        :func:`attnflow.geometry.hyperplane_distances`, smooth in the values: this count is piecewise constant
        in the tokens, so its gradient is 0 wherever it exists (``jax.grad`` returns 0, not an error).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.observables import num_levels
        >>> int(num_levels(jnp.array([1.0, 1.0001, -1.0, 0.0]), 0.01))
        3
    """
    v.check_array("s", s, "values (n,); vmap for a batch", ranks=(1,), nonempty=True)
    v.check_real("tol", tol, "the gap that separates two levels, a real scalar")
    return 1 + jnp.sum(jnp.diff(jnp.sort(s)) > tol).astype(jnp.int32)


@keeps_float64
@v.jit_entry
def abz_levels(s: Float[Array, " n"], tol) -> tuple[Int[Array, " n"], Float[Array, ""], Int[Array, ""]]:
    r"""Nearest of the three levels (0: a = min s, 1: zero, 2: b = max s) for each value,
    the largest distance :math:`\max_i \mathrm{dist}(s_i, \{a, 0, b\})` and the number of
    the three levels used (a level counts when some value lies within tol of it; a = b
    or a level at 0 count once).

    See also:
        :func:`attnflow.geometry.hyperplane_distances` and :func:`attnflow.geometry.hyperplane_levels`, smooth
        in the values: the labels and the count are piecewise constant in the tokens, so their gradient is 0
        wherever it exists (``jax.grad`` returns 0, not an error).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.observables import abz_levels
        >>> which, dist, used = abz_levels(jnp.array([-2.0, 0.0, 3.0, 3.0, 0.5]), 0.01)
        >>> which.tolist(), float(dist), int(used)
        ([0, 1, 2, 2, 1], 0.5, 3)
    """
    v.check_array("s", s, "values (n,); vmap for a batch", ranks=(1,), nonempty=True)
    v.check_real("tol", tol, "the gap that separates two levels, a real scalar")
    a, b = jnp.min(s), jnp.max(s)
    levels = jnp.stack([a, jnp.zeros_like(a), b])
    dist = jnp.abs(s[:, None] - levels[None, :])
    which = jnp.argmin(dist, axis=1).astype(jnp.int32)
    near = jnp.min(dist, axis=1)
    hit_zero = jnp.any(jnp.abs(s) <= tol)
    used = (1 + (b - a > tol) + (hit_zero & (jnp.abs(a) > tol) & (jnp.abs(b) > tol))).astype(jnp.int32)
    return which, jnp.max(near), used


@keeps_float64
@v.jit_entry
def extreme_monotonicity(s_t: Float[Array, "T n"]) -> tuple[Float[Array, ""], Float[Array, ""]]:
    r"""(largest increase of :math:`\max_i s_i(t)`, largest decrease of :math:`\min_i s_i(t)`)
    between consecutive saves; Thm 4.2 says both are <= 0.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.observables import extreme_monotonicity
        >>> up, down = extreme_monotonicity(jnp.array([[0.0, 3.0], [0.5, 2.0], [0.4, 2.5]]))
        >>> round(float(up), 6), round(float(down), 6)  # float32: ~7 digits
        (0.5, 0.1)
    """
    v.check_array("s_t", s_t, "projections over time (T, n)", ranks=(2,), nonempty=True)
    mx, mn = jnp.max(s_t, axis=1), jnp.min(s_t, axis=1)
    return jnp.max(jnp.diff(mx)), jnp.max(-jnp.diff(mn))
