r"""The inverse temperature as a function of the context length: :math:`\beta_n = \gamma\, g(n)`.

Long-context transformers rescale their attention scores with the number of tokens n (YaRN, Qwen's
:math:`\log n` scaling). :class:`BetaOfN` is such a law, given wherever a number of tokens is known:

* ``"log"``: :math:`\beta_n = \gamma \log n`, the critical scaling of Chen, Lin, Polyanskiy and Rigollet
  (arXiv 2510.05554), below;
* ``"power"``: :math:`\beta_n = \gamma\, n^p`, e.g. :math:`p = 2/(d-1)`: the scale at which one query among
  n i.i.d. uniform keys on :math:`S^{d-1}` passes from a local average to its nearest key (the
  :math:`\delta`-ball around the query holds :math:`n\delta^{d-1}` keys, and the scores there differ by
  :math:`\beta\delta^2`).
* ``"log_power"``: :math:`\beta_n = \gamma (\log n)^p`.
* ``"constant"``: :math:`\beta_n = \gamma` (the paper's model; n plays no part).

For tokens whose directions form a simplex with inner product :math:`\rho`, one attention row at
:math:`\beta_n = \gamma\log n` gives its own token the weight

.. math:: a_n = \frac{e^{\beta_n}}{e^{\beta_n} + (n-1)e^{\beta_n\rho}} = \frac{1}{1 + (n-1)\,n^{-\gamma(1-\rho)}},

which tends to 0 (the tokens are averaged: collapse) for :math:`\gamma < 1/(1-\rho)` and to 1 (attention is the
identity) for :math:`\gamma > 1/(1-\rho)`; the window of :math:`\gamma` where :math:`a_n` is between 0.1 and 0.9
has the width :math:`2\log 9/((1-\rho)\log n)` (:func:`simplex_self_weight`).

``simulate(x0, Q, K, V, beta=BetaOfN(...))`` takes n from the tokens; everything that builds a field from a
number (``build_field``, :class:`~attnflow.AttentionWeights`) is given ``beta=law(n)``, the law's value.
``gamma`` is an array leaf: a batch of laws (``gamma`` of shape (B,)) gives a batch of temperatures, and
derivatives in :math:`\gamma` go through it.
"""

from __future__ import annotations

import math

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from . import _validate as v
from ._laws import LAWS, check_law, law_factor
from .equiangular import simplex_weights
from .errors import InputError

__all__ = ["LAWS", "BetaOfN", "check_law", "law_factor", "simplex_self_weight", "simplex_transition", "simplex_tokens", "prenorm_simplex_layers"]

class BetaOfN(eqx.Module):
    r""":math:`\beta_n = \gamma\, g(n)` for n tokens, with :math:`g(n)` one of :data:`LAWS`:
    :math:`\log n`, :math:`n^p`, :math:`(\log n)^p` or 1.

    Args:
        gamma: the scale, finite and > 0; a scalar, or (B,) for a batch of laws.
        law: one of :data:`LAWS` (default ``"log"``).
        power: the exponent p of ``"power"`` and ``"log_power"`` (finite; > 0 for ``"log_power"``).

    Calling it with the number of tokens n (a Python int, >= 2 for the logarithmic laws, so that
    :math:`\beta_n > 0`) gives :math:`\beta_n` in gamma's dtype.

    Example:
        >>> import math
        >>> from attnflow.temperature import BetaOfN
        >>> law = BetaOfN(2.0)                                   # beta_n = 2 log n
        >>> round(float(law(1000)), 6) == round(2 * math.log(1000), 6)
        True
        >>> round(float(BetaOfN(1.5, "power", power=2 / (3 - 1))(100)), 6)   # 1.5 n^(2/(d-1)) on S^2
        150.0
        >>> BetaOfN([1.0, 2.0])(10).shape                        # a batch of laws
        (2,)
    """

    gamma: Float[Array, "*B"]
    law: str = eqx.field(static=True)
    power: float = eqx.field(static=True)

    def __init__(self, gamma, law: str = "log", *, power: float = 1.0):
        check_law(law, power)
        shape = v.check_array("gamma", gamma, "the scale of beta_n = gamma g(n)")
        if len(shape) > 1:
            raise InputError(f"gamma must be a scalar or a batch (B,), got shape {shape}.")
        v.check_beta("gamma", gamma, "the scale of beta_n = gamma g(n)")
        self.gamma = jnp.asarray(gamma) if v.dtype_of(gamma).kind == "f" else jnp.asarray(gamma, float)
        self.law = law
        self.power = float(power)

    def factor(self, n: int) -> float:
        r"""The factor :math:`g(n)` (a float) of n tokens.

        Example:
            >>> from attnflow.temperature import BetaOfN
            >>> BetaOfN(1.0, "log_power", power=2).factor(100) == BetaOfN(1.0, "log").factor(100) ** 2
            True
        """
        return law_factor(n, self.law, self.power)

    def __call__(self, n: int) -> Float[Array, "*B"]:
        return self.gamma * jnp.asarray(self.factor(n), self.gamma.dtype)


def simplex_self_weight(gamma, n, rho):
    r"""The weight :math:`a_n = 1/(1 + (n-1)\,n^{-\gamma(1-\rho)})` that softmax attention at
    :math:`\beta_n = \gamma\log n` gives a token's own key when the n token directions form a simplex with
    inner product :math:`\rho` (every other key gets :math:`(1 - a_n)/(n-1)`). NumPy, float64, broadcasting.

    Example:
        >>> import numpy as np
        >>> from attnflow.temperature import simplex_self_weight
        >>> a = simplex_self_weight(np.array([0.5, 2.0, 3.5]), 10**6, 0.5)   # gamma_c = 1/(1 - rho) = 2
        >>> [f"{x:.4f}" for x in a]
        ['0.0000', '0.5000', '1.0000']
    """
    g, n, r = (np.asarray(a, np.float64) for a in (gamma, n, rho))
    return simplex_weights(g * np.log(n), n, r)[0]


def simplex_transition(n, rho, low: float = 0.1, high: float = 0.9) -> dict:
    r"""Where :func:`simplex_self_weight` crosses 1/2, ``low`` and ``high`` in :math:`\gamma`, exactly:
    :math:`a_n = q` at :math:`\gamma_q = (\log(n-1) - \log(1/q - 1))/((1-\rho)\log n)`. So the midpoint
    :math:`\gamma_{1/2} = \log(n-1)/((1-\rho)\log n) \to \gamma_c = 1/(1-\rho)` and the width
    :math:`\gamma_{high} - \gamma_{low}` shrinks like :math:`1/\log n`.

    Example:
        >>> from attnflow.temperature import simplex_transition
        >>> t = simplex_transition(10**4, 0.5)
        >>> round(t["gamma_half"], 4), round(t["width"], 4)
        (2.0, 0.9542)
    """
    n, rho = float(n), float(rho)
    if not (n >= 2 and -1.0 < rho < 1.0):
        raise InputError(f"the simplex transition needs n >= 2 tokens and -1 < rho < 1, got n = {n:g}, rho = {rho:g}.")
    if not 0.0 < low < high < 1.0:
        raise InputError(f"low and high must satisfy 0 < low < high < 1, got {low}, {high}.")
    at = lambda q: (math.log(n - 1.0) - math.log(1.0 / q - 1.0)) / ((1.0 - rho) * math.log(n))
    return {"gamma_c": 1.0 / (1.0 - rho), "gamma_half": at(0.5), "gamma_low": at(low), "gamma_high": at(high),
            "width": at(high) - at(low)}


def simplex_tokens(n: int, rho: float, dtype=np.float64) -> np.ndarray:
    r"""n unit tokens in :math:`\mathbb R^{n+1}` with every pairwise inner product :math:`\rho` (0 <= rho < 1):
    :math:`y_i = \sqrt\rho\, e_0 + \sqrt{1-\rho}\, e_i`.

    Example:
        >>> import numpy as np
        >>> from attnflow.temperature import simplex_tokens
        >>> y = simplex_tokens(4, 0.3)
        >>> y.shape, np.allclose(y @ y.T, 0.3 + 0.7 * np.eye(4))
        ((4, 5), True)
    """
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)) or n < 2:
        raise InputError(f"a simplex needs an int n >= 2 tokens, got {n!r}.")
    if not (isinstance(rho, (int, float, np.integer, np.floating)) and 0.0 <= rho < 1.0):
        raise InputError(f"rho must be a number with 0 <= rho < 1 (the tokens' common inner product), got {rho!r}.")
    y = np.zeros((n, n + 1), dtype)
    y[:, 0] = math.sqrt(rho)
    y[np.arange(n), np.arange(1, n + 1)] = math.sqrt(1.0 - rho)
    return y


def prenorm_simplex_layers(beta: float, n: int, rho: float, layers: int, *, dt: float = 1.0,
                           radius: float = 1.0) -> dict[str, np.ndarray]:
    r"""The exact equiangular reduction of pre-LN attention layers with Q = K = V = I started on a simplex:
    :math:`x_i \leftarrow x_i + \Delta t\sum_j P_{ij}\, y_j`, :math:`y_j = x_j/|x_j|`,
    :math:`P = \mathrm{softmax}(\beta\langle y_i, y_j\rangle)` (the ``prenorm`` field stepped by
    :class:`~attnflow.integrate.EulerStepper`; with :math:`\Delta t = 1` the layer of Chen, Lin, Polyanskiy and
    Rigollet with its residual term).

    By symmetry every token keeps one norm r and every pair one inner product :math:`\rho` of directions. With
    :math:`a = 1/(1 + (n-1)e^{-\beta(1-\rho)})` on the own key, :math:`b = (1-a)/(n-1)` on each other one, and
    :math:`S = \sum_j y_j` (:math:`\langle y_i, S\rangle = s = 1 + (n-1)\rho`, :math:`|S|^2 = ns`), the new token
    is :math:`x_i' = c\,y_i + e\,S` with :math:`c = r + \Delta t(a - b)`, :math:`e = \Delta t\, b`, so

    .. math:: r'^2 = c^2 + 2ces + e^2 ns, \qquad \rho' = (c^2\rho + 2ces + e^2 ns)/r'^2 .

    Returns float64 arrays of length ``layers + 1``: ``rho`` (the directions' inner product), ``radius`` (the
    tokens' norm) and ``self_weight`` (a at each layer's start; the last entry is that of the final state).

    Example:
        >>> from attnflow.temperature import prenorm_simplex_layers
        >>> low = prenorm_simplex_layers(0.5 * 9.2103, 10**4, 0.5, 8)   # gamma = 0.5 < gamma_c = 2: collapse
        >>> high = prenorm_simplex_layers(4.0 * 9.2103, 10**4, 0.5, 8)  # gamma = 4 > 2: attention ~ identity
        >>> round(float(low["rho"][-1]), 3), round(float(high["rho"][-1]), 3)
        (0.993, 0.5)
    """
    v.check_beta("beta", beta, scalar=True)
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)) or n < 2:
        raise InputError(f"n must be an int >= 2 (the number of tokens), got {n!r}.")
    if not (isinstance(rho, (int, float, np.integer, np.floating)) and -1.0 / (n - 1) <= rho < 1.0):
        raise InputError(f"rho must satisfy -1/(n-1) <= rho < 1 (a simplex's inner product), got {rho!r}.")
    if isinstance(layers, (bool, np.bool_)) or not isinstance(layers, (int, np.integer)) or layers < 0:
        raise InputError(f"layers must be an int >= 0, got {layers!r}.")
    for name, x in (("dt", dt), ("radius", radius)):
        if not (isinstance(x, (int, float, np.integer, np.floating)) and math.isfinite(x) and x > 0):
            raise InputError(f"{name} must be a finite number > 0, got {x!r}.")
    beta, rho, r = float(beta), float(rho), float(radius)
    out = {"rho": [rho], "radius": [r], "self_weight": []}
    for _ in range(layers + 1):
        a, b = (float(w) for w in simplex_weights(beta, n, rho))
        out["self_weight"].append(a)
        if len(out["rho"]) == layers + 1:
            break
        c, e, s = r + dt * (a - b), dt * b, 1.0 + (n - 1) * rho
        common = 2.0 * c * e * s + e * e * n * s
        r2 = c * c + common
        rho, r = min((c * c * rho + common) / r2, 1.0), math.sqrt(r2)
        out["rho"].append(rho)
        out["radius"].append(r)
    return {k: np.asarray(x, np.float64) for k, x in out.items()}
