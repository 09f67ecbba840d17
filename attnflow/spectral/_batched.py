r"""The spectral checks and the prediction table, in JAX, for stacks of weights (B, d, d).

This is the only implementation: the single-system functions of
:mod:`attnflow.spectral._assumptions` call :func:`check_batch` on a batch of one.

Everything here is pure JAX (jit / vmap / grad / shard_map-able) except the choice of where
the non-symmetric eigenvalue problem runs, the *eig route* (``"auto"``, ``"device"``,
``"host"``, ``"cpu"``), which :mod:`attnflow.spectral._eig` resolves.

Only eigenvalues need ``eig``: the leading eigenvectors :math:`\varphi_1` (right) and
:math:`\varphi_1^*` (left, :math:`\varphi_1^*(\varphi_1)=1`) of a real simple :math:`\lambda_1`
are the null vectors of :math:`V-\lambda_1 I`, read off its SVD (supported on every backend).

The prediction table (:data:`RULES`, first rule that applies wins) and the reading of
":math:`Q^TK > 0`" each theorem needs:

====  ======================  ======================  =============================================
rule  geometry                source                  condition
====  ======================  ======================  =============================================
0     polytope                Thm 3.1 (proved)        V = lambda I, lambda > 0, Q^T K symmetric PD
1     polytope x subspace     Thm 5.2 (proved)        V paranormal (dim F < d), Q^T K symmetric PD
2     hyperplanes             Thm 4.2 (proved)        good triple (Def 4.1); no condition on Q^T K
                                                      beyond <Q phi_1, K phi_1> > 0
3     origin                  Thm 8.5 (proved)        V = -c I, Q^T K = c' I (c, c' > 0: a time and
                                                      token rescaling of V = -I, Q^T K = I)
4     polytope                Section 12.1 (observed) V = lambda I, Q^T K not symmetric PD
5     polytope x subspace     Section 12.1 (observed) V paranormal, Q^T K not symmetric PD
6     none                    --                      top-modulus eigenvalue complex: no clustering
7     codim-k                 Conjecture              k >= 1 eigenvalues with positive real part
8     none                    --                      nothing applies
====  ======================  ======================  =============================================

Thm 3.1 and Thm 5.2 need the *symmetric positive definite* reading (their proofs use
:math:`(Q^TK)^{1/2}`, and a symmetric :math:`Q^TK` makes the scores a Gram form); a
non-symmetric :math:`Q^TK` with positive definite symmetric part is *not* covered, and
neither is an indefinite one: there Section 12.1's numerics (U[-1, 1] entries) observe the same
polytope (x subspace) pattern, so the table predicts it with the label "Section 12.1, observed,
not proved" rather than falling through to the codimension-k conjecture, whose "at most three
points" for V = lambda I (k = d) would contradict them. ``qk_sym_part_pd`` reports the weaker
reading (symmetric part PD) for information.
"""

from __future__ import annotations

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Complex, Float, Int

from .. import _validate as v
from .._batching import lapack_needs_loop, loop_over_systems
from ..errors import InputError
from ._eig import eig_route, eigvals_sorted
from ._eigenpair import eigenpair_at

__all__ = [
    "GEOMETRIES",
    "RULES",
    "SpectralBatch",
    "EigenStats",
    "eigen_stats",
    "check_batch",
    "geometry_names",
    "left_eig",
    "projector_from_left_eig",
    "unstable_projector",
]

#: Limit geometries, predicted (:attr:`SpectralBatch.predicted`) and observed
#: (:func:`attnflow.observables.classify_geometry`): one tuple, one index.
GEOMETRIES = ("origin", "polytope", "polytope x subspace", "hyperplanes", "codim-k", "none")

#: The prediction table: (geometry, source, status) per rule code (see the module docstring).
RULES = (
    ("polytope", "Thm 3.1", "proved"),
    ("polytope x subspace", "Thm 5.2", "proved"),
    ("hyperplanes", "Thm 4.2", "proved"),
    ("origin", "Thm 8.5", "proved"),
    ("polytope", "Section 12.1", "observed, not proved"),
    ("polytope x subspace", "Section 12.1", "observed, not proved"),
    ("none", "-", "complex top eigenvalue: no clustering expected"),
    ("codim-k", "Conjecture (codim k)", "conjecture"),
    ("none", "-", "no theorem, observation or conjecture applies"),
)
_RULE_GEOMETRY = np.array([GEOMETRIES.index(g) for g, _, _ in RULES])

_TOL = 1e-10  # relative tolerance of the eigenvalue decisions (x max(1, |lambda_1|))
_PARA_TOL = 1e-9  # Def 5.1: lambda_1 real and positive, no other eigenvalue of modulus lambda_1
_MULT_TOL = 1e-6  # eigenvalues within this (relative) of lambda_1 count as lambda_1 (multiplicity)
_RANK_TOL = 1e-8  # singular values of V - lambda_1 I below this (relative) span F
_SYM_TOL = 1e-12  # |A - A^T| <= _SYM_TOL * max(1, max|A|): A = Q^T K counts as symmetric
_SCALAR_TOL = 1e-10  # |V - v I| <= _SCALAR_TOL * max(1, |v|): V counts as a multiple of I


class EigenStats(eqx.Module):
    """Per-system eigenvalue statistics of V (leading axis B). All decisions use tolerance
    ``1e-10 * max(1, |lambda_1|)``."""

    eigenvalues: Complex[Array, "B d"]  # sorted by decreasing modulus
    lambda1: Complex[Array, " B"]
    abs_lambda2: Float[Array, " B"]
    gap: Float[Array, " B"]  # Re lambda_1 - |lambda_2|
    cond1: Bool[Array, " B"]  # Def 4.1(1): largest modulus real, > 0, simple, strictly dominant
    cond1_real_part: Bool[Array, " B"]  # same with "largest real part" (the wrong reading)
    num_real: Int[Array, " B"]  # number of real eigenvalues
    num_pos_real_part: Int[Array, " B"]  # k of the codim-k conjecture


def stats_from_eigvals(w: Complex[Array, "*B d"]) -> "EigenStats":
    r"""The Def 4.1 statistics of eigenvalues already sorted by decreasing modulus
    (:func:`attnflow.spectral.sort_by_modulus`): :math:`\lambda_1`, the gap
    :math:`\mathrm{Re}\,\lambda_1 - |\lambda_2|`, condition (1) and its "largest real part" misreading, the
    counts of real eigenvalues and of eigenvalues with positive real part. :func:`eigen_stats` is this
    function after the eigenvalues of V.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.spectral import stats_from_eigvals
        >>> s = stats_from_eigvals(jnp.array([[2.0, -1.0, 0.5]]) + 0j)
        >>> bool(s.cond1[0]), float(s.gap[0]), int(s.num_real[0]), int(s.num_pos_real_part[0])
        (True, 1.0, 3, 2)
    """
    d = w.shape[-1]
    lam1 = w[..., 0]
    scale = jnp.maximum(1.0, jnp.abs(lam1))
    real = jnp.abs(w.imag) <= _TOL * scale[..., None]
    second = jnp.abs(w[..., 1]) if d > 1 else jnp.zeros_like(lam1.real)
    gap = lam1.real - second
    cond1 = real[..., 0] & (lam1.real > _TOL * scale) & (gap > _TOL * scale)
    rmax = jnp.max(w.real, axis=-1)
    top = w.real >= rmax[..., None] - _TOL * scale[..., None]  # eigenvalues sharing the top real part
    cond1_rp = (jnp.sum(top, axis=-1) == 1) & jnp.any(top & real, axis=-1) & (rmax > _TOL * scale)
    return EigenStats(
        eigenvalues=w,
        lambda1=lam1,
        abs_lambda2=second,
        gap=gap,
        cond1=cond1,
        cond1_real_part=cond1_rp,
        num_real=jnp.sum(real, axis=-1),
        num_pos_real_part=jnp.sum(w.real > 1e-12, axis=-1),
    )


def eigen_stats(V: Float[Array, "B d d"], route: str = "auto") -> EigenStats:
    r"""Definition 4.1(1) for a stack of V, both readings ("largest modulus", the paper's,
    and "largest real part"), with :math:`\lambda_1`, the gap :math:`\lambda_1 - |\lambda_2|` and
    the number of real eigenvalues.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.spectral import eigen_stats
        >>> V = jnp.stack([jnp.diag(jnp.array([2.0, 1.0])), jnp.diag(jnp.array([-2.0, 1.0]))])
        >>> s = eigen_stats(V)
        >>> s.cond1.tolist(), s.cond1_real_part.tolist(), s.gap.tolist()
        ([True, False], [True, True], [1.0, -3.0])
    """
    v.check_square("V", V, "a stack of matrices (B, d, d)", stacked=True)
    route = eig_route(route, traced=v.is_traced(V))
    if route == "cpu":
        return _stats_jit(eigvals_sorted(V, "cpu"))
    return _eigen_stats_jit(V, route)


_stats_jit = jax.jit(lambda w: stats_from_eigvals(w))
_eigen_stats_jit = jax.jit(lambda V, route: stats_from_eigvals(eigvals_sorted(V, route)), static_argnums=1)


class SpectralBatch(eqx.Module):
    r"""All spectral checks of a stack of triples (Q, K, V) (leading axis B).

    Attributes beyond :class:`EigenStats`:
        phi, phi_dual: (B, d) leading right eigenvector (unit, largest entry > 0) and dual
            :math:`\varphi_1^*` with :math:`\varphi_1^*\varphi_1 = 1` (NaN when
            :math:`\lambda_1` is not real).
        qk: :math:`\langle Q\varphi_1, K\varphi_1\rangle` (NaN when :math:`\lambda_1` is complex).
        cond2, good: Definition 4.1(2), and (1) and (2).
        qk_spd: :math:`Q^TK` symmetric positive definite (the reading Thm 3.1 / 5.2 need);
        qk_symmetric: :math:`Q^TK` symmetric; qk_sym_part_pd: its symmetric part positive
            definite (the weaker reading); qk_min_eig: smallest eigenvalue of the symmetric part.
        paranormal, para_dim_F, para_mult, para_radius_G: Definition 5.1 (dim F, algebraic
            multiplicity of :math:`\lambda_1`, spectral radius on G).
        para_F, para_G: (B, d, d) bases: the first ``dim F`` columns of ``para_F`` span F, the
            first ``d - dim F`` columns of ``para_G`` span G (when paranormal).
        scalar_V: V = v I (v = V[0, 0]); origin_case: V = -c I and Q^T K = c' I, c, c' > 0.
        rule: index into :data:`RULES`; predicted: index into :data:`GEOMETRIES`; codim: k for
            the codim-k rule, else 0.
    """

    stats: EigenStats
    phi: Float[Array, "B d"]
    phi_dual: Float[Array, "B d"]
    qk: Float[Array, " B"]
    cond2: Bool[Array, " B"]
    good: Bool[Array, " B"]
    qk_spd: Bool[Array, " B"]
    qk_symmetric: Bool[Array, " B"]
    qk_sym_part_pd: Bool[Array, " B"]
    qk_min_eig: Float[Array, " B"]
    paranormal: Bool[Array, " B"]
    para_dim_F: Int[Array, " B"]
    para_mult: Int[Array, " B"]
    para_radius_G: Float[Array, " B"]
    para_F: Float[Array, "B d d"]
    para_G: Float[Array, "B d d"]
    scalar_V: Bool[Array, " B"]
    origin_case: Bool[Array, " B"]
    rule: Int[Array, " B"]
    predicted: Int[Array, " B"]
    codim: Int[Array, " B"]


def _one_system(Q, K, V, w, st: EigenStats):
    """Eigenvectors, Def 4.1(2), Def 5.1, the readings of Q^T K > 0 and the rule for one triple."""
    d = V.shape[-1]
    eye = jnp.eye(d, dtype=V.dtype)
    lam1 = st.lambda1
    scale = jnp.maximum(1.0, jnp.abs(lam1))
    real1 = jnp.abs(lam1.imag) <= _TOL * scale
    lam = lam1.real
    # phi, phi*: the one leading-eigenpair implementation (null vectors of V - lam I, exact
    # derivative for a simple lam); the SVD below (same matrix) gives rank, F and G.
    _, phi, dual = eigenpair_at(V, jax.lax.stop_gradient(lam))
    u, s, vt = jnp.linalg.svd(V - lam * eye)
    nan = jnp.full_like(phi, jnp.nan)
    phi, dual = jnp.where(real1, phi, nan), jnp.where(real1, dual, nan)
    qk = jnp.where(real1, (Q @ phi) @ (K @ phi), jnp.nan)
    cond2 = real1 & (qk > 0)
    good = st.cond1 & cond2

    # Q^T K: symmetric?, symmetric part positive definite?
    A = Q.T @ K
    sym = 0.5 * (A + A.T)
    lam_min = jnp.linalg.eigvalsh(sym)[0]
    symmetric = jnp.max(jnp.abs(A - A.T)) <= _SYM_TOL * jnp.maximum(1.0, jnp.max(jnp.abs(A)))
    sym_pd = lam_min > 0
    spd = symmetric & sym_pd

    # Definition 5.1: V = lam I on F (dim F = algebraic multiplicity), rho(V|G) < lam.
    pos_real = (jnp.abs(lam1.imag) <= _PARA_TOL * scale) & (lam > _PARA_TOL * scale)
    at_lam = jnp.abs(w - lam) <= _MULT_TOL * scale
    mult = jnp.sum(at_lam)
    radius = jnp.max(jnp.where(at_lam, 0.0, jnp.abs(w)))
    tie = jnp.any(~at_lam & (jnp.abs(jnp.abs(w) - lam) <= _PARA_TOL * scale))
    rank = jnp.sum(s > _RANK_TOL * scale)
    dim_F = d - rank
    paranormal = pos_real & ~tie & (dim_F == mult)

    def scalar(M):  # M = M[0, 0] I
        return jnp.max(jnp.abs(M - M[0, 0] * eye)) <= _SCALAR_TOL * jnp.maximum(1.0, jnp.abs(M[0, 0]))

    scalar_V = scalar(V)
    origin = scalar_V & (V[0, 0] < 0) & scalar(A) & (A[0, 0] > 0)
    k = st.num_pos_real_part
    complex1 = ~real1
    vlam = paranormal & (dim_F == d)
    rule = jnp.select(
        [vlam & spd, paranormal & spd, good, origin, vlam, paranormal, complex1, k > 0],
        [0, 1, 2, 3, 4, 5, 6, 7], 8)
    F_basis = jnp.flip(vt, axis=0).T  # first dim F columns: null vectors of V - lam I
    return (phi, dual, qk, cond2, good, spd, symmetric, sym_pd, lam_min, paranormal, dim_F, mult,
            jnp.where(paranormal, radius, jnp.nan), F_basis, u, scalar_V, origin, rule)


def check_batch(Q: Float[Array, "B m d"], K: Float[Array, "B m d"], V: Float[Array, "B d d"],
                route: str = "auto", eigenvalues: Complex[Array, "B d"] | None = None) -> SpectralBatch:
    r"""Definition 4.1 (with margins, :math:`\varphi_1`, :math:`\varphi_1^*`), Definition 5.1,
    both readings of :math:`Q^TK > 0` and the prediction table (module docstring) for a stack of
    triples, in JAX.

    ``eigenvalues`` (sorted by :func:`eigvals_sorted`) may be passed when already computed
    (e.g. on another device); then ``route`` is unused. Traceable (``jit``, ``vmap``, ``grad``):
    under a transformation ``"auto"`` is always ``"device"``. Compute in float64 for decisions
    near the margins.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.spectral import check_batch, geometry_names, RULES
        >>> I = jnp.eye(2)[None]
        >>> r = check_batch(I, I, jnp.diag(jnp.array([1.0, 0.5]))[None])
        >>> r.good.tolist(), r.qk.tolist(), geometry_names(r.predicted), RULES[int(r.rule[0])][1]
        ([True], [1.0], ['polytope x subspace'], 'Thm 5.2')
    """
    for name, a in (("Q", Q), ("K", K), ("V", V)):
        v.check_array(name, a, "a stack of matrices with shape (B, ., d)", ranks=(3,))
    if eigenvalues is not None and v.shape_of("eigenvalues", eigenvalues) != np.shape(V)[:2]:
        raise InputError(f"eigenvalues must have shape {np.shape(V)[:2]} (B, d) like V, "
                         f"got {v.shape_of('eigenvalues', eigenvalues)}.")
    Q, K, V = (v.as_float(a) for a in (Q, K, V))
    if Q.shape != K.shape or V.shape[-1] != V.shape[-2] or Q.shape[-1] != V.shape[-1] or Q.shape[0] != V.shape[0]:
        raise InputError(f"check_batch needs Q, K (B, m, d) and V (B, d, d) with one B and d, "
                         f"got Q {Q.shape}, K {K.shape}, V {V.shape}.")
    route = eig_route(route, traced=v.is_traced(Q, K, V, eigenvalues))
    if eigenvalues is None and route == "cpu":
        eigenvalues = eigvals_sorted(V, "cpu")
    return _check_jit(Q, K, V, eigenvalues, route, lapack_needs_loop())


@functools.partial(jax.jit, static_argnums=(4, 5))
def _check_jit(Q, K, V, eigenvalues, route, loop):
    if loop:  # XLA:CPU: eig, svd and eigvalsh one system at a time (linalg.loop_over_systems)
        if eigenvalues is None:
            return loop_over_systems(lambda q, k, v: _check_jit(q, k, v, None, route, False))(Q, K, V)
        return loop_over_systems(lambda q, k, v, w: _check_jit(q, k, v, w, route, False))(Q, K, V, eigenvalues)
    w = eigvals_sorted(V, route) if eigenvalues is None else eigenvalues
    st = stats_from_eigvals(w)
    out = jax.vmap(_one_system)(Q, K, V, st.eigenvalues, st)
    (phi, dual, qk, cond2, good, spd, symmetric, sym_pd, lam_min, para, dim_F, mult, radius, F_basis, G_basis,
     scalar_V, origin, rule) = out
    predicted = jnp.asarray(_RULE_GEOMETRY)[rule]
    return SpectralBatch(stats=st, phi=phi, phi_dual=dual, qk=qk, cond2=cond2, good=good, qk_spd=spd,
                         qk_symmetric=symmetric, qk_sym_part_pd=sym_pd, qk_min_eig=lam_min, paranormal=para,
                         para_dim_F=dim_F, para_mult=mult, para_radius_G=radius, para_F=F_basis, para_G=G_basis,
                         scalar_V=scalar_V, origin_case=origin, rule=rule, predicted=predicted,
                         codim=jnp.where(rule == 7, st.num_pos_real_part, 0))


def geometry_names(codes) -> list[str]:
    """Names of geometry codes (see :data:`GEOMETRIES`).

    Example:
        >>> from attnflow.spectral import geometry_names
        >>> geometry_names([1, 3, 5])
        ['polytope', 'hyperplanes', 'none']
    """
    return [GEOMETRIES[int(c)] for c in np.asarray(codes).ravel()]


def left_eig(V: Float[Array, "d d"], route: str = "device"):
    r"""Eigenvalues w (d,) and left eigenvectors of V (the columns of vl, :math:`v^T V = w\,v^T`),
    as the right eigenvectors of :math:`V^T`; ``route`` as :func:`eig_route` (``"cpu"`` is not
    traceable and is read as ``"host"``; ``"auto"`` under a transformation is ``"device"``).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.spectral import left_eig
        >>> V = jnp.array([[2.0, 1.0], [0.0, -1.0]])
        >>> w, vl = left_eig(V)
        >>> bool(jnp.allclose(vl[:, 0] @ V, w[0] * vl[:, 0]))
        True
    """
    v.check_square("V", V, "a square matrix (d, d)")
    eig_route(route)  # validates the name
    route = eig_route(route, traced=v.is_traced(V)) if route == "auto" else ("host" if route == "cpu" else route)
    if route == "device":
        w, vr = jax.lax.linalg.eig(V.T, compute_left_eigenvectors=False, compute_right_eigenvectors=True)
        return w, vr
    cdtype = jnp.result_type(V.dtype, jnp.complex64)
    spec = (jax.ShapeDtypeStruct(V.shape[:-1], cdtype), jax.ShapeDtypeStruct(V.shape, cdtype))

    def host(a):
        w, v = np.linalg.eig(np.swapaxes(np.asarray(a), -1, -2))
        return w.astype(cdtype), v.astype(cdtype)

    return jax.pure_callback(host, spec, V, vmap_method="expand_dims")


def projector_from_left_eig(w: Complex[Array, " d"], vl: Complex[Array, "d d"], tol: float = 1e-12,
                            *, with_basis: bool = False):
    r"""The orthogonal projector onto the real span of the left eigenvectors ``vl`` whose
    eigenvalues ``w`` have positive real part, and their number k (with ``with_basis``, also a
    (d, d) orthonormal matrix whose first k columns span that subspace).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.spectral import left_eig, projector_from_left_eig
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
    P = (u * keep) @ u.T
    return (P, k, u[:, : w.shape[0]]) if with_basis else (P, k)


def unstable_projector(V: Float[Array, "d d"], route: str = "device", tol: float = 1e-12):
    r"""Orthogonal projector :math:`\Pi` onto the left invariant subspace of V for its k
    eigenvalues with positive real part, and k (:math:`|\Pi z_i - \Pi z_j| = |Wz_i - Wz_j|` for
    an orthonormal basis W of that subspace).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.spectral import unstable_projector
        >>> P, k = unstable_projector(jnp.diag(jnp.array([2.0, -1.0])))
        >>> P.tolist(), int(k)
        ([[1.0, 0.0], [0.0, 0.0]], 1)
    """
    v.check_real("tol", tol, "the relative threshold on Re w, a finite real scalar")
    P, k = projector_from_left_eig(*left_eig(V, route), tol=tol)
    return P.astype(V.dtype), k
