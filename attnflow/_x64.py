"""Scoped float64: attnflow never changes JAX's global configuration.

The report, the sweeps and ``simulate(dtype="float64")`` need float64 arrays; they run inside
``jax.enable_x64(True)`` (a context manager), so a user's process keeps its own setting.

The float64 rule of every public function: **float64 in, float64 out**. A function that takes
arrays is decorated with :func:`keeps_float64`; when any array among its arguments (searched
through lists, tuples, dicts and other pytrees, equinox modules included) is float64 or
complex128, or a ``dtype=`` asks for float64, and JAX's float64 mode is off, the call runs
inside :func:`float64_scope`, so every ``jnp`` operation, ``jax.jit`` / ``eqx.filter_jit`` trace
and result stays float64; float32 input runs as before, untouched (scalars, float64 or not, are
parameters and decide nothing)::

    from .._x64 import keeps_float64

    @keeps_float64            # outermost: the scope must be open when a jit below traces
    def cluster_count(x, tol=1e-3):
        ...

For a block inside a function (a job's loop), ``with float64_scope_for(x, mu):`` does the same
for the arrays it is given.  Decorate the public entry point, above any ``jax.jit``: a
function jitted *outside* the scope would trace once in float32.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable, TypeVar

import jax
import numpy as np

from .errors import InputError

F = TypeVar("F", bound=Callable)


def float64_scope():
    """Context manager enabling float64 for the enclosed computation only.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow._x64 import float64_scope
        >>> with float64_scope():
        ...     str(jnp.zeros(1, jnp.float64).dtype)
        'float64'
    """
    return jax.enable_x64(True)


def float64_enabled() -> bool:
    """True when JAX keeps float64 numbers as float64 here (``jax_enable_x64`` on, globally or in a scope).

    Example:
        >>> from attnflow._x64 import float64_enabled, float64_scope
        >>> with float64_scope():
        ...     float64_enabled()
        True
    """
    return jax.dtypes.canonicalize_dtype(np.float64) == np.float64


def check_float64_kept(name: str, a: Any) -> None:
    """Raise :class:`~attnflow.errors.InputError` when the array ``a`` is float64 but float64 is
    off, so that JAX would silently compute with it in float32 (Python numbers and lists pass)."""
    if getattr(a, "dtype", None) == np.float64 and not float64_enabled():
        raise InputError(
            f"{name} is a float64 array but JAX's float64 mode is off, so it would silently be computed in "
            "float32; run the call inside `with jax.enable_x64(True):` (simulate(..., dtype='float64') does "
            "this itself) or pass a float32 array."
        )


_WIDE = (np.dtype(np.float64), np.dtype(np.complex128))


def _is_float64(leaf: Any) -> bool:
    """An array of at least one axis in float64 / complex128, or a request for that dtype (``dtype=``)."""
    dtype = getattr(leaf, "dtype", None)
    if isinstance(dtype, np.dtype) and not isinstance(leaf, type):  # arrays (NumPy, JAX, tracers), NumPy scalars
        return dtype in _WIDE and getattr(leaf, "ndim", 0) > 0
    if isinstance(leaf, str):
        return leaf in ("float64", "complex128")
    if isinstance(leaf, np.dtype):
        return leaf in _WIDE
    if isinstance(leaf, type):  # np.float64, or jnp.float64 whose dtype is an attribute (float: no request)
        if issubclass(leaf, np.generic):
            return np.dtype(leaf) in _WIDE
        return isinstance(dtype, np.dtype) and dtype in _WIDE
    return False


def wants_float64(*trees: Any, **kwargs: Any) -> bool:
    """True when a leaf of the pytrees ``trees`` is a float64 or complex128 array of at least one axis, or
    names one of those dtypes (a ``dtype=`` argument). Scalars (Python numbers, 0-d arrays, NumPy scalars)
    are parameters and do not decide the precision, as in JAX's own type promotion.

    Example:
        >>> import numpy as np
        >>> from attnflow._x64 import wants_float64
        >>> wants_float64(np.ones(2), [np.ones(2, np.float32)]), wants_float64(np.ones(2, np.float32), np.float64(1))
        (True, False)
        >>> wants_float64(3.0, dtype="float64"), wants_float64(np.float32(3.0), np.dtype("float32"))
        (True, False)
    """
    return any(_is_float64(leaf) for leaf in jax.tree_util.tree_leaves((trees, kwargs)))


def float64_scope_for(*trees: Any, **kwargs: Any):
    """:func:`float64_scope` when float64 is off and :func:`wants_float64` of ``trees`` (and ``kwargs``),
    else a context that changes nothing.

    Example:
        >>> import numpy as np, jax.numpy as jnp
        >>> from attnflow._x64 import float64_scope_for
        >>> x = np.linspace(0.0, 1.0, 3)
        >>> with float64_scope_for(x):
        ...     str(jnp.asarray(x).dtype)
        'float64'
    """
    if not float64_enabled() and wants_float64(*trees, **kwargs):
        return float64_scope()
    return contextlib.nullcontext()


def keeps_float64(fn: F) -> F:
    """Decorator: run ``fn`` inside :func:`float64_scope` when one of its arguments is a float64
    (or complex128) array or asks for that dtype (:func:`wants_float64`), so that float64 input
    gives float64 results with JAX's float64 mode off; any other call runs unchanged.

    Example:
        >>> import numpy as np, jax.numpy as jnp
        >>> from attnflow._x64 import keeps_float64
        >>> @keeps_float64
        ... def mean(x):
        ...     return jnp.mean(jnp.asarray(x))
        >>> str(mean(np.arange(3.0)).dtype), str(mean(np.arange(3.0, dtype=np.float32)).dtype)
        ('float64', 'float32')
    """

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with float64_scope_for(args, kwargs):
            return fn(*args, **kwargs)

    wrapper.__keeps_float64__ = True  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]


def in_float64(fn: F) -> F:
    """Decorator: run ``fn`` inside :func:`float64_scope`."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with float64_scope():
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]
