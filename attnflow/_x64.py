"""Scoped float64: attnflow never changes JAX's global configuration.

The report, the sweeps and ``simulate(dtype="float64")`` need float64 arrays; they run inside
``jax.enable_x64(True)`` (a context manager), so a user's process keeps its own setting.
"""

from __future__ import annotations

import functools
from typing import Callable, TypeVar

import jax

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


def in_float64(fn: F) -> F:
    """Decorator: run ``fn`` inside :func:`float64_scope`."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with float64_scope():
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]
