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

The integral has a closed form in the exponential integrals Ei and :math:`E_1` (partial fractions of
:math:`1/((1-\rho)(1+(n-1)\rho)) = \frac1n\,[1/(1-\rho) + (n-1)/(1+(n-1)\rho)]`). It is evaluated with the
*scaled* functions :math:`g(x) = e^{-x}\mathrm{Ei}(x)` and :math:`h(y) = e^{y}E_1(y)`, which are of order
:math:`1/x` and :math:`1/y` for large arguments and never overflow or underflow. With :math:`m = n - 1`,
:math:`w = 1 + m\rho`, :math:`G(\rho) = g(\beta(1-\rho)) + h(\beta w/m)`, :math:`L(\rho) = \log w - \log(1-\rho)`
and :math:`[F]` the difference of F between :math:`\theta` and :math:`\rho_0`,

.. math:: T_{\text{softmax}} = -\tfrac{1}{2n}\big[e^{\beta(1-\rho)}\,G(\rho)\big] + \tfrac{m}{2n}\big[L\big],
   \qquad T_{\text{mean}} = -\tfrac12\big[e^{-\beta\rho}\,G(\rho)\big],

and :math:`\beta = 0` gives :math:`T = \tfrac12[L]` for both. The largest exponential,
:math:`e^{\beta(1-\rho_0)}` (softmax) or :math:`e^{-\beta\rho_0}` (mean), is factored out and applied last,
in log space: a time beyond the floating-point range (softmax, n = 2, beta = 800: about :math:`10^{344}`)
is ``inf``, every smaller one keeps its digits: relative error at most :math:`2\cdot10^{-13}` against
60-digit mpmath on 800 random cases with beta from 1e-3 to 1000 and n from 2 to 200
(tests/test_phase_numerics_edges.py). Where the interval is so short that the difference of G would lose
more than 4 digits, the scaled integrand is integrated by quadrature instead.
"""

from __future__ import annotations

import math

import numpy as np

from .. import _validate as v

#: argument above which the scaled exponential integrals are summed from their asymptotic series (below it
#: scipy's Ei and E_1 times the exponential lose nothing: Ei(700) ~ 1e301, E_1(600) ~ 1e-264, both normal)
_ASYMPTOTIC_EI, _ASYMPTOTIC_E1 = 700.0, 600.0
#: the closed form's difference keeps at least 12 of its 16 digits when it exceeds this fraction of its terms;
#: below, the time is integrated by quadrature
_CANCELLATION = 1e-4


def equiangular_rate(rho: float, beta: float, n: int, normalisation: str = "softmax") -> float:
    r""":math:`\dot\rho` of the equiangular model (see the module).

    Example:
        >>> from attnflow.phase import equiangular_rate
        >>> round(equiangular_rate(0.0, 1.0, 2), 6)    # b = 1 / (e + 1), (1 - 0)(1 + 0)
        0.537883
    """
    with np.errstate(over="ignore"):  # beyond the floating-point range: b = 0 (softmax) or inf (mean)
        if normalisation == "softmax":
            b = 1.0 / (np.exp(beta * (1.0 - rho)) + (n - 1))  # e^{beta rho} / (e^beta + (n-1) e^{beta rho})
        else:
            b = np.exp(beta * rho) / n
    return float(2.0 * b * (1.0 - rho) * (1.0 + (n - 1) * rho))


def equiangular_time(rho0: float, threshold: float, beta: float, n: int, normalisation: str = "softmax") -> float:
    r"""Time for the equiangular model to go from :math:`\rho_0` to ``threshold`` (0 if already there;
    NaN when :math:`\rho_0` is not finite or :math:`\rho_0 \le -1/(n-1)`, which no equiangular cloud has;
    ``inf`` when the time exceeds the floating-point range).

    Example:
        >>> import numpy as np
        >>> from attnflow.phase import equiangular_rate, equiangular_time
        >>> T = equiangular_time(0.0, 0.5, 2.0, 8)
        >>> from scipy.integrate import solve_ivp
        >>> sol = solve_ivp(lambda t, r: [equiangular_rate(r[0], 2.0, 8)], (0, T), [0.0], rtol=1e-10, atol=1e-12)
        >>> round(float(sol.y[0, -1]), 6)
        0.5
        >>> equiangular_time(0.0, 0.999, 800.0, 2)     # about 1.7e344
        inf
    """
    n = v.check_int("n", n, 2, "tokens in the equiangular cloud")
    beta = v.check_number("beta", beta, "the inverse temperature", low=0, closed="low")
    threshold = v.check_number("threshold", threshold, "the inner product to reach", low=-1, high=1)
    v.check_choice("normalisation", normalisation, ("softmax", "mean"), "the attention's normalisation")
    if not np.isfinite(rho0) or rho0 <= -1.0 / (n - 1):
        return float("nan")
    if rho0 >= threshold:
        return 0.0
    return _closed_form_time(float(rho0), threshold, beta, n, normalisation)


def _scaled_ei(x: float) -> float:
    r""":math:`g(x) = e^{-x}\mathrm{Ei}(x)` for x > 0 (asymptotic :math:`\sum_k k!/x^{k+1}` beyond
    :data:`_ASYMPTOTIC_EI`, whose terms fall below :math:`10^{-17}` of the sum long before they grow)."""
    if x <= _ASYMPTOTIC_EI:
        from scipy.special import expi  # imported where used: scipy.special takes 0.2 s to import

        return float(math.exp(-x) * expi(x))
    term = total = 1.0 / x
    k = 0
    while term > 1e-18 * total:
        k += 1
        term *= k / x
        total += term
    return total


def _scaled_e1(y: float) -> float:
    r""":math:`h(y) = e^{y}E_1(y)` for y > 0 (asymptotic :math:`\sum_k (-1)^k k!/y^{k+1}` beyond
    :data:`_ASYMPTOTIC_E1`)."""
    if y <= _ASYMPTOTIC_E1:
        from scipy.special import exp1

        return float(math.exp(y) * exp1(y))
    term = total = 1.0 / y
    k = 0
    while abs(term) > 1e-18 * total:
        k += 1
        term *= -k / y
        total += term
    return total


def _closed_form_time(rho0: float, threshold: float, beta: float, n: int, normalisation: str) -> float:
    """:func:`equiangular_time` for -1/(n-1) < rho0 < threshold < 1 and beta >= 0, from the module's formulas."""
    m = n - 1

    def L(rho: float) -> float:
        return math.log1p(m * rho) - math.log1p(-rho)

    if beta == 0.0:  # b = 1/n for both normalisations
        return 0.5 * (L(threshold) - L(rho0))

    def G(rho: float) -> float:
        return _scaled_ei(beta * (1.0 - rho)) + _scaled_e1(beta * (1.0 + m * rho) / m)

    # T = e^E S, E the largest exponent (the start's), S of order one times the interval
    if normalisation == "softmax":
        E = beta * (1.0 - rho0)
        big = (G(rho0), math.exp(-beta * (threshold - rho0)) * G(threshold))
        S = (big[0] - big[1]) / (2 * n) + math.exp(-E) * m / (2 * n) * (L(threshold) - L(rho0))
        scale = (abs(big[0]) + abs(big[1])) / (2 * n)
    else:
        E = -beta * rho0
        big = (G(rho0), math.exp(-beta * (threshold - rho0)) * G(threshold))
        S = 0.5 * (big[0] - big[1])
        scale = 0.5 * (abs(big[0]) + abs(big[1]))
    if not S > _CANCELLATION * scale:  # a short interval: the difference of G lost digits; quadrature instead
        S = _scaled_quadrature(rho0, threshold, beta, n, normalisation)
    with np.errstate(over="ignore", under="ignore"):  # beyond the floating-point range: inf (or 0)
        return float(np.exp(E + math.log(S)))


def _scaled_quadrature(rho0: float, threshold: float, beta: float, n: int, normalisation: str) -> float:
    r""":math:`e^{-E}\int_{\rho_0}^{\theta} d\rho/\dot\rho` (E as in :func:`_closed_form_time`), adaptive
    quadrature of the scaled integrand, which is bounded by its value at :math:`\rho_0` times :math:`1/(1-\theta)`."""
    from scipy.integrate import quad

    m = n - 1
    if normalisation == "softmax":
        tail = math.exp(-beta * (1.0 - rho0))

        def f(rho):
            return (math.exp(-beta * (rho - rho0)) + m * tail) / (2.0 * (1.0 - rho) * (1.0 + m * rho))
    else:
        def f(rho):
            return n * math.exp(-beta * (rho - rho0)) / (2.0 * (1.0 - rho) * (1.0 + m * rho))
    value, _ = quad(f, rho0, threshold, epsabs=0.0, epsrel=2e-14, limit=200)
    return value
