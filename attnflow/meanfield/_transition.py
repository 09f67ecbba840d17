r"""The phase transition of noisy tokens on the circle: the uniform state against a clustered one.

Tokens with independent noise of strength :math:`\sigma` have the mean-field limit
:math:`\partial_t\rho = \frac{\sigma^2}2\partial_\theta^2\rho - \partial_\theta(\rho\,v[\rho])`
(:func:`~attnflow.meanfield.solve_continuity` with ``sigma``). The uniform state loses its linear stability
below :math:`\sigma_c` (:func:`~attnflow.meanfield.critical_noise`). Mun and Rosenzweig find, for the 1/n
normalisation, a continuous transition for :math:`\beta < \beta^*` (:func:`~attnflow.meanfield.tricritical_beta`)
and a discontinuous one above it, with a range of :math:`\sigma > \sigma_c` where a clustered state is stable
too. :func:`noisy_transition` measures it: the order parameter :math:`r = |\int \rho\,e^{i\theta}d\theta|` (the
first Fourier coefficient; 0 for the uniform state) at a long time, from a nearly uniform start and from a
clustered one, for each :math:`\sigma` of a grid.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from .. import _validate as v
from ..errors import InputError
from ._linear import critical_noise, tricritical_beta
from ._pde import _check_normalisation, _check_step, circle_grid, kept_modes, solve_continuity

__all__ = ["order_parameter", "noisy_transition", "ORDERED"]

#: a state counts as ordered (clustered) when its order parameter is above this at the end of the run: the
#: nearly uniform start has r = eps/2 = 0.01 and decays below it wherever the uniform state is stable, a
#: clustered state of the grids studied has r > 0.1
ORDERED = 0.05
#: a clustered end state counts as stable (for the bistable range) unless its order parameter fell by more than
#: this over the last tenth of the run: a state still melting at t1 is no evidence of a stable one
STATIONARY = 1e-3


def order_parameter(density) -> jax.Array:
    r""":math:`r = |\int_0^{2\pi}\rho(\theta)e^{i\theta}d\theta|` of densities (..., G) on
    :func:`~attnflow.meanfield.circle_grid`: 0 for the uniform density, 1 for a point mass.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.meanfield import circle_grid, order_parameter
        >>> th = circle_grid(64)
        >>> round(float(order_parameter((1 + 0.4 * jnp.cos(th)) / (2 * jnp.pi))), 4)
        0.2
    """
    density = jnp.asarray(density)
    th = circle_grid(density.shape[-1], density.dtype)
    weight = 2 * math.pi / density.shape[-1]
    return jnp.abs(weight * jnp.sum(density * jnp.exp(1j * th), axis=-1))


def _plan(beta, normalisation, num_points, t1, dt, saves, eps, kappa):
    """The two starts (float64), the save times and the RK4 steps between saves of :func:`noisy_transition`,
    the step checked against the scheme's stability bound for both starts (one sentence, before any solve)."""
    th = circle_grid(num_points, jnp.float64)
    uniform = (1 + eps * jnp.cos(th)) / (2 * math.pi)
    clustered = jnp.exp(kappa * (jnp.cos(th) - 1))
    clustered = clustered / (jnp.sum(clustered) * 2 * math.pi / num_points)
    ts = jnp.concatenate([jnp.linspace(0.0, 0.9 * t1, saves), jnp.array([t1])])
    steps = max(1, math.ceil(float(jnp.max(jnp.diff(ts))) / dt - 1e-9))
    step = float(jnp.max(jnp.diff(ts))) / steps
    for start in (uniform, clustered):
        _check_step(start, jnp.asarray(beta, jnp.float64), normalisation, step, kept_modes(num_points, True))
    return uniform, clustered, ts, steps


def check_transition_step(beta, normalisation: str, *, num_points: int, t1: float, dt: float, saves: int = 5,
                          eps: float = 0.02, kappa: float = 4.0) -> None:
    """Refuse, in one sentence, a :func:`noisy_transition` whose RK4 step is above the stability bound for one
    of its starts (the clustered start's velocities are the larger), before any solve.

    Example:
        >>> from attnflow.meanfield._transition import check_transition_step
        >>> check_transition_step(4.0, "mean", num_points=32, t1=30.0, dt=0.05)
        Traceback (most recent call last):
        ...
        attnflow.errors.InputError: the RK4 step dt = 0.05 is above the stability bound ...
    """
    with jax.enable_x64(True):
        _plan(beta, _check_normalisation(normalisation), num_points, t1, dt, saves, eps, kappa)


def noisy_transition(beta, sigmas, *, normalisation: str = "mean", num_points: int = 64, t1: float = 200.0,
                     dt: float = 0.01, saves: int = 5, eps: float = 0.02, kappa: float = 4.0) -> dict:
    r"""The order parameter at ``t1`` against the noise :math:`\sigma`, from a nearly uniform start
    :math:`(1 + \varepsilon\cos\theta)/2\pi` and from a clustered one (von Mises, concentration ``kappa``),
    through the noisy continuity equation (integrating-factor RK4, ``num_points`` grid points, steps ``dt``).

    Returns a dict: ``beta``, ``normalisation``, ``sigma`` (S,), ``from_uniform`` and ``from_clustered`` (S,) the
    order parameter at ``t1`` (NaN where the density went non-finite, listed in ``nonfinite``), ``drift`` (S, 2)
    its change over the last tenth of the run (how far from stationary), ``sigma_c`` (the closed form),
    ``beta_star``, ``threshold``, ``bistable`` and ``nonfinite`` (:func:`read_transition`: the measured loss of
    stability of the uniform state, and the sigmas where a stationary clustered state coexists with it) and
    ``min_density`` (the smallest density of each run).

    Example:
        >>> from attnflow.meanfield import noisy_transition
        >>> out = noisy_transition(1.0, [0.5, 1.5], t1=30.0, dt=0.1, num_points=32)
        >>> [round(float(r), 2) for r in out["from_uniform"]], out["threshold"]["contains_sigma_c"]
        ([0.97, 0.0], True)
    """
    normalisation = _check_normalisation(normalisation)
    v.check_beta("beta", beta, "the inverse temperature", scalar=True)
    sigmas = np.asarray(sigmas, float)
    if sigmas.ndim != 1 or sigmas.size == 0 or not np.all(np.isfinite(sigmas)) or np.any(sigmas < 0):
        raise InputError(f"sigmas must be a non-empty list of finite noise strengths >= 0, got {sigmas.tolist()}.")
    if np.any(np.diff(sigmas) <= 0):
        raise InputError(f"sigmas must be increasing, got {sigmas.tolist()}.")
    num_points = v.check_int("num_points", num_points, minimum=8, meaning="grid points of the density")
    t1 = v.check_number("t1", t1, "the end time, long enough to reach the stationary state", low=0)
    dt = v.check_number("dt", dt, "the RK4 step", low=0)
    saves = v.check_int("saves", saves, minimum=2, meaning="save times after the start")
    with jax.enable_x64(True):
        uniform, clustered, ts, steps = _plan(beta, normalisation, num_points, t1, dt, saves, eps, kappa)
        ends, drift, low = np.full((sigmas.size, 2), np.nan), np.full((sigmas.size, 2), np.nan), np.full(
            (sigmas.size, 2), np.nan)
        for i, sigma in enumerate(sigmas):
            for j, start in enumerate((uniform, clustered)):
                path = solve_continuity(start, beta, ts, normalisation=normalisation, steps_per_save=steps,
                                        sigma=float(sigma))
                r = np.asarray(order_parameter(path.density))
                if np.all(np.isfinite(r)):
                    ends[i, j], drift[i, j] = r[-1], r[-1] - r[-2]
                low[i, j] = float(jnp.min(path.min_density))
    sigma_c = float(critical_noise(beta, 2, normalisation))
    reading = read_transition(sigmas, ends[:, 0], ends[:, 1], drift, sigma_c)
    return {"beta": float(beta), "normalisation": normalisation, "sigma": sigmas, "from_uniform": ends[:, 0],
            "from_clustered": ends[:, 1], "drift": drift, "min_density": low, "sigma_c": sigma_c,
            "beta_star": tricritical_beta(2), **reading}


def read_transition(sigmas, from_uniform, from_clustered, drift, sigma_c: float) -> dict:
    r"""What a grid of end states says: ``threshold`` (``lo``: the largest sigma at which the nearly uniform start
    ordered, ``hi``: the smallest disordered one beyond it, None for an end the grid does not bracket;
    ``contains_sigma_c``), ``bistable`` (the sigmas where the uniform start ended disordered and the clustered
    one ordered *and not melting*: its order parameter fell by at most :data:`STATIONARY` over the last tenth
    of the run, so a clustered state still melting at t1 is not counted; one still sharpening is) and ``nonfinite`` (the sigmas where a
    run went non-finite, excluded from both). A state is ordered when :math:`r >` :data:`ORDERED`.

    Example:
        >>> import numpy as np
        >>> from attnflow.meanfield._transition import read_transition
        >>> out = read_transition(np.array([0.9, 1.0, 1.1, 1.2]), np.array([0.8, 0.6, 0.0, 0.0]),
        ...                       np.array([0.8, 0.7, 0.6, 0.2]), np.array([[0, 0], [0, 0], [0, 0], [0, -0.05]]), 1.05)
        >>> out["threshold"], out["bistable"].tolist()
        ({'lo': 1.0, 'hi': 1.1, 'contains_sigma_c': True}, [1.1])
    """
    sigmas, uni, clu = (np.asarray(a, float) for a in (sigmas, from_uniform, from_clustered))
    drift = np.asarray(drift, float)
    finite = np.isfinite(uni)
    ordered = finite & (uni > ORDERED)
    below, above = sigmas[ordered], sigmas[finite & ~ordered]
    lo = float(below.max()) if below.size else None
    past = above if lo is None else above[above > lo]  # the disordered sigmas beyond the last ordered one
    hi = float(past.min()) if past.size else None
    contains = lo is not None and hi is not None and lo <= sigma_c <= hi
    settled = np.isfinite(clu) & (clu > ORDERED) & (drift[:, 1] >= -STATIONARY)  # ordered, and not melting
    return {"threshold": {"lo": lo, "hi": hi, "contains_sigma_c": bool(contains)},
            "bistable": sigmas[finite & ~ordered & settled],
            "nonfinite": sigmas[~(finite & np.isfinite(clu))]}
