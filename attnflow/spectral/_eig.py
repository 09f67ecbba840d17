r"""Where the non-symmetric eigenvalue problem runs (the *eig route*), and the modulus order.

The one place that calls ``eig``; :mod:`attnflow.spectral._batched` (the checks) and
:mod:`attnflow.spectral._eigenpair` (the leading eigenpair) both import it. Routes:

* ``"device"`` -- ``jax.lax.linalg.eig`` on the default backend. On CPU this is LAPACK; on
  CUDA GPUs JAX (0.4.36+) lowers it to cuSOLVER ``geev`` when cuSOLVER >= 11.7.1 and only
  eigenvalues / right vectors are requested, otherwise to LAPACK on the host. TPU has no lowering.
* ``"host"`` -- a :func:`jax.pure_callback` into NumPy (``numpy.linalg.eigvals``); works inside
  ``jit``/``shard_map`` on every backend (not under ``grad``), except on several (forced) CPU
  devices, where the callback starves XLA:CPU's thread pool (the sweeps refuse it there).
* ``"cpu"`` -- the eigenvalues are computed by a jitted call placed on the CPU device and moved
  back (not usable inside an outer ``jit``).
* ``"auto"`` -- traceable by construction: with traced inputs (under ``jit``, ``vmap``,
  ``grad``) always ``"device"``, whatever was called before; with concrete inputs ``"device"``
  when the backend compiles ``eig`` (probed once per backend), else ``"host"``.

Eigenvalues are sorted by decreasing modulus (:func:`modulus_order`).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Complex, Float

from .. import _validate as v
from .._eig_routes import EIG_ROUTES
from ..errors import InputError

__all__ = ["EIG_ROUTES", "eig_route", "eigvals_sorted", "sort_by_modulus", "modulus_order"]

def modulus_order(w: Complex[Array, " d"]) -> Array:
    """The permutation sorting eigenvalues by decreasing modulus, ties by decreasing real part,
    then decreasing imaginary part (so of a conjugate pair the one with Im > 0 comes first).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.spectral import modulus_order
        >>> modulus_order(jnp.array([1.0, 1j, -1j, 2.0])).tolist()
        [3, 0, 1, 2]
    """
    return jnp.lexsort((-w.imag, -w.real, -jnp.abs(w)))


@functools.cache
def _device_can_eig(backend: str) -> bool:
    """Whether ``backend`` compiles a non-symmetric eigenvalue problem (probed once; XLA:CPU always does, through
    LAPACK, so the CPU is not probed: a probe compiles a program, about 0.1 s of every command)."""
    if backend == "cpu":
        return True
    try:
        dev = jax.local_devices(backend=backend)[0]
        x = jax.device_put(np.eye(2), dev)
        jax.jit(lambda a: jax.lax.linalg.eig(a, compute_left_eigenvectors=False,
                                             compute_right_eigenvectors=False)[0])(x).block_until_ready()
        return True
    except Exception:  # NotImplementedError / XlaRuntimeError: no lowering on this backend
        return False


def eig_route(route: str = "auto", backend: str | None = None, *, traced: bool = False) -> str:
    """Resolve ``route`` (``"auto"``, ``"device"``, ``"host"``, ``"cpu"``) for ``backend``.

    ``"auto"``: ``"device"`` when ``traced`` (the inputs are JAX tracers: never a host callback
    under a transformation), else ``"device"`` when the backend compiles ``eig``, else ``"host"``.

    Example:
        >>> from attnflow.spectral import eig_route
        >>> eig_route("auto", "cpu"), eig_route("auto", traced=True)
        ('device', 'device')
    """
    if route not in EIG_ROUTES:
        raise InputError(f"eig route must be one of {EIG_ROUTES}, got {route!r}.")
    if route != "auto":
        return route
    if traced:
        return "device"
    backend = backend or jax.default_backend()
    return "device" if _device_can_eig(backend) else "host"


def sort_by_modulus(w: Complex[Array, "*B d"]) -> Complex[Array, "*B d"]:
    """Sort by decreasing modulus, ties by decreasing real part, then imaginary part
    (:func:`attnflow.spectral.modulus_order`).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.spectral import sort_by_modulus
        >>> sort_by_modulus(jnp.array([1.0, -2.0, 2.0, 0.5]) + 0j).real.tolist()
        [2.0, -2.0, 1.0, 0.5]
    """
    def one(row):
        return row[modulus_order(row)]

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
    traceable (``jit``, ``vmap``, ``shard_map``; ``grad`` needs ``"device"``), ``"cpu"`` is not.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.spectral import eigvals_sorted
        >>> eigvals_sorted(jnp.diag(jnp.array([0.5, -2.0, 1.0])), route="host").real.tolist()
        [-2.0, 1.0, 0.5]
    """
    shape = v.check_array("V", V, "a matrix (d, d) or a stack of them (*B, d, d)", min_rank=2)
    if shape[-1] != shape[-2]:
        raise InputError(f"V must be square in its last two axes (*B, d, d), got shape {shape}.")
    route = eig_route(route, traced=v.is_traced(V))
    if route == "cpu":
        if v.is_traced(V):
            raise InputError("eig route 'cpu' moves data between devices and cannot run under jit; "
                             "use route='device' (or 'host') inside traced code.")
        cpu = jax.local_devices(backend="cpu")[0]
        home = getattr(V, "sharding", None)
        w = _eigvals_cpu_jit(jax.device_put(V, cpu))
        return jax.device_put(w, home) if home is not None else w
    w = _eigvals_device(V) if route == "device" else _eigvals_host(V)
    return sort_by_modulus(w)
