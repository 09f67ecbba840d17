r"""The leading eigenpair of V, in JAX, with exact derivatives: the ONE implementation.

:func:`leading_eigenpair_jax` returns :math:`\lambda_1` (largest modulus), the unit right
eigenvector :math:`\varphi_1` (largest-modulus entry real positive) and the dual (left)
eigenvector :math:`\varphi_1^*` with :math:`\varphi_1^* V = \lambda_1\varphi_1^*` and
:math:`\varphi_1^*\varphi_1 = 1`. The spectral stage (:func:`attnflow.spectral.check_batch`, and
so :func:`attnflow.spectral.leading_eigenpair` / :func:`~attnflow.spectral.check_good_triple`)
and the differentiable margins (:mod:`attnflow.geometry`) all call :func:`eigenpair_at`.

Primal: only the *eigenvalues* need ``eig`` (any eig route, host callback included: their
derivative is never taken); the vectors are the right / left null vectors of
:math:`V - \lambda_1 I`, read off its SVD (every backend has one).

Tangent (exact when :math:`\lambda_1` is simple; the other eigenvalues may coincide, e.g. the
zero eigenvalues of a low-rank attention head :math:`V_h = W_O W_V`): with
:math:`A = \lambda_1 I - V`, :math:`\Pi = \varphi_1\varphi_1^*` (the spectral projector) and the
group inverse (reduced resolvent) :math:`S = (A + \Pi)^{-1} - \Pi` (:math:`S\varphi_1 = 0`,
:math:`\varphi_1^* S = 0`, :math:`AS = I - \Pi`),

.. math::
    d\lambda_1 = \varphi_1^*\,dV\,\varphi_1,\qquad
    d\varphi_1 = S\,dV\,\varphi_1 + c\,\varphi_1,\qquad
    d\varphi_1^* = \varphi_1^*\,dV\,S - c\,\varphi_1^*,

with :math:`c` the gauge term keeping :math:`|\varphi_1| = 1` and the chosen entry real
(:math:`\mathrm{Re}\,c = -\mathrm{Re}\,\varphi_1^H S\,dV\varphi_1`), and :math:`-c` keeping
:math:`\varphi_1^*\varphi_1 = 1`. The rule is linear in dV and made of matrix products and one
solve, so reverse mode, forward mode, Hessians, ``jit`` and ``vmap`` all work.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, Complex, Float

from ._eig import eigvals_sorted

__all__ = ["eigenpair_at", "leading_eigenpair_jax"]


def _null_vectors(V, lam):
    """Unit right null vector (largest entry real positive) and left one scaled to
    ``dual @ phi = 1`` of V - lam I (dtype of lam: real SVD for a real lam)."""
    d = V.shape[-1]
    A = V.astype(lam.dtype) - lam * jnp.eye(d, dtype=lam.dtype)
    u, _, vh = jnp.linalg.svd(A)
    phi = jnp.conj(vh[-1])
    lead = phi[jnp.argmax(jnp.abs(phi))]
    phi = phi * (jnp.conj(lead) / jnp.abs(lead))
    phi = phi / jnp.linalg.norm(phi)
    dual = jnp.conj(u[:, -1])
    return phi, dual / (dual @ phi)


@jax.custom_jvp
def eigenpair_at(V: Float[Array, "d d"], lam) -> tuple:
    r"""(:math:`\lambda`, :math:`\varphi`, :math:`\varphi^*`) for ``lam``, a simple eigenvalue of V
    (normally :math:`\lambda_1`, from any eig route), with the exact derivative in V (module
    docstring). ``lam``'s own tangent is ignored: it must *be* the eigenvalue of V, and its
    derivative is :math:`\varphi^* dV \varphi`. A real ``lam`` gives real vectors (real SVD),
    a complex one complex vectors.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from attnflow.spectral import eigenpair_at
        >>> V = jnp.array([[2.0, 1.0], [0.0, 0.5]])
        >>> lam, phi, dual = eigenpair_at(V, jnp.asarray(2.0))
        >>> float(lam), jnp.abs(phi).tolist(), round(float(dual @ phi), 12)
        (2.0, [1.0, 0.0], 1.0)
        >>> g = jax.grad(lambda V: eigenpair_at(V, jnp.asarray(2.0))[0])(V)   # phi* phi^T
        >>> [[round(float(a), 6) + 0.0 for a in row] for row in g]
        [[1.0, 0.0], [0.666667, 0.0]]
    """
    phi, dual = _null_vectors(V, lam)
    return lam, phi, dual


@eigenpair_at.defjvp
def _eigenpair_at_jvp(primals, tangents):
    V, lam = primals
    dV, _ = tangents
    phi, dual = _null_vectors(V, lam)
    d = V.shape[-1]
    cd = phi.dtype
    dV = dV.astype(cd)
    Pi = jnp.outer(phi, dual)
    B = lam * jnp.eye(d, dtype=cd) - V.astype(cd) + Pi  # A + Pi, invertible for a simple lam
    dV_phi = dV @ phi
    dual_dV = dual @ dV
    dlam = dual_dV @ phi
    dphi0 = jnp.linalg.solve(B, dV_phi) - phi * (dual @ dV_phi)  # S dV phi
    ddual0 = jnp.linalg.solve(B.T, dual_dV) - dual * (dual_dV @ phi)  # dual dV S
    p = jnp.argmax(jnp.abs(phi))
    c = -jnp.real(jnp.vdot(phi, dphi0))
    if jnp.issubdtype(cd, jnp.complexfloating):
        c = c - 1j * jnp.imag(dphi0[p]) / jnp.real(phi[p])
    return (lam, phi, dual), (dlam.astype(lam.dtype), dphi0 + c * phi, ddual0 - c * dual)


def leading_eigenpair_jax(V: Float[Array, "d d"], route: str = "auto") -> tuple[
        Complex[Array, ""], Complex[Array, " d"], Complex[Array, " d"]]:
    r"""(:math:`\lambda_1`, :math:`\varphi_1`, :math:`\varphi_1^*`) of V, complex: the eigenvalue of
    largest modulus (ties as :func:`modulus_order`), its unit right eigenvector (largest entry
    real positive, as :func:`attnflow.spectral.leading_eigenpair`) and the left one with
    :math:`\varphi_1^*\varphi_1 = 1`; real parts are the real vectors when :math:`\lambda_1` is
    real. Exact derivatives for a simple :math:`\lambda_1` (:func:`eigenpair_at`); ``route``:
    where the eigenvalues are computed (:func:`attnflow.spectral.eig_route`; never differentiated).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.spectral import leading_eigenpair_jax
        >>> lam, phi, dual = leading_eigenpair_jax(jnp.array([[2.0, 1.0], [0.0, 1.0]]))
        >>> float(lam.real), round(float((dual @ phi).real), 12)
        (2.0, 1.0)
    """
    w = eigvals_sorted(jax.lax.stop_gradient(V), route)
    return eigenpair_at(V, w[0])
