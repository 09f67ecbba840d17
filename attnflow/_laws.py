r"""The laws :math:`\beta_n = \gamma\,g(n)` of the inverse temperature in the number of tokens, in pure Python: a
job's config check reads them without importing JAX's modelling stack (:mod:`attnflow.temperature` re-exports them
beside :class:`~attnflow.temperature.BetaOfN`)."""

from __future__ import annotations

import math

import numpy as np

from .errors import InputError

__all__ = ["LAWS", "check_law", "law_factor"]

#: the laws :math:`g(n)` of :class:`BetaOfN`
LAWS = ("log", "power", "log_power", "constant")


def check_law(law: str, power: float = 1.0) -> None:
    """Refuse, in one sentence, a law that is not one of :data:`LAWS` or an exponent it cannot take (pure
    Python: no JAX array is made, so a job can check its config before JAX starts).

    Example:
        >>> from attnflow.temperature import check_law
        >>> check_law("log_power", 2.0)
    """
    if law not in LAWS:
        raise InputError(f"law must be one of {LAWS}, got {law!r}.")
    if isinstance(power, (bool, np.bool_)) or not isinstance(power, (int, float, np.integer, np.floating)) \
            or not math.isfinite(power):
        raise InputError(f"power must be a finite number (the exponent p of the law), got {power!r}.")
    if law == "log_power" and power <= 0:
        raise InputError(f"power must be > 0 for the law 'log_power' ((log n)^p grows with n), got {power!r}.")


def law_factor(n: int, law: str = "log", power: float = 1.0) -> float:
    """The factor :math:`g(n)` of a law (a Python float): :math:`\\log n`, :math:`n^p`, :math:`(\\log n)^p` or 1.

    Example:
        >>> from attnflow.temperature import law_factor
        >>> law_factor(100, "power", 0.5), round(law_factor(100, "log_power", 2.0), 4)
        (10.0, 21.2076)
    """
    check_law(law, power)
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)):
        raise InputError(f"the number of tokens n must be an int, got {n!r}.")
    least = 2 if law in ("log", "log_power") else 1
    if n < least:
        raise InputError(f"beta_n = gamma g(n) with the law {law!r} needs n >= {least} tokens "
                         f"(g({n}) = 0 would make beta 0), got n = {n}.")
    if law == "log":
        return math.log(n)
    if law == "log_power":
        return math.log(n) ** power
    if law == "power":
        return float(n) ** power
    return 1.0
