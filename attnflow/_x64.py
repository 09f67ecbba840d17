"""Scoped float64: attnflow never changes JAX's global configuration.

The report, the sweeps and ``simulate(dtype="float64")`` need float64 arrays; they run inside
``jax.enable_x64(True)`` (a context manager), so a user's process keeps its own setting.
"""

from __future__ import annotations

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


def in_float64(fn: F) -> F:
    """Decorator: run ``fn`` inside :func:`float64_scope`."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with float64_scope():
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]
