r"""How close the phase job's layers are to the continuous sphere flow: the measured order of projected Euler.

The phase job steps :math:`x_i \leftarrow (x_i + \Delta t\, f_i(x)) / \|x_i + \Delta t\, f_i(x)\|` with the
sphere field :math:`f_i = \mathrm{Proj}_{x_i^\perp}\sum_j P_{ij} V x_j` (:func:`attnflow.dynamics.sphere_flow`).
The field is tangent and the normalisation is a retraction,
:math:`\mathrm{normalise}(x + h v) = x + h v - \tfrac{h^2}{2}|v|^2 x + O(h^3)`, while the flow moves by
:math:`x + h f + \tfrac{h^2}{2}\dot f + O(h^3)`: the local error is :math:`O(\Delta t^2)` and the global error at a
fixed time T is :math:`O(\Delta t)` (order 1, like forward Euler). :func:`sphere_convergence` measures it:
the layer map at a ladder of dt against the same field integrated by diffrax (Tsit5, float64, tight
tolerances), and :func:`convergence_order` fits the order. With the 1/n normalisation it measures the job's
layers of :math:`f/s(\beta)` (:func:`~attnflow.phase.step_scale`) against the flow of :math:`f/s(\beta)` at the
rescaled time the job records.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .._x64 import in_float64
from .._validate import check_layers
from ..dynamics import normalise
from ..errors import InputError
from ..fields import build_field
from ..integrate import EulerStepper, sphere_shift
from ..stats import fit_slope
from ._config import log_step_scale


def convergence_order(dts, errors, confidence: float = 0.95) -> dict:
    r"""Least-squares order p of :math:`\log e_{s,k} = c_s + p \log \Delta t_k` (one intercept per system s,
    a common slope), with its Student-t interval (:func:`attnflow.stats.fit_slope` with the systems as groups).

    ``errors``: (K,) or (S, K) at the K steps ``dts``; non-finite or zero errors are left out (counted in
    ``excluded``).

    Example:
        >>> import numpy as np
        >>> from attnflow.phase import convergence_order
        >>> dts = np.array([0.1, 0.05, 0.025])
        >>> fit = convergence_order(dts, np.stack([3 * dts, 5 * dts * (1 + dts)]))   # order 1, and 1 + O(dt)
        >>> round(fit["order"], 3), fit["order_lo"] < fit["order"] < fit["order_hi"], fit["points"]
        (1.025, True, 6)
    """
    x = np.log(np.asarray(dts, float))
    e = np.atleast_2d(np.asarray(errors, float))
    if e.shape[1] != x.size:
        raise InputError(f"errors has {e.shape[1]} columns but there are {x.size} steps dts; give one error per dt.")
    ok = np.isfinite(e) & (e > 0)
    y = np.log(np.where(ok, e, 1.0))
    rows = np.broadcast_to(np.arange(e.shape[0])[:, None], e.shape)
    fit = fit_slope(np.broadcast_to(x, e.shape)[ok], y[ok], confidence, groups=rows[ok])  # the fixed-effects slope
    if not fit["groups"]:
        raise InputError("convergence_order needs at least two finite, positive errors of one system.")
    return {"order": fit["slope"], "order_lo": fit["lo"], "order_hi": fit["hi"], "points": fit["points"],
            "systems": fit["groups"], "excluded": int((~ok).sum())}


@in_float64
def sphere_convergence(x0: Float[Array, "S n d"], beta, t: float, dts, *, Q=None, K=None, V=None,
                       normalisation: str = "softmax", rtol: float = 1e-12, atol: float = 1e-12,
                       confidence: float = 0.95) -> dict:
    r"""Error of the projected-Euler layer map at time ``t`` against the sphere flow, for a ladder of ``dts``.

    ``x0``: S clouds (normalised here), ``beta``: a number or one per cloud; Q, K, V default to the identity
    (the phase job's default weights). The reference is :func:`attnflow.integrate.solve_ode` (Tsit5,
    adaptive at ``rtol`` / ``atol``) on the same field, in float64. Every ``t / dt`` must be a whole number.
    ``normalisation="mean"``: the field is divided by :func:`~attnflow.phase.step_scale` of each cloud's beta
    (V / s, exact since the 1/n weights do not involve V), as the phase job steps it; ``t`` and ``dts`` are then
    in the job's rescaled time.

    Returns ``dt``, ``error`` (S, len(dts)): :math:`\max_i |x_i^{\rm Euler}(t) - x_i(t)|`, and the fit of
    :func:`convergence_order` (``order``, ``order_lo``, ``order_hi``).

    Example:
        >>> import numpy as np
        >>> from attnflow.phase import sphere_convergence
        >>> x0 = np.random.default_rng(0).standard_normal((2, 6, 2))
        >>> r = sphere_convergence(x0, [1.0, 4.0], 0.5, [0.05, 0.025])
        >>> r["error"].shape, 0.9 < r["order"] < 1.1
        ((2, 2), True)
    """
    x0 = normalise(jnp.asarray(x0, jnp.float64))
    if x0.ndim != 3:
        raise InputError(f"x0 must be S clouds of shape (S, n, d), got shape {tuple(x0.shape)}.")
    S, _, d = x0.shape
    beta = jnp.broadcast_to(jnp.asarray(beta, jnp.float64), (S,))
    eye = jnp.eye(d, dtype=jnp.float64)
    Q, K, V = (eye if w is None else jnp.asarray(w, jnp.float64) for w in (Q, K, V))
    dts = [float(h) for h in dts]
    layers = [check_layers("t", t, "dt", h) for h in dts]
    from ..integrate import solve_ode  # diffrax: loaded by this study only, not by every phase job

    @jax.jit
    @jax.vmap
    def measure(x, b):  # one program for the reference and every dt (one compilation)
        scaled = V * jnp.exp(-log_step_scale(b)) if normalisation == "mean" else V
        field = build_field("sphere", Q, K, scaled, beta=b, normalisation=normalisation)
        ref = solve_ode(field, x, t0=0.0, t1=t, ts=jnp.array([0.0, t]), rtol=rtol, atol=atol).ys[-1]
        return jnp.stack([jnp.linalg.norm(EulerStepper(h, L, shift=sphere_shift, save_every=L, checkpoint=None)
                                          .solve(field, x).ys[-1] - ref, axis=-1).max()
                          for h, L in zip(dts, layers)])

    errors = np.asarray(measure(x0, beta))
    return {"dt": np.asarray(dts), "error": errors, **convergence_order(dts, errors, confidence)}
