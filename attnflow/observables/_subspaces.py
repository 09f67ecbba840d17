r"""Subspaces: Thm 5.2 (paranormal V, :math:`\mathbb R^d = F \oplus G`) and the
codimension-k conjecture.

* :func:`split_coordinates` -- coordinates of every token in a basis [F | G] (the direct
  sum need not be orthogonal): :math:`z_i = F a_i + G c_i`.
* :func:`unstable_left_basis` -- a real orthonormal basis W (k, d) of the left invariant
  subspace of V for its k eigenvalues with positive real part; the affine subspaces
  :math:`\{z: Wz = c\}` have codimension k (k = 1, V good: the hyperplanes of Thm 4.2).
* :func:`codim_projections` -- :math:`W z_i` (jnp), whose clusters count the subspaces approached.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .. import _validate as v
from .._x64 import keeps_float64
from ..errors import InputError

__all__ = ["split_coordinates", "unstable_left_basis", "codim_projections"]


@keeps_float64
def split_coordinates(
    z: Float[Array, "*T n d"], F: np.ndarray, G: np.ndarray
) -> tuple[Float[Array, "*T n f"], Float[Array, "*T n g"]]:
    r"""(F-coordinates, G-coordinates) of the tokens: solve :math:`[F\,G]\,(a, c) = z`.

    Example:
        >>> import numpy as np
        >>> from attnflow.observables import split_coordinates
        >>> F, G = np.array([[1.0], [0.0]]), np.array([[1.0], [1.0]])
        >>> a, c = split_coordinates(np.array([[3.0, 1.0]]), F, G)
        >>> a.tolist(), c.tolist()
        ([[2.0]], [[1.0]])
    """
    F, G = np.asarray(F, np.float64), np.asarray(G, np.float64)
    B = np.concatenate([F, G], axis=1)
    Binv = jnp.asarray(np.linalg.inv(B))
    zz = jnp.asarray(z)
    coords = zz @ Binv.T.astype(zz.dtype)
    f = F.shape[1]
    return coords[..., :f], coords[..., f:]


def unstable_left_basis(V, tol: float = 1e-12) -> np.ndarray:
    r"""Real orthonormal rows W (k, d) spanning the left invariant subspace of V belonging to
    its eigenvalues with positive real part (k = their number, with multiplicity); the basis of
    :func:`attnflow.spectral.unstable_projector` (:math:`\Pi = W^T W`), in float64.

    Example:
        >>> import numpy as np
        >>> from attnflow.observables import unstable_left_basis
        >>> W = unstable_left_basis(np.array([[1.0, 5.0], [0.0, -1.0]]))
        >>> W.shape, np.round(np.abs(W), 6).tolist()
        ((1, 2), [[0.371391, 0.928477]])
    """
    from ..spectral import left_eig, projector_from_left_eig

    V = np.asarray(V, np.float64)
    with jax.enable_x64(True):
        _, k, basis = projector_from_left_eig(*left_eig(jnp.asarray(V), "auto"), tol=tol, with_basis=True)
        return np.asarray(basis)[:, : int(k)].T


@keeps_float64
@v.jit_entry
def codim_projections(z: Float[Array, "n d"], W) -> Float[Array, "n k"]:
    r""":math:`W z_i`: tokens on one affine subspace {Wz = c} share one value.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.observables import codim_projections
        >>> codim_projections(jnp.array([[1.0, 2.0, 3.0]]), jnp.array([[0.0, 0.0, 1.0]])).tolist()
        [[3.0]]
    """
    d = v.check_array("z", z, "tokens (n, d); vmap for a batch", ranks=(2,), nonempty=True)[1]
    if v.check_array("W", W, "a (k, d) basis", ranks=(2,), nonempty=True)[1] != d:
        raise InputError(f"W must have shape (k, {d}) for tokens of dimension {d}, got {jnp.shape(W)}.")
    return z @ jnp.asarray(W, z.dtype).T
