r"""Theory lines for a phase diagram: the equiangular model on the sphere.

For Q = K = V = I and tokens whose pairwise inner products all equal :math:`\rho`, the sphere flow
:math:`\dot x_i = \mathrm{Proj}_{x_i^\perp}\sum_j P_{ij} x_j` keeps them equal, with

.. math:: \dot\rho = 2\,b(\rho)\,(1-\rho)\,(1 + (n-1)\rho),

where :math:`b(\rho)` is the attention weight of another token: :math:`e^{\beta\rho}/(e^\beta + (n-1)e^{\beta\rho})`
(softmax) or :math:`e^{\beta\rho}/n` (1/n normalisation). (From :math:`\sum_j P_{ij}x_j = a x_i + b\sum_{j\ne i}x_j`:
:math:`\langle \dot x_i, x_k\rangle = b(1 + (n-2)\rho) - b(n-1)\rho^2`.) :func:`equiangular_time` is the time
this scalar ODE needs from :math:`\rho_0` to the threshold :math:`\theta`,
:math:`T = \int_{\rho_0}^{\theta} d\rho / \dot\rho`: the phase diagram's line where a cloud with the initial
mean inner product :math:`\rho_0` would count as clustered.
"""

from __future__ import annotations

import numpy as np
from scipy.integrate import quad


def equiangular_rate(rho: float, beta: float, n: int, normalisation: str = "softmax") -> float:
    r""":math:`\dot\rho` of the equiangular model (see the module).

    Example:
        >>> from attnflow.phase import equiangular_rate
        >>> round(equiangular_rate(0.0, 1.0, 2), 6)    # b = 1 / (e + 1), (1 - 0)(1 + 0)
        0.537883
    """
    if normalisation == "softmax":
        b = 1.0 / (np.exp(beta * (1.0 - rho)) + (n - 1))  # e^{beta rho} / (e^beta + (n-1) e^{beta rho})
    else:
        b = np.exp(beta * rho) / n
    return float(2.0 * b * (1.0 - rho) * (1.0 + (n - 1) * rho))


def equiangular_time(rho0: float, threshold: float, beta: float, n: int, normalisation: str = "softmax") -> float:
    r"""Time for the equiangular model to go from :math:`\rho_0` to ``threshold`` (0 if already there;
    NaN when :math:`\rho_0 \le -1/(n-1)`, which no equiangular cloud has).

    Example:
        >>> import numpy as np
        >>> from attnflow.phase import equiangular_rate, equiangular_time
        >>> T = equiangular_time(0.0, 0.5, 2.0, 8)
        >>> from scipy.integrate import solve_ivp
        >>> sol = solve_ivp(lambda t, r: [equiangular_rate(r[0], 2.0, 8)], (0, T), [0.0], rtol=1e-10, atol=1e-12)
        >>> round(float(sol.y[0, -1]), 6)
        0.5
    """
    if rho0 >= threshold:
        return 0.0
    if not np.isfinite(rho0) or rho0 <= -1.0 / (n - 1):
        return float("nan")
    value, _ = quad(lambda r: 1.0 / equiangular_rate(r, beta, n, normalisation), rho0, threshold, limit=200)
    return float(value)
