r"""Matrix functions shared by the dynamics: :math:`e^{tV}`, integer powers, inverses.

There is exactly one implementation of each here; the dynamics call them once per
vector-field evaluation (a d x d computation), never once per token pair.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from ._validate import is_concrete
from .errors import InputError

__all__ = ["expm_tV", "matrix_power", "euler_transfer_matrix", "check_invertible_transfer"]


def expm_tV(V: Float[Array, "d d"], t: Float[Array, ""] | float) -> Float[Array, "d d"]:
    r"""The matrix exponential :math:`e^{tV}` (Pade scaling-and-squaring; works for any V,
    diagonalisable or not, and on every backend).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow import expm_tV
        >>> round(float(expm_tV(jnp.eye(2), 1.0)[0, 0]), 5)
        2.71828
    """
    t = jnp.asarray(t, dtype=V.dtype)
    return jax.scipy.linalg.expm(t * V)


def matrix_power(
    R: Float[Array, "d d"], k: Int[Array, ""] | int, num_bits: int
) -> Float[Array, "d d"]:
    r""":math:`R^k` for a traced integer :math:`0 \le k < 2^{\text{num\_bits}}` by binary
    exponentiation (``2 num_bits`` matrix products, differentiable in R).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow._linalg import matrix_power
        >>> matrix_power(jnp.array([[1.0, 1.0], [0.0, 1.0]]), 5, num_bits=3).tolist()
        [[1.0, 5.0], [0.0, 1.0]]
    """
    k = jnp.asarray(k, dtype=jnp.int32)
    result = jnp.eye(R.shape[0], dtype=R.dtype)
    base = R
    for bit in range(num_bits):
        use = ((k >> bit) & 1) == 1
        result = jnp.where(use, result @ base, result)
        if bit + 1 < num_bits:
            base = base @ base
    return result


def euler_transfer_matrix(V: Float[Array, "d d"], dt: float | Float[Array, ""]) -> Float[Array, "d d"]:
    r"""The one-layer transfer matrix :math:`R = I + \Delta t\, V` of Remark 3.4."""
    return jnp.eye(V.shape[0], dtype=V.dtype) + jnp.asarray(dt, V.dtype) * V


def check_invertible_transfer(V, dt) -> None:
    r"""Raise :class:`InputError` if :math:`I + \Delta t V` is (numerically) singular.

    The discrete rescaling :math:`z[k] = (I + \Delta t V)^{-k} x[k]` needs R invertible,
    i.e. :math:`-1/\Delta t` must not be an eigenvalue of V.
    """
    if not (is_concrete(V) and is_concrete(dt)):
        return
    Vn = np.asarray(V, dtype=np.float64)
    R = np.eye(Vn.shape[-1]) + float(dt) * Vn
    for idx in np.ndindex(R.shape[:-2]):
        s = np.linalg.svd(R[idx], compute_uv=False)
        if s[-1] <= 1e-12 * max(1.0, s[0]):
            where = f" (batch member {idx[0]})" if idx else ""
            raise InputError(
                f"I + dt*V is singular{where} for dt={float(dt)!r} (smallest singular value "
                f"{s[-1]:.3g}): -1/dt is an eigenvalue of V, so the discrete rescaling "
                "z[k] = (I + dt V)^{-k} x[k] does not exist; choose another dt."
            )
