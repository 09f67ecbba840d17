r"""``attnflow meanfield CONFIG --out DIR``: the flow on the circle (``d = 2``) or on :math:`S^2` (``d = 3``)
against its continuity equation.

Three studies (``configs/meanfield.toml``; a fourth, the noisy transition, when its beta list is not empty), each
for every normalisation (on the circle here; on :math:`S^2` the same studies with harmonics, in
:mod:`attnflow.meanfield._sphere_units`):

* **convergence**: n particles drawn iid from a smooth density :math:`\rho_0` and the PDE from
  :math:`\rho_0`; :math:`W_1(\mu^n_t, \rho_t)` at fixed times against n, and the fitted rate
  :math:`W_1 \propto n^{-r}` (least squares on every seed, Student-t interval);
* **growth**: near-uniform starts (n equally spaced angles displaced so that every mode
  :math:`k \le K` has amplitude :math:`\varepsilon/2` with random phases, and the PDE from the
  same first-order density): the growth rate of every mode fitted over the joint linear window (until
  the largest mode first passes ``max_amplitude``) against
  the linearised :math:`\lambda_k` (:func:`~attnflow.meanfield.growth_rates`), the clusters that
  form (:func:`~attnflow.meanfield.circle_cluster_count`) against :math:`k^*`, and how long they live;
* **largest**: one run of the largest n on the Fourier fast path, timed, with its memory.

Particles run the ODE flow (:func:`~attnflow.meanfield.circle_solver`, Tsit5 with constant steps) with
``attention_impl="fourier"``; the PDE is :func:`~attnflow.meanfield.solve_continuity`. Every unit of
work (one normalisation, study, n or beta, seed) is stored as it finishes in ``units/*.npz``
(verified: :class:`attnflow.runs.UnitStore`), so the same command after an interruption
recomputes nothing that finished.

Several processes (``jax.distributed``, :func:`attnflow.runs.init_distributed`) split the units: process p
of P computes the units whose index in the plan is p, p + P, ... into the shared ``units/`` folder (a
particle unit of the convergence study that needs the PDE unit of another process waits for its file);
process 0 then waits for the other processes' units (:func:`attnflow.runs.wait_for_units`), reads them
verified and writes the same tables as one process would.
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import numpy as np

from ..runs import (UnitStore, atomic_write_json, count_kept, init_distributed, open_run, releases_output_dirs,
                    wait_for_units)
from ._config import MeanfieldConfig, check_meanfield_config
from ._sphere_units import sphere_convergence, sphere_growth, sphere_largest, sphere_units
from ._study_units import (_conv_name, _growth_name, _transition_name, growth_rows, largest_run, time_scale,
                           transition_units)

#: a noisy particle seed's Brownian path: the key fold_in(seed's key, NOISE_STREAM) (its start is drawn from the
#: seed's key itself)
NOISE_STREAM = 1

__all__ = ["run_meanfield", "check_meanfield_sizes", "start_density", "near_uniform_start", "time_scale"]

#: state copies a particle solve holds at once besides its saved outputs (Tsit5's stages, the Fourier path's
#: temporaries: 13-16 measured from XLA's memory analysis at n = 16384 and 65536)
SOLVE_COPIES = 16
#: state copies of the largest run's Euler layers (state, field, the renormalisation)
EULER_COPIES = 8
#: float64 numbers per particle on the host beside a solve (the draw, the saved angles, W1's sorted CDFs)
HOST_NUMBERS = 12

def start_density(theta, modes, amplitudes, phases) -> np.ndarray:
    r""":math:`\rho_0(\theta) = \frac{1}{2\pi}\big(1 + \sum_k a_k\cos k(\theta - \varphi_k)\big)` at the angles ``theta``.

    Example:
        >>> import numpy as np
        >>> from attnflow.meanfield import start_density
        >>> theta = np.linspace(0, 2 * np.pi, 1000, endpoint=False)
        >>> round(float(start_density(theta, [1, 2], [0.5, 0.3], [0.0, 1.0]).mean() * 2 * np.pi), 12)
        1.0
    """
    theta = np.asarray(theta, float)
    out = np.ones_like(theta)
    for k, a, p in zip(modes, amplitudes, phases):
        out = out + a * np.cos(k * (theta - p))
    return out / (2 * math.pi)


def near_uniform_start(n: int, modes: int, epsilon: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    r"""(angles (n,), phases (modes,)): :math:`\theta_j = \phi_j - \varepsilon\sum_{k=1}^{K}\frac1k\sin k(\phi_j - \varphi_k)`,
    :math:`\phi_j = 2\pi(j + \frac12)/n`, whose measure is :math:`\frac1{2\pi}(1 + \varepsilon\sum_k \cos k(\theta - \varphi_k))`
    to first order (every mode's amplitude :math:`\varepsilon/2`), with phases drawn uniformly.

    Example:
        >>> import numpy as np
        >>> from attnflow.meanfield import fourier_coefficients, near_uniform_start
        >>> th, _ = near_uniform_start(4096, 3, 1e-4, np.random.default_rng(1))
        >>> [round(float(a) * 1e4, 2) for a in np.abs(np.asarray(fourier_coefficients(th, 3)))[1:]]
        [0.5, 0.5, 0.5]
    """
    phases = rng.uniform(0, 2 * math.pi, modes)
    phi = 2 * math.pi * (np.arange(n) + 0.5) / n
    k = np.arange(1, modes + 1)
    theta = phi - epsilon * np.sum(np.sin(k[None, :] * (phi[:, None] - phases[None, :])) / k[None, :], axis=1)
    return theta % (2 * math.pi), phases


# -- the units of work ------------------------------------------------------------------------------


def _tokens(theta):
    import jax.numpy as jnp

    return jnp.stack([jnp.cos(theta), jnp.sin(theta)], axis=-1)


def _particles(cache: dict, kind: str, theta0, beta, normalisation, ts, dt, dtype, save_fn, *, sigma: float = 0.0,
               key=None):
    """The ODE flow on the circle from the angles ``theta0`` (Fourier path, constant steps ``dt``),
    ``save_fn(y)`` at the times ``ts``; with ``sigma > 0`` the noisy flow (Stratonovich Heun) on the Brownian
    path of ``key``.

    One compiled solve (:func:`attnflow.meanfield.circle_solver`) per (kind, n, beta, normalisation,
    times, dt, sigma), kept in ``cache``: the seeds of one n reuse it (``kind`` names the ``save_fn``)."""
    import jax.numpy as jnp

    from ._study import circle_solver

    entry = (kind, len(theta0), float(beta), normalisation, tuple(np.asarray(ts, float)), float(dt),
             str(np.dtype(dtype)), float(sigma))
    if entry not in cache:
        cache[entry] = circle_solver(float(beta), jnp.asarray(ts, dtype), normalisation, save=save_fn,
                                     attention_impl="fourier", dt=float(dt), sigma=float(sigma))
    x0 = _tokens(jnp.asarray(theta0, dtype))
    return cache[entry](x0, key) if sigma else cache[entry](x0)


def _plan(config: MeanfieldConfig) -> list[dict]:
    """Every unit of work of ``config``: its name, its size key (``key``, ``n``), its estimated peak bytes
    and its work in particle-steps (grid-point steps for the PDE)."""
    if config.d == 3:
        return sphere_units(config)
    c, g, la = config.convergence, config.growth, config.largest
    item = 8 if config.dtype == "float64" else 4
    frames = len(np.union1d(c.times, np.linspace(0.0, c.times[-1], c.frames)))
    units = []
    for norm in config.normalisations:
        units.append({"name": _conv_name(norm), "key": "convergence.grid", "n": c.grid,
                      "bytes": item * c.grid * (4 * frames + 64), "work": c.grid * c.times[-1] / c.pde_dt})
        for n in c.n:
            for s in range(c.seeds):
                saves = frames if (n == c.n[-1] and s == 0) else len(c.times)
                units.append({"name": _conv_name(norm, n, s), "key": "convergence.n", "n": n,
                              "bytes": item * 2 * n * (SOLVE_COPIES + 2 * saves) + 8 * HOST_NUMBERS * n,
                              "work": n * c.times[-1] / c.dt})
        for b, beta in enumerate(g.beta):
            lam, t_lin, t_hor = _window(config, beta, norm)
            steps = max(t_hor, t_lin) / min(0.05 / float(lam.max()), t_lin / (g.saves - 1))
            for s in range(g.seeds):
                units.append({"name": _growth_name(norm, b, s, "particles"), "key": "growth.n", "n": g.n,
                              "bytes": item * 2 * g.n * SOLVE_COPIES + 8 * g.n * (3 * g.modes + HOST_NUMBERS),
                              "work": g.n * steps})
                units.append({"name": _growth_name(norm, b, s, "pde"), "key": "growth.grid", "n": g.grid,
                              "bytes": item * g.grid * (4 * g.saves + 64), "work": g.grid * steps})
        tr = config.transition
        for b, _ in enumerate(tr.beta):  # two starts per sigma, each a run of the PDE
            units.append({"name": _transition_name(norm, b), "key": "transition.grid", "n": tr.grid,
                          "bytes": item * tr.grid * 64, "work": 2 * len(tr.sigma_ratios) * tr.grid * tr.t1 / tr.dt})
    units.append({"name": "largest", "key": "largest.n", "n": la.n,
                  "bytes": item * 2 * la.n * EULER_COPIES + 8 * la.n, "work": la.n * la.layers})
    return units


def check_meanfield_sizes(config: MeanfieldConfig | dict) -> dict:
    """Refuse a config one of whose units cannot fit in memory (or count its particles' numbers in a 32-bit
    index), before any unit runs: one sentence naming the key, its count and about the largest that fits.
    Returns the plan's totals: ``units``, ``peak_bytes`` (the largest unit's estimate) and ``work``
    (particle-steps of every unit together).

    Example:
        >>> from attnflow.meanfield import load_meanfield_config
        >>> from attnflow.meanfield._run import check_meanfield_sizes
        >>> cfg = load_meanfield_config(None)
        >>> check_meanfield_sizes(cfg)["units"]
        111
        >>> cfg["largest"]["n"] = 10**12
        >>> check_meanfield_sizes(cfg)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        attnflow.errors.InputError: the unit 'largest' (largest.n = 1000000000000) needs about ...
    """
    from .._resources import INT32_MAX, check_count, check_fits

    config = check_meanfield_config(config)
    plan = _plan(config)
    d = config.d  # numbers per particle
    for unit in plan:
        what = f"the unit '{unit['name']}' ({unit['key']} = {unit['n']})"
        check_fits(what, unit["bytes"], [(unit["key"], unit["n"], unit["n"], 1)])
        if unit["key"].endswith(".n"):
            check_count(f"{unit['key']} x {d} (the numbers of the particles' state)", d * unit["n"],
                        fix=f"lower {unit['key']} to at most {INT32_MAX // d}")
    return {"units": len(plan), "peak_bytes": float(max(u["bytes"] for u in plan)),
            "work": float(sum(u["work"] for u in plan))}


class _Units:
    """The stored units of one run folder (:class:`attnflow.runs.UnitStore` in ``units/``): computed once,
    then read back (verified); each computed unit records its ``seconds``.

    In the first pass of a multi-process run ``share`` holds the names of this process's units: :meth:`get`
    computes (or resumes) those and gives None for the others, and process 0 keeps what it got in ``held``
    for its second pass (``share`` None: every unit), where the other processes' units join them."""

    def __init__(self, out: Path, fingerprint: str, progress=None, *, share: set | None = None,
                 process_index: int = 0, process_count: int = 1):
        self.store = UnitStore(out / "units", "meanfield-unit", fingerprint, on_store=self._stored)
        self.progress = progress
        self.cache: dict = {}  # compiled particle solves, shared by the units of one n
        self.kept: dict = {}  # the verified units found in the folder, read before any unit runs
        self.tally = None  # the units stored so far (attnflow.runs.count_kept), for an interrupted command's line
        self.share = share
        self.process_index, self.process_count = process_index, process_count
        self.held: dict = {}  # units already counted: process 0's share after its first pass, the others' units
        self.fetched: dict = {}  # the other processes' units this process's own units need (the first pass)

    @property
    def computed(self) -> int:
        return self.store.computed

    @property
    def resumed(self) -> int:
        return self.store.resumed

    @property
    def first_pass(self) -> bool:
        """True while a process of a multi-process run computes its share (the results are assembled later)."""
        return self.share is not None

    def _stored(self, name: str) -> None:
        if self.tally is not None:
            self.tally.add()
        if self.progress is not None:
            self.progress.set_postfix_str(name)
            self.progress.update(1)

    def read_kept(self, names) -> int:
        """Read every stored unit among ``names`` that verifies (the others are recomputed); return their count."""
        for name in names:
            if self.store.path(name).is_file():
                found = self.store.load(name)
                if found is not None:
                    self.kept[name] = found
        return len(self.kept)

    def read_others(self, names) -> None:
        """Hold the other processes' units ``names`` (loaded verified; one that is not is computed again here)."""
        for name in names:
            found = self.store.load(name)
            if found is not None:
                self.held[name] = found

    def _timed(self, compute):
        def timed() -> dict:
            t = time.perf_counter()
            arrays = {k: np.asarray(v) for k, v in compute().items()}
            arrays["seconds"] = np.asarray(time.perf_counter() - t)
            return arrays

        return timed

    def get(self, name: str, compute) -> dict | None:
        """The unit ``name``: held, kept from an earlier run, or computed and stored; None in the first pass when
        another process computes it."""
        if self.share is not None and name not in self.share:
            return None
        if name in self.held:
            return self.held[name] if self.share is not None else self.held.pop(name)
        found = self.kept.pop(name, None)
        if found is not None:
            self.store.resumed += 1
        else:
            found = self.store.get(name, self._timed(compute))
        if self.share is not None and self.process_index == 0:
            self.held[name] = found  # for the second pass
        return found

    def need(self, name: str, compute) -> dict:
        """The unit ``name`` that a unit of this process needs, whichever process computes it: :meth:`get` when
        it is this process's, else its file, waited for (:func:`attnflow.runs.wait_for_units`) and loaded
        verified (computed here when it does not verify)."""
        if self.share is None or name in self.share:
            return self.get(name, compute)
        if name not in self.fetched:
            wait_for_units(self.store, [name], process_index=self.process_index, process_count=self.process_count)
            found = self.store.load(name)
            self.fetched[name] = found if found is not None else self.store.get(name, self._timed(compute))
        return self.fetched[name]


def _convergence(config: MeanfieldConfig, units: _Units, norm: str, dtype) -> dict:
    import jax.numpy as jnp

    from ._distances import circle_w1_to_density
    from ._measures import circle_histogram
    from ._pde import circle_grid, solve_continuity
    from ._study import draw_from_density

    c = config.convergence
    scale = time_scale(c.beta, norm)
    times = np.asarray(c.times) * scale
    frames = np.linspace(0.0, times[-1], c.frames)
    ts_pde = np.union1d(times, frames)

    def pde():
        rho0 = start_density(np.asarray(circle_grid(c.grid)), c.start_modes, c.start_amplitudes, c.start_phases)
        path = solve_continuity(jnp.asarray(rho0, dtype), c.beta, jnp.asarray(ts_pde, dtype), normalisation=norm,
                                dt=c.pde_dt * scale, **({"sigma": c.sigma} if c.sigma else {}))
        return {"ts": path.ts, "density": path.density, "mass": path.mass, "min_density": path.min_density,
                "result": path.result}

    sol = units.get(_conv_name(norm), pde)  # None: another process's unit (the first pass)
    at = np.searchsorted(ts_pde, times)

    def solution() -> dict:  # the PDE a particle unit is compared with (waited for when another process's)
        return sol if sol is not None else units.need(_conv_name(norm), pde)

    w1 = np.full((len(c.n), c.seeds, len(c.times)), np.nan)
    histogram = None
    for i, n in enumerate(c.n):
        for s in range(c.seeds):
            def particles(n=n, s=s):
                import jax

                key = jax.random.fold_in(jax.random.fold_in(jax.random.key(config.seed), n), s)
                theta0 = draw_from_density(key, jnp.asarray(solution()["density"][0], dtype), n)
                frames_too = n == c.n[-1] and s == 0  # the density figure: histograms at every frame too
                ts = ts_pde if frames_too else times
                dens = jnp.asarray(solution()["density"], dtype)[at]

                def save(y):
                    return {"y": y, "hist": circle_histogram(y, c.bins)} if frames_too else {"y": y}

                # a noisy seed's Brownian path: its own stream of the seed's key (the start is drawn from the key)
                saved = _particles(units.cache, "frames" if frames_too else "states", theta0, c.beta, norm,
                                   ts, c.dt * scale, dtype, save, sigma=c.sigma,
                                   key=jax.random.fold_in(key, NOISE_STREAM) if c.sigma else None)
                ys = saved["y"][np.searchsorted(ts, times)]
                out = {"hist": saved["hist"], "frames": ts} if frames_too else {}
                out["w1"] = jnp.stack([circle_w1_to_density(ys[j], dens[j]) for j in range(len(c.times))])
                return out

            got = units.get(_conv_name(norm, n, s), particles)
            if units.first_pass:
                continue
            w1[i, s] = got["w1"]
            if "hist" in got:
                histogram = (got["frames"], got["hist"])
    if units.first_pass:
        return None
    return {"w1": w1, "pde_ts": np.asarray(sol["ts"]), "pde_density": np.asarray(sol["density"]),
            "mass": np.asarray(sol["mass"]), "min_density": np.asarray(sol["min_density"]),
            "pde_result": int(sol["result"]), "frames": histogram, "times": times, "time_scale": scale,
            "pde_negative": np.minimum.accumulate(np.asarray(sol["min_density"])[at]) < 0}


def _check_transition_steps(config: MeanfieldConfig) -> None:
    """Refuse a transition study whose RK4 step is unstable at one of its betas, naming the key (one sentence)."""
    from ..errors import InputError
    from ._transition import check_transition_step

    tr = config.transition
    if config.d == 3:  # the sphere's transition takes steps of at most dt, integrating the diffusion exactly
        return
    for norm in config.normalisations:
        for beta in tr.beta:
            try:
                check_transition_step(beta, norm, num_points=tr.grid, t1=tr.t1, dt=tr.dt, eps=tr.epsilon,
                                      kappa=tr.kappa)
            except InputError as err:
                raise InputError(f"config key 'transition.dt' at beta = {beta:g} ({norm}): {err}") from None


def _rate_fits(config: MeanfieldConfig, w1: np.ndarray, times, negative) -> list[dict]:
    """Per time: :func:`~attnflow.meanfield.fit_power_law` of W1 against n over every (n, seed) with finite
    W1 > 0, reported as the rate r of W1 ~ n^-r; no fit where the PDE's density had gone negative by then
    (the spectral solution no longer resolves the measure: W1 would compare with an unresolved limit)."""
    from ._study import fit_power_law

    rows = []
    for j, t in enumerate(times):
        y = w1[:, :, j].T  # (seeds, N)
        ok = np.isfinite(y) & (y > 0)
        row = {"t": float(t), "points": int(ok.sum()), "excluded": int((~ok).sum()), "rate": None, "lo": None,
               "hi": None, "pde_negative": bool(negative[j])}
        fit = fit_power_law(config.convergence.n, y)
        if not negative[j] and math.isfinite(fit["slope"]):
            row.update(rate=-fit["slope"], lo=-fit["hi"], hi=-fit["lo"])
        rows.append(row)
    return rows


def _window(config: MeanfieldConfig, beta: float, norm: str) -> tuple[np.ndarray, float, float]:
    """(the predicted rates k = 1..K, the linear window's length, the clusters' horizon)."""
    from ._linear import growth_rates

    g = config.growth
    lam = np.asarray(growth_rates(beta, g.modes, norm))[1:]
    top = float(lam.max())
    return lam, 1.5 * math.log(2 * g.max_amplitude / g.epsilon) / top, g.horizon / top


def _growth(config: MeanfieldConfig, units: _Units, norm: str, dtype) -> list[dict]:
    import jax.numpy as jnp

    from ._clusters import circle_gaps
    from ._linear import most_unstable_mode
    from ._measures import density_fourier_coefficients, fourier_coefficients
    from ._pde import circle_grid, solve_continuity

    g = config.growth
    rows = []
    for b, beta in enumerate(g.beta):
        lam, t_lin, t_hor = _window(config, beta, norm)
        ts_lin = np.linspace(0.0, t_lin, g.saves)
        ts_all = np.union1d(ts_lin, np.linspace(0.0, max(t_hor, t_lin), g.saves))
        fastest = most_unstable_mode(beta, max(64, 2 * g.modes))
        k_star, runner_up, margin = int(fastest.k), int(fastest.runner_up), float(fastest.margin)
        for s in range(g.seeds):
            rng = np.random.default_rng([config.seed, 2, b, s])
            theta0, phases = near_uniform_start(g.n, g.modes, g.epsilon, rng)
            dt = min(0.05 / float(lam.max()), t_lin / (g.saves - 1))

            def particles():
                saved = _particles(units.cache, "growth", theta0, beta, norm, ts_all, dt, dtype, lambda y: {
                    # a float count: diffrax pre-fills its outputs with inf, which no integer holds
                    "modes": fourier_coefficients(y, g.modes),
                    "clusters": circle_gaps(y, g.cluster_gap).astype(y.dtype)})
                return {"ts": ts_all, "modes": jnp.abs(saved["modes"]), "clusters": saved["clusters"].astype(jnp.int32)}

            def pde():
                theta = np.asarray(circle_grid(g.grid))
                k = np.arange(1, g.modes + 1)
                rho0 = (1 + g.epsilon * np.cos(k[None, :] * (theta[:, None] - phases[None, :])).sum(1)) / (2 * math.pi)
                path = solve_continuity(jnp.asarray(rho0, dtype), beta, jnp.asarray(ts_lin, dtype), normalisation=norm,
                                        dt=dt)
                return {"ts": ts_lin, "modes": jnp.abs(density_fourier_coefficients(path.density, g.modes)),
                        "min_density": path.min_density, "result": path.result}

            p = units.get(_growth_name(norm, b, s, "particles"), particles)
            q = units.get(_growth_name(norm, b, s, "pde"), pde)
            if units.first_pass:
                continue
            rows += growth_rows(norm, beta, s, p, q, ts_lin, lam, g, (k_star, runner_up, margin))
    return rows


def _largest(config: MeanfieldConfig, units: _Units, dtype) -> dict:
    import jax.numpy as jnp

    from ..fields import build_field

    la = config.largest

    def prepare():
        rng = np.random.default_rng([config.seed, 3])
        x0 = _tokens(jnp.asarray(rng.uniform(0, 2 * math.pi, la.n), dtype))
        I = jnp.eye(2, dtype=dtype)
        return x0, build_field("sphere", I, I, I, beta=la.beta, attention_impl="fourier", fourier_max_score=la.beta)

    return largest_run(units, prepare, la.layers, la.dt)


# -- the job ---------------------------------------------------------------------------------------


@releases_output_dirs
def run_meanfield(config: MeanfieldConfig | dict, out: str | Path, *, progress: bool = True,
                  processes: dict | None = None, figures: bool = True) -> dict:
    """Run (or resume) the mean-field study of ``config`` into ``out``; returns the summary.

    ``processes`` (``coordinator``, ``num_processes``, ``process_id``: a manual launch of one command per
    process, :func:`attnflow.runs.init_distributed`) splits the units over processes that share ``out``:
    process p of P computes the units p, p + P, ... of the plan (resuming the ones of its share it finds);
    every process but 0 returns only what it did (``process_index``, ``process_count``, ``units_computed``,
    ``units_resumed``, ``units``); process 0 waits for the other processes' units, reads them verified
    (computing again any that is not) and writes the same tables and summary as one process, whose
    ``units_computed`` / ``units_resumed`` count its own work. The returned summary also says
    ``process_index``, ``process_count`` and ``units`` (in the plan; these three are not written to
    summary.json). ``figures=False`` draws no figure (the same tables; summary.json's ``figures`` is empty and
    report.md says that none was drawn; the same call with figures resumes every unit and draws them).

    Example:
        >>> import tempfile, pathlib
        >>> from attnflow.meanfield import load_meanfield_config, run_meanfield
        >>> cfg = load_meanfield_config(None)
        >>> cfg["normalisations"] = ["softmax"]
        >>> cfg["convergence"].update(n=[32, 64], seeds=2, times=[0.0, 0.5], frames=2, grid=32)
        >>> cfg["growth"].update(beta=[2.0], n=64, seeds=1, modes=2, saves=5, grid=32)
        >>> cfg["largest"].update(n=256, layers=1)
        >>> s = run_meanfield(cfg, pathlib.Path(tempfile.mkdtemp()) / "mf", progress=False)
        >>> s["units_computed"], sorted(s["convergence"]), s["largest"]["finite"]
        (8, ['softmax'], True)
    """
    import jax

    config = check_meanfield_config(config)  # before the folder is claimed or anything compiles
    pidx, pcount = init_distributed(False, **(processes or {}))  # before any JAX computation
    sizes = check_meanfield_sizes(config)  # every unit fits, before any unit runs
    _check_transition_steps(config)  # every transition run is stable, before any unit runs
    run = open_run(out, "meanfield", config, process=pidx, seed=config.seed)
    out = run.out
    plan = [u["name"] for u in _plan(config)]
    share = None if pcount == 1 else {name for i, name in enumerate(plan) if i % pcount == pidx}
    units = _Units(out, run.fingerprint, share=share, process_index=pidx, process_count=pcount)
    mine = plan if share is None else [name for name in plan if name in share]
    kept = units.read_kept(mine)
    units.tally = count_kept(len(mine), "units" if pcount == 1 else f"units of process {pidx}'s share", kept=kept)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        # a resumed run's bar starts at the units already kept
        bar = tqdm(total=len(mine), initial=kept, desc="meanfield units" if pcount == 1 else
                   f"meanfield units (process {pidx} of {pcount})", file=sys.stderr)
    units.progress = bar
    t0 = time.perf_counter()
    with jax.enable_x64(config.dtype == "float64"):
        import jax.numpy as jnp

        dtype = jnp.float64 if config.dtype == "float64" else jnp.float32

        def studies():
            if config.d == 3:
                conv = {norm: sphere_convergence(config, units, norm, dtype, NOISE_STREAM)
                        for norm in config.normalisations}
                growth = [row for norm in config.normalisations for row in sphere_growth(config, units, norm, dtype)]
                transition = [row for norm in config.normalisations for row in transition_units(config, units, norm)]
                return conv, growth, sphere_largest(config, units, dtype), transition
            conv = {norm: _convergence(config, units, norm, dtype) for norm in config.normalisations}
            growth = [row for norm in config.normalisations for row in _growth(config, units, norm, dtype)]
            transition = [row for norm in config.normalisations for row in transition_units(config, units, norm)]
            return conv, growth, _largest(config, units, dtype), transition

        if share is not None:  # the first pass: this process's share of the units
            studies()
            if bar is not None:
                bar.close()
            units.progress = bar = units.tally = None
            if pidx != 0:
                return {"process_index": pidx, "process_count": pcount, "units_computed": units.computed,
                        "units_resumed": units.resumed, "units": len(plan)}
            others = [name for name in plan if name not in share]
            wait_for_units(units.store, others, process_index=pidx, process_count=pcount)
            units.read_others(others)
            units.share = None  # the second pass: every unit, held or (when damaged) computed here
        conv, growth, largest, transition = studies()
    if bar is not None:
        bar.close()
    from ._report import write_results

    summary = write_results(config, out, conv, growth, largest, _rate_fits, transition, draw=figures)
    summary.update(units_computed=units.computed, units_resumed=units.resumed, seconds=time.perf_counter() - t0,
                   planned={"units": sizes["units"], "peak_bytes": sizes["peak_bytes"],
                            "particle_steps": sizes["work"]})
    summary["provenance"] = run.write_provenance()
    atomic_write_json(out / "summary.json", summary)
    return dict(summary, process_index=pidx, process_count=pcount, units=len(plan))
