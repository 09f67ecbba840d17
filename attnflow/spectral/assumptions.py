r"""Host-side (NumPy, float64) checks of the spectral hypotheses for one weight triple.

* :func:`leading_eigenpair` -- eigenvalue of **largest modulus** :math:`\lambda_1`, its right
  eigenvector :math:`\varphi_1` and the dual (left) :math:`\varphi_1^*` with
  :math:`\varphi_1^*(\varphi_1) = 1`.
* :func:`check_good_triple` -- Definition 4.1 with margins.
* :func:`paranormal_split` -- Definition 5.1: :math:`\mathbb R^d = F \oplus G`.
* :func:`predict_geometry` -- which limit geometry the theorems predict, and why.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = [
    "LeadingEigenpair",
    "GoodTripleCheck",
    "ParanormalSplit",
    "Prediction",
    "leading_eigenpair",
    "check_good_triple",
    "paranormal_split",
    "is_positive_definite",
    "predict_geometry",
]


@dataclass(frozen=True)
class LeadingEigenpair:
    """Eigenvalues sorted by decreasing modulus, and the leading right/left eigenvectors."""

    eigenvalues: np.ndarray  # (d,) complex, |lambda_1| >= |lambda_2| >= ...
    phi: np.ndarray  # (d,) right eigenvector of lambda_1 (unit norm, real part if real)
    phi_dual: np.ndarray  # (d,) left eigenvector with phi_dual @ phi = 1

    @property
    def lambda1(self) -> complex:
        return complex(self.eigenvalues[0])


def leading_eigenpair(V) -> LeadingEigenpair:
    r"""Eigen-decomposition of V ordered by modulus, with :math:`\varphi_1^* V = \lambda_1 \varphi_1^*`.

    Example:
        >>> import numpy as np
        >>> from attnflow.spectral import leading_eigenpair
        >>> e = leading_eigenpair(np.diag([0.5, -2.0, 1.0]))
        >>> e.lambda1
        (-2+0j)
    """
    V = np.asarray(V, dtype=np.float64)
    w, vr = np.linalg.eig(V)
    order = np.lexsort((-w.real, -np.abs(w)))  # by modulus, ties: larger real part first
    w, vr = w[order], vr[:, order]
    phi = vr[:, 0]
    wl, vl = np.linalg.eig(V.T)
    j = int(np.argmin(np.abs(wl - w[0])))
    phi_dual = vl[:, j]
    if abs(w[0].imag) <= 1e-12 * max(1.0, abs(w[0])):
        phi, phi_dual = phi.real, phi_dual.real
        phi = phi / np.linalg.norm(phi)
        # Make the largest-|.| entry of phi positive, for reproducible signs.
        phi = phi * np.sign(phi[np.argmax(np.abs(phi))])
    denom = phi_dual @ phi
    phi_dual = phi_dual / denom if abs(denom) > 0 else phi_dual
    return LeadingEigenpair(eigenvalues=w, phi=phi, phi_dual=phi_dual)


@dataclass(frozen=True)
class GoodTripleCheck:
    """Definition 4.1, each condition with its margin."""

    condition1: bool  # lambda_1 real, > 0, simple and lambda_1 > |lambda_2|
    gap: float  # lambda_1 - |lambda_2| (real part of lambda_1 used when complex)
    lambda1: complex
    condition2: bool  # <Q phi_1, K phi_1> > 0
    qk_value: float  # <Q phi_1, K phi_1> (nan when condition 1 fails with complex lambda_1)
    eig: LeadingEigenpair

    @property
    def good(self) -> bool:
        return self.condition1 and self.condition2


def check_good_triple(Q, K, V, tol: float = 1e-10) -> GoodTripleCheck:
    r"""Definition 4.1: (1) the eigenvalue of largest modulus is real, positive and
    simple with :math:`\lambda_1 > |\lambda_2|`; (2) :math:`\langle Q\varphi_1, K\varphi_1\rangle > 0`.

    Example:
        >>> import numpy as np
        >>> from attnflow.spectral import check_good_triple
        >>> c = check_good_triple(np.eye(2), np.eye(2), np.diag([1.0, 0.5]))
        >>> c.good, round(c.gap, 3)
        (True, 0.5)
    """
    eig = leading_eigenpair(V)
    lam = eig.eigenvalues
    lam1 = lam[0]
    second = abs(lam[1]) if lam.size > 1 else 0.0
    scale = max(1.0, abs(lam1))
    real = abs(lam1.imag) <= tol * scale
    gap = float(lam1.real - second)
    cond1 = bool(real and lam1.real > tol * scale and gap > tol * scale)
    if real:
        phi = eig.phi
        qk = float((np.asarray(Q, np.float64) @ phi) @ (np.asarray(K, np.float64) @ phi))
    else:
        qk = float("nan")
    cond2 = bool(real and qk > 0)
    return GoodTripleCheck(cond1, gap, complex(lam1), cond2, qk, eig)


def is_positive_definite(A, tol: float = 0.0) -> tuple[bool, float]:
    r"""Whether A (e.g. :math:`Q^T K`) is symmetric positive definite; returns (flag, smallest eigenvalue
    of the symmetric part). A non-symmetric A is reported as not SPD.

    Example:
        >>> import numpy as np
        >>> from attnflow.spectral import is_positive_definite
        >>> is_positive_definite(np.diag([2.0, 0.5]))
        (True, 0.5)
    """
    A = np.asarray(A, dtype=np.float64)
    sym = 0.5 * (A + A.T)
    lam_min = float(np.linalg.eigvalsh(sym).min())
    symmetric = np.allclose(A, A.T, rtol=1e-10, atol=1e-12 * max(1.0, np.abs(A).max()))
    return bool(symmetric and lam_min > tol), lam_min


@dataclass(frozen=True)
class ParanormalSplit:
    """Definition 5.1: V = lambda I on F, spectral radius of V on G < lambda."""

    paranormal: bool
    lam: float
    F: np.ndarray  # (d, dim F) basis
    G: np.ndarray  # (d, dim G) basis
    radius_G: float  # spectral radius of V restricted to G
    reason: str


def paranormal_split(V, tol: float = 1e-9) -> ParanormalSplit:
    r"""Find :math:`\mathbb R^d = F\oplus G` with F, G V-invariant, :math:`V|_F = \lambda I`
    (:math:`\lambda > 0`) and :math:`\rho(V|_G) < \lambda`. F and G need not be orthogonal.

    Example:
        >>> import numpy as np
        >>> from attnflow.spectral import paranormal_split
        >>> s = paranormal_split(np.diag([1.0, 1.0, -0.5]))
        >>> s.paranormal, s.F.shape[1], s.G.shape[1]
        (True, 2, 1)
    """
    V = np.asarray(V, dtype=np.float64)
    d = V.shape[0]
    eig = leading_eigenpair(V)
    lam1 = eig.lambda1
    scale = max(1.0, abs(lam1))
    empty = np.zeros((d, 0))
    if abs(lam1.imag) > tol * scale or lam1.real <= tol * scale:
        return ParanormalSplit(False, float(lam1.real), empty, empty, float("nan"),
                               f"the eigenvalue of largest modulus {lam1:.4g} is not real and positive")
    lam = float(lam1.real)
    w = eig.eigenvalues
    mult = int(np.sum(np.abs(w - lam) <= 1e-6 * scale))
    others = w[np.abs(w - lam) > 1e-6 * scale]
    radius = float(np.abs(others).max()) if others.size else 0.0
    if others.size and np.any(np.abs(np.abs(others) - lam) <= tol * scale):
        return ParanormalSplit(False, lam, empty, empty, radius,
                               f"another eigenvalue has modulus {lam:.4g} (e.g. -lambda or a complex pair)")
    M = V - lam * np.eye(d)
    u, s, vt = np.linalg.svd(M)
    rank = int(np.sum(s > 1e-8 * scale))
    F = vt[rank:].T  # null space of V - lam I
    if F.shape[1] != mult:
        return ParanormalSplit(False, lam, F, empty, radius,
                               f"lambda = {lam:.4g} is defective (algebraic multiplicity {mult}, "
                               f"eigenspace dimension {F.shape[1]}): V is not lambda*I on any complement")
    G = u[:, :rank]  # range(V - lam I) is V-invariant and complementary when lam is semisimple
    return ParanormalSplit(True, lam, F, G, radius,
                           f"V = {lam:.4g} I on F (dim {F.shape[1]}), spectral radius {radius:.4g} on G (dim {G.shape[1]})")


@dataclass(frozen=True)
class Prediction:
    geometry: str  # polytope | polytope x subspace | hyperplanes | origin | codim-k | none
    theorem: str
    reason: str
    codim: int = 0


def predict_geometry(Q, K, V) -> Prediction:
    """Which limit geometry the paper predicts for (Q, K, V), with the reason.

    Example:
        >>> import numpy as np
        >>> from attnflow.spectral import predict_geometry
        >>> predict_geometry(np.eye(2), np.eye(2), np.eye(2)).geometry
        'polytope'
    """
    Q, K, V = (np.asarray(a, np.float64) for a in (Q, K, V))
    d = V.shape[0]
    A = Q.T @ K
    spd, lam_min = is_positive_definite(A)
    w = np.linalg.eigvals(V)
    split = paranormal_split(V)
    if split.paranormal and split.F.shape[1] == d:
        if spd:
            return Prediction("polytope", "Thm 3.1", f"V = {split.lam:.4g} I and Q^T K > 0 (min eig {lam_min:.3g})")
    if split.paranormal and spd:
        return Prediction("polytope x subspace", "Thm 5.2", f"V paranormal ({split.reason}) and Q^T K > 0")
    good = check_good_triple(Q, K, V)
    if good.good:
        return Prediction("hyperplanes", "Thm 4.2",
                          f"good triple: lambda_1 = {good.lambda1.real:.4g}, gap {good.gap:.3g}, "
                          f"<Q phi_1, K phi_1> = {good.qk_value:.3g}")
    if np.allclose(V, -np.eye(d) * abs(V[0, 0])) and V[0, 0] < 0 and np.allclose(A, np.eye(d) * A[0, 0]) and A[0, 0] > 0:
        return Prediction("origin", "Thm 8.5", "V = -c I and Q^T K = c' I")
    k = int(np.sum(w.real > 1e-12))
    lam1 = good.lambda1
    if abs(lam1.imag) > 1e-10 * max(1.0, abs(lam1)):
        return Prediction("none", "-", f"the top-modulus eigenvalue {lam1:.4g} is complex: no clustering expected", k)
    if k > 0:
        return Prediction("codim-k", "Conjecture", f"{k} eigenvalue(s) of V with positive real part", k)
    return Prediction("none", "-", "no theorem or conjecture applies", k)
