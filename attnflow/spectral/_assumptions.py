r"""The spectral hypotheses of the paper for ONE weight triple: each function is
:func:`attnflow.spectral.check_batch` on a batch of one (the only implementation), with the
result unpacked into a small host-side record.

* :func:`leading_eigenpair` -- eigenvalue of **largest modulus** :math:`\lambda_1`, its right
  eigenvector :math:`\varphi_1` and the dual (left) :math:`\varphi_1^*` with
  :math:`\varphi_1^*(\varphi_1) = 1`.
* :func:`check_good_triple` -- Definition 4.1 with margins.
* :func:`paranormal_split` -- Definition 5.1: :math:`\mathbb R^d = F \oplus G`.
* :func:`is_positive_definite` -- the reading of ":math:`Q^TK > 0`" Thm 3.1 / 5.2 need.
* :func:`predict_geometry` -- the prediction table (:data:`attnflow.spectral.RULES`).

Inputs may be NumPy or JAX arrays of any float dtype; the checks run in float64 (inside
``jax.enable_x64``), so they do not depend on the caller's JAX configuration.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from .. import _validate as v
from ..errors import InputError
from ._batched import GEOMETRIES, RULES, SpectralBatch, check_batch

__all__ = [
    "LeadingEigenpair",
    "GoodTripleCheck",
    "ParanormalSplit",
    "Prediction",
    "spectral_one",
    "leading_eigenpair",
    "check_good_triple",
    "paranormal_split",
    "is_positive_definite",
    "predict_geometry",
]


def _square(name: str, a) -> np.ndarray:
    v.check_square(name, a, "a square (d, d) matrix")
    return np.asarray(a, np.float64)


def spectral_one(Q, K, V) -> SpectralBatch:
    """:func:`check_batch` for one triple (Q, K (m, d); V (d, d)), as NumPy float64 arrays with a
    leading axis of length 1. Q = K = None means Q = K = I (for V-only questions).

    Example:
        >>> import numpy as np
        >>> from attnflow.spectral import spectral_one
        >>> spectral_one(None, None, np.eye(2)).predicted.tolist()
        [1]
    """
    V = _square("V", V)
    d = V.shape[0]
    for name, a in (("Q", Q), ("K", K)):
        if a is not None:
            v.check_array(name, a, f"an (m, {d}) matrix", ranks=(2,))
    Q = np.eye(d) if Q is None else np.asarray(Q, np.float64)
    K = np.eye(d) if K is None else np.asarray(K, np.float64)
    if Q.ndim != 2 or Q.shape != K.shape or Q.shape[1] != d:
        raise InputError(f"Q and K must both be (m, {d}) to act on tokens of dimension {d}, got {Q.shape} and "
                         f"{K.shape}.")
    with jax.enable_x64(True):
        r = check_batch(jnp.asarray(Q[None]), jnp.asarray(K[None]), jnp.asarray(V[None]))
        return jax.tree_util.tree_map(np.asarray, r)


@dataclass(frozen=True)
class LeadingEigenpair:
    """Eigenvalues sorted by decreasing modulus, and the leading right/left eigenvectors
    (NaN when :math:`\\lambda_1` is not real)."""

    eigenvalues: np.ndarray  # (d,) complex, |lambda_1| >= |lambda_2| >= ...
    phi: np.ndarray  # (d,) right eigenvector of lambda_1 (unit norm, largest entry > 0)
    phi_dual: np.ndarray  # (d,) left eigenvector with phi_dual @ phi = 1

    @property
    def lambda1(self) -> complex:
        return complex(self.eigenvalues[0])


def leading_eigenpair(V) -> LeadingEigenpair:
    r"""Eigenvalues of V ordered by modulus, with :math:`V\varphi_1 = \lambda_1\varphi_1` and
    :math:`\varphi_1^* V = \lambda_1 \varphi_1^*`, :math:`\varphi_1^*\varphi_1 = 1`.

    Example:
        >>> import numpy as np
        >>> from attnflow.spectral import leading_eigenpair
        >>> e = leading_eigenpair(np.diag([0.5, -2.0, 1.0]))
        >>> e.lambda1, e.phi.tolist(), e.phi_dual.tolist()
        ((-2+0j), [0.0, 1.0, 0.0], [0.0, 1.0, 0.0])
    """
    r = spectral_one(None, None, V)
    return LeadingEigenpair(eigenvalues=r.stats.eigenvalues[0], phi=r.phi[0], phi_dual=r.phi_dual[0])


@dataclass(frozen=True)
class GoodTripleCheck:
    """Definition 4.1, each condition with its margin."""

    condition1: bool  # lambda_1 real, > 0, simple and lambda_1 > |lambda_2|
    gap: float  # lambda_1 - |lambda_2| (real part of lambda_1 used when complex)
    lambda1: complex
    condition2: bool  # <Q phi_1, K phi_1> > 0
    qk_value: float  # <Q phi_1, K phi_1> (nan when lambda_1 is complex)
    eig: LeadingEigenpair

    @property
    def good(self) -> bool:
        return self.condition1 and self.condition2


def check_good_triple(Q, K, V) -> GoodTripleCheck:
    r"""Definition 4.1: (1) the eigenvalue of largest modulus is real, positive and
    simple with :math:`\lambda_1 > |\lambda_2|`; (2) :math:`\langle Q\varphi_1, K\varphi_1\rangle > 0`.
    Decisions at relative tolerance 1e-10 x max(1, |lambda_1|).

    Example:
        >>> import numpy as np
        >>> from attnflow.spectral import check_good_triple
        >>> c = check_good_triple(np.eye(2), np.eye(2), np.diag([1.0, 0.5]))
        >>> c.good, round(c.gap, 3)
        (True, 0.5)
    """
    r = spectral_one(Q, K, V)
    eig = LeadingEigenpair(eigenvalues=r.stats.eigenvalues[0], phi=r.phi[0], phi_dual=r.phi_dual[0])
    return GoodTripleCheck(bool(r.stats.cond1[0]), float(r.stats.gap[0]), complex(r.stats.lambda1[0]),
                           bool(r.cond2[0]), float(r.qk[0]), eig)


def is_positive_definite(A) -> tuple[bool, float]:
    r"""Whether A (e.g. :math:`Q^T K`) is **symmetric** positive definite (the reading of
    ":math:`Q^TK > 0`" that Thm 3.1 and Thm 5.2 need); returns (flag, smallest eigenvalue of the
    symmetric part). A non-symmetric A (|A - A^T| > 1e-12 max(1, max|A|)) is not SPD, whatever its
    symmetric part.

    Example:
        >>> import numpy as np
        >>> from attnflow.spectral import is_positive_definite
        >>> is_positive_definite(np.diag([2.0, 0.5]))
        (True, 0.5)
        >>> is_positive_definite(np.array([[1.0, 0.1], [-0.1, 1.0]]))[0]  # symmetric part I, not symmetric
        False
    """
    A = _square("A", A)
    r = spectral_one(np.eye(A.shape[0]), A, np.eye(A.shape[0]))  # Q^T K = A
    return bool(r.qk_spd[0]), float(r.qk_min_eig[0])


@dataclass(frozen=True)
class ParanormalSplit:
    """Definition 5.1: V = lambda I on F, spectral radius of V on G < lambda."""

    paranormal: bool
    lam: float
    F: np.ndarray  # (d, dim F) basis
    G: np.ndarray  # (d, dim G) basis
    radius_G: float  # spectral radius of V restricted to G
    reason: str


def paranormal_split(V) -> ParanormalSplit:
    r"""Find :math:`\mathbb R^d = F\oplus G` with F, G V-invariant, :math:`V|_F = \lambda I`
    (:math:`\lambda > 0`) and :math:`\rho(V|_G) < \lambda`. F and G need not be orthogonal
    (F = ker(V - lambda I), G = range(V - lambda I), complementary when lambda is semisimple).

    Example:
        >>> import numpy as np
        >>> from attnflow.spectral import paranormal_split
        >>> s = paranormal_split(np.diag([1.0, 1.0, -0.5]))
        >>> s.paranormal, s.F.shape[1], s.G.shape[1]
        (True, 2, 1)
    """
    r = spectral_one(None, None, V)
    d = r.phi.shape[1]
    lam1 = complex(r.stats.lambda1[0])
    lam = float(lam1.real)
    empty = np.zeros((d, 0))
    w = r.stats.eigenvalues[0]
    if r.paranormal[0]:
        f = int(r.para_dim_F[0])
        F, G = r.para_F[0][:, :f], r.para_G[0][:, : d - f]
        return ParanormalSplit(True, lam, F, G, float(r.para_radius_G[0]),
                               f"V = {lam:.4g} I on F (dim {f}), spectral radius {float(r.para_radius_G[0]):.4g} "
                               f"on G (dim {d - f})")
    scale = max(1.0, abs(lam1))
    if abs(lam1.imag) > 1e-9 * scale or lam <= 1e-9 * scale:
        reason = f"the eigenvalue of largest modulus {lam1:.4g} is not real and positive"
    elif int(r.para_mult[0]) != int(r.para_dim_F[0]):
        reason = (f"lambda = {lam:.4g} is defective (algebraic multiplicity {int(r.para_mult[0])}, eigenspace "
                  f"dimension {int(r.para_dim_F[0])}): V is not lambda*I on any complement")
    else:
        reason = f"another eigenvalue has modulus {lam:.4g} (e.g. -lambda or a complex pair): {np.round(w, 4)}"
    return ParanormalSplit(False, lam, empty, empty, float("nan"), reason)


@dataclass(frozen=True)
class Prediction:
    """One row of the prediction table: the limit geometry, its source and status, why, and
    which reading of "Q^T K > 0" the source needs."""

    geometry: str  # one of GEOMETRIES
    theorem: str  # Thm 3.1 | Thm 5.2 | Thm 4.2 | Thm 8.5 | Section 12.1 | Conjecture (codim k) | -
    reason: str
    codim: int = 0
    status: str = "proved"  # proved | observed, not proved | conjecture | (why there is none)
    rule: int = 0  # index into RULES
    qk_reading: str = ""

    @property
    def label(self) -> str:
        """``geometry (theorem, status)``, e.g. 'polytope (Section 12.1, observed, not proved)'."""
        return f"{self.geometry} ({self.theorem}, {self.status})"


def predict_geometry(Q, K, V) -> Prediction:
    """Which limit geometry the paper predicts for (Q, K, V), with the source and the reason
    (the table of :mod:`attnflow.spectral._batched`).

    Example:
        >>> import numpy as np
        >>> from attnflow.spectral import predict_geometry
        >>> I = np.eye(2)
        >>> predict_geometry(I, I, I).label
        'polytope (Thm 3.1, proved)'
        >>> predict_geometry(I, I + 1e-3 * np.array([[0.0, 1.0], [-1.0, 0.0]]), I).label
        'polytope (Section 12.1, observed, not proved)'
    """
    r = spectral_one(Q, K, V)
    rule = int(r.rule[0])
    geometry, theorem, status = RULES[rule]
    assert GEOMETRIES[int(r.predicted[0])] == geometry
    lam1 = complex(r.stats.lambda1[0])
    lam_min = float(r.qk_min_eig[0])
    spd = bool(r.qk_spd[0])
    qk_text = ("Q^T K symmetric positive definite" if spd else
               f"Q^T K {'symmetric' if r.qk_symmetric[0] else 'not symmetric'}, symmetric part "
               f"{'positive definite' if r.qk_sym_part_pd[0] else 'not positive definite'}")
    qk_text += f" (min eigenvalue of the symmetric part {lam_min:.3g})"
    k = int(r.stats.num_pos_real_part[0])
    d = r.phi.shape[1]
    reading = {0: "symmetric positive definite", 1: "symmetric positive definite",
               2: "none beyond <Q phi_1, K phi_1> > 0", 3: "Q^T K = c' I, c' > 0",
               4: "not needed (observed for U[-1,1] entries)", 5: "not needed (observed for U[-1,1] entries)"}
    if rule == 0:
        reason = f"V = {lam1.real:.4g} I and {qk_text}"
    elif rule == 1:
        reason = f"V paranormal (dim F = {int(r.para_dim_F[0])} of {d}, lambda = {lam1.real:.4g}) and {qk_text}"
    elif rule == 2:
        reason = (f"good triple: lambda_1 = {lam1.real:.4g}, gap {float(r.stats.gap[0]):.3g}, "
                  f"<Q phi_1, K phi_1> = {float(r.qk[0]):.3g}")
    elif rule == 3:
        reason = "V = -c I and Q^T K = c' I (c, c' > 0): Thm 8.5 after rescaling time by c and tokens by sqrt(c')"
    elif rule in (4, 5):
        what = "V = lambda I" if rule == 4 else f"V paranormal (dim F = {int(r.para_dim_F[0])} of {d})"
        reason = (f"{what} with {qk_text}: Thm 3.1 / 5.2 do not apply; Section 12.1 observes the same "
                  "pattern for U[-1, 1] Q^T K")
    elif rule == 6:
        reason = f"the top-modulus eigenvalue {lam1:.4g} is complex"
    elif rule == 7:
        reason = f"{k} eigenvalue(s) of V with positive real part; not a good triple, no theorem applies"
    else:
        reason = "no eigenvalue of V with positive real part and no theorem applies"
    return Prediction(geometry, theorem, reason, int(r.codim[0]), status, rule, reading.get(rule, "-"))
