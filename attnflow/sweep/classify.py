r"""Batched (jit / vmap / shard_map-able) version of
:func:`attnflow.observables.classify_geometry`, for sweeps over many systems.

It applies the same criteria, in the same order (origin, polytope, polytope x subspace,
hyperplanes, codim-k, none), built from the same jnp diagnostics
(:func:`~attnflow.observables.num_clusters`, :func:`~attnflow.observables.num_levels`,
:func:`~attnflow.observables.projections`); the spectral inputs come from
:func:`attnflow.spectral.check_batch` instead of per-system host calls. One difference:
for a paranormal V with :math:`1 < \dim F < d` (probability zero in the random ensembles) the
F-cluster criterion is not evaluated (``f_clusters = -2``, criterion False).

Tolerances, as ``classify_geometry(..., scale=ref)``: ``rel_tol`` times the larger of the
examined quantity's own diameter and the reference length ``scale`` (for phi*(z): ``scale *
|phi*|``), so that a cloud collapsed onto one point / level counts as one cluster / level.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Complex, Float, Int

from ..observables import GEOMETRY_LABELS, diameter, num_clusters, num_levels, projections
from ..spectral.batched import eig_route

__all__ = ["GEOMETRY_LABELS", "BatchObservation", "left_eig", "projector_from_left_eig", "unstable_projector",
           "classify_batch"]


class BatchObservation(eqx.Module):
    """Per-configuration observation (leading axes as the input); counts -1 where n/a."""

    label: Int[Array, "*B"]  # index into GEOMETRY_LABELS
    criteria: Bool[Array, "*B 6"]  # criterion met, in GEOMETRY_LABELS order
    num_clusters: Int[Array, "*B"]
    num_levels: Int[Array, "*B"]
    num_subspaces: Int[Array, "*B"]
    f_clusters: Int[Array, "*B"]
    max_norm_x: Float[Array, "*B"]


def left_eig(V: Float[Array, "d d"], route: str = "device"):
    r"""Eigenvalues w (d,) and left eigenvectors of V (the columns of vl, :math:`v^T V = w\,v^T`),
    as the right eigenvectors of :math:`V^T`; ``route`` as :func:`attnflow.spectral.eig_route`
    (``"cpu"`` is not traceable and is read as ``"host"``). The eigenvalues of :math:`V^T` are
    those of V, so one call serves both the spectral checks and :func:`unstable_projector`.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.sweep.classify import left_eig
        >>> V = jnp.array([[2.0, 1.0], [0.0, -1.0]])
        >>> w, vl = left_eig(V)
        >>> bool(jnp.allclose(vl[:, 0] @ V, w[0] * vl[:, 0]))
        True
    """
    route = eig_route(route) if route == "auto" else ("host" if route == "cpu" else route)
    if route == "device":
        w, vr = jax.lax.linalg.eig(V.T, compute_left_eigenvectors=False, compute_right_eigenvectors=True)
        return w, vr
    cdtype = jnp.result_type(V.dtype, jnp.complex64)
    spec = (jax.ShapeDtypeStruct(V.shape[:-1], cdtype), jax.ShapeDtypeStruct(V.shape, cdtype))

    def host(a):
        w, v = np.linalg.eig(np.swapaxes(np.asarray(a), -1, -2))
        return w.astype(cdtype), v.astype(cdtype)

    return jax.pure_callback(host, spec, V, vmap_method="expand_dims")


def projector_from_left_eig(w: Complex[Array, " d"], vl: Complex[Array, "d d"], tol: float = 1e-12):
    r"""The orthogonal projector onto the real span of the left eigenvectors ``vl`` whose
    eigenvalues ``w`` have positive real part, and their number k (see :func:`unstable_projector`).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.sweep.classify import left_eig, projector_from_left_eig
        >>> P, k = projector_from_left_eig(*left_eig(jnp.diag(jnp.array([2.0, -1.0]))))
        >>> P.tolist(), int(k)
        ([[1.0, 0.0], [0.0, 0.0]], 1)
    """
    rdtype = jnp.finfo(vl.dtype).dtype
    pos = w.real > tol * jnp.maximum(1.0, jnp.max(jnp.abs(w)))
    cols = jnp.where(pos[None, :], vl, 0.0)
    real = jnp.concatenate([cols.real, cols.imag], axis=1).astype(rdtype)
    u, s, _ = jnp.linalg.svd(real, full_matrices=False)
    k = jnp.sum(pos)
    keep = (jnp.arange(u.shape[1]) < k).astype(rdtype)
    return (u * keep) @ u.T, k


def unstable_projector(V: Float[Array, "d d"], route: str = "device", tol: float = 1e-12):
    r"""Orthogonal projector onto the span of the left invariant subspace of V for its k
    eigenvalues with positive real part, and k (as
    :func:`~attnflow.observables.unstable_left_basis`: :math:`|\Pi z_i - \Pi z_j| = |Wz_i - Wz_j|`).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.sweep.classify import unstable_projector
        >>> P, k = unstable_projector(jnp.diag(jnp.array([2.0, -1.0])))
        >>> P.tolist(), int(k)
        ([[1.0, 0.0], [0.0, 0.0]], 1)
    """
    P, k = projector_from_left_eig(*left_eig(V, route), tol=tol)
    return P.astype(V.dtype), k


def classify_batch(z, x, scale, phi_dual, lam1, paranormal, dim_F, proj, k, *, rel_tol: float = 2e-2,
                   max_clusters: int | None = None) -> BatchObservation:
    r"""Classify ONE final configuration (vmap it): rescaled tokens z (n, d), raw tokens x (n, d),
    the reference length ``scale`` (e.g. the initial :math:`\max_i |z_i(0)|`), and the system's spectral data:
    ``phi_dual`` (d,), complex ``lam1``, ``paranormal``, ``dim_F``, the unstable projector
    ``proj`` (d, d) and k (from :func:`unstable_projector`).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.sweep.classify import classify_batch, unstable_projector
        >>> from attnflow.observables import GEOMETRY_LABELS
        >>> z = jnp.array([[1.0, 0.0], [1.0, 0.0], [-1.0, 0.5], [-1.0, 0.5]])
        >>> V = jnp.diag(jnp.array([1.0, 0.5])); P, k = unstable_projector(V)
        >>> o = classify_batch(z, z, 1.0, jnp.array([1.0, 0.0]), 1.0 + 0j, True, 1, P, k)
        >>> GEOMETRY_LABELS[int(o.label)], int(o.num_levels)
        ('polytope', 2)
    """
    n, d = z.shape
    if max_clusters is None:
        max_clusters = max(3, n // 2)
    dt = z.dtype
    diam = diameter(z)
    floor = 1e-9 * jnp.maximum(jnp.maximum(diam, jnp.max(jnp.abs(z))), jnp.finfo(dt).tiny)

    def clusters(y):
        return num_clusters(y, rel_tol, jnp.maximum(jnp.maximum(diameter(y), floor), scale))

    mx = jnp.max(jnp.linalg.norm(x, axis=-1))
    origin = mx <= rel_tol * scale
    nc = clusters(z)
    polytope = nc <= max_clusters

    phi_dual = phi_dual.astype(dt)
    pd = jnp.where(jnp.isfinite(phi_dual), phi_dual, 0.0)
    s = projections(z, pd)
    spread = jnp.max(s) - jnp.min(s)
    lev_raw = num_levels(s, rel_tol * jnp.maximum(jnp.maximum(spread, floor), scale * jnp.linalg.norm(pd)))
    real_pos = (jnp.abs(lam1.imag) <= 1e-10 * jnp.maximum(1.0, jnp.abs(lam1))) & (lam1.real > 0)
    lev = jnp.where(real_pos, lev_raw, -1)
    hyper = real_pos & (lev_raw <= 3)

    # Paranormal: dim F = 1 -> F-coordinate is proportional to phi*(z): its clusters are the levels.
    f1 = paranormal & (dim_F == 1) & (d > 1)
    fcl = jnp.where(f1, lev_raw, jnp.where(paranormal & (dim_F > 1) & (dim_F < d), -2, -1))
    para = jnp.where(f1, lev_raw <= 3, paranormal & (dim_F == d) & polytope)

    nsub_raw = clusters(z @ proj.astype(dt).T)
    nsub = jnp.where(k >= 1, nsub_raw, -1)
    codim = (k >= 1) & (nsub_raw <= 3)

    crit = jnp.stack([origin, polytope, para, hyper, codim, jnp.asarray(True)])
    label = jnp.argmax(crit)
    return BatchObservation(label=label, criteria=crit, num_clusters=nc, num_levels=lev,
                            num_subspaces=nsub, f_clusters=fcl, max_norm_x=mx)
