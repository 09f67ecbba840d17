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
from ._pde import (
    _check_normalisation,
    _check_step,
    circle_grid,
    kept_modes,
    solve_continuity,
)

__all__ = ["ORDERED", "disordered_fluctuations", "noisy_transition", "order_parameter", "particle_transition", "read_transition"]

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
    normalisation, sigmas, t1, dt, saves = check_transition_args(beta, sigmas, normalisation, t1, dt, saves)
    num_points = v.check_int("num_points", num_points, minimum=8, meaning="grid points of the density")
    with jax.enable_x64(True):
        uniform, clustered, ts, steps = _plan(beta, normalisation, num_points, t1, dt, saves, eps, kappa)
        ends, drift, low = end_states(
            sigmas, (uniform, clustered),
            lambda start, sigma: solve_continuity(start, beta, ts, normalisation=normalisation, steps_per_save=steps,
                                                  sigma=sigma),
            lambda path: order_parameter(path.density))
    sigma_c = float(critical_noise(beta, 2, normalisation))
    reading = read_transition(sigmas, ends[:, 0], ends[:, 1], drift, sigma_c)
    return {"beta": float(beta), "normalisation": normalisation, "sigma": sigmas, "from_uniform": ends[:, 0],
            "from_clustered": ends[:, 1], "drift": drift, "min_density": low, "sigma_c": sigma_c,
            "beta_star": tricritical_beta(2), **reading}


def end_states(sigmas, starts, solve, order) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The grid every transition study runs: for each sigma and start, ``solve(start, sigma)`` (a path with its
    ``min_density``) and ``order(path)`` (the order parameter at the saves). Returns (S, starts) arrays: the last
    order parameter, its change over the last save interval (NaN where the path went non-finite) and the smallest
    density of each run."""
    ends, drift, low = (np.full((len(sigmas), len(starts)), np.nan) for _ in range(3))
    for i, sigma in enumerate(sigmas):
        for j, start in enumerate(starts):
            path = solve(start, float(sigma))
            r = np.asarray(order(path))
            if np.all(np.isfinite(r)):
                ends[i, j], drift[i, j] = r[-1], r[-1] - r[-2]
            low[i, j] = float(jnp.min(path.min_density))
    return ends, drift, low


def check_transition_args(beta, sigmas, normalisation: str, t1, dt, saves):
    """The checks every transition study makes before it solves: ``(normalisation, sigmas, t1, dt, saves)``, or one
    sentence naming the bad argument."""
    normalisation = _check_normalisation(normalisation)
    v.check_beta("beta", beta, "the inverse temperature", scalar=True)
    sigmas = np.asarray(sigmas, float)
    if sigmas.ndim != 1 or sigmas.size == 0 or not np.all(np.isfinite(sigmas)) or np.any(sigmas < 0):
        raise InputError(f"sigmas must be a non-empty list of finite noise strengths >= 0, got {sigmas.tolist()}.")
    if np.any(np.diff(sigmas) <= 0):
        raise InputError(f"sigmas must be increasing, got {sigmas.tolist()}.")
    t1 = v.check_number("t1", t1, "the end time, long enough to reach the stationary state", low=0)
    dt = v.check_number("dt", dt, "the RK4 step", low=0)
    saves = v.check_int("saves", saves, minimum=2, meaning="save times after the start")
    return normalisation, sigmas, t1, dt, saves


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


def disordered_fluctuations(sigma_ratio, critical_ratio_sq: float | None = None) -> np.ndarray:
    r"""The linear-response prediction of the order parameter's fluctuations of n noisy particles in the
    disordered phase (:math:`\sigma > \sigma_c`): :math:`n\,E r^2 = \sigma^2 / (\sigma^2 - \sigma_c^2)`.

    Derivation: the first Fourier mode :math:`m = \frac1n\sum_j e^{i\theta_j}` of the empirical measure obeys,
    linearised at the uniform state, :math:`dm = \lambda_1 m\,dt + dM` with the mean-field rate
    :math:`\lambda_1 = (\sigma_c^2 - \sigma^2)/2 < 0` (:func:`~attnflow.meanfield.noisy_growth_rates`) and the
    martingale :math:`dM = \frac{i\sigma}{n}\sum_j e^{i\theta_j}dW_j` (independent noises), whose quadratic
    variation is :math:`E|dM|^2 = \sigma^2 dt / n`. The stationary Ornstein-Uhlenbeck variance is
    :math:`E|m|^2 = \frac{\sigma^2/n}{2|\lambda_1|}`. Far from the threshold it is 1 (independent uniform
    particles); it diverges at :math:`\sigma_c` (critical slowing down), where the linearisation, and with it
    this law, fails at any finite n. ``sigma_ratio``: :math:`\sigma/\sigma_c` (> 1).

    Example:
        >>> from attnflow.meanfield._transition import disordered_fluctuations
        >>> [round(float(x), 4) for x in disordered_fluctuations([1.5, 2.0, 100.0])]
        [1.8, 1.3333, 1.0001]
    """
    q = np.asarray(sigma_ratio, float)
    return np.where(q > 1, q**2 / np.maximum(q**2 - 1, 1e-300), np.inf)


def particle_transition(beta, sigma_ratios, n: int, *, systems: int = 8, t1: float = 200.0, burn: float = 20.0,
                        dt: float = 0.02, normalisation: str = "mean", seed: int = 0, save_every: int = 10,
                        confidence: float = 0.95) -> dict:
    r"""n noisy particles on the circle at stationarity, against the mean field: the finite-n side of the
    transition.

    ``systems`` independent clouds of n iid uniform particles (each its own Brownian path) run the sphere flow
    with Q = K = V = I (``normalisation``; the Fourier path above 2048 particles, exact to rounding) plus
    :class:`~attnflow.integrate.TokenNoise` of strength :math:`\sigma = \rho\,\sigma_c(\beta)` for each ratio
    :math:`\rho` of ``sigma_ratios``, in stochastic layers of ``dt`` renormalised onto the circle
    (:class:`~attnflow.integrate.EulerMaruyamaStepper`), to ``t1``. The order parameter
    :math:`r = |\frac1n\sum_j x_j|` is read every ``save_every`` layers after ``burn``; each system's time
    averages of r and of :math:`n r^2` are one sample, and the Student-t interval over the systems is reported.

    Returns a dict: ``beta``, ``n``, ``normalisation``, ``sigma_c``, ``ratio`` (S,), ``sigma`` (S,), ``r`` and
    ``n_r2`` (S, 3: mean, lo, hi), ``n_r2_theory`` (S,) the disordered side's law :func:`disordered_fluctuations`
    (inf at and below :math:`\sigma_c`), ``nonfinite`` (S,) the systems excluded (a run that went non-finite)
    and ``samples`` (the saved readings per system after ``burn``).

    Example:
        >>> from attnflow.meanfield._transition import particle_transition
        >>> out = particle_transition(1.5, [2.0], 64, systems=2, t1=4.0, burn=1.0, dt=0.05, save_every=4)
        >>> out["n_r2"].shape, bool(out["n_r2_theory"][0] == 4 / 3)
        ((1, 3), True)
    """
    from ..fields import build_field
    from ..integrate import EulerMaruyamaStepper, SaveLayers, TokenNoise, sphere_shift
    from ..stats import mean_interval

    normalisation = _check_normalisation(normalisation)
    v.check_beta("beta", beta, "the inverse temperature", scalar=True)
    ratios = np.asarray(sigma_ratios, float)
    if ratios.ndim != 1 or ratios.size == 0 or not np.all(np.isfinite(ratios)) or np.any(ratios <= 0):
        raise InputError(f"sigma_ratios must be a non-empty list of finite numbers > 0 (sigma / sigma_c), got "
                         f"{ratios.tolist()}.")
    n = v.check_int("n", n, minimum=2, meaning="particles per system")
    systems = v.check_int("systems", systems, minimum=2, meaning="independent systems (the interval's samples)")
    layers = v.check_layers("t1", t1, "dt", dt)
    burn = v.check_number("burn", burn, "the time after which the order parameter is read", low=0, high=float(t1),
                          closed="low")
    save_every = v.check_int("save_every", save_every, meaning="layers between two readings")
    first = math.ceil(burn / dt / save_every) * save_every
    if first > layers:
        raise InputError(f"no reading after burn = {burn:g}: lower burn or save_every, or raise t1.")
    saves = SaveLayers.given(range(first, layers + 1, save_every))
    sigma_c = float(critical_noise(beta, 2, normalisation))
    eye = jnp.eye(2, dtype=jnp.float32)
    impl = {"attention_impl": "fourier", "fourier_max_score": float(beta)} if n > 2048 else {}
    field = build_field("sphere", eye, eye, eye, beta=float(beta), normalisation=normalisation, **impl)

    def run(sigma, key):
        start, path = jax.random.split(key)
        theta = jax.random.uniform(start, (n,), jnp.float32, 0.0, 2 * math.pi)
        x0 = jnp.stack([jnp.cos(theta), jnp.sin(theta)], axis=1)
        stepper = EulerMaruyamaStepper(dt, layers, noise=TokenNoise(sigma, path, sphere=True), shift=sphere_shift,
                                       save_at=saves, loop="fori", checkpoint=None)
        return stepper.solve(field, x0, save_fn=lambda t, y, args: jnp.sum(jnp.mean(y, axis=0) ** 2)).ys

    solve = jax.jit(jax.vmap(run, in_axes=(None, 0)))
    keys = jax.random.split(jax.random.key(seed), systems)
    r_stats, nr2_stats, bad = [], [], []
    for ratio in ratios:
        r2 = np.asarray(solve(jnp.float32(ratio * sigma_c), keys), np.float64)  # (systems, readings)
        ok = np.all(np.isfinite(r2), axis=1)
        bad.append(int((~ok).sum()))
        r_stats.append(mean_interval(np.sqrt(r2[ok]).mean(axis=1)[:, None], confidence))
        nr2_stats.append(mean_interval((n * r2[ok]).mean(axis=1)[:, None], confidence))
    pack = lambda stats: np.array([[float(m[0]), float(lo[0]), float(hi[0])] for m, lo, hi in stats])
    return {"beta": float(beta), "n": n, "normalisation": normalisation, "sigma_c": sigma_c, "ratio": ratios,
            "sigma": ratios * sigma_c, "r": pack(r_stats), "n_r2": pack(nr2_stats),
            "n_r2_theory": disordered_fluctuations(ratios), "nonfinite": np.asarray(bad),
            "samples": saves.num_saves}
