r"""Differentiable margins of the paper's hypotheses on (Q, K, V), traceable by construction.

Everything here is plain JAX with exact first-order perturbation formulas for **simple**
eigenvalues (``jax.custom_jvp``); there is no host callback and no cached route: ``jax.grad``,
``jax.jvp``, ``jax.jit`` and ``jax.vmap`` work in any order.

* The leading eigenpair (:math:`\lambda_1`, :math:`\varphi_1`, :math:`\varphi_1^*`) is
  :func:`attnflow.spectral.leading_eigenpair_jax` (re-exported here), the one implementation the
  spectral checks use too: null vectors of :math:`V - \lambda_1 I`, derivative through the
  reduced resolvent, exact when :math:`\lambda_1` alone is simple.
* :func:`eig_sorted` -- the full decomposition, for what needs every eigenvector (spectral
  projectors, V's eigenbasis): ``jnp.linalg.eig`` (LAPACK on CPU, cuSOLVER ``geev`` on GPUs
  with eigenvalues and right vectors only). With :math:`V = X\Lambda Y`, :math:`Y = X^{-1}`,
  :math:`M = Y\,dV\,X`: :math:`d\lambda_k = M_{kk}`,
  :math:`dx_k = \sum_{j\ne k} x_j M_{jk}/(\lambda_k - \lambda_j) + c_k x_k` (gauge :math:`c_k`:
  :math:`|x_k| = 1`, largest entry real positive), :math:`dY = -Y\,dX\,Y` (all eigenvalues
  simple).
* spectral projector of a group G of eigenvalues,
  :math:`d\Pi_G = \sum_{k\in G, j\notin G} (P_j\,dV P_k + P_k\,dV P_j)/(\lambda_k - \lambda_j)`,
  :math:`P_k = x_k y_k` (only cross-group gaps appear: valid when eigenvalues inside G coincide).

Margins (positive when the hypothesis holds, continuous across its boundary):

* :func:`good_triple_margins` -- Def 4.1: gap :math:`|\lambda_1| - |\lambda_2|`, Im
  :math:`\lambda_1`, Re :math:`\lambda_1`, :math:`\langle Q\varphi_1, K\varphi_1\rangle`, and the
  signed margin of condition (1), :math:`\min(|\lambda_1|-|\lambda_2|, \mathrm{Re}\lambda_1) - |\mathrm{Im}\lambda_1|`.
* :func:`distance_to_paranormal` -- Def 5.1.
* :func:`qk_lambda_min` -- smallest eigenvalue of the symmetric part of :math:`Q^TK`
  (Thm 3.1 / 5.2 need :math:`Q^TK > 0`).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Complex, Float

from .. import _validate as v
from .._x64 import keeps_float64
from ..errors import InputError
from ..spectral import eigvals_sorted, modulus_order
from ..spectral import leading_eigenpair_jax as _leading_eigenpair_jax
from ._smooth import safe_norm


def _check_square(name, A) -> int:
    return v.check_square(name, A, "(d, d); vmap for a batch")


def _check_qk(Q, K, d: int | None = None) -> None:
    """Q and K real (m, d) matrices of one shape (d given: that many columns)."""
    qs = v.check_array("Q", Q, "an (m, d) matrix", ranks=(2,), nonempty=True)
    ks = v.check_array("K", K, "an (m, d) matrix", ranks=(2,), nonempty=True)
    for name, shape in (("Q", qs), ("K", ks)):
        if d is not None and shape[1] != d:
            raise InputError(f"{name} must have d = {d} columns like V, got shape {shape}.")
    if qs != ks:
        raise InputError(f"Q and K must have the same shape (m, d), got Q {qs} and K {ks}.")


def _check_r(r, d: int) -> None:
    if isinstance(r, bool) or not isinstance(r, (int, np.integer)) or not 1 <= r <= d:
        raise InputError(f"r (the dimension of F) must be an int in 1..{d}, got {r!r}.")

__all__ = [
    "eig_sorted",
    "leading_eigenpair_jax",
    "spectral_projector",
    "GoodTripleMargins",
    "good_triple_margins",
    "distance_to_paranormal",
    "qk_lambda_min",
]


def _complex_dtype(x):
    return jnp.result_type(x.dtype, jnp.complex64)


@jax.custom_jvp
def eig_sorted(V: Float[Array, "d d"]) -> tuple[Complex[Array, " d"], Complex[Array, "d d"], Complex[Array, "d d"]]:
    r"""Eigenvalues sorted by decreasing modulus (ties: larger real part, then larger imaginary
    part first), unit right eigenvectors X (columns, largest-modulus entry real positive) and
    :math:`Y = X^{-1}` (rows: left eigenvectors with :math:`y_k x_k = 1`). Exact JVPs for
    simple eigenvalues (module docstring).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from attnflow.geometry import eig_sorted
        >>> w, X, Y = eig_sorted(jnp.array([[2.0, 1.0], [0.0, -1.0]]))
        >>> w.real.tolist()
        [2.0, -1.0]
        >>> float(jax.grad(lambda V: eig_sorted(V)[0][0].real)(jnp.array([[2.0, 1.0], [0.0, -1.0]]))[0, 0])
        1.0
    """
    w, X = jnp.linalg.eig(V)
    order = modulus_order(w)
    w, X = w[order], X[:, order]
    X = X / jnp.linalg.norm(X, axis=0, keepdims=True)
    p = jnp.argmax(jnp.abs(X), axis=0)
    lead = X[p, jnp.arange(X.shape[1])]
    X = X * (jnp.conj(lead) / jnp.abs(lead))[None, :]
    Y = jnp.linalg.inv(X)
    return w, X, Y


@eig_sorted.defjvp
def _eig_sorted_jvp(primals, tangents):
    (V,), (dV,) = primals, tangents
    w, X, Y = eig_sorted(V)
    d = w.shape[0]
    M = Y @ dV.astype(X.dtype) @ X
    dw = jnp.diagonal(M)
    eye = jnp.eye(d, dtype=bool)
    gaps = w[None, :] - w[:, None]  # [j, k] = lambda_k - lambda_j
    F = jnp.where(eye, 0, 1 / jnp.where(eye, 1, gaps))
    dX0 = X @ (F * M)
    cols = jnp.arange(d)
    p = jnp.argmax(jnp.abs(X), axis=0)
    re_c = -jnp.real(jnp.sum(jnp.conj(X) * dX0, axis=0))
    im_c = -jnp.imag(dX0[p, cols]) / jnp.real(X[p, cols])
    dX = dX0 + X * (re_c + 1j * im_c)[None, :]
    dY = -Y @ dX @ Y
    return (w, X, Y), (dw, dX, dY)


#: the public eig_sorted keeps float64 input in float64 (attnflow._x64); its custom JVP stays inside
eig_sorted = keeps_float64(eig_sorted)
#: attnflow.spectral.leading_eigenpair_jax, keeping float64 input in float64 (attnflow._x64)
leading_eigenpair_jax = keeps_float64(_leading_eigenpair_jax)


@jax.custom_jvp
def _projector_cjvp(V, r_mask):
    w, X, Y = eig_sorted(V)
    return (X * r_mask[None, :]) @ Y


@_projector_cjvp.defjvp
def _projector_jvp(primals, tangents):
    V, mask = primals
    dV, _ = tangents
    w, X, Y = eig_sorted(V)
    Pi = (X * mask[None, :]) @ Y
    M = Y @ dV.astype(X.dtype) @ X
    in_g = mask.astype(bool)
    cross = in_g[:, None] != in_g[None, :]  # exactly one of a, b in G
    gaps = jnp.where(in_g[:, None], w[:, None] - w[None, :], w[None, :] - w[:, None])
    H = jnp.where(cross, 1 / jnp.where(cross, gaps, 1), 0)
    return Pi, X @ (H * M) @ Y


@keeps_float64
def spectral_projector(V: Float[Array, "d d"], r: int) -> Complex[Array, "d d"]:
    r"""Spectral projector :math:`\Pi` onto the invariant subspace of the r eigenvalues of largest
    modulus (:math:`\Pi^2 = \Pi`, :math:`V\Pi = \Pi V`), with the exact derivative of the group
    (valid even when the r eigenvalues coincide, as for a paranormal V).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.geometry import spectral_projector
        >>> Pi = spectral_projector(jnp.diag(jnp.array([3.0, 3.0, 1.0])), 2)
        >>> jnp.round(Pi.real, 6).tolist()
        [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.0]]
    """
    d = _check_square("V", V)
    _check_r(r, d)
    V = v.as_float(V)
    mask = (jnp.arange(d) < r).astype(V.dtype)
    return _projector_cjvp(V, mask)


class GoodTripleMargins(NamedTuple):
    """Definition 4.1 margins (real scalars; positive = the condition holds)."""

    gap: Float[Array, ""]  # |lambda_1| - |lambda_2|  (>= 0 by the ordering; 0 for a complex pair)
    imag: Float[Array, ""]  # Im lambda_1
    real: Float[Array, ""]  # Re lambda_1
    qk: Float[Array, ""]  # <Q phi_1, K phi_1> (Hermitian real part when phi_1 is complex)
    condition1: Float[Array, ""]  # min(gap, Re lambda_1) - |Im lambda_1|


@keeps_float64
def good_triple_margins(Q: Float[Array, "m d"], K: Float[Array, "m d"], V: Float[Array, "d d"]) -> GoodTripleMargins:
    r"""Def 4.1 as continuous margins. Condition (1) (:math:`\lambda_1` of largest modulus is
    real, positive and :math:`> |\lambda_2|`) holds iff ``condition1`` :math:`> 0`, where
    ``condition1`` :math:`= \min(|\lambda_1|-|\lambda_2|, \mathrm{Re}\,\lambda_1) - |\mathrm{Im}\,\lambda_1|`
    (a complex pair has gap 0, so the margin is :math:`-|\mathrm{Im}\lambda_1| < 0`; it is
    continuous where two real eigenvalues meet and turn complex). Condition (2) holds iff
    ``qk`` :math:`= \mathrm{Re}\,\varphi_1^H Q^T K \varphi_1 > 0` (:math:`|\varphi_1| = 1`).
    Hard counterpart: :func:`attnflow.spectral.check_good_triple` (``gap``, ``qk_value``).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from attnflow.geometry import good_triple_margins
        >>> m = good_triple_margins(jnp.eye(2), jnp.eye(2), jnp.diag(jnp.array([1.0, 0.5])))
        >>> float(m.gap), float(m.condition1), float(m.qk)
        (0.5, 0.5, 1.0)
        >>> g = jax.grad(lambda V: good_triple_margins(jnp.eye(2), jnp.eye(2), V).gap)(jnp.diag(jnp.array([1.0, 0.5])))
        >>> g.tolist()
        [[1.0, 0.0], [0.0, -1.0]]
    """
    d = _check_square("V", V)
    _check_qk(Q, K, d)
    Q, K, V = (v.as_float(a) for a in (Q, K, V))
    lam1, phi, _ = leading_eigenpair_jax(V)
    # |lambda_2|: eigenvalues only (JAX's eig derivative), so coinciding lower eigenvalues are fine
    second = jnp.abs(eigvals_sorted(V, "device")[1]) if d > 1 else jnp.zeros((), V.dtype)
    gap = jnp.abs(lam1) - second
    cd = _complex_dtype(V)
    qk = jnp.real(jnp.vdot(Q.astype(cd) @ phi, K.astype(cd) @ phi))
    cond1 = jnp.minimum(gap, lam1.real) - jnp.abs(lam1.imag)
    return GoodTripleMargins(gap, lam1.imag, lam1.real, qk, cond1)


@keeps_float64
def distance_to_paranormal(V: Float[Array, "d d"], r: int) -> Float[Array, ""]:
    r"""How far V is from being paranormal (Def 5.1) with :math:`\dim F = r`:

    .. math:: \|(V - \bar\lambda I)\Pi\|_F + \max(0, |\lambda_{r+1}| - \bar\lambda) + \max(0, -\bar\lambda),

    :math:`\Pi` the spectral projector on the r eigenvalues of largest modulus
    (:func:`spectral_projector`; its range is F and its kernel G), :math:`\bar\lambda =
    \mathrm{Re}\,\mathrm{tr}(V\Pi)/r`. The first term is 0 iff :math:`V = \bar\lambda I` on F, the
    others iff :math:`\bar\lambda > 0` and the spectral radius on G is at most
    :math:`\bar\lambda`. So it is 0 exactly on the (diagonalisable) paranormal V with
    :math:`\dim F = r` (and on the boundary :math:`\rho(V|_G) = \bar\lambda`), in the units of V.
    Hard counterpart: :func:`attnflow.spectral.paranormal_split` (``paranormal`` and
    ``F.shape[1] == r``).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.geometry import distance_to_paranormal
        >>> round(float(distance_to_paranormal(jnp.diag(jnp.array([1.0, 1.0, -0.5])), 2)), 9)
        0.0
        >>> round(float(distance_to_paranormal(jnp.diag(jnp.array([1.0, 0.8, -0.5])), 2)), 6)
        0.141421
    """
    d = _check_square("V", V)
    _check_r(r, d)
    V = v.as_float(V)
    Pi = spectral_projector(V, r)
    cd = Pi.dtype
    lam = jnp.real(jnp.trace(V.astype(cd) @ Pi)) / r
    # |Im| part of a complex projector (a split conjugate pair) counts too
    resid = safe_norm((V - lam * jnp.eye(d, dtype=V.dtype)).astype(cd) @ Pi) + safe_norm(jnp.imag(Pi))
    if r < d:
        w, _, _ = eig_sorted(V)
        radius = jnp.abs(w[r])
    else:
        radius = jnp.zeros((), V.dtype)
    return resid + jax.nn.relu(radius - lam) + jax.nn.relu(-lam)


@keeps_float64
def qk_lambda_min(Q: Float[Array, "m d"], K: Float[Array, "m d"]) -> Float[Array, ""]:
    r"""Smallest eigenvalue of the symmetric part :math:`\tfrac12(A + A^T)`, :math:`A = Q^TK`.
    :math:`Q^TK > 0` (in the sense of :func:`attnflow.spectral.is_positive_definite`, for a
    symmetric A) iff it is positive. Derivative :math:`u^T\,d(\mathrm{sym}\,A)\,u` for a simple
    smallest eigenvalue (unit eigenvector u).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.geometry import qk_lambda_min
        >>> float(qk_lambda_min(jnp.eye(2), jnp.diag(jnp.array([2.0, -0.5]))))
        -0.5
    """
    _check_qk(Q, K)
    A = v.as_float(Q).T @ v.as_float(K)
    return jnp.linalg.eigvalsh(0.5 * (A + A.T))[0]
