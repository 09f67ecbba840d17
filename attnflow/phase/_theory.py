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

The integral has a closed form in the exponential integral Ei (partial fractions of
:math:`1/((1-\rho)(1+(n-1)\rho)) = \frac1n\,[1/(1-\rho) + (n-1)/(1+(n-1)\rho)]`); with
:math:`w = 1 + (n-1)\rho` and :math:`[F]` the difference of F between :math:`\theta` and :math:`\rho_0`,

.. math:: T_{\text{softmax}} = \tfrac{1}{2n}\big[-\mathrm{Ei}(\beta(1-\rho)) + e^{\beta n/(n-1)}\,
   \mathrm{Ei}(-\beta w/(n-1))\big] + \tfrac{n-1}{2n}\big[\log w - \log(1-\rho)\big],

.. math:: T_{\text{mean}} = \tfrac12\big[-e^{-\beta}\,\mathrm{Ei}(\beta(1-\rho)) + e^{\beta/(n-1)}\,
   \mathrm{Ei}(-\beta w/(n-1))\big].

Where that is not finite (beta = 0, or e^beta beyond floating point) the integral is taken by quadrature.
"""

from __future__ import annotations

import numpy as np
from scipy import special as _special


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
    value = _closed_form_time(float(rho0), float(threshold), float(beta), int(n), normalisation)
    if not np.isfinite(value):
        from scipy.integrate import quad

        value, _ = quad(lambda r: 1.0 / equiangular_rate(r, beta, n, normalisation), rho0, threshold, limit=200)
    return float(value)


def _closed_form_time(rho0: float, threshold: float, beta: float, n: int, normalisation: str) -> float:
    """:func:`equiangular_time` from the module's Ei formulas (not finite where they overflow or beta = 0)."""
    m = n - 1

    def antiderivative(rho: float) -> float:
        w = 1.0 + m * rho
        with np.errstate(all="ignore"):
            if normalisation == "softmax":
                return float((-_special.expi(beta * (1.0 - rho)) + np.exp(beta * n / m) * _special.expi(-beta * w / m))
                             / (2 * n) + m / (2 * n) * (np.log(w) - np.log1p(-rho)))
            return float(0.5 * (-np.exp(-beta) * _special.expi(beta * (1.0 - rho))
                                + np.exp(beta / m) * _special.expi(-beta * w / m)))

    return antiderivative(threshold) - antiderivative(rho0)
