"""Size checks before work starts: refuse what cannot fit or finish, with the size that would.

Every entry that allocates from user-given sizes (``simulate``, ``EulerStepper``, the sweeps,
the probe, the phase and report jobs) estimates the bytes it will hold at once and calls
:func:`check_memory` (and :func:`check_count` for counters that must fit a 32-bit integer)
before anything is compiled, so that a run that cannot fit fails in one sentence instead of
after minutes with ``RESOURCE_EXHAUSTED`` or ``MemoryError``.

Every job also counts its work before it starts (:func:`attention_flops` per evaluation of the field,
times layers, clouds and systems) and calls :func:`check_work`: a run that even at the machine's peak
rate would take longer than :func:`work_limit` (one hour; ``ATTNFLOW_WORK_LIMIT`` seconds overrides it)
is refused with the size that would finish, and :func:`describe_work` gives the one-line estimate a job
prints before it starts.

The memory available is the device's (``memory_stats()["bytes_limit"]`` on an accelerator) or,
on CPU, the host's available memory (``MemAvailable`` of ``/proc/meminfo``, else physical pages).
``ATTNFLOW_MEMORY_LIMIT`` (bytes, e.g. ``8e9``) overrides it, for a shared machine or a test.
"""

from __future__ import annotations

import math
import os

from .errors import InputError

__all__ = ["available_memory", "usable_memory", "check_memory", "check_fits", "check_count", "format_bytes",
           "INT32_MAX", "attention_flops", "peak_rate", "work_limit", "work_seconds", "check_work", "describe_work",
           "format_seconds", "announce_work"]

#: largest value of a 32-bit signed counter (step and layer counters, array sizes inside jit)
INT32_MAX = 2**31 - 1
#: fraction of the available memory one run may plan to hold (room for XLA's temporaries)
USABLE_FRACTION = 0.8
#: the longest run a job starts, in seconds of its lower-bound estimate (:func:`work_seconds`): an hour at the
#: peak rate is many hours at the rates the attention flow reaches (4-90% of a matmul's, benchmarks/RESULTS.md)
WORK_LIMIT_S = 3600.0
#: flop/s one CPU core cannot exceed (float32 FMA on 512-bit vectors at 4 GHz is 2.6e11; the 2-core Intel
#: Xeon of benchmarks/NOTES.md reaches 1.0e11 a core on a large matmul): a rate above every core's
CORE_FLOPS = 3e11
#: flop/s one accelerator cannot exceed (dense 16-bit tensor cores of the largest current chips are ~1e15)
ACCELERATOR_FLOPS = 2e15
#: seconds one sequential step of a compiled loop (a layer, a solver step) takes at the least
STEP_SECONDS = 1e-6
#: a job whose work takes at least this many seconds says so before it starts (:func:`announce_work`)
ANNOUNCE_S = 60.0


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
    override = _env_positive("ATTNFLOW_MEMORY_LIMIT", "a positive number of bytes (e.g. 8e9)")
    if override is not None:
        return int(override)
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


def attention_flops(n: float, d: float, m: float | None = None) -> float:
    r"""Flops of one evaluation of the attention field for one cloud of ``n`` tokens in dimension ``d``
    (``m`` rows of Q and K, default d): :math:`2n^2(m + d) + 2nd(2m + d)` (scores, P times the values, the
    three projections; exponentials not counted), the count of ``benchmarks/NOTES.md``.

    Example:
        >>> from attnflow._resources import attention_flops
        >>> attention_flops(32, 3)
        14016.0
    """
    m = d if m is None else m
    return 2.0 * n * n * (m + d) + 2.0 * n * d * (2.0 * m + d)


def peak_rate() -> float:
    """The flop/s this process cannot exceed: :data:`ACCELERATOR_FLOPS` per accelerator when JAX's default
    backend is one, else :data:`CORE_FLOPS` per available CPU core."""
    import jax

    if jax.default_backend() != "cpu":
        return ACCELERATOR_FLOPS * max(1, jax.local_device_count())
    return CORE_FLOPS * available_cores()


def work_limit() -> float:
    """Seconds a job may be estimated to take at least: :data:`WORK_LIMIT_S`, or ``ATTNFLOW_WORK_LIMIT``.

    Example:
        >>> from attnflow._resources import work_limit
        >>> work_limit() > 0
        True
    """
    override = _env_positive("ATTNFLOW_WORK_LIMIT", "a positive number of seconds (e.g. 86400)")
    return WORK_LIMIT_S if override is None else override


def _env_positive(name: str, meaning: str) -> float | None:
    """The environment variable ``name`` as a finite number > 0, None when unset or empty; otherwise
    :class:`~attnflow.errors.InputError` saying it must be ``meaning``."""
    given = os.environ.get(name)
    if not given:
        return None
    try:
        value = float(given)
    except ValueError:
        value = math.nan
    if not (value > 0 and math.isfinite(value)):
        raise InputError(f"{name} must be {meaning}, got {given!r}.")
    return value


def work_seconds(flops: float, steps: float = 0.0, rate: float | None = None) -> float:
    """A lower bound on the seconds ``flops`` of work in ``steps`` sequential steps take: the larger of
    ``flops / rate`` (the :func:`peak_rate` by default) and ``steps`` x :data:`STEP_SECONDS`.

    Example:
        >>> from attnflow._resources import work_seconds
        >>> work_seconds(1e12, 10, rate=1e11), work_seconds(0.0, 1e9, rate=1e11)
        (10.0, 1000.0)
    """
    rate = peak_rate() if rate is None else rate
    return max(float(flops) / rate, float(steps) * STEP_SECONDS)


def format_seconds(seconds: float) -> str:
    """``90`` -> ``'1.5 min'``; seconds, minutes, hours, days or years.

    Example:
        >>> from attnflow._resources import format_seconds
        >>> format_seconds(0.25), format_seconds(5400), format_seconds(86400), format_seconds(3e9)
        ('0.25 s', '1.5 h', '1 day', '95.1 years')
    """
    s = float(seconds)
    for unit, size in (("years", 365.25 * 86400), ("days", 86400), ("h", 3600), ("min", 60)):
        if s >= size:
            value = f"{s / size:.3g}"
            return f"{value} {unit[:-1] if value == '1' and unit.endswith('s') else unit}"
    return f"{s:.2g} s"


def describe_work(flops: float, steps: float = 0.0) -> str:
    """The estimate a job prints before it starts: its flops and the least time they take here.

    Example:
        >>> from attnflow._resources import describe_work
        >>> describe_work(2e9).startswith("2e+09 flops (at least ")
        True
    """
    return f"{float(flops):.3g} flops (at least {format_seconds(work_seconds(flops, steps))} at this machine's peak rate)"


def check_work(what: str, flops: float, keys: list[tuple[str, float, float, float]], *, steps: float = 0.0) -> float:
    """Refuse ``what`` when even at this machine's peak rate it would take longer than :func:`work_limit`
    (:func:`work_seconds` of its ``flops`` in ``steps`` sequential steps); returns that lower bound.

    ``keys`` are the sizes the work grows with, ``(key, value, default, power)`` as in :func:`check_fits`:
    the sentence names the key that grew most from its default and about how large it may be for the run
    to finish within the limit.

    Example:
        >>> from attnflow._resources import check_work
        >>> check_work("a small run", 1e6, [("layers", 10, 10, 1)]) < 1
        True
        >>> try:
        ...     check_work("a run of 1e9 layers", 1e30, [("layers", 1e9, 120, 1)])
        ... except Exception as err:
        ...     print(type(err).__name__)
        InputError
    """
    limit = work_limit()
    seconds = work_seconds(flops, steps)
    if seconds <= limit:
        return seconds
    key, value, _, power = max(keys, key=lambda k: (k[1] / k[2]) ** k[3])
    fit = value * (limit / seconds) ** (1.0 / power) if math.isfinite(seconds) else 0.0
    fix = f"lower {key} to at most about {fit:.3g}" if fit >= 1 else f"lower {key}"
    raise InputError(
        f"{what} needs at least {format_seconds(seconds)} of computing ({float(flops):.3g} flops in "
        f"{float(steps):.3g} sequential steps, at this machine's peak rate), more than the "
        f"{format_seconds(limit)} a run may take; {fix} (ATTNFLOW_WORK_LIMIT, in seconds, sets the limit)."
    )


def announce_work(what: str, flops: float, steps: float = 0.0) -> None:
    """Say on stderr, before a long job starts, what it will compute (:func:`describe_work`), when even at the
    peak rate that takes at least :data:`ANNOUNCE_S` seconds (a shorter job starts without a word).

    Example:
        >>> from attnflow._resources import announce_work
        >>> announce_work("a small run", 1e6)
    """
    if work_seconds(flops, steps) >= ANNOUNCE_S:
        import sys

        print(f"{what}: {describe_work(flops, steps)}", file=sys.stderr, flush=True)
