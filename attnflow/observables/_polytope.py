r"""Convex hulls of token clouds (Thm 3.1): host-side NumPy float64 + ``scipy.spatial``.

* :func:`hull_vertices` -- indices of the tokens that are vertices of conv{z_i}
  (degenerate clouds are handled in their affine span).
* :func:`hull_violation` -- how far a cloud sticks out of the hull of another one
  (<= 0 up to rounding when it is inside): Thm 3.1's nesting
  :math:`\mathrm{conv}\{z(t')\} \subseteq \mathrm{conv}\{z(t)\}` for :math:`t' > t`.
* :func:`hull_nesting` -- that violation for consecutive saves of a trajectory.
* :func:`classify_tokens` -- each token at a vertex, at 0, elsewhere on the boundary,
  or inside.
* :func:`polytope_set_residual` -- Thm 3.1's characterisation of the limit set
  :math:`S = \{x \in K: |Ax|^2 = \max_j \langle Ax, Av_j\rangle\}`, :math:`A = (Q^TK)^{1/2}`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = [
    "AffineHull",
    "affine_hull",
    "hull_vertices",
    "hull_violation",
    "hull_nesting",
    "classify_tokens",
    "TOKEN_CLASSES",
    "polytope_set_residual",
]

TOKEN_CLASSES = ("vertex", "origin", "boundary", "interior")


@dataclass(frozen=True)
class AffineHull:
    """conv of a cloud in its affine span: x = center + basis @ u, facets ``eq @ [u, 1] <= 0``."""

    center: np.ndarray  # (d,)
    basis: np.ndarray  # (d, r) orthonormal
    equations: np.ndarray  # (f, r + 1): inside iff normal . u + offset <= 0
    vertices: np.ndarray  # indices into the cloud
    scale: float  # diameter of the cloud


def affine_hull(points, rel_tol: float = 1e-9) -> AffineHull:
    r"""The convex hull of ``points`` (n, d) inside their affine span (dimension r <= d).

    Example:
        >>> import numpy as np
        >>> from attnflow.observables import affine_hull
        >>> h = affine_hull(np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.2, 0.2]]))
        >>> sorted(h.vertices.tolist()), h.basis.shape
        ([0, 1, 2], (2, 2))
    """
    from scipy.spatial import ConvexHull

    p = np.asarray(points, np.float64)
    if p.ndim != 2 or p.shape[0] < 1:
        from ..errors import InputError

        raise InputError(f"points must be a (n, d) array with n >= 1, got shape {p.shape}.")
    center = p.mean(axis=0)
    q = p - center
    scale = float(np.max(np.linalg.norm(p[:, None] - p[None], axis=-1))) if len(p) > 1 else 0.0
    if scale == 0.0:
        return AffineHull(center, np.zeros((p.shape[1], 0)), np.zeros((0, 1)), np.array([0]), 0.0)
    _, s, vt = np.linalg.svd(q, full_matrices=False)
    r = int(np.sum(s > rel_tol * s[0]))
    basis = vt[:r].T
    u = q @ basis
    if r == 1:
        lo, hi = int(np.argmin(u[:, 0])), int(np.argmax(u[:, 0]))
        eqs = np.array([[-1.0, u[lo, 0]], [1.0, -u[hi, 0]]])
        return AffineHull(center, basis, eqs, np.array(sorted({lo, hi})), scale)
    hull = ConvexHull(u)
    return AffineHull(center, basis, hull.equations, np.sort(hull.vertices), scale)


def hull_vertices(points, rel_tol: float = 1e-9) -> np.ndarray:
    r"""Indices of the points that are vertices of their convex hull.

    Example:
        >>> import numpy as np
        >>> from attnflow.observables import hull_vertices
        >>> hull_vertices(np.array([[0.0], [2.0], [1.0]])).tolist()
        [0, 1]
    """
    return affine_hull(points, rel_tol).vertices


def hull_violation(points, hull: AffineHull | np.ndarray) -> float:
    r"""Largest distance by which a point of ``points`` lies outside ``hull`` (a cloud or an
    :class:`AffineHull`); negative when every point is strictly inside (in the span).

    Example:
        >>> import numpy as np
        >>> from attnflow.observables import hull_violation
        >>> square = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
        >>> round(hull_violation(np.array([[0.5, 0.5], [1.25, 0.5]]), square), 6)
        0.25
    """
    h = hull if isinstance(hull, AffineHull) else affine_hull(hull)
    q = np.asarray(points, np.float64) - h.center
    u = q @ h.basis
    off_span = np.linalg.norm(q - u @ h.basis.T, axis=-1)
    if h.basis.shape[1] == 0:
        return float(np.max(off_span))
    normals, offsets = h.equations[:, :-1], h.equations[:, -1]
    norms = np.linalg.norm(normals, axis=1)
    signed = (u @ normals.T + offsets) / norms  # (n, f) signed distances to facet planes
    inside = np.max(signed, axis=1)
    return float(np.max(np.where(off_span > 0, np.maximum(off_span, inside), inside)))


def hull_nesting(states) -> np.ndarray:
    r"""For a trajectory (T, n, d): violation of conv{z(t_{k+1})} ⊆ conv{z(t_k)} for each k,
    relative to the diameter at t_k (<= 0 up to solver error when hulls are nested).

    Example:
        >>> import numpy as np
        >>> from attnflow.observables import hull_nesting
        >>> z = np.array([[[0.0, 0.0], [2.0, 0.0], [0.0, 2.0]], [[0.1, 0.1], [1.0, 0.0], [0.0, 1.0]]])
        >>> bool(hull_nesting(z)[0] <= 1e-12)
        True
    """
    z = np.asarray(states, np.float64)
    out = np.empty(len(z) - 1)
    for k in range(len(z) - 1):
        h = affine_hull(z[k])
        out[k] = hull_violation(z[k + 1], h) / max(h.scale, np.finfo(float).tiny)
    return out


def classify_tokens(points, rel_tol: float = 1e-2, scale: float | None = None) -> np.ndarray:
    r"""Class of every token of a (final) cloud: 0 ``vertex`` (within tol of a hull vertex),
    1 ``origin`` (within tol of 0), 2 ``boundary`` (within tol of a facet), 3 ``interior``;
    tol = rel_tol * scale (default scale: the cloud's diameter). See ``TOKEN_CLASSES``.

    Example:
        >>> import numpy as np
        >>> from attnflow.observables import classify_tokens
        >>> z = np.array([[-1.0, -1.0], [1.0, -1.0], [0.0, 1.0], [0.0, -1.0], [0.0, 0.0], [0.1, -0.3]])
        >>> classify_tokens(z).tolist()
        [0, 0, 0, 2, 1, 3]
    """
    p = np.asarray(points, np.float64)
    h = affine_hull(p)
    tol = rel_tol * (h.scale if scale is None else float(scale))
    verts = p[h.vertices]
    d_vert = np.min(np.linalg.norm(p[:, None] - verts[None], axis=-1), axis=1)
    d_orig = np.linalg.norm(p, axis=-1)
    if h.basis.shape[1] == 0:
        d_bd = np.zeros(len(p))
    else:
        u = (p - h.center) @ h.basis
        normals, offsets = h.equations[:, :-1], h.equations[:, -1]
        signed = (u @ normals.T + offsets) / np.linalg.norm(normals, axis=1)
        d_bd = -np.max(signed, axis=1)
    return np.select([d_vert <= tol, d_orig <= tol, d_bd <= tol], [0, 1, 2], 3)


def polytope_set_residual(points, A2, vertex_points=None) -> np.ndarray:
    r"""Thm 3.1's limit set: for each point x the residual
    :math:`\big(\max_j \langle Ax, Av_j\rangle - |Ax|^2\big) / \max_j |Av_j|^2 \ge 0`,
    :math:`A = (\mathrm{sym}\,Q^TK)^{1/2}`, v_j the hull vertices (of ``vertex_points``,
    default the points themselves). It is 0 exactly on S (0 and the admissible vertices).

    Example:
        >>> import numpy as np
        >>> from attnflow.observables import polytope_set_residual
        >>> z = np.array([[1.0, 0.0], [-1.0, 0.0], [0.0, 0.0], [0.0, 0.5]])
        >>> np.round(polytope_set_residual(z, np.eye(2)), 3).tolist()
        [0.0, 0.0, 0.0, 0.0]
    """
    p = np.asarray(points, np.float64)
    S = 0.5 * (np.asarray(A2, np.float64) + np.asarray(A2, np.float64).T)
    w, U = np.linalg.eigh(S)
    A = (U * np.sqrt(np.clip(w, 0, None))) @ U.T
    vp = p if vertex_points is None else np.asarray(vertex_points, np.float64)
    v = vp[affine_hull(vp).vertices]
    Ax, Av = p @ A.T, v @ A.T
    denom = max(float(np.max(np.sum(Av * Av, axis=1))), np.finfo(float).tiny)
    return (np.max(Ax @ Av.T, axis=1) - np.sum(Ax * Ax, axis=1)) / denom
