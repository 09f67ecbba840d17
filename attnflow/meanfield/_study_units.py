"""What the circle's and the sphere's units of the mean-field study share: the units' names, the time unit, the
reading of a cluster count over time, the rows of the growth study and the largest run."""

from __future__ import annotations

import math
import time

import numpy as np

__all__ = ["time_scale"]


def time_scale(beta: float, normalisation: str, d: int = 2) -> float:
    r"""The unit of time of the convergence study: 1 for softmax, :math:`1/I_0(\beta)` for the mean
    normalisation, whose velocity :math:`\frac1\beta\partial_\theta(K*\rho)` is :math:`K*\rho \approx I_0(\beta)`
    times the softmax one :math:`\frac1\beta\partial_\theta\log(K*\rho)` near the uniform measure (so both
    normalisations are compared at the same stage of their evolution); on :math:`S^2` (``d = 3``) the mean
    of the kernel over the uniform measure is :math:`\sinh(\beta)/\beta` instead of :math:`I_0(\beta)`.

    Example:
        >>> from attnflow.meanfield import time_scale
        >>> time_scale(3.0, "softmax"), round(time_scale(3.0, "mean"), 4), round(time_scale(3.0, "mean", 3), 4)
        (1.0, 0.2049, 0.2995)
    """
    if normalisation == "softmax":
        return 1.0
    if d == 3:
        return float(beta / math.sinh(beta))
    from scipy.special import i0

    return float(1.0 / i0(beta))



def _conv_name(norm: str, n: int | None = None, s: int | None = None) -> str:
    return f"{norm}-convergence-pde" if n is None else f"{norm}-convergence-n{n}-s{s}"


def _growth_name(norm: str, b: int, s: int, part: str) -> str:
    return f"{norm}-growth-b{b}-s{s}-{part}"


def _transition_name(norm: str, b: int) -> str:
    return f"{norm}-transition-b{b}"


def _first_merge(ts: np.ndarray, gaps: np.ndarray) -> tuple[int | None, float, float, bool]:
    """(clusters formed, their formation time, lifetime, censored) from the gap counts of a near-uniform
    start (:func:`~attnflow.meanfield.circle_gaps`; 0 while the cloud still covers the circle): the clusters
    have formed at the first save with at least one gap from which the count holds for a tenth of the
    remaining horizon; the lifetime runs from then to the first save with fewer clusters (censored at the
    horizon). None when no clusters form before the horizon."""
    for i in np.nonzero(gaps >= 1)[0]:
        hold = 0.1 * (ts[-1] - ts[i])
        later = np.nonzero(gaps[i:] != gaps[i])[0]
        if later.size and ts[i + later[0]] - ts[i] < hold:
            continue
        drop = np.nonzero(gaps[i:] < gaps[i])[0]
        if drop.size:
            return int(gaps[i]), float(ts[i]), float(ts[i + drop[0]] - ts[i]), False
        return int(gaps[i]), float(ts[i]), float(ts[-1] - ts[i]), True
    return None, math.nan, math.nan, True


def _num(x) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def largest_run(units, prepare, layers: int, dt: float) -> dict | None:
    """The largest run's unit: ``layers`` Euler layers of ``dt`` renormalised onto the sphere from the start and field
    that ``prepare()`` returns (called only when the unit is computed, not when it is read back), compiled ahead and
    timed (compile and run apart), with the compiled program's temporaries; None in the first pass of a
    multi-process run when another process computes it."""

    def run():
        import jax
        import jax.numpy as jnp

        from ..integrate import EulerStepper, sphere_shift

        x0, field = prepare()
        stepper = EulerStepper(dt, layers, shift=sphere_shift, save_every=layers)
        solve = jax.jit(lambda x: stepper.solve(field, x).ys[-1])
        t = time.perf_counter()
        compiled = solve.lower(x0).compile()
        compile_s = time.perf_counter() - t
        t = time.perf_counter()
        y = jax.block_until_ready(compiled(x0))
        run_s = time.perf_counter() - t
        memory = compiled.memory_analysis()
        temp = getattr(memory, "temp_size_in_bytes", None) if memory is not None else None
        return {"compile_s": compile_s, "run_s": run_s, "finite": bool(jnp.all(jnp.isfinite(y))),
                "state_bytes": int(x0.size * x0.dtype.itemsize), "temp_bytes": -1 if temp is None else int(temp)}

    got = units.get("largest", run)
    if units.first_pass:
        return None
    return {k: (float(v) if k.endswith("_s") else int(v) if k.endswith("bytes") else bool(v)) for k, v in got.items()
            if k != "seconds"}


def growth_rows(norm: str, beta: float, seed: int, particles: dict, pde: dict, ts_lin, lam, growth,
                fastest: tuple[int, int, float]) -> list[dict]:
    """One row per mode (harmonic degree on S^2) of a near-uniform start: the rates of the particles' and the PDE's
    amplitudes (``modes`` (T, K + 1), mode 0 first) over the joint linear window of the saves ``ts_lin``
    (:func:`~attnflow.meanfield.fit_growth_rates`), against the prediction ``lam`` (K,), with the fastest mode, its
    runner-up and margin (``fastest``) and the clusters read from the particles' counts (:func:`_first_merge`)."""
    from ._linear import fit_growth_rates

    g = growth
    in_lin = np.isin(particles["ts"], ts_lin)
    fit_p = fit_growth_rates(particles["ts"][in_lin], particles["modes"][in_lin][:, 1:], max_amplitude=g.max_amplitude)
    fit_q = fit_growth_rates(pde["ts"], pde["modes"][:, 1:], max_amplitude=g.max_amplitude)
    formed, t_form, life, censored = _first_merge(np.asarray(particles["ts"]), np.asarray(particles["clusters"]))
    star, runner, margin = fastest
    return [{"normalisation": norm, "beta": beta, "seed": seed, "k": k + 1, "predicted": float(lam[k]),
             **{f"particles_{key}": _num(fit_p[key][k]) for key in ("rate", "lo", "hi")},
             **{f"pde_{key}": _num(fit_q[key][k]) for key in ("rate", "lo", "hi")},
             "particles_points": int(fit_p["points"][k]), "pde_points": int(fit_q["points"][k]),
             "k_star": star, "k_star_runner_up": runner, "k_star_margin": margin,
             "clusters_formed": formed, "formed_at": t_form, "lifetime": life,
             "censored": censored, "horizon": float(particles["ts"][-1]),
             "pde_min_density": float(np.min(pde["min_density"]))} for k in range(g.modes)]


def transition_units(config, units, norm: str) -> list[dict]:
    """Per beta of the transition study: the noisy continuity equation's order parameter over sigma = ratio x sigma_c
    (:func:`~attnflow.meanfield.noisy_transition` on the circle, :func:`~attnflow.meanfield.noisy_sphere_transition`
    on S^2; float64 whatever the config's dtype: a long run near a marginal mode); empty in the first pass of a
    multi-process run."""
    from ._linear import critical_noise
    from ._sphere_transition import noisy_sphere_transition
    from ._transition import noisy_transition

    tr = config.transition
    out = []
    for b, beta in enumerate(tr.beta):
        sigma_c = float(critical_noise(beta, config.d, norm))

        def compute(beta=beta, sigma_c=sigma_c):
            sigmas = np.asarray(tr.sigma_ratios) * sigma_c
            common = {"normalisation": norm, "t1": tr.t1, "dt": tr.dt, "eps": tr.epsilon, "kappa": tr.kappa}
            res = (noisy_sphere_transition(beta, sigmas, degree=tr.degree, **common) if config.d == 3
                   else noisy_transition(beta, sigmas, num_points=tr.grid, **common))
            return {key: np.asarray(res[key], np.float64) for key in
                    ("sigma", "from_uniform", "from_clustered", "drift", "min_density")}

        got = units.get(_transition_name(norm, b), compute)
        if units.first_pass:
            continue
        out.append({"normalisation": norm, "beta": beta, "sigma_c": sigma_c, **got})
    return out
