"""Size checks before work starts: refuse what cannot fit, with the size that would.

Every entry that allocates from user-given sizes (``simulate``, ``EulerStepper``, the sweeps,
the probe, the phase and report jobs) estimates the bytes it will hold at once and calls
:func:`check_memory` (and :func:`check_count` for counters that must fit a 32-bit integer)
before anything is compiled, so that a run that cannot fit fails in one sentence instead of
after minutes with ``RESOURCE_EXHAUSTED`` or ``MemoryError``.

The memory available is the device's (``memory_stats()["bytes_limit"]`` on an accelerator) or,
on CPU, the host's available memory (``MemAvailable`` of ``/proc/meminfo``, else physical pages).
``ATTNFLOW_MEMORY_LIMIT`` (bytes, e.g. ``8e9``) overrides it, for a shared machine or a test.
"""

from __future__ import annotations

import math
import os

from .errors import InputError

__all__ = ["available_memory", "usable_memory", "check_memory", "check_fits", "check_count", "format_bytes",
           "INT32_MAX"]

#: largest value of a 32-bit signed counter (step and layer counters, array sizes inside jit)
INT32_MAX = 2**31 - 1
#: fraction of the available memory one run may plan to hold (room for XLA's temporaries)
USABLE_FRACTION = 0.8


def available_cores() -> int:
    """The CPU cores this process may run on (its affinity mask where the platform has one).

    Example:
        >>> from attnflow._resources import available_cores
        >>> available_cores() >= 1
        True
    """
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def format_bytes(nbytes: float) -> str:
    """``1.5e9`` -> ``'1.4 GiB'``.

    Example:
        >>> from attnflow._resources import format_bytes
        >>> format_bytes(3 * 2**30)
        '3.0 GiB'
    """
    value = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(value) < 1024 or unit == "PiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} PiB"  # pragma: no cover


def _host_available() -> int:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - exotic platforms
        return 8 * 2**30


def available_memory() -> int:
    """Bytes one run may use on the default device (see the module docstring).

    Example:
        >>> from attnflow._resources import available_memory
        >>> available_memory() > 0
        True
    """
    override = os.environ.get("ATTNFLOW_MEMORY_LIMIT")
    if override:
        try:
            return int(float(override))
        except ValueError:
            raise InputError(
                f"ATTNFLOW_MEMORY_LIMIT must be a number of bytes (e.g. 8e9), got {override!r}."
            ) from None
    import jax

    device = jax.devices()[0]
    if device.platform != "cpu":
        try:
            stats = device.memory_stats() or {}
            if stats.get("bytes_limit"):
                return int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0))
        except Exception:  # pragma: no cover - backends without memory_stats
            pass
    return _host_available()


def usable_memory() -> float:
    """Bytes one run may plan to hold: :data:`USABLE_FRACTION` of :func:`available_memory`."""
    return USABLE_FRACTION * available_memory()


def check_memory(what: str, nbytes: float, *, fix: str, scale: float | None = None) -> None:
    """Raise :class:`InputError` when ``what`` needs more than the usable memory.

    Args:
        what: the work, e.g. ``"simulate with 1000000000 saved states of (512, 64)"``.
        nbytes: its estimated peak bytes.
        fix: what to change, e.g. ``"lower num_saves"``; when ``scale`` is given, the sentence
            adds the factor by which the size must shrink.
        scale: how the estimate scales with the size named in ``fix`` (1 for linear, 2 for
            quadratic); gives the "at most about ..." figure.

    Example:
        >>> from attnflow._resources import check_memory
        >>> check_memory("a small run", 1e3, fix="lower n")
        >>> try:
        ...     check_memory("a huge run", 1e30, fix="lower n")
        ... except Exception as err:
        ...     print(type(err).__name__)
        InputError
    """
    if not math.isfinite(nbytes):
        raise InputError(f"{what} has a size that is not a finite number; {fix}.")
    usable = usable_memory()
    if nbytes <= usable:
        return
    shrink = ""
    if scale:
        factor = (nbytes / usable) ** (1.0 / scale)
        shrink = f" (by a factor of at least {factor:.3g})"
    raise InputError(
        f"{what} needs about {format_bytes(nbytes)} of memory, more than the {format_bytes(usable)} "
        f"this machine can give it; {fix}{shrink}."
    )


def check_fits(what: str, nbytes: float, keys: list[tuple[str, float, float, float]]) -> None:
    """Refuse ``what`` when its ``nbytes`` cannot fit in memory (:func:`check_memory`).

    ``keys`` are the sizes it grows with, ``(key, value, default, power)``: ``nbytes`` grows like
    ``value ** power``. The message names the key that grew most from its default, ``(value / default) ** power``,
    and about how large it may be for the whole to fit.

    Example:
        >>> from attnflow._resources import check_fits
        >>> check_fits("a small run", 1e4, [("n", 32, 32, 2)])
    """
    usable = usable_memory()
    if nbytes <= usable:
        return
    key, value, _, power = max(keys, key=lambda k: (k[1] / k[2]) ** k[3])
    fit = int(value * (usable / nbytes) ** (1.0 / power)) if math.isfinite(nbytes) else 0
    check_memory(what, nbytes, fix=f"lower {key} to at most about {fit}" if fit >= 1 else f"lower {key}")


def check_count(name: str, value: float, *, limit: int = INT32_MAX, fix: str) -> None:
    """Raise :class:`InputError` when a count exceeds ``limit`` (a 32-bit counter by default).

    Example:
        >>> from attnflow._resources import check_count
        >>> check_count("num_layers", 10, fix="use a larger dt")
        >>> try:
        ...     check_count("num_layers", 10**10, fix="use a larger dt")
        ... except Exception as err:
        ...     print(type(err).__name__)
        InputError
    """
    if not (value <= limit):  # also refuses NaN
        raise InputError(f"{name} = {value:.4g} exceeds {limit} (the most this run can count); {fix}.")
