r"""Particles against the continuity equation: W1 between the n-particle circle flow and its mean-field limit.

From one initial density :math:`\rho_0` on the circle, :func:`particles_vs_pde` solves the continuity
equation (:func:`~attnflow.meanfield.solve_continuity`) and, for each n and seed, draws n i.i.d.
particles from :math:`\rho_0` (:func:`draw_from_density`), runs them with the project's own sphere flow
(:func:`attnflow.dynamics.sphere_flow` with Q = K = V = I, integrated by
:func:`attnflow.integrate.solve_ode`; the direct attention path, O(n^2) per evaluation) and measures
:math:`W_1(\mu^n_t, \rho_t)` exactly (:func:`~attnflow.meanfield.circle_w1_to_density`, the PDE's
density read through its trigonometric interpolant on a grid ``refine`` times finer). At fixed t
the law of large numbers for the empirical measure of i.i.d. draws gives
:math:`\mathbb E\, W_1(\mu^n_0, \rho_0) \asymp n^{-1/2}` on the circle, and the flow's stability
in W1 (cf. Geshkovski, Letrouit, Polyanskiy and Rigollet, 2023; Chen, Lin, Polyanskiy and Rigollet,
*Quantitative clustering in mean-field transformer models*, 2025) carries that rate to later
times with a constant growing in t: the slope of :math:`\log W_1` against :math:`\log n` is
expected near :math:`-1/2`. It is fitted by least squares over all (n, seed) pairs, with a
Student-t interval.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .. import _validate as v
from .._x64 import float64_scope_for, keeps_float64, wants_float64
from ..errors import InputError
from ._distances import circle_w1_to_density
from ._pde import _check_density, _check_normalisation, _interpolate, interpolate_density, solve_continuity

__all__ = ["draw_from_density", "particles_vs_pde", "fit_power_law", "circle_solver", "sphere_solver"]

TWO_PI = 2 * math.pi


@keeps_float64
def draw_from_density(key, density: Float[Array, " G"], n: int, refine: int = 16) -> Float[Array, " n"]:
    r"""n i.i.d. angles from a grid density: exact draws from the piecewise-constant density on a grid
    ``refine`` times finer, filled in by trigonometric interpolation (:func:`~attnflow.meanfield._pde.interpolate_density`;
    negative values of the interpolant are set to 0 first).

    The inverse distribution function of the cells is applied to uniform numbers: O(n log(G refine)).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from attnflow.meanfield import circle_w1_to_density
        >>> from attnflow.meanfield._study import draw_from_density
        >>> th = draw_from_density(jax.random.key(0), jnp.ones(16), 4000)
        >>> float(circle_w1_to_density(th, jnp.ones(16))) < 0.05    # about n^{-1/2} / 2
        True
    """
    density = _check_density(density)
    n = v.check_int("n", n, meaning="the number of particles")
    refine = v.check_int("refine", refine, meaning="how many times finer the sampling grid is")
    return _draw(key, density, n, refine)


@functools.partial(jax.jit, static_argnames=("n", "refine"))
def _draw(key, density, n: int, refine: int):
    fine = jnp.maximum(_interpolate(density, density.shape[0] * refine), 0)
    cells = fine.shape[0]
    h = TWO_PI / cells
    cumulative = jnp.cumsum(fine) / jnp.sum(fine)
    u = jax.random.uniform(key, (n,), fine.dtype)
    index = jnp.clip(jnp.searchsorted(cumulative, u, side="right"), 0, cells - 1)
    below = jnp.where(index > 0, cumulative[jnp.maximum(index - 1, 0)], 0)
    within = (u - below) / jnp.maximum(cumulative[index] - below, jnp.finfo(fine.dtype).tiny)
    # cell g is [theta_g - h/2, theta_g + h/2), theta_g = g h
    return jnp.mod((index + jnp.clip(within, 0, 1) - 0.5) * h, TWO_PI)


def fit_power_law(ns, values, confidence: float = 0.95) -> dict:
    r"""Least-squares slope of :math:`\log(\text{value})` against :math:`\log n` over all samples.

    ``values`` (S, N): S repetitions (seeds) at each of the N sizes ``ns``. Returns ``slope``,
    ``lo``, ``hi`` (Student-t interval, :func:`attnflow.stats.fit_slope`), ``intercept`` (of the natural logarithms) and ``points``.

    Example:
        >>> import numpy as np
        >>> from attnflow.meanfield._study import fit_power_law
        >>> ns = np.array([100, 400, 1600])
        >>> fit = fit_power_law(ns, np.array([2.0 / np.sqrt(ns), 3.0 / np.sqrt(ns)]))
        >>> round(fit["slope"], 6), fit["points"]
        (-0.5, 6)
    """
    from ..stats import fit_slope

    ns = np.asarray(ns, float)
    values = np.atleast_2d(np.asarray(values, float))
    if values.shape[-1] != ns.shape[0]:
        raise InputError(f"values must be (repetitions, len(ns) = {ns.shape[0]}), got shape {values.shape}.")
    x = np.broadcast_to(np.log(ns), values.shape).ravel()
    y = values.ravel()
    ok = np.isfinite(y) & (y > 0)
    x, y = x[ok], np.log(y[ok])
    if x.size < 3 or np.ptp(x) == 0:
        return {"slope": float("nan"), "lo": float("nan"), "hi": float("nan"), "intercept": float("nan"),
                "points": int(x.size)}
    fit = fit_slope(x, y, confidence)
    return {"slope": fit["slope"], "lo": fit["lo"], "hi": fit["hi"], "intercept": fit["intercept"],
            "points": int(x.size)}


def circle_solver(beta, ts, normalisation: str = "softmax", *, save=None, attention_impl: str = "dense",
                  dt: float | None = None, rtol: float = 1e-5, atol: float = 1e-6, sigma: float = 0.0):
    r"""A jitted map tokens (n, 2) -> ``save(y)`` at the times ``ts`` of the sphere flow with Q = K = V = I on
    the circle (default ``save``: the angles :math:`\theta_i \in [0, 2\pi)`, (T, n)): :func:`sphere_solver`
    with d = 2. ``attention_impl="fourier"`` runs the O(n K) path (exact to rounding for scores up to beta).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.meanfield._study import circle_solver
        >>> theta = jnp.array([0.0, 0.5, 1.0, 4.0])
        >>> run = circle_solver(2.0, jnp.linspace(0.0, 1.0, 3), dt=0.05, attention_impl="fourier")
        >>> run(jnp.stack([jnp.cos(theta), jnp.sin(theta)], axis=1)).shape    # (T, n) angles
        (3, 4)
    """
    save = (lambda y: jnp.mod(jnp.arctan2(y[..., 1], y[..., 0]), TWO_PI)) if save is None else save
    return sphere_solver(beta, ts, normalisation, d=2, save=save, attention_impl=attention_impl, dt=dt, rtol=rtol,
                         atol=atol, sigma=sigma)


def sphere_solver(beta, ts, normalisation: str = "softmax", *, d: int = 3, save=None, attention_impl: str = "dense",
                  dt: float | None = None, rtol: float = 1e-5, atol: float = 1e-6, sigma: float = 0.0):
    r"""A jitted map tokens (n, d) -> ``save(y)`` (default: the tokens, (T, n, d)) at the times ``ts`` of the sphere
    flow with Q = K = V = I on :math:`S^{d-1}`, through :func:`attnflow.integrate.solve_ode` with Tsit5: adaptive
    with ``rtol`` / ``atol``, or constant steps of ``dt``. ``attention_impl`` is any of the sphere field's
    (``"fourier"`` on the circle, ``"harmonic"`` on :math:`S^2`: the O(n K) and O(n L^2) paths, exact to rounding for
    scores up to beta). Compiled once per n; ``ts`` (concrete) sets the dtype (float64 ``ts`` run in float64, JAX's
    float64 mode switched on for each call). ``sigma > 0``: tokens with independent noise
    (:class:`attnflow.integrate.TokenNoise` on the sphere), a Stratonovich Heun solve in constant steps ``dt``
    (required) on the Brownian path of the key the map then takes: ``run(x0, key)``.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.meanfield._study import sphere_solver
        >>> x0 = jnp.array([[0.0, 0.0, 1.0], [0.6, 0.0, 0.8], [0.0, -1.0, 0.0], [0.0, 0.8, -0.6]])
        >>> y = sphere_solver(2.0, jnp.linspace(0.0, 1.0, 3), dt=0.05)(x0)
        >>> y.shape, bool(jnp.allclose(jnp.linalg.norm(y, axis=-1), 1.0, atol=1e-5))    # (T, n, d), on S^2
        ((3, 4, 3), True)
    """
    from ..fields import build_field
    from ..integrate import SDESolver, TokenNoise, solve_ode

    probe = np.zeros(0, np.float64) if wants_float64(ts) else None  # float64 save times: float64 solves
    scope = lambda: float64_scope_for(probe)
    with scope():
        ts = jnp.asarray(ts)
    t0, t1 = float(ts[0]), float(ts[-1])
    d = v.check_int("d", d, 2, "the dimension of the tokens, S^{d-1}")
    options = {"fourier_max_score": float(beta)} if attention_impl == "fourier" else {}
    save = (lambda y: y) if save is None else save

    noisy = sigma != 0
    if noisy and dt is None:
        raise InputError("a solver with noise (sigma > 0) steps with a constant dt: give dt > 0.")

    # built once, outside the transformations (the sphere path chooses its degree from the concrete weights), and
    # refused now, in one sentence, when the attention path does not apply
    with scope():
        eye = jnp.eye(d, dtype=ts.dtype)
        field = build_field("sphere", eye, eye, eye, beta=beta, stepper="ode", attention_impl=attention_impl,
                            normalisation=normalisation, **options)

    @jax.jit
    def run(x0):
        return solve_ode(field, x0, t0=t0, t1=t1, ts=ts, solver="tsit5", rtol=rtol, atol=atol, dt0=dt,
                         adaptive=dt is None, max_steps=16384 if dt is None else None,
                         save_fn=lambda t, y, args: save(y)).ys

    @jax.jit
    def run_noisy(x0, key):
        solver = SDESolver(t0, t1, dt=dt, noise=TokenNoise(sigma, key, sphere=True), ts=ts, solver="heun")
        return solver.solve(field, x0, save_fn=lambda t, y, args: save(y)).ys

    def call(x0, key=None):
        if noisy and key is None:
            raise InputError("this solver has noise: call it with a key, run(x0, key).")
        with scope():
            return run_noisy(x0, key) if noisy else run(x0)

    return call


@keeps_float64
def particles_vs_pde(beta, density0: Float[Array, " G"], ns, ts, *, seeds: int = 4, normalisation: str = "softmax",
                     steps_per_save: int = 40, refine: int = 16, key=None, particle_dtype=jnp.float32,
                     rtol: float = 1e-5, atol: float = 1e-6, sigma: float = 0.0, attention_impl: str = "dense",
                     particle_dt: float | None = None) -> dict:
    r"""W1 between the n-particle sphere flow on the circle and the continuity equation, from one density.

    Args:
        beta: inverse temperature.
        density0: the initial density on :func:`~attnflow.meanfield.circle_grid` (G,), smooth enough
            to be resolved by the spectral scheme until ``ts[-1]`` (check ``pde.min_density``).
        ns: particle numbers.
        ts: times (T,), from the start ``ts[0]``.
        seeds: independent draws per n.
        steps_per_save: RK4 steps of the PDE between two times.
        refine: the PDE's density is interpolated onto G x refine cells for W1 and sampling.
        particle_dtype: the particles' precision (W1 is computed in the PDE's precision).
        rtol, atol: tolerances of the particles' adaptive solve (Tsit5).
        sigma: independent noise on every particle (its strength; the PDE then has the diffusion
            :math:`\frac{\sigma^2}2\partial_\theta^2`): the particles take Stratonovich Heun steps of ``particle_dt``
            (default: the shortest interval of ``ts`` / ``steps_per_save``), each seed its own Brownian path.
        attention_impl: the particles' attention (``"fourier"``: the O(n K) path, for large n).

    Returns a dict: ``ns``, ``ts``, ``w1`` (seeds, N, T), ``fits`` (one :func:`fit_power_law` per
    time), ``pde`` (the :class:`~attnflow.meanfield.DensityPath`) and ``pde_negative`` (T,): True
    where the PDE's density had gone below 0 by that time (the spectral solution no longer
    resolves the clusters; W1 and its fit there compare the particles with an unresolved limit). Host-side loop over n and seeds
    (one compiled particle solve per n).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.meanfield import perturbed_uniform_density
        >>> from attnflow.meanfield._study import particles_vs_pde
        >>> out = particles_vs_pde(1.0, perturbed_uniform_density(32, 1, 0.5), [32], jnp.array([0.0, 0.5]),
        ...                        seeds=1, steps_per_save=10)
        >>> out["w1"].shape, bool(out["w1"].max() < 0.5), out["pde_negative"].tolist()
        ((1, 1, 2), True, [False, False])
    """
    density0 = _check_density(density0, "density0")
    normalisation = _check_normalisation(normalisation)
    ns = [v.check_int("ns", int(n), meaning="particle numbers") for n in np.atleast_1d(ns)]
    seeds = v.check_int("seeds", seeds, meaning="independent draws per n")
    v.check_beta("beta", beta, "the inverse temperature", scalar=True)
    ts = jnp.asarray(ts, density0.dtype)
    v.check_real("sigma", sigma, "the noise strength, >= 0")
    if float(sigma) < 0:
        raise InputError(f"sigma must be >= 0 (the noise strength), got {float(sigma)!r}.")
    pde = solve_continuity(density0, beta, ts, normalisation=normalisation, steps_per_save=steps_per_save,
                           sigma=float(sigma))
    fine = jax.vmap(lambda r: interpolate_density(r, density0.shape[0] * refine))(pde.density)
    key = jax.random.key(0) if key is None else key
    noisy = float(sigma) > 0
    if noisy and particle_dt is None:
        particle_dt = float(jnp.min(jnp.diff(ts))) / steps_per_save
    run = circle_solver(beta, ts.astype(particle_dtype), normalisation, rtol=rtol, atol=atol, sigma=float(sigma),
                        attention_impl=attention_impl, dt=particle_dt if noisy else None)
    w1 = np.full((seeds, len(ns), ts.shape[0]), np.nan)
    for j, n in enumerate(ns):
        for s in range(seeds):
            theta0 = draw_from_density(jax.random.fold_in(jax.random.fold_in(key, n), s), density0, n, refine)
            x0 = jnp.stack([jnp.cos(theta0), jnp.sin(theta0)], axis=1).astype(particle_dtype)
            path_key = jax.random.fold_in(jax.random.fold_in(jax.random.fold_in(key, n), s), 1)
            angles = (run(x0, path_key) if noisy else run(x0)).astype(density0.dtype)
            w1[s, j] = [float(circle_w1_to_density(angles[i], fine[i])) for i in range(ts.shape[0])]
    fits = [fit_power_law(ns, w1[:, :, i]) for i in range(ts.shape[0])]
    negative = np.minimum.accumulate(np.asarray(pde.min_density)) < 0
    return {"ns": np.asarray(ns), "ts": np.asarray(ts), "w1": w1, "fits": fits, "pde": pde, "pde_negative": negative}
