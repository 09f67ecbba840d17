r"""Equiangular reductions: a cloud whose directions all meet at one inner product stays so, and each
normalisation scheme moves that inner product by a law of its own.

Take Q = K = V = I, softmax attention at inverse temperature :math:`\beta`, and n tokens :math:`x_i = r\theta_i`
with one norm r and :math:`\langle\theta_i, \theta_j\rangle = \rho` for :math:`i \ne j` (a simplex, e.g.
:func:`attnflow.temperature.simplex_tokens`). Every token's attention row gives its own key
:math:`a = e^\beta/Z` and every other key :math:`b = e^{\beta\rho}/Z`, :math:`Z = e^\beta + (n-1)e^{\beta\rho}`, so
:math:`A_i = a\theta_i + b\sum_{j\ne i}\theta_j` and

.. math::
    m = \langle A_i, \theta_i\rangle = a + (n-1)b\rho, \qquad
    \|A_i\|^2 = a^2 + 2(n-1)ab\rho + (n-1)b^2(1 + (n-2)\rho),

and the tangent part of :math:`A_i` meets every other direction at

.. math:: \langle A_i - m\theta_i, \theta_j\rangle = b(1-\rho)(1 + (n-1)\rho) =: q .

By symmetry the cloud stays equiangular, and with :math:`\dot\theta_i = s\,(A_i - m\theta_i)` (the scheme's
speed s, :mod:`attnflow.dynamics._ln_schemes`)

.. math:: \dot\rho = 2 s q, \qquad
    s = \begin{cases} 1 & \text{post-LN} \\ 1/r & \text{pre-LN},\ \dot r = m \\
    1/(r\|A\|) & \text{Peri-LN},\ \dot r = m/\|A\| \\ \alpha/\|A\| & \text{nGPT} \end{cases}

and Mix-LN is post-LN up to its switch time, pre-LN after it (r = 1 at the switch). Near collapse
(:math:`\rho \to 1`: :math:`b \to 1/n`, :math:`q \to (1-\rho)`, :math:`\|A\|, m \to 1`) this gives
:math:`1 - \rho \propto e^{-2t}` for post-LN, :math:`e^{-2\alpha t}` for nGPT and, since then :math:`r \sim t`,
:math:`1 - \rho \propto t^{-2}` for pre-LN and Peri-LN: the residual stream's growth turns an exponential
collapse into a polynomial one. Far from it (:math:`\rho` small, n large) :math:`\|A\| \approx \sqrt{1/n + \rho}`
is small, and Peri-LN and nGPT move the directions :math:`1/\|A\|` times faster than pre-LN and post-LN.
"""

from __future__ import annotations

import math

import numpy as np

from . import _validate as v
from .errors import InputError

__all__ = ["SCHEMES", "simplex_weights", "equiangular_velocity", "equiangular_path"]

#: the normalisation schemes of :func:`equiangular_velocity`
SCHEMES = ("post", "pre", "peri", "mix", "ngpt")


def simplex_weights(beta, n, rho):
    r"""The softmax row of a simplex (n unit directions at inner product :math:`
ho`, scores
    :math:`eta\langle	heta_i, 	heta_j
angle`): the weight :math:`a = 1/(1 + (n-1)e^{-eta(1-
ho)})` of a token's
    own key and :math:`b = (1 - a)/(n - 1)` of each other key, without overflow at any beta. NumPy, broadcasting.

    Example:
        >>> from attnflow.equiangular import simplex_weights
        >>> a, b = simplex_weights(2.0, 5, 0.5)
        >>> round(float(a + 4 * b), 12), round(float(a / b), 6)   # a row sums to 1; a / b = e^{beta (1 - rho)}
        (1.0, 2.718282)
    """
    f = np.exp(np.multiply(beta, np.subtract(rho, 1.0)))  # e^{beta rho} / e^beta
    z = 1.0 + np.subtract(n, 1) * f
    return 1.0 / z, f / z


def _row(rho: float, beta: float, n: int) -> tuple[float, float, float]:
    """(m, |A|, q) of the module docstring (Python floats)."""
    a, b = (float(w) for w in simplex_weights(beta, n, rho))
    m = a + (n - 1) * b * rho
    norm2 = a * a + 2 * (n - 1) * a * b * rho + (n - 1) * b * b * (1 + (n - 2) * rho)
    q = b * (1.0 - rho) * (1.0 + (n - 1) * rho)
    return m, math.sqrt(max(norm2, 0.0)), q


def equiangular_velocity(scheme: str, rho: float, radius: float, beta: float, n: int, *, t: float = 0.0,
                         alpha: float = 1.0, switch: float = 0.0) -> tuple[float, float]:
    r""":math:`(\dot\rho, \dot r)` of an equiangular cloud under ``scheme`` (:data:`SCHEMES`; the laws in the
    module docstring). ``t`` and ``switch`` place Mix-LN before or after its switch; ``alpha`` is nGPT's.

    Example:
        >>> from attnflow.equiangular import equiangular_velocity
        >>> post = equiangular_velocity("post", 0.999, 1.0, 1.0, 100)[0]
        >>> pre = equiangular_velocity("pre", 0.999, 10.0, 1.0, 100)[0]
        >>> round(post / 0.001, 3), round(pre / post, 3)     # 2 (1 - rho) near collapse; pre-LN 1/r of it
        (1.998, 0.1)
    """
    if scheme not in SCHEMES:
        raise InputError(f"scheme must be one of {SCHEMES}, got {scheme!r}.")
    m, norm, q = _row(rho, beta, n)
    if scheme == "mix":
        scheme = "post" if t < switch else "pre"
    if scheme == "post":
        return 2.0 * q, 0.0
    if scheme == "pre":
        return 2.0 * q / radius, m
    if scheme == "peri":
        return 2.0 * q / (radius * norm), m / norm
    return 2.0 * alpha * q / norm, 0.0


def equiangular_path(scheme: str, rho0: float, beta: float, n: int, times, *, radius0: float = 1.0,
                     alpha: float = 1.0, switch: float = 0.0, step: float = 1e-3) -> dict[str, np.ndarray]:
    r"""The inner product :math:`\rho(t)` and norm :math:`r(t)` of an equiangular cloud under ``scheme``, at the
    sorted ``times`` (from t = 0), by classical RK4 of step at most ``step`` on :func:`equiangular_velocity`
    (float64; the error is :math:`O(\text{step}^4)`, Mix-LN's switch is a step boundary).

    Example:
        >>> import math
        >>> from attnflow.equiangular import equiangular_path
        >>> late = equiangular_path("post", 0.9, 1.0, 50, [5.0, 6.0])
        >>> round(math.log((1 - late["rho"][0]) / (1 - late["rho"][1])), 2)   # 1 - rho ~ e^{-2t}
        2.0
    """
    if scheme not in SCHEMES:
        raise InputError(f"scheme must be one of {SCHEMES}, got {scheme!r}.")
    v.check_beta("beta", beta, scalar=True)
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)) or n < 2:
        raise InputError(f"n must be an int >= 2 (the number of tokens), got {n!r}.")
    if not (isinstance(rho0, (int, float, np.integer, np.floating)) and -1.0 / (n - 1) <= rho0 < 1.0):
        raise InputError(f"rho0 must satisfy -1/(n-1) <= rho0 < 1 (a simplex's inner product), got {rho0!r}.")
    times = np.asarray(times, np.float64)
    if times.ndim != 1 or not np.all(np.isfinite(times)) or np.any(times < 0) or np.any(np.diff(times) < 0):
        raise InputError("times must be a sorted 1-D array of finite times >= 0.")
    for name, x in (("radius0", radius0), ("alpha", alpha), ("step", step)):
        if not (isinstance(x, (int, float, np.integer, np.floating)) and math.isfinite(x) and x > 0):
            raise InputError(f"{name} must be a finite number > 0, got {x!r}.")
    beta, n = float(beta), int(n)
    y = np.array([float(rho0), float(radius0)])

    def rate(phase_time, y):  # every stage of an interval in its phase (no interval straddles the switch)
        return np.array(equiangular_velocity(scheme, min(y[0], 1.0), y[1], beta, n, t=phase_time, alpha=alpha,
                                             switch=switch))

    marks = sorted({0.0, *times.tolist(), *([float(switch)] if scheme == "mix" and switch > 0 else [])})
    out, t = {}, 0.0
    for mark in marks:
        span = mark - t
        steps = max(1, math.ceil(span / step)) if span > 0 else 0
        h = span / steps if steps else 0.0
        phase = t + span / 2
        for _ in range(steps):
            k1 = rate(phase, y)
            k2 = rate(phase, y + h / 2 * k1)
            k3 = rate(phase, y + h / 2 * k2)
            k4 = rate(phase, y + h * k3)
            y = y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        t = mark
        out[mark] = y.copy()
    rho = np.array([out[float(s)][0] for s in times])
    radius = np.array([out[float(s)][1] for s in times])
    return {"t": times, "rho": rho, "radius": radius}
