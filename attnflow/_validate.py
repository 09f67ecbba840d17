"""Host-side checks of user input, run before anything is traced or compiled.

Each check raises :class:`attnflow.errors.InputError` with one sentence naming the
argument, what it is, and what is expected. Checks on values (finiteness) are skipped
for traced arrays, so the library stays usable inside ``jax.jit``.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from ._resources import check_count
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


def check_positive(name: str, value: Any, meaning: str = "a finite positive scalar") -> None:
    """A finite real scalar > 0 (see :func:`check_real`)."""
    check_real(name, value, meaning, positive=True)


def check_time_span(t0: Any, t1: Any) -> None:
    """t0 <= t1, both finite real scalars (values checked when concrete)."""
    for value in (t0, t1):
        if isinstance(value, (str, bytes, bool)) or value is None or shape_of("t0, t1", value) != () or (
                is_concrete(value) and (dtype_of(value).kind not in "iuf" or not np.isfinite(value))):
            raise InputError(f"t0 and t1 must be finite real scalars, got t0={t0!r}, t1={t1!r}.")
    if is_concrete(t0) and is_concrete(t1):
        if float(t1) < float(t0):
            raise InputError(
                f"t1 must be >= t0 (the flow runs forward in time), got t0={t0!r}, t1={t1!r}."
            )


def dtype_of(a: Any) -> np.dtype:
    """The dtype ``a`` has, or would have as an array (``object`` for what is no number)."""
    if hasattr(a, "dtype"):
        return np.dtype(a.dtype)
    try:
        return np.asarray(a).dtype
    except Exception:  # ragged or exotic objects
        return np.dtype(object)


def check_array(name: str, a: Any, meaning: str, min_rank: int = 0, ranks: tuple[int, ...] | None = None,
                nonempty: bool = False) -> tuple[int, ...]:
    """Check that ``a`` is a real array (not a string, an object or complex numbers) of rank
    >= ``min_rank`` (or one of ``ranks``), with no axis of length 0 if ``nonempty``, finite if
    concrete; return its shape."""
    if isinstance(a, (str, bytes)) or a is None:
        raise InputError(f"{name} must be an array ({meaning}), got {type(a).__name__}.")
    refuse_law(name, a)
    shape = shape_of(name, a) if ranks is None else check_rank(name, a, ranks, meaning)
    if len(shape) < min_rank or (nonempty and 0 in shape):
        raise InputError(f"{name} must be a{' non-empty' if nonempty else 'n'} array ({meaning}), got shape {shape}.")
    kind = dtype_of(a).kind
    if kind not in "biuf":
        what = "complex numbers" if kind == "c" else f"dtype {dtype_of(a)}"
        raise InputError(f"{name} must hold real numbers ({meaning}), got {what}.")
    check_finite(name, a)
    return shape


def is_traced(*trees: Any) -> bool:
    """True when any leaf of the pytrees is a JAX tracer (we are inside jit/vmap/grad)."""
    return any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree_util.tree_leaves(trees))


def check_save_times(ts: Any, t0: Any, t1: Any) -> None:
    """Check save times: a 1-D array of finite, non-decreasing times inside ``[t0, t1]``.

    The rank is always checked; the values only when ``ts`` is concrete (the range only when
    ``t0`` and ``t1`` are concrete too, in the precision of ``ts``).
    """
    want = "ts must be a non-decreasing 1-D array of finite save times inside [t0, t1]"
    if isinstance(ts, (str, bytes)) or ts is None:
        raise InputError(f"{want}, got {type(ts).__name__}.")
    shape = shape_of("ts", ts)
    if len(shape) != 1 or shape[0] == 0:
        raise InputError(f"{want}, got shape {shape}.")
    if dtype_of(ts).kind not in "iuf":
        raise InputError(f"{want}, got dtype {dtype_of(ts)}.")
    if not is_concrete(ts):
        return
    arr = np.asarray(ts, dtype=np.float64)
    finite = np.isfinite(arr)
    if not np.all(finite):
        raise InputError(f"{want}, got {arr.size - np.count_nonzero(finite)} NaN or infinite entries.")
    if np.any(np.diff(arr) < 0):
        raise InputError(f"{want}, got times that decrease: {arr.tolist()}.")
    if is_concrete(t0) and is_concrete(t1):
        lo, hi = float(t0), float(t1)
        # compared in the precision of ts (a float32 linspace(t0, t1) ends at float32(t1))
        kind = dtype_of(ts) if dtype_of(ts).kind == "f" else np.dtype(np.float64)
        if arr[0] < float(np.asarray(lo, kind)) or arr[-1] > float(np.asarray(hi, kind)):
            raise InputError(f"{want} = [{lo}, {hi}], got times from {arr[0]} to {arr[-1]}.")


def check_int(name: str, value: Any, minimum: int = 1, meaning: str = "a count") -> int:
    """Check that ``value`` is a whole number >= ``minimum`` (no bool, no float); return it as int."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        want = "a positive int" if minimum == 1 else f"an int >= {minimum}"
        raise InputError(f"{name} must be {want} ({meaning}), got {value!r}.")
    return int(value)


def check_real(name: str, value: Any, meaning: str, positive: bool = False) -> None:
    """Check a real scalar (a temperature, a tolerance, a time): finite, and > 0 if ``positive``.

    A traced value has only its rank checked.
    """
    want = "> 0" if positive else "a finite real number"
    if isinstance(value, (str, bytes, bool)) or value is None or shape_of(name, value) != ():
        raise InputError(f"{name} must be {want}, got {value!r} ({meaning}).")
    if not is_concrete(value):
        return
    arr = np.asarray(value)
    if arr.dtype.kind not in "iuf" or not np.isfinite(arr) or (positive and not arr > 0):
        shown = arr.item() if arr.dtype.kind in "iufc" else value
        raise InputError(f"{name} must be {want}, got {shown!r} ({meaning}).")


def check_number(name: str, value: Any, meaning: str, *, low: float | None = None, high: float | None = None,
                 closed: str = "") -> float:
    """Check a finite real number (no bool, no string) inside ``(low, high)``; return it as float.

    ``closed`` holds ``"low"`` and/or ``"high"`` for an end that is allowed (``[low, ...``, ``..., high]``);
    ``None`` leaves that side unbounded.

    Example:
        >>> from attnflow._validate import check_number
        >>> check_number("confidence", 0.95, "a probability", low=0, high=1)
        0.95
    """
    ok = not isinstance(value, (bool, np.bool_)) and isinstance(value, (int, float, np.integer, np.floating))
    ok = ok and bool(np.isfinite(value))
    if ok and low is not None:
        ok = value >= low if "low" in closed else value > low
    if ok and high is not None:
        ok = value <= high if "high" in closed else value < high
    if not ok:
        lo = "" if low is None else f"{'>=' if 'low' in closed else '>'} {low:g}"
        hi = "" if high is None else f"{'<=' if 'high' in closed else '<'} {high:g}"
        bounds = " and ".join(b for b in (lo, hi) if b)
        raise InputError(f"{name} must be a finite number{' ' + bounds if bounds else ''} ({meaning}), got {value!r}.")
    return float(value)


def check_choice(name: str, value: Any, known: tuple | list, meaning: str) -> Any:
    """Check that ``value`` is one of ``known``; return it.

    Example:
        >>> from attnflow._validate import check_choice
        >>> check_choice("dtype", "float32", ("float32", "float64"), "the dynamics' precision")
        'float32'
    """
    if isinstance(value, (list, dict)) or value not in known:
        raise InputError(f"{name} must be one of {', '.join(map(repr, known))} ({meaning}), got {value!r}.")
    return value


def check_list(name: str, values: Any, meaning: str, *, item: Any = None, distinct: bool = True,
               allow_empty: bool = False) -> list:
    """Check a list: non-empty (unless ``allow_empty``), without repeated entries (when ``distinct``), each
    entry checked by ``item(f"{name}[i]", entry)`` when given; return the checked entries.

    Example:
        >>> from attnflow._validate import check_int, check_list
        >>> check_list("d", [3, 8], "token dimensions", item=lambda n, v: check_int(n, v))
        [3, 8]
    """
    if not isinstance(values, (list, tuple)) or (not values and not allow_empty):
        want = "a list" if allow_empty else "a non-empty list"
        raise InputError(f"{name} must be {want} ({meaning}), got {values!r}.")
    if distinct:
        seen = [v for i, v in enumerate(values) if v in values[:i]]
        if seen:
            raise InputError(f"{name} must not repeat an entry ({meaning}), got {values!r} ({seen[0]!r} twice).")
    return [item(f"{name}[{i}]", v) if item else v for i, v in enumerate(values)]


def check_names(name: str, values: Any, known: tuple | list, meaning: str, *, allow_empty: bool = False) -> list:
    """Check a list of distinct names, each one of ``known`` (non-empty unless ``allow_empty``).

    Example:
        >>> from attnflow._validate import check_names
        >>> check_names("ensembles", ["ginibre"], ("ginibre", "goe"), "value ensembles")
        ['ginibre']
    """
    return check_list(name, values, f"{meaning}, among {', '.join(map(repr, known))}", allow_empty=allow_empty,
                      item=lambda n, v: check_choice(n, v, known, meaning))


def whole_layers(span: float, dt: float, what: str, *, fix: str) -> int | None:
    """The number of layers ``span / dt`` when it is a whole number >= 1 (to 1e-9 relative), else None;
    a count beyond a 32-bit counter is an :class:`InputError` naming ``what`` and ``fix``.

    Example:
        >>> from attnflow._validate import whole_layers
        >>> whole_layers(1.2, 0.1, "the number of layers", fix="use a larger dt"), whole_layers(1.0, 0.3, "n", fix="")
        (12, None)
    """
    layers = span / dt
    check_count(what, layers, fix=fix)
    count = round(layers)
    return int(count) if count >= 1 and abs(layers - count) <= 1e-9 * max(1.0, layers) else None


def check_layers(t1_name: str, t1: Any, dt_name: str, dt: Any) -> int:
    """Check a positive, finite horizon ``t1`` and step ``dt`` whose ratio is a whole number of layers that a
    32-bit counter can count (:func:`whole_layers`); return that number.

    Example:
        >>> from attnflow._validate import check_layers
        >>> check_layers("t1", 12.0, "dt", 0.1)
        120
    """
    t1 = check_number(t1_name, t1, "the horizon", low=0)
    dt = check_number(dt_name, dt, "the layer step", low=0)
    layers = whole_layers(t1, dt, f"the number of layers {t1_name} / {dt_name}",
                          fix=f"use a larger {dt_name} or a smaller {t1_name}")
    if layers is None:
        raise InputError(f"{t1_name} / {dt_name} must be a whole number of layers, got {t1_name} = {t1!r} and "
                         f"{dt_name} = {dt!r} ({t1 / dt:.6g} layers).")
    return layers


def as_float(a: Any) -> jax.Array:
    """``a`` as a JAX array of floating dtype (integers and lists become the default float)."""
    a = jnp.asarray(a)
    return a if jnp.issubdtype(a.dtype, jnp.floating) else a.astype(jnp.result_type(float))


def check_square(name: str, a: Any, meaning: str = "a square matrix (d, d)", stacked: bool = False) -> int:
    """A real, finite (when concrete) non-empty square matrix (with a leading stack axis if ``stacked``); its d."""
    shape = check_array(name, a, meaning, ranks=(3,) if stacked else (2,), nonempty=True)
    if shape[-1] != shape[-2]:
        raise InputError(f"{name} must be square ({meaning}), got shape {shape}.")
    return shape[-1]


def jit_entry(fn: Callable) -> Callable:
    """``jax.jit(fn)`` behind a host-side check that every argument is a number or an array (not a
    string or another object), so such input gets one sentence instead of a JAX type error."""
    jitted = jax.jit(fn)
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def entry(*args, **kwargs):
        for name, value in signature.bind(*args, **kwargs).arguments.items():
            optional = signature.parameters[name].default is None  # None is allowed where it is the default
            if (value is None and not optional) or (value is not None and dtype_of(value).kind not in "biufc"):
                raise InputError(f"{name} must be an array or a number, got {type(value).__name__} {value!r:.40}.")
        return jitted(*args, **kwargs)

    return entry


#: the fewest tokens a simulation or a job runs: the interaction needs a second token
MIN_TOKENS = 2


def refuse_law(name: str, value: Any) -> None:
    """Refuse a law of the number of tokens (:class:`attnflow.temperature.BetaOfN`) where n is not known."""
    if type(value).__name__ == "BetaOfN":
        raise InputError(f"{name} is a law of the number of tokens (BetaOfN): give its value for your n, "
                         f"{name}=law(n), or pass the law to simulate, which reads n from the tokens.")


def check_beta(name: str, beta: Any, meaning: str = "the inverse temperature; for beta < 0 pass -Q instead", *,
               scalar: bool = False) -> None:
    r"""The one rule for an inverse temperature :math:`\beta` (a scalar, or one per head, layer or
    system): real, finite and > 0, checked on concrete values only, so that a traced beta
    (``jax.jit``, ``jax.vmap``, ``jax.grad`` over it) passes with its dtype checked; ``scalar``: one
    number only, not one per head, layer or system.

    :math:`\beta \le 0` is refused on purpose: :math:`\beta = 0` makes P uniform whatever the
    tokens, and a negative :math:`\beta` is the model with :math:`Q \to -Q`, which is better
    written that way.

    Example:
        >>> from attnflow._validate import check_beta
        >>> check_beta("beta", 0.5)
        >>> try:
        ...     check_beta("beta", -1.0)
        ... except ValueError as err:
        ...     print(err)
        beta must be finite and > 0 (the inverse temperature; for beta < 0 pass -Q instead), got -1.0.
    """
    refuse_law(name, beta)
    if isinstance(beta, (str, bytes, bool, np.bool_)) or beta is None or dtype_of(beta).kind not in "iuf":
        raise InputError(f"{name} must be a real number > 0 ({meaning}), got {beta!r:.60}.")
    if scalar and shape_of(name, beta) != ():
        raise InputError(f"{name} must be one number > 0 ({meaning}), got shape {shape_of(name, beta)}.")
    if not is_concrete(beta):
        return
    arr = np.asarray(beta, np.float64)
    bad = ~(np.isfinite(arr) & (arr > 0))
    if np.any(bad):
        shown = arr.item() if arr.ndim == 0 else arr[bad].ravel()[0].item()
        where = "" if arr.ndim == 0 else f" (entry {tuple(int(i) for i in np.argwhere(bad)[0])} of shape {arr.shape})"
        raise InputError(f"{name} must be finite and > 0 ({meaning}), got {shown!r}{where}.")


def check_num_tokens(name: str, n: Any) -> int:
    """The one rule for the number of tokens n of a simulation or a job: an int >= 2; return it.

    With one token the attention matrix is P = [1] and the flow is the linear ODE dx/dt = V x
    (solved by :math:`x(t) = e^{tV} x_0`): there is no interaction to simulate, and every statistic of
    the clusters (pairs, inner products, counts) needs a second token.

    Example:
        >>> from attnflow._validate import check_num_tokens
        >>> check_num_tokens("n", 8)
        8
        >>> try:
        ...     check_num_tokens("x0", 1)
        ... except ValueError as err:
        ...     print(err)
        x0 must hold at least 2 tokens, got n = 1 (one token does not interact: P = [1] and x(t) = e^{tV} x0).
    """
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)):
        raise InputError(f"{name} must be an int number of tokens >= {MIN_TOKENS}, got {n!r:.60}.")
    if n < MIN_TOKENS:
        raise InputError(f"{name} must hold at least {MIN_TOKENS} tokens, got n = {int(n)} (one token does not "
                         "interact: P = [1] and x(t) = e^{tV} x0).")
    return int(n)


def check_that(ok: bool, name: str, want: str, value: Any) -> Any:
    """Refuse ``value`` of ``name`` unless ``ok``, with the sentence "``name`` must be ``want``, got ``value``."
    (for conditions the other checkers do not cover: an increasing list, a power of two); return ``value``.

    Example:
        >>> from attnflow._validate import check_that
        >>> check_that(64 & 63 == 0, "config key 'grid'", "a power of two", 64)
        64
        >>> check_that(48 & 47 == 0, "config key 'grid'", "a power of two", 48)
        Traceback (most recent call last):
        ...
        attnflow.errors.InputError: config key 'grid' must be a power of two, got 48.
    """
    if not ok:
        raise InputError(f"{name} must be {want}, got {value!r}.")
    return value
