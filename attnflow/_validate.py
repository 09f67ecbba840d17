"""Host-side checks of user input, run before anything is traced or compiled.

Each check raises :class:`attnflow.errors.InputError` with one sentence naming the
argument, what it is, and what is expected. Checks on values (finiteness) are skipped
for traced arrays, so the library stays usable inside ``jax.jit``.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from .errors import InputError


def is_concrete(a: Any) -> bool:
    """True when ``a`` holds actual numbers (not a JAX tracer)."""
    return not isinstance(a, jax.core.Tracer)


def shape_of(name: str, a: Any) -> tuple[int, ...]:
    if hasattr(a, "shape") and not callable(a.shape):
        return tuple(a.shape)
    try:
        return tuple(np.shape(a))
    except Exception as exc:  # pragma: no cover - exotic objects
        raise InputError(f"{name} must be an array, got an object of type {type(a).__name__}.") from exc


def check_rank(name: str, a: Any, ranks: tuple[int, ...], meaning: str) -> tuple[int, ...]:
    """Check that ``a`` has one of the allowed ranks; return its shape."""
    shape = shape_of(name, a)
    if len(shape) not in ranks:
        allowed = " or ".join(str(r) for r in ranks)
        raise InputError(
            f"{name} must have rank {allowed} ({meaning}), got shape {shape}."
        )
    return shape


def check_finite(name: str, a: Any) -> None:
    """Raise if a concrete array holds NaN or infinity."""
    if not is_concrete(a):
        return
    arr = np.asarray(a)
    if arr.dtype.kind in "fc" and not np.all(np.isfinite(arr)):
        bad = int(np.size(arr) - np.count_nonzero(np.isfinite(arr)))
        raise InputError(
            f"{name} contains {bad} non-finite entr{'y' if bad == 1 else 'ies'} (NaN or inf); "
            "all entries must be finite numbers."
        )


def check_positive(name: str, value: Any) -> None:
    if is_concrete(value) and not np.all(np.asarray(value) > 0):
        raise InputError(f"{name} must be > 0, got {value!r}.")


def check_time_span(t0: Any, t1: Any) -> None:
    if is_concrete(t0) and is_concrete(t1):
        if not (np.isfinite(t0) and np.isfinite(t1)):
            raise InputError(f"t0 and t1 must be finite, got t0={t0!r}, t1={t1!r}.")
        if float(t1) < float(t0):
            raise InputError(
                f"t1 must be >= t0 (the flow runs forward in time), got t0={t0!r}, t1={t1!r}."
            )


def check_weights(Q: Any, K: Any, V: Any, d: int | None = None) -> None:
    """Check Q (m, d), K (m, d), V (d, d), each optionally with a leading batch axis B.

    ``d`` is the token dimension when known (from x0). Entries must be finite.
    """
    for name, a in (("Q", Q), ("K", K), ("V", V)):
        check_rank(name, a, (2, 3), "a matrix, or a batch of matrices with a leading axis B")
    qs, ks, vs = np.shape(Q), np.shape(K), np.shape(V)
    if vs[-1] != vs[-2]:
        raise InputError(f"V must be square (d, d), got shape {vs[-2:]}.")
    if d is not None and vs[-1] != d:
        raise InputError(
            f"the tokens have dimension d = {d}, so V must be ({d}, {d}), got {vs[-2:]}."
        )
    if qs[-2:] != ks[-2:]:
        raise InputError(
            f"Q and K must have the same shape (m, d) so that <Q x_i, K x_j> is defined, "
            f"got Q {qs[-2:]} and K {ks[-2:]}."
        )
    if qs[-1] != vs[-1]:
        raise InputError(
            f"Q and K must have shape (m, {vs[-1]}) to act on tokens of dimension {vs[-1]}, got {qs[-2:]}."
        )
    for name, a in (("Q", Q), ("K", K), ("V", V)):
        check_finite(name, a)


def check_array(name: str, a: Any, meaning: str, min_rank: int = 0) -> tuple[int, ...]:
    """Check that ``a`` is an array (not a string or an object) of rank >= min_rank, finite if concrete."""
    if isinstance(a, (str, bytes)) or a is None:
        raise InputError(f"{name} must be an array ({meaning}), got {type(a).__name__}.")
    shape = shape_of(name, a)
    if len(shape) < min_rank:
        raise InputError(f"{name} must be an array ({meaning}), got shape {shape}.")
    check_finite(name, a)
    return shape


def is_traced(*trees: Any) -> bool:
    """True when any leaf of the pytrees is a JAX tracer (we are inside jit/vmap/grad)."""
    return any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree_util.tree_leaves(trees))
