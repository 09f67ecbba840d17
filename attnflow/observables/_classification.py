r"""Observed limit geometry of a final configuration, with the labels of the prediction table
(:data:`attnflow.spectral.GEOMETRIES`, one tuple for predicted and observed labels).

One JAX implementation, :func:`classify_configuration` (jit / vmap / shard_map-able; the sweeps
vmap it); :func:`classify_geometry` is the same function for one configuration on the host.

=====================  ===============================================================
label                  criterion on the final rescaled tokens z (raw tokens x for origin)
=====================  ===============================================================
origin                 :math:`\max_i |x_i| \le \tau`
polytope               z forms at most ``max_clusters`` clusters, each of diameter <= tau
polytope x subspace    V paranormal: the F-coordinates of z are clustered as above
                       (at most 3 clusters when dim F = 1); G-coordinates free
hyperplanes            :math:`\lambda_1` real > 0: :math:`\varphi_1^*(z_i)` takes <= 3 levels,
                       each of width <= :math:`\tau|\varphi_1^*|`
codim-k                k >= 1 eigenvalues with positive real part: :math:`\Pi z_i` (:math:`\Pi`
                       the projector on the unstable left subspace) forms <= 3 clusters
none                   none of the above
=====================  ===============================================================

The tolerance is fixed: :math:`\tau` = ``rel_tol * scale`` with ``scale`` a reference length of
the *initial* configuration (e.g. :math:`\max_i|z_i(0)|`), never the examined cloud's own size,
so that a cloud that stays spread never counts as clustered however many tokens it has. Clusters
are connected components of :math:`|y_i - y_j| \le \tau`; a component counts only when its
diameter is at most :math:`\tau` too (so that a dense noise cloud, whose components chain
together at large n, is not "one cluster").

The label is the first criterion met in this order (the most structured geometry);
:meth:`GeometryObservation.supports` tells whether the data meet a given label's criterion
(clustered points also lie on hyperplanes).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int

from ..errors import InputError
from .._x64 import keeps_float64
from ..spectral import GEOMETRIES, left_eig, projector_from_left_eig
from ._clusters import cluster_labels, pairwise_distances

__all__ = ["GEOMETRY_LABELS", "BatchObservation", "GeometryObservation", "clustered", "levels_clustered",
           "classify_configuration", "classify_geometry"]

GEOMETRY_LABELS = GEOMETRIES


@keeps_float64
def clustered(y: Float[Array, "n f"], tol) -> tuple[Int[Array, ""], Bool[Array, ""]]:
    r"""(number of clusters, whether every cluster has diameter <= tol) for the components of
    :math:`|y_i - y_j| \le` tol.

    See also:
        :func:`attnflow.geometry.soft_cluster_count`, smooth in y: this count is piecewise constant in the
        tokens, so its gradient is 0 wherever it exists (``jax.grad`` returns 0, not an error).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.observables import clustered
        >>> y = jnp.array([[0.0, 0.0], [0.001, 0.0], [1.0, 0.0]])
        >>> [int(a) for a in clustered(y, 0.01)], [int(a) for a in clustered(jnp.linspace(0, 1, 201)[:, None], 0.01)]
        ([2, 1], [1, 0])
    """
    n = y.shape[0]
    tol = jnp.asarray(tol, y.dtype)
    labels = cluster_labels(y, 1.0, tol)
    count = jnp.sum(labels == jnp.arange(n))
    same = labels[:, None] == labels[None, :]
    widest = jnp.max(jnp.where(same, pairwise_distances(y), 0.0))
    return count.astype(jnp.int32), widest <= tol


@keeps_float64
def levels_clustered(s: Float[Array, " n"], tol) -> tuple[Int[Array, ""], Bool[Array, ""]]:
    r""":func:`clustered` for values on a line (sorted gaps, O(n log n)): (number of levels,
    whether every level has width <= tol).

    See also:
        :func:`attnflow.geometry.hyperplane_distances` / :func:`attnflow.geometry.hyperplane_levels`, smooth in
        the values: this count is piecewise constant in the tokens, so its gradient is 0 wherever it exists
        (``jax.grad`` returns 0, not an error).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.observables import levels_clustered
        >>> [int(a) for a in levels_clustered(jnp.array([2.0, 0.0, 2.001, -1.0]), 0.01)]
        [3, 1]
    """
    n = s.shape[0]
    ss = jnp.sort(s)
    new = jnp.concatenate([jnp.zeros((1,), bool), jnp.diff(ss) > tol])
    seg = jnp.cumsum(new)
    hi = jax.ops.segment_max(ss, seg, num_segments=n)
    lo = jax.ops.segment_min(ss, seg, num_segments=n)
    used = jnp.arange(n) <= seg[-1]
    width = jnp.max(jnp.where(used, hi - lo, 0.0))
    return (seg[-1] + 1).astype(jnp.int32), width <= tol


class BatchObservation(eqx.Module):
    """Per-configuration observation (leading axes as the input); counts -1 where n/a
    (-2: F-clusters of a paranormal V with 1 < dim F < d when no basis was given)."""

    label: Int[Array, "*B"]  # index into GEOMETRY_LABELS
    criteria: Bool[Array, "*B 6"]  # criterion met, in GEOMETRY_LABELS order
    num_clusters: Int[Array, "*B"]
    num_levels: Int[Array, "*B"]
    num_subspaces: Int[Array, "*B"]
    f_clusters: Int[Array, "*B"]
    max_norm_x: Float[Array, "*B"]


@keeps_float64
def classify_configuration(z, x, scale, phi_dual, lam1, paranormal, dim_F, proj, k, *, basis_inv=None,
                           rel_tol: float = 2e-2, max_clusters: int | None = None) -> BatchObservation:
    r"""Classify ONE final configuration (vmap it for many): rescaled tokens z (n, d), raw tokens
    x (n, d), the reference length ``scale`` (e.g. the initial :math:`\max_i |z_i(0)|`), and the
    system's spectral data (from :func:`attnflow.spectral.check_batch`): ``phi_dual`` (d,),
    complex ``lam1``, ``paranormal``, ``dim_F``, the unstable projector ``proj`` (d, d) and k
    (:func:`attnflow.spectral.unstable_projector`); ``basis_inv`` (d, d), the inverse of the basis
    [F | G] of a paranormal V (needed only when 1 < dim F < d).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.observables import classify_configuration, GEOMETRY_LABELS
        >>> from attnflow.spectral import unstable_projector
        >>> z = jnp.array([[1.0, 0.0], [1.0, 0.0], [-1.0, 0.5], [-1.0, 0.5]])
        >>> V = jnp.diag(jnp.array([1.0, 0.5])); P, k = unstable_projector(V)
        >>> o = classify_configuration(z, z, 1.0, jnp.array([1.0, 0.0]), 1.0 + 0j, True, 1, P, k)
        >>> GEOMETRY_LABELS[int(o.label)], int(o.num_levels)
        ('polytope', 2)
    """
    n, d = z.shape
    if max_clusters is None:
        max_clusters = max(3, n // 2)
    dt = z.dtype
    scale = jnp.asarray(scale, dt)
    tol = rel_tol * jnp.maximum(scale, jnp.finfo(dt).tiny)

    mx = jnp.max(jnp.linalg.norm(x, axis=-1))
    origin = mx <= tol
    nc, compact = clustered(z, tol)
    polytope = (nc <= max_clusters) & compact

    phi_dual = jnp.asarray(phi_dual).astype(dt)
    pd = jnp.where(jnp.isfinite(phi_dual), phi_dual, 0.0)
    lev_raw, lev_compact = levels_clustered(z @ pd, tol * jnp.linalg.norm(pd))
    lam1 = jnp.asarray(lam1)
    real_pos = (jnp.abs(lam1.imag) <= 1e-10 * jnp.maximum(1.0, jnp.abs(lam1))) & (lam1.real > 0)
    lev = jnp.where(real_pos, lev_raw, -1)
    hyper = real_pos & (lev_raw <= 3) & lev_compact

    # Paranormal: dim F = 1 -> the F-coordinate is phi*(z) (phi* vanishes on G): its clusters are the levels.
    f1 = paranormal & (dim_F == 1) & (d > 1)
    fmid = paranormal & (dim_F > 1) & (dim_F < d)
    if basis_inv is None:
        fcl = jnp.where(f1, lev_raw, jnp.where(fmid, -2, -1))
        para = jnp.where(f1, (lev_raw <= 3) & lev_compact, paranormal & (dim_F == d) & polytope)
    else:
        rows = (jnp.arange(d) < dim_F)[:, None]
        PF = jnp.where(rows, jnp.asarray(basis_inv, dt), 0.0)  # F-coordinates a_i = (B^{-1} z_i)[:dim F]
        fnc, fcompact = clustered(z @ PF.T, tol * jnp.linalg.norm(PF, 2))
        fcl = jnp.where(paranormal & (dim_F < d), fnc, -1)
        para = jnp.where(dim_F == d, paranormal & polytope,
                         paranormal & (fnc <= jnp.where(dim_F == 1, 3, max_clusters)) & fcompact)

    nsub_raw, sub_compact = clustered(z @ jnp.asarray(proj, dt).T, tol)
    nsub = jnp.where(k >= 1, nsub_raw, -1)
    codim = (k >= 1) & (nsub_raw <= 3) & sub_compact

    crit = jnp.stack([origin, polytope, para, hyper, codim, jnp.asarray(True)])
    label = jnp.argmax(crit)
    return BatchObservation(label=label, criteria=crit, num_clusters=nc, num_levels=lev,
                            num_subspaces=nsub, f_clusters=fcl, max_norm_x=mx)


@dataclass(frozen=True)
class GeometryObservation:
    """What :func:`classify_geometry` saw; counts are -1 where they do not apply."""

    label: str
    num_clusters: int  # clusters of z
    num_levels: int  # levels of phi_1*(z) (lambda_1 real > 0), else -1
    codim: int  # k = number of eigenvalues of V with positive real part
    num_subspaces: int  # clusters of the unstable projection (k >= 1), else -1
    f_clusters: int  # clusters of the F-coordinates (paranormal, 0 < dim F < d), else -1
    max_norm_x: float  # max_i |x_i| (nan without x)
    criteria: dict = field(default_factory=dict)  # label -> bool (criterion met)

    def supports(self, label: str) -> bool:
        """Whether the configuration meets the criterion of ``label`` (see the module table).

        Example:
            >>> import numpy as np
            >>> from attnflow.observables import classify_geometry
            >>> z = np.array([[1.0, 0.0], [1.0, 0.0], [-1.0, 0.5], [-1.0, 0.5]])
            >>> obs = classify_geometry(z, np.diag([1.0, 0.5]), scale=1.0)
            >>> obs.label, obs.supports("hyperplanes")
            ('polytope', True)
        """
        if label not in GEOMETRY_LABELS:
            raise InputError(f"label must be one of {GEOMETRY_LABELS}, got {label!r}.")
        return bool(self.criteria.get(label, False))


_classify_jit = jax.jit(classify_configuration, static_argnames=("rel_tol", "max_clusters"))


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
    r"""Observed limit geometry of final rescaled tokens ``z`` (n, d) for value matrix V
    (:func:`classify_configuration` on one configuration, spectral data from
    :func:`attnflow.spectral.check_batch`, in float64).

    Args:
        z: final rescaled tokens :math:`e^{-tV} x(t)` (or :math:`(I+dt\,V)^{-k}x[k]`).
        V: (d, d) value matrix (its spectrum decides which projections are examined).
        Q, K: accepted for a uniform call with :func:`~attnflow.spectral.predict_geometry`
            (the criteria do not need them).
        x: final raw tokens, for the "origin" criterion (default: never "origin").
        scale: reference length of the initial configuration, e.g. :math:`\max_i|z_i(0)|`; the
            tolerance is ``rel_tol * scale``. Default: :math:`\max_i|z_i|` of ``z`` itself (a
            fallback: pass the initial size whenever the cloud may have shrunk or grown).
        rel_tol: relative tolerance.
        max_clusters: most clusters that still count as clustered (default max(3, n // 2)).

    Example:
        >>> import numpy as np
        >>> from attnflow.observables import classify_geometry
        >>> rng = np.random.default_rng(0)
        >>> z = np.concatenate([np.full((5, 2), 1.0), rng.normal(size=(5, 2)) * [0, 1] - [1, 0]])
        >>> obs = classify_geometry(z, np.diag([1.0, -0.5]), scale=2.0)
        >>> obs.label, obs.num_levels, obs.supports("hyperplanes")
        ('polytope x subspace', 2, True)
    """
    from ..spectral import spectral_one

    z = np.asarray(z, np.float64)
    V = np.asarray(V, np.float64)
    if z.ndim != 2:
        raise InputError(f"z must be one final configuration (n, d), got shape {z.shape}.")
    n, d = z.shape
    if V.shape != (d, d):
        raise InputError(f"V must be ({d}, {d}) to act on tokens of dimension {d}, got shape {V.shape}.")
    if not (np.all(np.isfinite(z)) and np.all(np.isfinite(V))):
        raise InputError("z and V must be finite (the simulation overflowed or produced NaN).")
    if x is not None:
        x = np.asarray(x, np.float64)
        if x.shape != z.shape:
            raise InputError(f"x must have the shape of z {z.shape}, got {x.shape}.")
    ref = float(np.max(np.linalg.norm(z, axis=-1))) if scale is None else float(scale)
    if not ref > 0:
        raise InputError(f"scale must be > 0 (a length of the initial configuration), got {scale!r}.")
    r = spectral_one(None, None, V)
    f = int(r.para_dim_F[0])
    basis_inv = None
    if bool(r.paranormal[0]) and 0 < f < d:
        basis_inv = np.linalg.inv(np.concatenate([r.para_F[0][:, :f], r.para_G[0][:, : d - f]], axis=1))
    with jax.enable_x64(True):
        w, vl = left_eig(jnp.asarray(V), "auto")
        proj, k = projector_from_left_eig(w, vl)
        o = _classify_jit(jnp.asarray(z), jnp.asarray(np.full_like(z, np.inf) if x is None else x), ref,
                          r.phi_dual[0], r.stats.lambda1[0], bool(r.paranormal[0]), f, proj, k,
                          basis_inv=None if basis_inv is None else jnp.asarray(basis_inv), rel_tol=float(rel_tol),
                          max_clusters=max_clusters)
        o = jax.tree_util.tree_map(np.asarray, o)
    crit = {lab: bool(c) for lab, c in zip(GEOMETRY_LABELS, o.criteria)}
    return GeometryObservation(GEOMETRY_LABELS[int(o.label)], int(o.num_clusters), int(o.num_levels), int(k),
                               int(o.num_subspaces), int(o.f_clusters), float("nan") if x is None else
                               float(o.max_norm_x), crit)
