r"""Observed limit geometry of a final configuration, with the labels of
:func:`attnflow.spectral.predict_geometry`:

=====================  ===============================================================
label                  criterion on the final rescaled tokens z (raw tokens x for origin)
=====================  ===============================================================
origin                 :math:`\max_i |x_i| \le` ``rel_tol * scale`` (needs ``x``)
polytope               z forms at most ``max_clusters`` clusters (points: vertices or 0)
polytope x subspace    V paranormal, :math:`0 < \dim F < d`: the F-coordinates form at most
                       ``max_clusters`` clusters (3 when dim F = 1); G-coordinates free
hyperplanes            :math:`\lambda_1` real > 0: :math:`\varphi_1^*(z_i)` takes <= 3 levels
codim-k                k >= 1 eigenvalues with positive real part: :math:`W z_i` (W the
                       unstable left subspace) takes <= 3 values
none                   none of the above
=====================  ===============================================================

The label is the first criterion met in this order (the most structured geometry);
:meth:`GeometryObservation.supports` tells whether the data also meet a given label's
criterion (e.g. clustered points also lie on hyperplanes). Compare with a prediction by
``obs.supports(predict_geometry(Q, K, V).geometry)``: a good triple with a diagonalisable V
is paranormal with dim F = 1 (F = span phi_1, and the F-coordinate is phi_1^*(z)), so
Thm 4.2's hyperplanes and Thm 5.2 coincide there and both criteria hold together. Host-side (calls the jnp
diagnostics on concrete arrays); vmap the jnp diagnostics for batched use.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import jax.numpy as jnp
import numpy as np

from ..errors import InputError
from .clusters import diameter, num_clusters
from .hyperplanes import num_levels, projections
from .subspaces import codim_projections, split_coordinates, unstable_left_basis

__all__ = ["GEOMETRY_LABELS", "GeometryObservation", "classify_geometry"]

GEOMETRY_LABELS = ("origin", "polytope", "polytope x subspace", "hyperplanes", "codim-k", "none")


@dataclass(frozen=True)
class GeometryObservation:
    """What :func:`classify_geometry` saw; counts are -1 where they do not apply."""

    label: str
    num_clusters: int  # clusters of z
    num_levels: int  # levels of phi_1*(z) (lambda_1 real > 0), else -1
    codim: int  # k = number of eigenvalues of V with positive real part
    num_subspaces: int  # clusters of W z (k >= 1), else -1
    f_clusters: int  # clusters of the F-coordinates (paranormal, 0 < dim F < d), else -1
    max_norm_x: float  # max_i |x_i| (nan without x)
    criteria: dict = field(default_factory=dict)  # label -> bool (criterion met)

    def supports(self, label: str) -> bool:
        """Whether the configuration meets the criterion of ``label`` (see the module table).

        Example:
            >>> import numpy as np
            >>> from attnflow.observables import classify_geometry
            >>> z = np.array([[1.0, 0.0], [1.0, 0.0], [-1.0, 0.5], [-1.0, 0.5]])
            >>> obs = classify_geometry(z, np.diag([1.0, 0.5]))
            >>> obs.label, obs.supports("hyperplanes")
            ('polytope', True)
        """
        if label not in GEOMETRY_LABELS:
            raise InputError(f"label must be one of {GEOMETRY_LABELS}, got {label!r}.")
        return bool(self.criteria.get(label, False))


def classify_geometry(
    z,
    V,
    Q=None,
    K=None,
    *,
    x=None,
    scale: float | None = None,
    rel_tol: float = 2e-2,
    max_clusters: int | None = None,
) -> GeometryObservation:
    r"""Observed limit geometry of final rescaled tokens ``z`` (n, d) for value matrix V.

    Args:
        z: final rescaled tokens :math:`e^{-tV} x(t)` (or :math:`(I+dt\,V)^{-k}x[k]`).
        V: (d, d) value matrix (its spectrum decides which projections are examined).
        Q, K: accepted for a uniform call with :func:`~attnflow.spectral.predict_geometry`
            (the criteria do not need them).
        x: final raw tokens, for the "origin" criterion.
        scale: reference length, e.g. the initial configuration's :math:`\max_i|z_i(0)|`.
            Cluster tolerances are ``rel_tol`` times max(diameter of the examined cloud (z, its
            F-coordinates, its projections), ``scale``), so that a cloud that collapsed to a point
            counts as one cluster; "origin" needs :math:`\max_i|x_i| \le` ``rel_tol * scale``.
            Default: no reference (own diameters only; origin against :math:`\max_i|z_i|`).
        rel_tol: relative cluster tolerance.
        max_clusters: most clusters that still count as clustered (default max(3, n // 2)).

    Example:
        >>> import numpy as np
        >>> from attnflow.observables import classify_geometry
        >>> rng = np.random.default_rng(0)
        >>> z = np.concatenate([np.full((5, 2), 1.0), rng.normal(size=(5, 2)) * [0, 1] - [1, 0]])
        >>> obs = classify_geometry(z, np.diag([1.0, -0.5]))
        >>> obs.label, obs.num_levels, obs.supports("hyperplanes")
        ('polytope x subspace', 2, True)
    """
    z = np.asarray(z, np.float64)
    V = np.asarray(V, np.float64)
    if z.ndim != 2:
        raise InputError(f"z must be one final configuration (n, d), got shape {z.shape}.")
    n, d = z.shape
    if V.shape != (d, d):
        raise InputError(f"V must be ({d}, {d}) to act on tokens of dimension {d}, got shape {V.shape}.")
    if not (np.all(np.isfinite(z)) and np.all(np.isfinite(V))):
        raise InputError("z and V must be finite (the simulation overflowed or produced NaN).")
    if max_clusters is None:
        max_clusters = max(3, n // 2)
    zj = jnp.asarray(z)
    diam = float(diameter(zj))
    floor = 1e-9 * max(diam, float(np.max(np.abs(z))), np.finfo(float).tiny)

    ref = 0.0 if scale is None else float(scale)

    def clusters(y, ref_scale=ref):
        y = jnp.asarray(y)
        s = max(float(diameter(y)), floor, ref_scale)
        return int(num_clusters(y, rel_tol, s))

    crit = {label: False for label in GEOMETRY_LABELS}
    crit["none"] = True

    mx = float("nan")
    if x is not None:
        x = np.asarray(x, np.float64)
        if x.shape != z.shape:
            raise InputError(f"x must have the shape of z {z.shape}, got {x.shape}.")
        mx = float(np.max(np.linalg.norm(x, axis=-1)))
        ref_origin = float(np.max(np.linalg.norm(z, axis=-1))) if scale is None else float(scale)
        crit["origin"] = mx <= rel_tol * ref_origin

    nc = clusters(z)
    crit["polytope"] = nc <= max_clusters

    from ..spectral import leading_eigenpair, paranormal_split

    split = paranormal_split(V)
    fcl = -1
    if split.paranormal and 0 < split.F.shape[1] < d:
        a, _ = split_coordinates(z, split.F, split.G)
        # F-coordinates of a reference-size cloud have size ~ ref * |F-part of the inverse basis|
        proj = np.linalg.inv(np.concatenate([split.F, split.G], axis=1))[: split.F.shape[1]]
        fcl = clusters(a, ref * np.linalg.norm(proj, 2))
        # dim F = 1: the polytope in F is a segment, whose vertices and 0 are 3 levels.
        crit["polytope x subspace"] = fcl <= (3 if split.F.shape[1] == 1 else max_clusters)
    elif split.paranormal:  # V = lambda I: F = R^d
        crit["polytope x subspace"] = crit["polytope"]

    eig = leading_eigenpair(V)
    lam1 = eig.lambda1
    lev = -1
    if abs(lam1.imag) <= 1e-10 * max(1.0, abs(lam1)) and lam1.real > 0:
        s = projections(zj, eig.phi_dual.real)
        spread = float(jnp.max(s) - jnp.min(s))
        lev = int(num_levels(s, rel_tol * max(spread, floor, ref * float(np.linalg.norm(eig.phi_dual)))))
        crit["hyperplanes"] = lev <= 3

    W = unstable_left_basis(V)
    k = W.shape[0]
    nsub = -1
    if k >= 1:
        nsub = clusters(codim_projections(zj, W)) if k < d else nc
        crit["codim-k"] = nsub <= 3

    label = next(lab for lab in GEOMETRY_LABELS if crit[lab])
    return GeometryObservation(label, nc, lev, k, nsub, fcl, mx, crit)
