r"""Studies of the noisy dynamics that are not mean-field: the fate of two tokens under common noise.

In a deep stochastic transformer every layer's value matrix is :math:`V\,\Delta t + \sigma\,\Delta W` with one
matrix Brownian motion W shared by all tokens (:class:`attnflow.integrate.CommonNoise`). Two tokens on the sphere
then end either merged or antipodal, and antipodal with positive probability (Fedorov, Sander, Elie, Marion and
Lauriere): the noise, acting on both tokens through the same matrix, can hold them apart where the attention alone
would merge them. :func:`two_token_fates` estimates the probabilities, with Wilson intervals.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from . import _validate as v
from .errors import InputError

__all__ = ["two_token_fates", "FATE_TOLERANCE"]

#: two unit tokens count as merged when <x_1, x_2> >= 1 - FATE_TOLERANCE, antipodal when <= -1 + FATE_TOLERANCE
FATE_TOLERANCE = 0.01


def two_token_fates(sigma, d: int, *, beta: float = 1.0, t1: float = 30.0, dt: float = 0.01, paths: int = 400,
                    seed: int = 0, confidence: float = 0.95) -> dict:
    r"""How two tokens on :math:`S^{d-1}` end under common noise: merged, antipodal or neither by ``t1``.

    Each path starts from two independent uniform tokens and runs the sphere flow with Q = K = V = I at
    inverse temperature ``beta`` plus :class:`~attnflow.integrate.CommonNoise` of strength ``sigma`` (on the
    sphere), ``t1 / dt`` stochastic layers (Euler-Maruyama, renormalised), its own Brownian path. A path is
    merged when :math:`\langle x_1, x_2\rangle \ge 1 - \epsilon` at ``t1``, antipodal when
    :math:`\le -1 + \epsilon` (:data:`FATE_TOLERANCE`).

    Returns a dict: ``sigma``, ``d``, ``beta``, ``t1``, ``paths``, and for ``merged``, ``antipodal`` and
    ``undecided`` the count, the fraction and its Wilson interval at ``confidence``.

    Example:
        >>> from attnflow.stochastic import two_token_fates
        >>> out = two_token_fates(1.0, 2, t1=10.0, dt=0.05, paths=64)
        >>> out["merged"]["count"] + out["antipodal"]["count"] + out["undecided"]["count"]
        64
    """
    from .dynamics import normalise
    from .fields import build_field
    from .integrate import CommonNoise, EulerMaruyamaStepper, sphere_shift
    from .stats import wilson_interval

    v.check_real("sigma", sigma, "the strength of the common noise, >= 0")
    if float(sigma) < 0:
        raise InputError(f"sigma must be >= 0 (the strength of the common noise), got {float(sigma)!r}.")
    d = v.check_int("d", d, minimum=2, meaning="the token dimension")
    v.check_beta("beta", beta, "the inverse temperature", scalar=True)
    layers = v.check_layers("t1", t1, "dt", dt)
    paths = v.check_int("paths", paths, meaning="independent paths")
    eye = jnp.eye(d)
    field = build_field("sphere", eye, eye, eye, beta=float(beta))

    def fate(key):
        start, path = jax.random.split(key)
        x0 = normalise(jax.random.normal(start, (2, d)))
        stepper = EulerMaruyamaStepper(dt, layers, noise=CommonNoise(float(sigma), path, sphere=True),
                                       shift=sphere_shift, save_every=layers)
        y = stepper.solve(field, x0).ys[-1]
        return jnp.dot(y[0], y[1])

    cosines = np.asarray(jax.jit(jax.vmap(fate))(jax.random.split(jax.random.key(seed), paths)))
    finite = np.isfinite(cosines)
    counts = {"merged": int(np.sum(cosines[finite] >= 1 - FATE_TOLERANCE)),
              "antipodal": int(np.sum(cosines[finite] <= -1 + FATE_TOLERANCE))}
    counts["undecided"] = int(finite.sum()) - counts["merged"] - counts["antipodal"]
    total = int(finite.sum())
    out = {"sigma": float(sigma), "d": d, "beta": float(beta), "t1": float(t1), "paths": paths,
           "nonfinite": int((~finite).sum())}
    for name, k in counts.items():
        lo, hi = wilson_interval(k, total, confidence) if total else (float("nan"), float("nan"))
        out[name] = {"count": k, "fraction": k / total if total else float("nan"), "lo": lo, "hi": hi}
    return out
