r"""The units of work of the mean-field study on :math:`S^2` (``d = 3``): the circle's studies with harmonics.

* **convergence**: n particles drawn iid (:func:`~attnflow.meanfield.sample_sphere_density`) from the zonal start
  :func:`~attnflow.meanfield._sphere_study.sphere_start_coefficients`, moved by the ODE flow on the harmonic path
  (Tsit5, constant steps), against the continuity equation spectral to degree L
  (:func:`~attnflow.meanfield.solve_sphere_continuity`). The distance is
  :math:`D = \sqrt{E_1 + E_2 + E_3}` of the difference of their harmonic coefficients
  (:func:`~attnflow.meanfield.sphere_degree_energies`): the MMD of the kernel :math:`\sum_{l=1}^3 (2l+1)P_l`, exact
  for the measures (no grid, no histogram), with the known bias of iid draws
  :math:`\mathbb E D^2 = \sum_{l \le 3}\sum_m \mathrm{Var}\,Y_{lm}(X)/n` (15/n for the uniform measure), so
  :math:`D \propto n^{-1/2}` while the particles follow the PDE;
* **growth**: near-uniform starts (:func:`~attnflow.meanfield._sphere_study.near_uniform_sphere_start`, every degree
  :math:`l \le` ``modes`` of amplitude :math:`\varepsilon/2`) and the PDE from the same first-order density; the
  amplitude :math:`\sqrt{E_l}` of each degree (:func:`attnflow.kernels.sphere.degree_energies`, O(n L^2)) against
  the Funk-Hecke rate :math:`\lambda_l` (:func:`~attnflow.meanfield.sphere_growth_rates`), and the clusters that form
  (:func:`~attnflow.meanfield.sphere_cluster_count`: connected cells of 32 x 64 with at least ``min_mass``, 0 while
  the cloud is spread);
* **largest**: the largest n on the harmonic path, Euler layers renormalised onto the sphere;
* **transition**: :func:`~attnflow.meanfield.noisy_sphere_transition` over sigma = ratio x sigma_c(beta, d = 3)
  (:func:`~attnflow.meanfield._study_units.transition_units`, shared with the circle).
"""

from __future__ import annotations

import math

import numpy as np

from ._study_units import _conv_name, _growth_name, _transition_name, growth_rows, largest_run, time_scale

__all__ = ["sphere_units", "sphere_convergence", "sphere_growth", "sphere_largest", "DISTANCE_DEGREE"]

#: the distance of the convergence study compares the harmonics of degrees 1..DISTANCE_DEGREE
DISTANCE_DEGREE = 3
#: state copies a particle solve on the harmonic path holds at once (Tsit5's stages and the path's temporaries)
SOLVE_COPIES = 16
#: float64 numbers per particle on the host beside a solve (the draw, the start)
HOST_NUMBERS = 12


#: the density figure's histogram has about this many particles per cell (fewer cells show sampling noise)
PARTICLES_PER_CELL = 64


def histogram_shape(bins: int, n: int) -> tuple[int, int]:
    """(rows of z, columns of phi) of the density figure's histogram of n particles: equal-area cells, twice as many
    columns as rows, about :data:`PARTICLES_PER_CELL` particles per cell, at most ``bins`` columns, at least 8.

    Example:
        >>> from attnflow.meanfield._sphere_units import histogram_shape
        >>> histogram_shape(128, 65536), histogram_shape(128, 1000), histogram_shape(16, 10**6)
        ((23, 46), (4, 8), (8, 16))
    """
    columns = min(bins, max(8, 2 * round(math.sqrt(n / (2 * PARTICLES_PER_CELL)))))
    columns -= columns % 2
    return columns // 2, columns


def _window(config, beta: float, norm: str) -> tuple[np.ndarray, float, float, float, int, int, float]:
    """(the predicted rates of degrees 1..modes, the linear window, the clusters' horizon, the fastest rate, l*,
    the runner-up, the margin): the window and horizon in units of the fastest degree's rate (which may lie above
    the fitted degrees)."""
    from ._linear import sphere_growth_rates

    g = config.growth
    top_degree = max(64, 2 * g.modes)
    lam_all = np.asarray(sphere_growth_rates(beta, 3, top_degree, norm), float)
    order = np.argsort(lam_all[1:])[::-1] + 1
    star, runner = int(order[0]), int(order[1])
    top = float(lam_all[star])
    margin = (top - float(lam_all[runner])) / top
    return (lam_all[1:g.modes + 1], 1.5 * math.log(2 * g.max_amplitude / g.epsilon) / top, g.horizon / top, top,
            star, runner, margin)


def _growth_dt(config, beta: float, norm: str) -> float:
    lam, t_lin, _, top, *_ = _window(config, beta, norm)
    return min(0.05 / top, t_lin / (config.growth.saves - 1))


def sphere_units(config) -> list[dict]:
    """The plan of a ``d = 3`` config: every unit's name, size key, estimated peak bytes and work (particle-steps,
    or coefficient-steps for the PDE)."""
    c, g, la = config.convergence, config.growth, config.largest
    item = 8 if config.dtype == "float64" else 4
    frames = len(np.union1d(c.times, np.linspace(0.0, c.times[-1], c.frames)))
    units = []
    for norm in config.normalisations:
        size = (c.degree + 1) ** 2
        units.append({"name": _conv_name(norm), "key": "convergence.degree", "n": c.degree,
                      "bytes": item * (size * (frames + 64) + 40 * size), "work": size * c.times[-1] / c.pde_dt})
        for n in c.n:
            for s in range(c.seeds):
                hist = math.prod(histogram_shape(c.bins, n)) if (n == c.n[-1] and s == 0) else 0
                units.append({"name": _conv_name(norm, n, s), "key": "convergence.n", "n": n,
                              "bytes": item * (3 * n * SOLVE_COPIES + frames * (hist + 16)) + 8 * HOST_NUMBERS * n,
                              "work": n * c.times[-1] / c.dt})
        for b, beta in enumerate(g.beta):
            _, t_lin, t_hor, *_ = _window(config, beta, norm)
            steps = max(t_hor, t_lin) / _growth_dt(config, beta, norm)
            size = (g.degree + 1) ** 2
            for s in range(g.seeds):
                units.append({"name": _growth_name(norm, b, s, "particles"), "key": "growth.n", "n": g.n,
                              "bytes": item * 3 * g.n * SOLVE_COPIES + 8 * g.n * HOST_NUMBERS, "work": g.n * steps})
                units.append({"name": _growth_name(norm, b, s, "pde"), "key": "growth.degree", "n": g.degree,
                              "bytes": item * size * (g.saves + 104), "work": size * steps})
        tr = config.transition
        for b, _ in enumerate(tr.beta):
            size = (tr.degree + 1) ** 2
            units.append({"name": _transition_name(norm, b), "key": "transition.degree", "n": tr.degree,
                          "bytes": 8 * size * 104, "work": 2 * len(tr.sigma_ratios) * size * tr.t1 / tr.dt})
    units.append({"name": "largest", "key": "largest.n", "n": la.n, "bytes": item * 3 * la.n * 8 + 8 * 3 * la.n,
                  "work": la.n * la.layers})
    return units


def _solver(units, kind: str, n: int, beta, norm: str, ts, dt, dtype, save_fn, sigma: float = 0.0):
    """One compiled solve (``attention_impl="auto"``: the harmonic path from n >= 4 (L + 1)^2 tokens, where it is
    the faster one, else the dense sum; both exact to rounding) per (kind, n, beta, normalisation, times, dt,
    sigma), kept in ``units.cache`` (the seeds of one n reuse it)."""
    import jax.numpy as jnp

    from ._study import sphere_solver

    entry = ("sphere", kind, int(n), float(beta), norm, tuple(np.asarray(ts, float)), float(dt),
             str(np.dtype(dtype)), float(sigma))
    if entry not in units.cache:
        units.cache[entry] = sphere_solver(float(beta), jnp.asarray(ts, dtype), norm, d=3, save=save_fn,
                                           attention_impl="auto", dt=float(dt), sigma=float(sigma))
    return units.cache[entry]


def sphere_convergence(config, units, norm: str, dtype, noise_stream: int) -> dict | None:
    """Particles against the PDE on S^2 (module docstring) for one normalisation; None in the first pass of a
    multi-process run."""
    import jax
    import jax.numpy as jnp

    from ._measures import sphere_histogram
    from ._sphere_pde import (sample_sphere_density, solve_sphere_continuity, sphere_degree_energies,
                              sphere_empirical_coefficients)
    from ._sphere_study import sphere_start_coefficients

    c = config.convergence
    scale = time_scale(c.beta, norm, 3)
    times = np.asarray(c.times) * scale
    frames = np.linspace(0.0, times[-1], c.frames)
    ts_pde = np.union1d(times, frames)
    start = sphere_start_coefficients(c.degree, c.start_modes, c.start_amplitudes, c.start_phases)
    size = (DISTANCE_DEGREE + 1) ** 2
    nz, nphi = histogram_shape(c.bins, c.n[-1])

    def pde():
        path = solve_sphere_continuity(jnp.asarray(start, dtype), c.beta, jnp.asarray(ts_pde, dtype), degree=c.degree,
                                       normalisation=norm, dt=c.pde_dt * scale,
                                       **({"sigma": c.sigma} if c.sigma else {}))
        return {"ts": path.ts, "coefficients": path.coefficients, "mass": path.mass, "min_density": path.min_density,
                "result": path.result, "discarded": path.discarded}

    sol = units.get(_conv_name(norm), pde)
    at = np.searchsorted(ts_pde, times)

    def solution() -> dict:
        return sol if sol is not None else units.need(_conv_name(norm), pde)

    distance = np.full((len(c.n), c.seeds, len(c.times)), np.nan)
    histogram = None
    for i, n in enumerate(c.n):
        for s in range(c.seeds):
            def particles(n=n, s=s):
                key = jax.random.fold_in(jax.random.fold_in(jax.random.key(config.seed), n), s)
                x0 = sample_sphere_density(key, jnp.asarray(start, dtype), n).astype(dtype)
                frames_too = n == c.n[-1] and s == 0  # the density figure: histograms at every frame too
                ts = ts_pde if frames_too else times

                def save(y):
                    out = {"coefficients": sphere_empirical_coefficients(y, DISTANCE_DEGREE)}
                    if frames_too:
                        out["hist"] = sphere_histogram(y, nz, nphi)
                    return out

                run = _solver(units, "frames" if frames_too else "states", n, c.beta, norm, ts, c.dt * scale, dtype,
                              save, sigma=c.sigma)
                saved = run(x0, jax.random.fold_in(key, noise_stream)) if c.sigma else run(x0)
                mine = np.asarray(saved["coefficients"])[np.searchsorted(ts, times)]
                target = np.asarray(solution()["coefficients"])[at][:, :size]
                energies = np.asarray(sphere_degree_energies(jnp.asarray(mine - target)))
                out = {"hist": saved["hist"], "frames": ts} if frames_too else {}
                out["distance"] = np.sqrt(np.sum(energies[:, 1:], axis=1))
                return out

            got = units.get(_conv_name(norm, n, s), particles)
            if units.first_pass:
                continue
            distance[i, s] = got["distance"]
            if "hist" in got:
                histogram = (got["frames"], got["hist"])
    if units.first_pass:
        return None
    return {"w1": distance, "pde_ts": np.asarray(sol["ts"]), "pde_coefficients": np.asarray(sol["coefficients"]),
            "mass": np.asarray(sol["mass"]), "min_density": np.asarray(sol["min_density"]),
            "pde_result": int(sol["result"]), "discarded": float(sol["discarded"]), "frames": histogram,
            "times": times, "time_scale": scale,
            "pde_negative": np.minimum.accumulate(np.asarray(sol["min_density"])[at]) < 0}


def sphere_growth(config, units, norm: str, dtype) -> list[dict]:
    """Degree growth from near-uniform starts on S^2 (module docstring) for one normalisation, one row per (beta,
    seed, degree); empty in the first pass of a multi-process run."""
    import jax.numpy as jnp

    from ..kernels.sphere import degree_energies
    from ._clusters import sphere_cluster_count
    from ._sphere_pde import solve_sphere_continuity
    from ._sphere_study import near_uniform_sphere_start

    g = config.growth
    rows = []
    for b, beta in enumerate(g.beta):
        lam, t_lin, t_hor, _, star, runner, margin = _window(config, beta, norm)
        ts_lin = np.linspace(0.0, t_lin, g.saves)
        ts_all = np.union1d(ts_lin, np.linspace(0.0, max(t_hor, t_lin), g.saves))
        dt = _growth_dt(config, beta, norm)
        for s in range(g.seeds):
            rng = np.random.default_rng([config.seed, 2, b, s])
            x0, rel = near_uniform_sphere_start(g.n, g.modes, g.epsilon, rng)

            def particles(x0=x0):
                run = _solver(units, "growth", g.n, beta, norm, ts_all, dt, dtype, lambda y: {
                    "energies": degree_energies(y, g.modes),
                    # a float count: diffrax pre-fills its outputs with inf, which no integer holds
                    "clusters": sphere_cluster_count(y, g.min_mass).astype(y.dtype)})
                saved = run(jnp.asarray(x0, dtype))
                return {"ts": ts_all, "modes": jnp.sqrt(jnp.maximum(saved["energies"], 0)),
                        "clusters": saved["clusters"].astype(jnp.int32)}

            def pde(rel=rel):
                a = np.zeros((g.degree + 1) ** 2)
                a[:rel.size] = rel
                a[0] = 1.0
                path = solve_sphere_continuity(jnp.asarray(a / (4 * math.pi), dtype), beta, jnp.asarray(ts_lin, dtype),
                                               degree=g.degree, normalisation=norm, dt=dt)
                return {"ts": ts_lin, "modes": jnp.sqrt(jnp.maximum(path.energies()[:, :g.modes + 1], 0)),
                        "min_density": path.min_density, "result": path.result}

            p = units.get(_growth_name(norm, b, s, "particles"), particles)
            q = units.get(_growth_name(norm, b, s, "pde"), pde)
            if units.first_pass:
                continue
            rows += growth_rows(norm, beta, s, p, q, ts_lin, lam, g, (star, runner, margin))
    return rows


def sphere_largest(config, units, dtype) -> dict | None:
    """One timed run of ``largest.n`` uniform tokens on S^2, Euler layers on the harmonic path."""
    import jax.numpy as jnp

    from ..fields import build_field

    la = config.largest

    def prepare():
        rng = np.random.default_rng([config.seed, 3])
        x = rng.normal(size=(la.n, 3))
        eye = jnp.eye(3, dtype=dtype)
        return (jnp.asarray(x / np.linalg.norm(x, axis=1, keepdims=True), dtype),
                build_field("sphere", eye, eye, eye, beta=la.beta, attention_impl="harmonic"))

    return largest_run(units, prepare, la.layers, la.dt)
