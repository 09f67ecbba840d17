r"""Batched JAX versions of the spectral checks, for stacks of weights (B, d, d).

Everything here is pure JAX (jit / vmap / shard_map-able) except the choice of where the
non-symmetric eigenvalue problem runs (the *eig route*):

* ``"device"`` -- ``jax.lax.linalg.eig`` on the default backend. On CPU this is LAPACK; on
  CUDA GPUs JAX (0.4.36+, incl. 0.10/0.11) lowers it to cuSOLVER ``geev`` when cuSOLVER >= 11.7.1
  and only eigenvalues / right vectors are requested (we request eigenvalues only), otherwise to
  LAPACK on the host. TPU has no lowering.
* ``"host"`` -- a :func:`jax.pure_callback` into NumPy (``numpy.linalg.eigvals``); works inside
  ``jit``/``shard_map`` on every backend, except on several (forced) CPU devices, where the
  callback starves XLA:CPU's thread pool (the sweeps refuse it there,
  :func:`attnflow.sweep.runner.check_eig_route`).
* ``"cpu"`` -- the eigenvalues are computed by a jitted call placed on the CPU device and moved
  back (not usable inside an outer ``jit``).
* ``"auto"`` -- ``"device"`` when the default backend can compile ``eig`` (probed once),
  ``"host"`` otherwise.

Only eigenvalues need ``eig``: the leading eigenvectors :math:`\varphi_1` (right) and
:math:`\varphi_1^*` (left, :math:`\varphi_1^*(\varphi_1)=1`) of a real simple :math:`\lambda_1`
are the null vectors of :math:`V-\lambda_1 I`, read off its SVD (supported on every backend).

The decision rules are those of the host functions in :mod:`attnflow.spectral.assumptions`
(same tolerances), so both agree system by system.
"""

from __future__ import annotations

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Complex, Float, Int

from ..errors import InputError
from ..linalg import lapack_needs_loop, loop_over_systems

__all__ = [
    "EIG_ROUTES",
    "GEOMETRIES",
    "SpectralBatch",
    "EigenStats",
    "eig_route",
    "eigvals_sorted",
    "sort_by_modulus",
    "eigen_stats",
    "check_batch",
    "geometry_names",
]

EIG_ROUTES = ("auto", "device", "host", "cpu")
#: Predicted limit geometries, indexed by :attr:`SpectralBatch.predicted`.
GEOMETRIES = ("polytope", "polytope x subspace", "hyperplanes", "origin", "codim-k", "none")

_TOL = 1e-10  # as check_good_triple
_PARA_TOL = 1e-9  # as paranormal_split


@functools.cache
def _device_can_eig(backend: str) -> bool:
    """Whether ``backend`` compiles a non-symmetric eigenvalue problem (probed once)."""
    try:
        dev = jax.local_devices(backend=backend)[0]
        x = jax.device_put(np.eye(2), dev)
        jax.jit(lambda a: jax.lax.linalg.eig(a, compute_left_eigenvectors=False,
                                             compute_right_eigenvectors=False)[0])(x).block_until_ready()
        return True
    except Exception:  # NotImplementedError / XlaRuntimeError: no lowering on this backend
        return False


def eig_route(route: str = "auto", backend: str | None = None) -> str:
    """Resolve ``route`` (``"auto"``, ``"device"``, ``"host"``, ``"cpu"``) for ``backend``.

    ``"auto"``: ``"device"`` when the backend compiles ``eig``, else ``"host"``.

    Example:
        >>> from attnflow.spectral.batched import eig_route
        >>> eig_route("auto", "cpu")
        'device'
    """
    if route not in EIG_ROUTES:
        raise InputError(f"eig route must be one of {EIG_ROUTES}, got {route!r}.")
    if route != "auto":
        return route
    backend = backend or jax.default_backend()
    return "device" if _device_can_eig(backend) else "host"


def sort_by_modulus(w: Complex[Array, "*B d"]) -> Complex[Array, "*B d"]:
    """Sort by decreasing modulus, ties by decreasing real part (as ``leading_eigenpair``).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.spectral.batched import sort_by_modulus
        >>> sort_by_modulus(jnp.array([1.0, -2.0, 2.0, 0.5]) + 0j).real.tolist()
        [2.0, -2.0, 1.0, 0.5]
    """
    def one(row):
        return row[jnp.lexsort((-row.real, -jnp.abs(row)))]

    flat = w.reshape(-1, w.shape[-1])
    return jax.vmap(one)(flat).reshape(w.shape)


def _eigvals_device(V):
    return jax.lax.linalg.eig(V, compute_left_eigenvectors=False, compute_right_eigenvectors=False)[0]


def _eigvals_host(V):
    cdtype = jnp.result_type(V.dtype, jnp.complex64)
    spec = jax.ShapeDtypeStruct(V.shape[:-1], cdtype)
    return jax.pure_callback(lambda a: np.linalg.eigvals(np.asarray(a)).astype(cdtype), spec, V,
                             vmap_method="expand_dims")


_eigvals_cpu_jit = jax.jit(lambda V: sort_by_modulus(_eigvals_device(V)))


def eigvals_sorted(V: Float[Array, "*B d d"], route: str = "auto") -> Complex[Array, "*B d"]:
    r"""Eigenvalues of V sorted by decreasing modulus (ties: larger real part first).

    ``route`` says where ``eig`` runs (module docstring); ``"device"`` and ``"host"`` are
    traceable (usable under ``jit``, ``vmap``, ``shard_map``), ``"cpu"`` is not.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.spectral.batched import eigvals_sorted
        >>> eigvals_sorted(jnp.diag(jnp.array([0.5, -2.0, 1.0])), route="host").real.tolist()
        [-2.0, 1.0, 0.5]
    """
    route = eig_route(route)
    if route == "cpu":
        if isinstance(V, jax.core.Tracer):
            raise InputError("eig route 'cpu' moves data between devices and cannot run under jit; "
                             "use route='host' inside traced code.")
        cpu = jax.local_devices(backend="cpu")[0]
        home = getattr(V, "sharding", None)
        w = _eigvals_cpu_jit(jax.device_put(V, cpu))
        return jax.device_put(w, home) if home is not None else w
    w = _eigvals_device(V) if route == "device" else _eigvals_host(V)
    return sort_by_modulus(w)


class EigenStats(eqx.Module):
    """Per-system eigenvalue statistics of V (leading axis B). All decisions use tolerance
    ``1e-10 * max(1, |lambda_1|)`` as :func:`~attnflow.spectral.check_good_triple`."""

    eigenvalues: Complex[Array, "B d"]  # sorted by decreasing modulus
    lambda1: Complex[Array, " B"]
    abs_lambda2: Float[Array, " B"]
    gap: Float[Array, " B"]  # Re lambda_1 - |lambda_2|
    cond1: Bool[Array, " B"]  # Def 4.1(1): largest modulus real, > 0, simple, strictly dominant
    cond1_real_part: Bool[Array, " B"]  # same with "largest real part" (the wrong reading)
    num_real: Int[Array, " B"]  # number of real eigenvalues
    num_pos_real_part: Int[Array, " B"]  # k of the codim-k conjecture


def _stats_from_eigvals(w):
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
        >>> from attnflow.spectral.batched import eigen_stats
        >>> V = jnp.stack([jnp.diag(jnp.array([2.0, 1.0])), jnp.diag(jnp.array([-2.0, 1.0]))])
        >>> s = eigen_stats(V)
        >>> s.cond1.tolist(), s.cond1_real_part.tolist(), s.gap.tolist()
        ([True, False], [True, True], [1.0, -3.0])
    """
    route = eig_route(route)
    if route == "cpu":
        return _stats_jit(eigvals_sorted(V, "cpu"))
    return _eigen_stats_jit(V, route)


_stats_jit = jax.jit(lambda w: _stats_from_eigvals(w))
_eigen_stats_jit = jax.jit(lambda V, route: _stats_from_eigvals(eigvals_sorted(V, route)), static_argnums=1)


class SpectralBatch(eqx.Module):
    r"""All spectral checks of a stack of triples (Q, K, V) (leading axis B).

    Attributes beyond :class:`EigenStats`:
        phi, phi_dual: (B, d) leading right eigenvector (unit, largest entry > 0) and dual
            :math:`\varphi_1^*` with :math:`\varphi_1^*\varphi_1 = 1` (NaN when
            :math:`\lambda_1` is not real).
        qk: :math:`\langle Q\varphi_1, K\varphi_1\rangle` (NaN when :math:`\lambda_1` is complex).
        cond2, good: Definition 4.1(2), and (1) and (2).
        qk_spd, qk_min_eig: :math:`Q^TK` symmetric positive definite, and the smallest
            eigenvalue of its symmetric part.
        paranormal, para_dim_F, para_radius_G: Definition 5.1 (dim F, spectral radius on G).
        predicted: index into :data:`GEOMETRIES` (same rules as ``predict_geometry``).
    """

    stats: EigenStats
    phi: Float[Array, "B d"]
    phi_dual: Float[Array, "B d"]
    qk: Float[Array, " B"]
    cond2: Bool[Array, " B"]
    good: Bool[Array, " B"]
    qk_spd: Bool[Array, " B"]
    qk_min_eig: Float[Array, " B"]
    paranormal: Bool[Array, " B"]
    para_dim_F: Int[Array, " B"]
    para_radius_G: Float[Array, " B"]
    predicted: Int[Array, " B"]
    codim: Int[Array, " B"]


def _one_system(Q, K, V, w, st: EigenStats):
    """Eigenvectors, Def 4.1(2), Def 5.1, Q^T K > 0 and the prediction for one triple."""
    d = V.shape[-1]
    eye = jnp.eye(d, dtype=V.dtype)
    lam1 = st.lambda1
    scale = jnp.maximum(1.0, jnp.abs(lam1))
    real1 = jnp.abs(lam1.imag) <= _TOL * scale
    lam = lam1.real
    # Null vectors of V - lam I from its SVD: right -> phi, left -> phi*.
    u, s, vt = jnp.linalg.svd(V - lam * eye)
    phi = vt[-1]
    phi = phi * jnp.where(phi[jnp.argmax(jnp.abs(phi))] < 0, -1.0, 1.0)
    phi = phi / jnp.linalg.norm(phi)
    dual = u[:, -1]
    dual = dual / (dual @ phi)
    nan = jnp.full_like(phi, jnp.nan)
    phi, dual = jnp.where(real1, phi, nan), jnp.where(real1, dual, nan)
    qk = jnp.where(real1, (Q @ phi) @ (K @ phi), jnp.nan)
    cond2 = real1 & (qk > 0)
    good = st.cond1 & cond2

    # Q^T K symmetric positive definite (as is_positive_definite).
    A = Q.T @ K
    sym = 0.5 * (A + A.T)
    lam_min = jnp.linalg.eigvalsh(sym)[0]
    atol = 1e-12 * jnp.maximum(1.0, jnp.max(jnp.abs(A)))
    symmetric = jnp.all(jnp.abs(A - A.T) <= atol + 1e-10 * jnp.abs(A.T))
    spd = symmetric & (lam_min > 0)

    # Definition 5.1 (as paranormal_split).
    pscale = scale
    pos_real = (jnp.abs(lam1.imag) <= _PARA_TOL * pscale) & (lam > _PARA_TOL * pscale)
    at_lam = jnp.abs(w - lam) <= 1e-6 * pscale
    mult = jnp.sum(at_lam)
    radius = jnp.max(jnp.where(at_lam, 0.0, jnp.abs(w)))
    tie = jnp.any(~at_lam & (jnp.abs(jnp.abs(w) - lam) <= _PARA_TOL * pscale))
    rank = jnp.sum(s > 1e-8 * pscale)
    dim_F = d - rank
    paranormal = pos_real & ~tie & (dim_F == mult)

    # The prediction (as predict_geometry).
    def close(a, b):  # numpy.allclose defaults
        return jnp.all(jnp.abs(a - b) <= 1e-8 + 1e-5 * jnp.abs(b))

    origin = (close(V, -eye * jnp.abs(V[0, 0])) & (V[0, 0] < 0)
              & close(A, eye * A[0, 0]) & (A[0, 0] > 0))
    k = st.num_pos_real_part
    complex1 = jnp.abs(lam1.imag) > 1e-10 * scale
    code = jnp.where(
        paranormal & (dim_F == d) & spd, 0,
        jnp.where(paranormal & spd, 1,
                  jnp.where(good, 2,
                            jnp.where(origin, 3,
                                      jnp.where(complex1, 5, jnp.where(k > 0, 4, 5))))))
    return phi, dual, qk, cond2, good, spd, lam_min, paranormal, dim_F, jnp.where(paranormal, radius, jnp.nan), code


def check_batch(Q: Float[Array, "B m d"], K: Float[Array, "B m d"], V: Float[Array, "B d d"],
                route: str = "auto", eigenvalues: Complex[Array, "B d"] | None = None) -> SpectralBatch:
    r"""Definition 4.1 (with margins, :math:`\varphi_1`, :math:`\varphi_1^*`), Definition 5.1,
    :math:`Q^TK > 0` and the predicted geometry for a stack of triples, in JAX.

    ``eigenvalues`` (sorted by :func:`eigvals_sorted`) may be passed when already computed
    (e.g. on another device); then ``route`` is unused. Traceable for ``route`` in ``("device", "host")`` (resolve ``"auto"`` with
    :func:`eig_route` outside ``jit``). Compute in float64 for decisions that match the host
    functions.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.spectral.batched import check_batch, geometry_names
        >>> I = jnp.eye(2)[None]
        >>> r = check_batch(I, I, jnp.diag(jnp.array([1.0, 0.5]))[None])
        >>> r.good.tolist(), r.qk.tolist(), geometry_names(r.predicted)
        ([True], [1.0], ['polytope x subspace'])
    """
    for name, a, rank in (("Q", Q, 3), ("K", K, 3), ("V", V, 3)):
        if jnp.ndim(a) != rank:
            raise InputError(f"{name} must be a stack of matrices with shape (B, ., d), got shape {jnp.shape(a)}.")
    if Q.shape != K.shape or V.shape[-1] != V.shape[-2] or Q.shape[-1] != V.shape[-1] or Q.shape[0] != V.shape[0]:
        raise InputError(f"check_batch needs Q, K (B, m, d) and V (B, d, d) with one B and d, "
                         f"got Q {Q.shape}, K {K.shape}, V {V.shape}.")
    route = eig_route(route)
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
    st = _stats_from_eigvals(w)
    out = jax.vmap(_one_system)(Q, K, V, st.eigenvalues, st)
    phi, dual, qk, cond2, good, spd, lam_min, para, dim_F, radius, code = out
    return SpectralBatch(stats=st, phi=phi, phi_dual=dual, qk=qk, cond2=cond2, good=good, qk_spd=spd,
                         qk_min_eig=lam_min, paranormal=para, para_dim_F=dim_F, para_radius_G=radius,
                         predicted=code, codim=jnp.where(code == 4, st.num_pos_real_part, 0))


def geometry_names(codes) -> list[str]:
    """Names of predicted-geometry codes (see :data:`GEOMETRIES`).

    Example:
        >>> from attnflow.spectral.batched import geometry_names
        >>> geometry_names([0, 2, 5])
        ['polytope', 'hyperplanes', 'none']
    """
    return [GEOMETRIES[int(c)] for c in np.asarray(codes).ravel()]
