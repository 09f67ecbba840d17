"""The prediction table, against cases written out by hand from the paper (SPEC sections 2, 3).

Each row below is (Q, K, V) with the geometry, the source and the status that the paper's
statements give, decided by reading the theorem, not by running the implementation. Random
bases and perturbations are seeded; the expected answers do not depend on the draw.
"""

import numpy as np
import pytest

from attnflow.spectral import RULES, check_good_triple, is_positive_definite, paranormal_split, predict_geometry

rng = np.random.default_rng(2023)
I2, I3 = np.eye(2), np.eye(3)
J2 = np.array([[0.0, 1.0], [-1.0, 0.0]])  # antisymmetric
B3 = np.eye(3) + 0.4 * rng.normal(size=(3, 3))  # a non-orthogonal basis (cond ~ 3)
Binv = np.linalg.inv(B3)
U3 = rng.uniform(-1, 1, size=(3, 3))  # Section 12.1: Q^T K with i.i.d. U[-1, 1] entries
U2 = rng.uniform(-1, 1, size=(2, 2))
S3 = (lambda M: M @ M.T + 0.5 * I3)(rng.normal(size=(3, 3)))  # symmetric positive definite
R3 = np.linalg.cholesky(S3).T  # Q = K = R3: Q^T K = S3


def sim(D, B=B3):
    return B @ D @ np.linalg.inv(B)


# (id, Q, K, V, geometry, source, status)
TABLE = [
    # Thm 3.1: V = I (or lambda I, a time rescaling), Q^T K symmetric PD
    ("V=I, QK=I", I2, I2, I2, "polytope", "Thm 3.1", "proved"),
    ("V=2.5I, QK SPD", R3, R3, 2.5 * I3, "polytope", "Thm 3.1", "proved"),
    # Section 12.1: V = lambda I with Q^T K not symmetric PD: the polytope, observed -- never codim-k
    ("V=I, QK=I+1e-3 J", I2, I2 + 1e-3 * J2, I2, "polytope", "Section 12.1", "observed, not proved"),
    ("V=I, QK U[-1,1]", I2, U2, I2, "polytope", "Section 12.1", "observed, not proved"),
    ("V=I, QK=-I", I2, -I2, I2, "polytope", "Section 12.1", "observed, not proved"),
    ("V=I, QK sym indefinite", I3, np.diag([1.0, -1.0, 2.0]), I3, "polytope", "Section 12.1",
     "observed, not proved"),
    # symmetric part PD is NOT the reading Thm 3.1 needs
    ("V=I, QK=I+0.5J (sym part PD)", I2, I2 + 0.5 * J2, I2, "polytope", "Section 12.1", "observed, not proved"),
    # Thm 5.2: V paranormal (here F, G not orthogonal), Q^T K SPD; repeated top eigenvalue 1, 1
    ("paranormal diag(1,1,-1/2), QK SPD", R3, R3, sim(np.diag([1.0, 1.0, -0.5])), "polytope x subspace",
     "Thm 5.2", "proved"),
    ("paranormal, QK U[-1,1]", I3, U3, sim(np.diag([1.0, 1.0, -0.5])), "polytope x subspace", "Section 12.1",
     "observed, not proved"),
    # dim F = 1 with Q^T K SPD: Thm 5.2 and Thm 4.2 both apply; Thm 5.2 is listed first
    ("diag(2,1,0.5), QK=I", I3, I3, np.diag([2.0, 1.0, 0.5]), "polytope x subspace", "Thm 5.2", "proved"),
    # Thm 4.2: good triple; Q^T K indefinite and not symmetric is allowed
    ("good triple 1.348 / -0.068", np.array([[1.0, 0.0], [0.3, 1.0]]), np.array([[1.0, 0.5], [0.0, -0.2]]),
     sim(np.diag([1.348, -0.068]), np.array([[1.0, 0.4], [0.2, 1.0]])), "hyperplanes", "Thm 4.2", "proved"),
    ("good, complex sub-leading", I3, np.array([[1.0, 3.0, 0.0], [-2.0, 1.0, 0.0], [0.0, 0.0, -1.0]]),
     sim(np.array([[1.0, 0, 0], [0, 0.3, 0.6], [0, -0.6, 0.3]])), "hyperplanes", "Thm 4.2", "proved"),
    # Thm 8.5: V = -I, Q^T K = I, and its rescalings V = -cI, Q^T K = c'I
    ("V=-I, QK=I", I2, I2, -I2, "origin", "Thm 8.5", "proved"),
    ("V=-3I, QK=0.2I", I3, 0.2 * I3, -3 * I3, "origin", "Thm 8.5", "proved"),
    # V = -I with another Q^T K: nothing is proved, no eigenvalue with positive real part
    ("V=-I, QK SPD not scalar", R3, R3, -I3, "none", "-", None),
    # complex top-modulus eigenvalue: no clustering expected
    ("complex top", I3, I3, np.array([[0.0, -2.0, 0.0], [2.0, 0.0, 0.0], [0.0, 0.0, 1.0]]), "none", "-", None),
    # Def 4.1 read by MODULUS: top real part 1 but top modulus -2 -> not good; k = 2 -> conjecture
    ("top modulus negative", I3, I3, np.diag([-2.0, 1.0, 0.5]), "codim-k", "Conjecture (codim k)", "conjecture"),
    # repeated top modulus (1 and -1): not simple, not paranormal -> conjecture with k = 2
    ("|lambda_1| = |lambda_2|", I3, I3, np.diag([1.0, -1.0, 0.5]), "codim-k", "Conjecture (codim k)",
     "conjecture"),
    # repeated top eigenvalue, defective (Jordan block): not paranormal, not simple -> conjecture, k = 3
    ("defective lambda_1", I3, I3, np.array([[1.0, 1.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.5]]), "codim-k",
     "Conjecture (codim k)", "conjecture"),
    # condition (2) fails: <Q phi_1, K phi_1> < 0, QK not SPD -> paranormal dim F = 1 -> Section 12.1
    ("<Q phi,K phi> < 0", I3, -I3, np.diag([2.0, 1.0, 0.5]), "polytope x subspace", "Section 12.1",
     "observed, not proved"),
    # codim-k case of the report: eigenvalues (1, 0.7, -0.5) is paranormal with dim F = 1 -> not a conjecture
    # case when Q^T K is SPD (Thm 5.2); with top modulus negative it is
    ("codim-k: (-1.2, 0.8, 0.5)", I3, U3, sim(np.diag([-1.2, 0.8, 0.5])), "codim-k", "Conjecture (codim k)",
     "conjecture"),
    # all eigenvalues negative, not scalar: nothing
    ("all negative", I3, I3, -np.diag([1.0, 2.0, 3.0]), "none", "-", None),
]


@pytest.mark.parametrize("row", TABLE, ids=[r[0] for r in TABLE])
def test_prediction_table_by_hand(row):
    _, Q, K, V, geometry, source, status = row
    p = predict_geometry(Q, K, V)
    assert (p.geometry, p.theorem) == (geometry, source), p
    if status is not None:
        assert p.status == status
        assert p.label == f"{geometry} ({source}, {status})"
    assert RULES[p.rule][:2] == (geometry, source)
    if geometry == "codim-k":
        assert p.codim == int(np.sum(np.linalg.eigvals(V).real > 0))
    else:
        assert p.codim == 0


def test_no_lambda_I_case_is_ever_codim_k():
    """SPEC 3: for V = lambda I the conjecture's k = d reading is never the right one."""
    for _ in range(30):
        d = int(rng.integers(1, 5))
        lam = float(rng.uniform(0.1, 3.0))
        Q, K = rng.normal(size=(d, d)), rng.normal(size=(d, d))
        assert predict_geometry(Q, K, lam * np.eye(d)).geometry == "polytope"


def test_readings_of_qk_positive():
    """Symmetric PD (Thm 3.1 / 5.2) vs symmetric part PD: the first implies the second, not back."""
    assert is_positive_definite(S3)[0]
    assert not is_positive_definite(I2 + 0.5 * J2)[0]  # symmetric part I, but not symmetric
    assert is_positive_definite(I2 + 0.5 * J2)[1] == pytest.approx(1.0)
    assert not is_positive_definite(np.diag([1.0, -1e-3]))[0]


def test_definitions_by_hand():
    # Def 4.1 on the report's hyperplane V: eigenvalues 1.348 and -0.068, <Q phi, K phi> as written
    V = sim(np.diag([1.348, -0.068]), np.array([[1.0, 0.4], [0.2, 1.0]]))
    Q, K = np.array([[1.0, 0.0], [0.3, 1.0]]), np.array([[1.0, 0.5], [0.0, -0.2]])
    g = check_good_triple(Q, K, V)
    phi = np.array([1.0, 0.2]) / np.hypot(1.0, 0.2)  # B e_1, normalised
    assert g.good and g.lambda1.real == pytest.approx(1.348) and g.gap == pytest.approx(1.348 - 0.068)
    assert g.qk_value == pytest.approx((Q @ phi) @ (K @ phi))
    # Def 5.1 with a non-orthogonal split: F = span(B e1, B e2), G = span(B e3)
    s = paranormal_split(sim(np.diag([1.0, 1.0, -0.5])))
    assert s.paranormal and s.F.shape == (3, 2) and s.G.shape == (3, 1) and s.radius_G == pytest.approx(0.5)
    F_true = B3[:, :2]
    resid = s.F - F_true @ np.linalg.lstsq(F_true, s.F, rcond=None)[0]
    assert np.abs(resid).max() < 1e-10
    assert np.abs(np.cross(s.G[:, 0], B3[:, 2])).max() < 1e-10
    assert not paranormal_split(np.array([[1.0, 1.0], [0.0, 1.0]])).paranormal  # defective
