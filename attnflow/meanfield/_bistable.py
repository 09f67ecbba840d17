r"""The finite-n side of the discontinuous noisy transition: n noisy particles in the bistable range, and how long
a clustered state survives.

Above :math:`\beta^*(d)` (:func:`~attnflow.meanfield.tricritical_beta`) the mean field of noisy tokens with 1/n
attention has, for :math:`\sigma` a little above :math:`\sigma_c`, two stable states: the uniform one and a clustered
one (:func:`~attnflow.meanfield.noisy_transition`, :func:`~attnflow.meanfield.noisy_sphere_transition`). At finite n
both are metastable: the noise carries a clustered cloud over the barrier to the uniform state after a time that
grows with n (the barrier of the n-particle system is n times a free-energy difference). :func:`particle_escape_times`
measures it: ``systems`` clouds of n particles drawn from the PDE's stationary clustered state
(:func:`stationary_clustered_state`) or from the uniform law, the first time their order parameter
:math:`r = |\frac1n\sum_j x_j|` crosses a threshold (right-censored at the end of the run), and the order parameter
of each branch while the cloud is in it.

**The time change.** The 1/n field at :math:`\beta = 4` has velocities of order :math:`e^\beta`. With the drift
divided by :math:`s` and the time :math:`\tau = s\,t`, the noisy flow :math:`dx = f\,dt + \sigma\,\Pi_{x^\perp}\circ dW_t`
becomes :math:`d\tilde x = (f/s)\,d\tau + (\sigma/\sqrt s)\,\Pi_{\tilde x^\perp}\circ d\tilde W_\tau`, where
:math:`\tilde x(\tau) = x(\tau/s)` and :math:`\tilde W_\tau = \sqrt s\,W_{\tau/s}` is again a standard Brownian motion
(Brownian scaling): :math:`\sigma'^2 = \sigma^2/s` (:func:`time_rescaled_noise`). The drift scales like 1/s, the
noise's variance too, so the generator is divided by s; the threshold becomes :math:`\sigma_c'^2 = \sigma_c^2/s`
and the ratio :math:`\sigma/\sigma_c` is unchanged. On the layers it is exact, path by path: a layer of the flow
:math:`(f/s, \sigma/\sqrt s)` of step h adds :math:`h f/s + (\sigma/\sqrt s)\sqrt h\,\Pi\xi_k`, a layer of
:math:`(f, \sigma)` of step h/s adds :math:`(h/s) f + \sigma\sqrt{h/s}\,\Pi\xi_k`: the same, for the same draws
:math:`\xi_k` (the stepper draws layer k's from ``fold_in(key, k)``). Here :math:`s = e^\beta`, the identity
sphere's ``log_scale = beta``: the kernel :math:`e^{\beta(\langle x, y\rangle - 1)} \le 1` and every time of this
module is :math:`\tau = e^\beta t`.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from .. import _validate as v
from ..errors import InputError
from ._linear import critical_noise, tricritical_beta
from ._transition import disordered_fluctuations

__all__ = ["particle_escape_times", "stationary_clustered_state", "time_rescaled_noise"]

#: the attention paths of :func:`particle_escape_times`
PATHS = ("auto", "dense", "fourier")
#: cells of the z grid the clustered start on S^2 is drawn from (the density is zonal: uniform in z per cell)
_Z_CELLS = 4096
#: the PDE settings of :func:`stationary_clustered_state` per dimension: resolution, the end time and the RK4 step
#: (in the PDE's own time t), as the transition benchmarks use them at beta = 4
_PDE = {2: {"resolution": 64, "t1": 200.0, "dt": 0.01}, 3: {"resolution": 16, "t1": 60.0, "dt": 0.008}}


def time_rescaled_noise(sigma, log_scale):
    r"""The noise strength :math:`\sigma' = \sigma\,e^{-\log s/2}` of a noisy flow whose drift is divided by
    :math:`s = e^{\text{log\_scale}}` and whose time is :math:`\tau = s\,t`: the same process in law (module docstring:
    Brownian scaling, :math:`\sigma'^2 = \sigma^2/s`), and on the layer stepper the same path for the same key when
    the step is multiplied by s.

    Example:
        >>> import math
        >>> from attnflow.meanfield import time_rescaled_noise
        >>> round(float(time_rescaled_noise(2.0, math.log(4.0))), 6)      # sigma / sqrt(s)
        1.0
    """
    v.check_real("sigma", sigma, "the noise strength, a finite scalar >= 0")
    v.check_real("log_scale", log_scale, "the log of the factor s the drift is divided by, a finite real scalar")
    return sigma * jnp.exp(-jnp.asarray(log_scale, jnp.result_type(sigma, float)) / 2)


def _check_dimension(d) -> int:
    if d not in (2, 3) or isinstance(d, bool):
        raise InputError(f"d must be 2 (the circle) or 3 (the sphere S^2), the dimensions whose mean field attnflow "
                         f"solves, got {d!r}.")
    return int(d)


def stationary_clustered_state(beta, sigma_ratio, *, d: int = 2, resolution: int | None = None,
                               t1: float | None = None, dt: float | None = None, kappa: float = 4.0) -> dict:
    r"""The mean field's clustered state at :math:`\sigma = \rho\,\sigma_c(\beta)` (1/n attention): the noisy
    continuity equation run from a von Mises (-Fisher) cluster of concentration ``kappa`` about the first axis
    (circle) or the z axis (:math:`S^2`) to ``t1`` (the PDE's own time t; :math:`\tau = e^\beta t`), as
    :func:`~attnflow.meanfield.noisy_transition` and :func:`~attnflow.meanfield.noisy_sphere_transition` run their
    clustered start (``resolution``: grid points on the circle, the degree on :math:`S^2`; defaults 64 points, t1
    = 200, steps 0.01 on the circle and degree 16, t1 = 60, steps 0.008 on :math:`S^2`).

    Returns a dict: ``d``, ``beta``, ``ratio``, ``sigma``, ``sigma_c``, ``density`` (G,) on
    :func:`~attnflow.meanfield.circle_grid` or ``coefficients`` ((L+1)^2,) on :math:`S^2` (float64), ``r`` its order
    parameter, ``drift`` the change of r over the last tenth of the run (a state still melting is not stationary),
    ``min_density`` the smallest density of the run and ``ordered`` (r above
    :data:`~attnflow.meanfield._transition.ORDERED` and not melting, as :func:`noisy_transition` reads it).

    Example:
        >>> from attnflow.meanfield import stationary_clustered_state
        >>> state = stationary_clustered_state(4.0, 1.01, resolution=32, t1=20.0, dt=0.02)
        >>> state["density"].shape, state["ordered"], round(state["r"], 1)
        ((32,), True, 0.7)
    """
    from ._transition import ORDERED, STATIONARY, check_transition_args

    d = _check_dimension(d)
    ratio = v.check_number("sigma_ratio", sigma_ratio, "the noise strength over sigma_c", low=0)
    sigma_c = float(critical_noise(beta, d, "mean"))
    plan = _PDE[d]
    resolution = plan["resolution"] if resolution is None else resolution
    _, sigmas, t1, dt, saves = check_transition_args(beta, [ratio * sigma_c], "mean", plan["t1"] if t1 is None else t1,
                                                     plan["dt"] if dt is None else dt, 5)
    kappa = v.check_number("kappa", kappa, "the concentration of the clustered start", low=0)
    sigma = float(sigmas[0])
    with jax.enable_x64(True):
        if d == 2:
            from ._pde import solve_continuity
            from ._transition import _plan, order_parameter

            resolution = v.check_int("resolution", resolution, minimum=8, meaning="grid points of the density")
            _, start, ts, steps = _plan(beta, "mean", resolution, t1, dt, saves, 0.02, kappa)
            path = solve_continuity(start, beta, ts, normalisation="mean", steps_per_save=steps, sigma=sigma)
            state, r = path.density, order_parameter(path.density)
        else:
            from ._sphere_continuity import check_degree
            from ._sphere_pde import solve_sphere_continuity
            from ._sphere_transition import _order
            from ._sphere_transition import _plan as _sphere_plan

            resolution = check_degree(resolution)
            _, start, _, ts, steps = _sphere_plan(beta, "mean", resolution, t1, dt, saves, 0.02, kappa)
            path = solve_sphere_continuity(start, beta, ts, normalisation="mean", steps_per_save=steps, sigma=sigma)
            state, r = path.coefficients, _order(path.coefficients)
        state, r = np.asarray(state[-1], np.float64), np.asarray(r, np.float64)
        low = float(jnp.min(path.min_density))
    drift = float(r[-1] - r[-2])
    out = {"d": d, "beta": float(beta), "ratio": ratio, "sigma": sigma, "sigma_c": sigma_c,
           "density" if d == 2 else "coefficients": state, "r": float(r[-1]), "drift": drift, "min_density": low,
           "ordered": bool(np.isfinite(r[-1]) and r[-1] > ORDERED and drift >= -STATIONARY)}
    return out


def _start_cells(state: dict) -> tuple[np.ndarray, float]:
    """The probabilities of the cells a clustered start is drawn from (the density clipped at 0 and normalised) and
    the clipped mass (the negative part of the spectral density's undershoot, relative to 1)."""
    if state["d"] == 2:
        rho = np.asarray(state["density"], np.float64)
        cell = 2 * math.pi / rho.size
    else:
        from ._sphere_pde import sphere_density_at

        z = -1 + (np.arange(_Z_CELLS) + 0.5) * (2.0 / _Z_CELLS)
        points = np.stack([np.sqrt(1 - z * z), np.zeros_like(z), z], axis=1)
        with jax.enable_x64(True):
            rho = np.asarray(sphere_density_at(jnp.asarray(state["coefficients"], jnp.float64), jnp.asarray(points)))
        cell = 2 * math.pi * 2.0 / _Z_CELLS  # the area of a band of height dz is 2 pi dz
    clipped = float(-np.sum(np.minimum(rho, 0.0)) * cell)
    p = np.maximum(rho, 0.0)
    return p / p.sum(), clipped


def _draw(key, n: int, d: int, cells):
    """n points from the uniform law (``cells`` None) or from the cells' probabilities: on the circle a grid cell of
    :func:`~attnflow.meanfield.circle_grid` and a uniform angle within it; on :math:`S^2` a band of the z grid, a
    uniform z within it and a uniform longitude (the clustered state is zonal about the z axis). Traceable."""
    k_cell, k_in, k_phi = jax.random.split(key, 3)
    if cells is None:
        if d == 2:
            theta = jax.random.uniform(k_in, (n,), jnp.float32, 0.0, 2 * math.pi)
            return jnp.stack([jnp.cos(theta), jnp.sin(theta)], axis=1)
        x = jax.random.normal(k_in, (n, 3), jnp.float32)
        return x / jnp.linalg.norm(x, axis=1, keepdims=True)
    G = cells.shape[0]
    index = jax.random.categorical(k_cell, jnp.log(cells), shape=(n,)).astype(jnp.float32)
    u = jax.random.uniform(k_in, (n,), jnp.float32, -0.5, 0.5)
    if d == 2:
        theta = (index + u) * (2 * math.pi / G)  # grid point g at 2 pi g / G, its cell centred on it
        return jnp.stack([jnp.cos(theta), jnp.sin(theta)], axis=1)
    z = jnp.clip(-1 + (index + 0.5 + u) * (2.0 / G), -1.0, 1.0)
    phi = jax.random.uniform(k_phi, (n,), jnp.float32, 0.0, 2 * math.pi)
    rho = jnp.sqrt(jnp.maximum(1 - z * z, 0.0))
    return jnp.stack([rho * jnp.cos(phi), rho * jnp.sin(phi), z], axis=1)


def _field_and_noise(beta: float, d: int, n: int, sigma: float, dt: float, path: str):
    """The rescaled flow of one path: (field, the stepper's step, the noise strength). ``dense`` (or ``auto`` on
    S^2): the identity sphere's 1/n field divided by :math:`e^\\beta` (``log_scale = beta``), the step dt and the
    noise :func:`time_rescaled_noise`; ``fourier`` (``auto`` on the circle): the 1/n field itself on the Fourier
    path, the step :math:`dt\\,e^{-\\beta}` and the noise sigma (the same layers, module docstring)."""
    from ..fields import build_field

    eye = jnp.eye(d, dtype=jnp.float32)
    if path == "fourier" or (path == "auto" and d == 2):
        field = build_field("sphere", eye, eye, eye, beta=beta, normalisation="mean", attention_impl="fourier",
                            fourier_max_score=beta)
        return field, dt * math.exp(-beta), sigma
    impl = "dense" if path == "dense" else "auto"
    field = build_field("sphere", eye, eye, eye, beta=beta, normalisation="mean", identity_weights=True,
                        log_scale=beta, attention_impl=impl)
    return field, dt, float(time_rescaled_noise(sigma, beta))


def particle_escape_times(beta, sigma_ratio, n: int, *, d: int = 2, start: str = "clustered", threshold=None,
                          systems: int = 16, t1: float = 400.0, dt: float = 0.1, burn: float = 20.0,
                          save_every: int = 10, seed: int = 0, clustered: dict | None = None,
                          attention_impl: str = "auto", confidence: float = 0.95) -> dict:
    r"""How long n noisy particles stay in the branch they start on, and its order parameter, at
    :math:`\sigma = \rho\,\sigma_c(\beta)` with 1/n attention on the circle (d = 2) or :math:`S^2` (d = 3).

    ``systems`` independent clouds (each its own start and Brownian path) of n particles, drawn from the PDE's
    stationary clustered state (``start="clustered"``; ``clustered`` a :func:`stationary_clustered_state` of the same
    beta, ratio and d, computed with its defaults when None) or iid uniform (``start="uniform"``), run the sphere flow
    with Q = K = V = I and :class:`~attnflow.integrate.TokenNoise` in stochastic layers renormalised onto the sphere
    (:class:`~attnflow.integrate.EulerMaruyamaStepper`), in the rescaled time :math:`\tau = e^\beta t` (module
    docstring): ``t1``, ``dt`` and ``burn`` are times :math:`\tau`, and the rescaled noise is
    :math:`\sigma e^{-\beta/2}`. ``attention_impl``: ``"auto"`` (the Fourier path on the circle, the identity sphere's
    automatic path on :math:`S^2`), ``"dense"`` or ``"fourier"`` (circle only): the same layers to rounding.

    The order parameter :math:`r = |\frac1n\sum_j x_j|` is read every ``save_every`` layers. A clustered cloud
    *escapes* at the first reading with r below ``threshold``, a uniform one at the first with r above it (default:
    half the clustered state's r); a cloud that never crosses is right-censored at ``t1``.

    Returns a dict: ``beta``, ``d``, ``n``, ``start``, ``ratio``, ``sigma``, ``sigma_c``, ``sigma_rescaled``,
    ``scale`` (:math:`e^\beta`: a time :math:`\tau` is :math:`e^\beta` times the PDE's t), ``threshold``,
    ``pde_r`` (the clustered state's r, NaN when not computed), ``beta_star``, ``times`` (the readings),
    ``r`` (systems, readings; NaN rows for the clouds that went non-finite, excluded from everything and counted in
    ``nonfinite``), ``lifetime`` and ``censored`` (systems,), ``events``, ``km`` (the Kaplan-Meier curve
    :func:`~attnflow.stats.kaplan_meier`: event times and survival), ``median`` (its median, None while more than
    half survive), ``surviving`` (the fraction still in its branch at t1 with its Wilson interval),
    ``mean_lifetime`` (the exponential law's maximum-likelihood mean, total time at risk over events, with its exact
    chi-square interval; inf with a lower bound when nothing escaped), ``branch_r`` and ``branch_n_r2`` (mean, lo,
    hi: the Student-t interval over the clouds of their time averages of r and :math:`n r^2` over the readings from
    ``burn`` to their escape), ``branch_systems`` (the clouds with such readings), ``n_r2_theory`` (the disordered
    branch's law :math:`\sigma^2/(\sigma^2-\sigma_c^2)`, :func:`~attnflow.meanfield.disordered_fluctuations`, the
    same in every dimension) and ``clipped`` (the negative mass of the PDE density dropped from the start).

    Example:
        >>> from attnflow.meanfield import particle_escape_times
        >>> out = particle_escape_times(4.0, 1.2, 64, start="uniform", threshold=0.6, systems=2, t1=4.0, dt=0.1,
        ...                             burn=1.0, save_every=5)
        >>> out["r"].shape, out["censored"].tolist(), round(out["sigma_rescaled"] / out["sigma"], 4)
        ((2, 8), [True, True], 0.1353)
    """
    from ..integrate import EulerMaruyamaStepper, SaveLayers, TokenNoise, sphere_shift
    from .._batching import vmap_systems
    from ..stats import kaplan_meier, mean_interval, survival_quantile, wilson_interval

    d = _check_dimension(d)
    v.check_beta("beta", beta, "the inverse temperature", scalar=True)
    beta = float(beta)
    ratio = v.check_number("sigma_ratio", sigma_ratio, "the noise strength over sigma_c", low=0)
    n = v.check_int("n", n, minimum=2, meaning="particles per system")
    start = v.check_choice("start", start, ("clustered", "uniform"), "the branch the clouds start on")
    attention_impl = v.check_choice("attention_impl", attention_impl, PATHS, "the attention path")
    if attention_impl == "fourier" and d != 2:
        raise InputError("attention_impl='fourier' is the circle's path (d = 2); on S^2 use 'auto' or 'dense'.")
    systems = v.check_int("systems", systems, minimum=2, meaning="independent systems (the intervals' samples)")
    layers = v.check_layers("t1", t1, "dt", dt)
    burn = v.check_number("burn", burn, "the time from which the branch's order parameter is read", low=0,
                          high=float(t1), closed="low")
    save_every = v.check_int("save_every", save_every, meaning="layers between two readings")
    if save_every > layers:
        raise InputError(f"save_every = {save_every} is more than the run's {layers} layers: no reading; lower it.")
    confidence = v.check_number("confidence", confidence, "the level of the intervals", low=0, high=1)
    sigma_c = float(critical_noise(beta, d, "mean"))
    sigma = ratio * sigma_c
    if clustered is not None:
        if not (isinstance(clustered, dict) and clustered.get("d") == d and "r" in clustered
                and math.isclose(clustered.get("beta", math.nan), beta)
                and math.isclose(clustered.get("ratio", math.nan), ratio)):
            raise InputError(f"clustered must be the stationary_clustered_state of the same beta = {beta:g}, "
                             f"sigma_ratio = {ratio:g} and d = {d}.")
    elif start == "clustered" or threshold is None:
        clustered = stationary_clustered_state(beta, ratio, d=d)
    pde_r = float(clustered["r"]) if clustered is not None else math.nan
    if threshold is None:
        if not (clustered["ordered"] and np.isfinite(pde_r)):
            raise InputError(f"the mean field has no stationary clustered state at sigma = {ratio:g} sigma_c (its r is "
                             f"{pde_r:.3g}, drift {clustered['drift']:.2g}): give a threshold, or a sigma_ratio in the "
                             f"bistable range.")
        threshold = pde_r / 2
    threshold = v.check_number("threshold", threshold, "the order parameter that ends a branch", low=0, high=1)
    cells, clipped = (None, 0.0)
    if start == "clustered":
        cells, clipped = _start_cells(clustered)
        cells = jnp.asarray(cells, jnp.float32)

    field, step, strength = _field_and_noise(beta, d, n, sigma, dt, attention_impl)
    saves = SaveLayers.given(range(save_every, layers + 1, save_every))
    times = np.arange(save_every, layers + 1, save_every) * dt

    def run(key):
        k_start, k_path = jax.random.split(key)
        x0 = _draw(k_start, n, d, cells)
        stepper = EulerMaruyamaStepper(step, layers, noise=TokenNoise(strength, k_path, sphere=True),
                                       shift=sphere_shift, save_at=saves, loop="fori", checkpoint=None)
        return stepper.solve(field, x0, save_fn=lambda t, y, args: jnp.linalg.norm(jnp.mean(y, axis=0))).ys

    keys = jax.random.split(jax.random.key(seed), systems)
    r = np.asarray(jax.jit(vmap_systems(run, tokens=n, itemsize=4))(keys), np.float64)  # (systems, readings)
    ok = np.all(np.isfinite(r), axis=1)
    r[~ok] = np.nan
    crossed = (r < threshold) if start == "clustered" else (r > threshold)
    hit = crossed.any(axis=1) & ok
    lifetime = np.where(hit, times[np.argmax(crossed, axis=1)], float(times[-1]))
    censored = ~hit
    life, cen = lifetime[ok], censored[ok]
    km_times, km_s = kaplan_meier(life, cen)
    events, exposure = int((~cen).sum()), float(life.sum())
    from scipy.stats import chi2

    tail = (1 - confidence) / 2
    if events:
        mean_life = [exposure / events, 2 * exposure / chi2.ppf(1 - tail, 2 * events),
                     2 * exposure / chi2.ppf(tail, 2 * events)]
    else:  # no escape: the one-sided bound of the Poisson count 0
        mean_life = [math.inf, exposure / -math.log(1 - confidence), math.inf]
    branch_r, branch_nr2 = [], []
    for row, end, kept in zip(r[ok], life, cen):
        inside = (times >= burn) & ((times < end) | kept)  # the readings in the branch: before the escape
        if inside.any():
            branch_r.append(row[inside].mean())
            branch_nr2.append((n * row[inside] ** 2).mean())
    pack = lambda values: [float(a[0]) for a in mean_interval(np.asarray(values, float).reshape(-1, 1), confidence)]
    total = int(ok.sum())
    return {"beta": beta, "d": d, "n": n, "start": start, "ratio": ratio, "sigma": sigma, "sigma_c": sigma_c,
            "sigma_rescaled": float(time_rescaled_noise(sigma, beta)),
            "scale": math.exp(beta), "threshold": threshold, "pde_r": pde_r, "beta_star": tricritical_beta(d),
            "times": times, "r": r, "lifetime": np.where(ok, lifetime, np.nan), "censored": censored & ok,
            "events": events, "km": (km_times, km_s), "median": survival_quantile(km_times, km_s, 0.5),
            "surviving": [float(cen.mean()) if total else math.nan, *wilson_interval(int(cen.sum()), total, confidence)],
            "mean_lifetime": mean_life, "branch_r": pack(branch_r), "branch_n_r2": pack(branch_nr2),
            "branch_systems": len(branch_r), "n_r2_theory": float(disordered_fluctuations(ratio)),
            "nonfinite": int((~ok).sum()), "clipped": clipped}
