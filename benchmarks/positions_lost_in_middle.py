#!/usr/bin/env python
r"""Causal ALiBi dynamics on the circle: the lost-in-the-middle profile and the causal seeds of clusters.

**Lost in the middle** (Duerinckx, Geshkovski and Rossi, arXiv 2605.09213; the particle model of their code): angles
:math:`\theta_0, \dots, \theta_{n-1}` drawn iid uniform, token j attending to the earlier tokens k < j only, with the
causal ALiBi weights :math:`w_{jk} = e^{-\lambda (j-k)/n} / \sum_{l<j} e^{-\lambda (j-l)/n}`,

.. math::  \dot\theta_j = \sum_{k<j} w_{jk}\, \beta \sin(\theta_k - \theta_j)\, e^{\beta\cos(\theta_j - \theta_k)},

computed with ``attnflow.attend(beta x, x, x, mask=k < j, positions=Positions(alibi=lambda), normalisation="mean")``
(x = (cos, sin) of the angles; the mean normalisation's 1/n is traded for the positional sum
:math:`1/\sum_{l<j} e^{-\lambda(j-l)/n}` row by row), RK4 steps of ``--dt``. The retrieval profile of the source
position s = (k + 1)/n is the soft accuracy
:math:`S_t(s) = n\,E\sum_{m=1}^{20}\omega_m\cos(m(\theta_{n-1}(t) - \theta_k(0)))` (how much of the source
token's prompt angle the last token carries at time t), :math:`\omega_m = e^{-\pi^2 m^2/(2M^2)}`,
M = 8, estimated over ``--samples`` draws (minus its value at t = 0, whose mean is 0: a control variate). It is compared
with

* the paper's closed form (n -> infinity): :math:`S_t(s) = \sum_m \omega_m \frac{\lambda e^{\lambda s}}{e^\lambda - 1}
  \psi_{a_m t}(Y_\lambda(s))`, :math:`a_m = m^2 I_m(\beta)`, :math:`Y_\lambda(s) = \log\frac{e^\lambda - 1}{e^{\lambda s}-1}`,
  :math:`\psi_c(y) = \sum_k c^{k+1}y^k/(k!(k+1)!)`, whose right-end slope changes sign at
  :math:`t_{crit}(\beta) = 2(1 - e^{-\lambda})\sum_m\omega_m a_m / \sum_m\omega_m a_m^2`;
* the same first-order correlation equation for n discrete tokens, derived here from the particle system:
  :math:`C_m(t)_{ab} = n E[\cos m(\theta_a(t) - \theta_b(0))]` obeys :math:`\dot C_m = a_m (nW + W C_m)` (W the
  weights above) to leading order in 1/n, so :math:`C_m(t) = n(e^{a_m t W} - I)`.

**Causal seeds** (``--seeds``; Karagodin, Polyanskiy and Rigollet, arXiv 2411.04990): n = 200 tokens on the circle,
beta = 64, Q = K = V = I, causal softmax attention (token i attends to j <= i) projected onto the circle
(``attnflow.dynamics.sphere_flow(mask="causal")``), Euler layers of dt = 0.05 renormalised onto the circle. It counts
the clusters at t = ``--t1`` (gaps > 0.1 rad) and, for each, its earliest token (its seed), how far the seed moved
from its start and how far the cluster's centre lies from the seed's start.

Writes a JSON record and a figure (``--out``, ``--figure``) and prints a table; every figure is labelled with the
machine. ``--quick``: fewer samples (a smoke run of seconds).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from benchmarks.common import add_record_arguments, machine_info  # noqa: E402

N_TOKENS, BETA, LAMBDA, M_WIDTH, MODES = 64, 1.0, 1.0, 8.0, 20
TIMES = (0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5)
#: the right-end slope of a profile is the least-squares slope over the sources s in [1 - SLOPE_WINDOW, 1)
SLOPE_WINDOW = 0.25


# -- the paper's closed form ------------------------------------------------------------------------------------------

def bessel_i(m: int, x: float) -> float:
    """Modified Bessel function I_m(x) of integer order (scipy-free)."""
    return float(np.i0(x)) if m == 0 else float(_bessel_series(m, x))


def _bessel_series(m: int, x: float) -> float:
    term = (x / 2) ** m / math.factorial(m)
    total, k = term, 0
    while abs(term) > 1e-17 * abs(total) and k < 500:
        term *= (x * x / 4) / ((k + 1) * (k + m + 1))
        total += term
        k += 1
    return total


def mode_rates(beta: float, modes: int = MODES) -> np.ndarray:
    """a_m = m^2 I_m(beta), m = 1..modes: the growth rate of the m-th Fourier correlation."""
    return np.array([m * m * bessel_i(m, beta) for m in range(1, modes + 1)])


def mode_weights(width: float = M_WIDTH, modes: int = MODES) -> np.ndarray:
    """omega_m = exp(-pi^2 m^2 / (2 M^2)): the Fourier coefficients of the wrapped Gaussian of width pi/M."""
    m = np.arange(1, modes + 1)
    return np.exp(-0.5 * (np.pi * m / width) ** 2)


def t_crit(beta: float, lam: float = LAMBDA, width: float = M_WIDTH, modes: int = MODES) -> float:
    """The time at which the closed-form profile's slope at s = 1 changes sign."""
    a, w = mode_rates(beta, modes), mode_weights(width, modes)
    return float(2 * (1 - math.exp(-lam)) * np.sum(w * a) / np.sum(w * a * a))


def _psi(c: float, y: float) -> float:
    term = total = c
    k = 0
    while abs(term) > 1e-16 * max(1.0, abs(total)) and k < 2000:
        term *= c * y / ((k + 1) * (k + 2))
        total += term
        k += 1
    return total


def profile_closed_form(s: np.ndarray, t: float, beta: float = BETA, lam: float = LAMBDA) -> np.ndarray:
    """The paper's n -> infinity soft-accuracy profile S_t(s) at the source positions s in (0, 1)."""
    a, w = mode_rates(beta), mode_weights()
    out = []
    for si in np.atleast_1d(s):
        y = math.log(math.expm1(lam) / math.expm1(lam * si))
        coeff = lam * math.exp(lam * si) / math.expm1(lam)
        out.append(sum(wm * coeff * _psi(am * t, y) for am, wm in zip(a, w)))
    return np.asarray(out)


# -- the discrete first-order correlation equation --------------------------------------------------------------------

def causal_weights(n: int, lam: float = LAMBDA) -> np.ndarray:
    """W_jk = e^{-lam (j - k)/n} / sum_{l<j} e^{-lam (j - l)/n} for k < j (row 0 empty)."""
    j, k = np.indices((n, n))
    W = np.where(k < j, np.exp(-lam * (j - k) / n), 0.0)
    return W / np.maximum(W.sum(axis=1, keepdims=True), 1e-300)


def profile_discrete(n: int, times, beta: float = BETA, lam: float = LAMBDA) -> np.ndarray:
    r"""The first-order profile of n discrete tokens, :math:`\sum_m \omega_m [C_m(t)]_{n-1,k}` for k < n - 1 at each time,
    :math:`C_m(t) = n(e^{a_m t W} - I)` (the solution of :math:`\dot C = a_m (nW + WC)`, C(0) = 0). Returns
    (len(times), n - 1)."""
    import scipy.linalg as sla

    W = causal_weights(n, lam)
    out = np.zeros((len(times), n - 1))
    for a, w in zip(mode_rates(beta), mode_weights()):
        if w * a < 1e-12:
            continue
        for i, t in enumerate(times):
            out[i] += w * n * (sla.expm(a * t * W) - np.eye(n))[n - 1, : n - 1]
    return out


def right_slope(s: np.ndarray, values: np.ndarray, window: float = SLOPE_WINDOW) -> float:
    """Least-squares slope of the profile over the sources s in [1 - window, 1)."""
    near = s >= 1 - window
    return float(np.polyfit(s[near], values[near], 1)[0])


def crossing(times, slopes) -> float | None:
    """The first time the slope turns from positive to negative (linear interpolation), or None."""
    for t0, t1, a, b in zip(times[:-1], times[1:], slopes[:-1], slopes[1:]):
        if a > 0 >= b:
            return float(t0 + (t1 - t0) * a / (a - b))
    return None


# -- the particle system, through attnflow.attend ----------------------------------------------------------------------

def particle_velocity(theta, beta: float, lam: float):
    """d theta_j/dt of the causal ALiBi model for angles theta (n,), through the attention kernel."""
    import jax.numpy as jnp

    from attnflow.kernels import Positions, attend

    n = theta.shape[-1]
    x = jnp.stack([jnp.cos(theta), jnp.sin(theta)], axis=-1)
    before = jnp.arange(n)[None, :] < jnp.arange(n)[:, None]  # k < j
    mean = attend(beta * x, x, x, impl="dense", mask=before, positions=Positions(alibi=lam), normalisation="mean")
    j = jnp.arange(n, dtype=theta.dtype)
    z = jnp.exp(-lam / n) * -jnp.expm1(-lam * j / n) / -jnp.expm1(-lam / n)  # sum_{l<j} e^{-lam (j - l)/n}
    scale = jnp.where(j > 0, n / jnp.where(j > 0, z, 1), 0)
    tangent = jnp.stack([-jnp.sin(theta), jnp.cos(theta)], axis=-1)
    return beta * scale * jnp.sum(mean * tangent, axis=-1)


def particle_profiles(samples: int, times, *, n: int = N_TOKENS, beta: float = BETA, lam: float = LAMBDA,
                      dt: float = 0.05, seed: int = 0, batch: int = 4096):
    """Monte Carlo soft accuracy of each source k < n - 1 at each time: (mean, standard error), (len(times), n - 1),
    and the right-end slope (:func:`right_slope`, a linear function of the profile) per time: (mean, standard error)
    from the per-draw slopes."""
    import jax
    import jax.numpy as jnp

    w = jnp.asarray(mode_weights(), jnp.float32)
    m = jnp.arange(1, MODES + 1, dtype=jnp.float32)
    steps = [int(round(t / dt)) for t in times]

    def accuracy(theta, theta0):  # (n - 1,): n sum_m w_m cos m (theta_{n-1}(t) - theta_k(0))
        gap = theta[-1] - theta0[:-1]
        return n * jnp.cos(gap[:, None] * m) @ w

    def rk4(theta):
        f = lambda th: particle_velocity(th, beta, lam)
        k1 = f(theta)
        k2 = f(theta + 0.5 * dt * k1)
        k3 = f(theta + 0.5 * dt * k2)
        k4 = f(theta + dt * k3)
        return theta + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)

    def run(theta0):
        start = accuracy(theta0, theta0)  # mean 0: a control variate

        def body(theta, _):
            theta = rk4(theta)
            return theta, accuracy(theta, theta0) - start

        _, acc = jax.lax.scan(body, theta0, None, length=max(steps))
        return acc[jnp.asarray(steps) - 1]

    run_batch = jax.jit(jax.vmap(run))
    s = np.arange(1, n) / n
    near = s >= 1 - SLOPE_WINDOW
    lever = np.where(near, s - s[near].mean(), 0) / np.sum((s[near] - s[near].mean()) ** 2)
    total = total_sq = slope_sum = slope_sq = 0.0
    key = jax.random.key(seed)
    done = 0
    while done < samples:
        size = min(batch, samples - done)
        key, sub = jax.random.split(key)
        theta0 = jax.random.uniform(sub, (size, n), jnp.float32, 0.0, 2 * np.pi)
        acc = np.asarray(run_batch(theta0), np.float64)
        total = total + acc.sum(axis=0)
        total_sq = total_sq + (acc ** 2).sum(axis=0)
        slopes = acc @ lever  # (size, times)
        slope_sum, slope_sq = slope_sum + slopes.sum(axis=0), slope_sq + (slopes ** 2).sum(axis=0)
        done += size
    mean, slope_mean = total / samples, slope_sum / samples
    std = np.sqrt(np.maximum(total_sq / samples - mean ** 2, 0))
    slope_std = np.sqrt(np.maximum(slope_sq / samples - slope_mean ** 2, 0))
    return mean, std / np.sqrt(samples), slope_mean, slope_std / np.sqrt(samples)


# -- the causal seeds --------------------------------------------------------------------------------------------------

def causal_seeds(n: int = 200, beta: float = 64.0, t1: float = 30.0, dt: float = 0.05, seed: int = 0,
                 gap: float = 0.1) -> dict:
    """Causal softmax attention on the circle (Karagodin, Polyanskiy and Rigollet): clusters and their seeds."""
    import jax
    import jax.numpy as jnp

    import attnflow
    from attnflow.dynamics import sphere_flow
    from attnflow.integrate import EulerStepper, sphere_shift

    theta0 = np.asarray(jax.random.uniform(jax.random.key(seed), (n,), jnp.float32, 0.0, 2 * np.pi), np.float64)
    x0 = jnp.stack([jnp.cos(theta0), jnp.sin(theta0)], axis=-1)
    I = jnp.eye(2)
    layers = int(round(t1 / dt))
    sim = attnflow.simulate(x0, sphere_flow(I, I, I, beta, mask="causal", attention_impl="dense"),
                            EulerStepper(dt, layers, save_every=layers // 10, shift=sphere_shift))
    ts = np.asarray(sim.ts)
    xs = np.asarray(sim.states, np.float64)
    theta = np.arctan2(xs[..., 1], xs[..., 0])
    final = theta[-1]
    order = np.argsort(final)
    gaps = np.diff(np.concatenate([final[order], final[order[:1]] + 2 * np.pi]))
    cuts = np.flatnonzero(gaps > gap)
    clusters = []
    wrap = lambda a: (a + np.pi) % (2 * np.pi) - np.pi
    for c0, c1 in zip(cuts, np.roll(cuts, -1)):
        members = order[(np.arange(c0 + 1, c0 + 1 + (c1 - c0) % n)) % n] if len(cuts) > 1 else order
        seed_token = int(members.min())
        centre = float(np.angle(np.exp(1j * final[members]).mean()))
        clusters.append({"size": int(len(members)), "seed": seed_token,
                         "seed_moved": float(abs(wrap(final[seed_token] - theta0[seed_token]))),
                         "centre_from_seed_start": float(abs(wrap(centre - theta0[seed_token]))),
                         "diameter": float(np.ptp(wrap(final[members] - centre)))})
    clusters.sort(key=lambda c: c["seed"])
    moved = np.abs(wrap(theta - theta0[None]))  # (saves, n)
    return {"n": n, "beta": beta, "t1": t1, "dt": dt, "seed": seed, "gap": gap, "clusters": clusters,
            "times": ts.tolist(), "theta": theta.tolist(), "theta0": theta0.tolist(),
            "moved_first10": moved[-1, :10].tolist(), "moved_median": float(np.median(moved[-1]))}


# -- the study ---------------------------------------------------------------------------------------------------------

def machine_label(machine: dict) -> str:
    """'2-core AMD EPYC, jax 0.10.2 CPU' from :func:`benchmarks.common.machine_info`."""
    cpu = " ".join(str(machine.get("cpu", "")).split()[:2])
    return f"{machine.get('cpu_count')}-core {cpu}, jax {machine['versions'].get('jax')} {machine['jax_backend'].upper()}"


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--samples", type=int, default=32768, help="particle draws of the profile (default 32768)")
    p.add_argument("--dt", type=float, default=0.05, help="RK4 step of the particle system (default 0.05)")
    p.add_argument("--seeds", action="store_true", help="run the causal seeds study instead (n = 200, beta = 64)")
    p.add_argument("--t1", type=float, default=30.0, help="end time of the causal seeds run (default 30)")
    p.add_argument("--quick", action="store_true", help="2048 draws (seconds)")
    add_record_arguments(p, "positions_lost_in_middle", redraw=False)
    args = p.parse_args(argv)
    machine = machine_info()
    start = time.perf_counter()
    if args.seeds:
        record = {"machine": machine, "study": "causal seeds", **causal_seeds(t1=args.t1)}
        record["seconds"] = time.perf_counter() - start
        args.out.write_text(json.dumps(record, indent=1) + "\n")
        print(f"causal seeds, n = {record['n']}, beta = {record['beta']:g}, t = {record['t1']:g} "
              f"({machine_label(machine)}; {record['seconds']:.1f} s): {len(record['clusters'])} clusters")
        print(f"{'seed':>5} {'size':>5} {'seed moved':>11} {'centre - seed start':>20} {'diameter':>9}")
        for c in record["clusters"]:
            print(f"{c['seed']:>5} {c['size']:>5} {c['seed_moved']:>11.4f} {c['centre_from_seed_start']:>20.4f} "
                  f"{c['diameter']:>9.4f}")
        _seeds_figure(record, args.figure)
        return record

    samples = 2048 if args.quick else args.samples
    times = np.asarray(TIMES)
    s = np.arange(1, N_TOKENS) / N_TOKENS
    mc, err, _, slope_err = particle_profiles(samples, times, dt=args.dt)
    mc_seconds = time.perf_counter() - start
    discrete = profile_discrete(N_TOKENS, times)
    fine_s = np.linspace(0.01, 0.99, 197)
    closed = np.stack([profile_closed_form(s, t) for t in times])
    closed_fine = np.stack([profile_closed_form(fine_s, t) for t in times])
    slopes = {name: [right_slope(s, prof) for prof in profiles]
              for name, profiles in (("particles", mc), ("discrete", discrete), ("closed_form", closed))}
    tc_grid = np.linspace(1.5, 3.5, 41)
    tc_discrete = {str(n): crossing(tc_grid, [right_slope(np.arange(1, n) / n, prof)
                                              for prof in profile_discrete(n, tc_grid)]) for n in (64, 256)}
    # the slope at s = 1 itself, of n discrete tokens: the last two sources
    tc_end = {str(n): crossing(tc_grid, [n * (prof[-1] - prof[-2]) for prof in profile_discrete(n, tc_grid)])
              for n in (64, 256, 1024)}
    tc_closed_window = crossing(tc_grid, [right_slope(s, profile_closed_form(s, t)) for t in tc_grid])
    record = {"machine": machine, "study": "lost in the middle", "n": N_TOKENS, "beta": BETA, "lambda": LAMBDA,
              "M": M_WIDTH, "modes": MODES, "samples": samples, "dt": args.dt, "times": times.tolist(),
              "s": s.tolist(), "particles": mc.tolist(), "particles_stderr": err.tolist(),
              "discrete": discrete.tolist(), "closed_form": closed.tolist(), "fine_s": fine_s.tolist(),
              "closed_form_fine": closed_fine.tolist(), "slope_window": SLOPE_WINDOW, "right_slopes": slopes,
              "right_slope_stderr_particles": slope_err.tolist(),
              "t_crit_formula": {"beta=1": t_crit(1.0), "beta=2": t_crit(2.0)},
              "t_crit_windowed": {"particles": crossing(times, slopes["particles"]),
                                  "discrete": crossing(times, slopes["discrete"]),
                                  "closed_form": tc_closed_window, "discrete_fine_grid": tc_discrete},
              "t_crit_end_slope_discrete": tc_end,
              "minimum_s": {"particles": [float(s[np.argmin(m)]) for m in mc],
                            "discrete": [float(s[np.argmin(m)]) for m in discrete]},
              "particle_seconds": mc_seconds, "seconds": time.perf_counter() - start}
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    _report(record)
    _figure(record, args.figure)
    return record


def _report(r: dict) -> None:
    print(f"lost in the middle: n = {r['n']}, beta = {r['beta']:g}, lambda = {r['lambda']:g}, {r['samples']} draws, "
          f"RK4 dt = {r['dt']:g} ({machine_label(r['machine'])}; particles {r['particle_seconds']:.1f} s)")
    print(f"t_crit (closed form, slope at s = 1): beta = 1: {r['t_crit_formula']['beta=1']:.4f}, "
          f"beta = 2: {r['t_crit_formula']['beta=2']:.4f}")
    tw = r["t_crit_windowed"]
    print(f"sign change of the last two sources' slope, first-order equation: {r['t_crit_end_slope_discrete']}")
    print(f"sign change of the slope over s in [{1 - r['slope_window']:g}, 1): particles {tw['particles']}, "
          f"discrete n = 64 {tw['discrete']}, closed form {tw['closed_form']}; fine grid {tw['discrete_fine_grid']}")
    s = np.asarray(r["s"])
    print(f"{'t':>5} {'argmin s (particles)':>21} {'argmin s (discrete)':>20} {'slope particles':>22} "
          f"{'slope discrete':>15} {'slope closed':>13} {'chi2/dof':>9}")
    for i, t in enumerate(r["times"]):
        mc, err, disc = (np.asarray(r[k][i]) for k in ("particles", "particles_stderr", "discrete"))
        chi2 = float(np.mean(((mc - disc) / err) ** 2))
        print(f"{t:>5.2f} {r['minimum_s']['particles'][i]:>21.3f} {r['minimum_s']['discrete'][i]:>20.3f} "
              f"{r['right_slopes']['particles'][i]:>12.3f} +- {r['right_slope_stderr_particles'][i]:<6.3f} "
              f"{r['right_slopes']['discrete'][i]:>15.3f} {r['right_slopes']['closed_form'][i]:>13.3f} {chi2:>9.2f}")
    del s


def _figure(r: dict, path: Path) -> None:
    import attnflow.plot as ap

    fig, axes = ap.new_figure(2, panel=(4.8, 3.7))
    left, right = axes.ravel()
    s, fine = np.asarray(r["s"]), np.asarray(r["fine_s"])
    show = [i for i, t in enumerate(r["times"]) if t in (0.5, 1.0, 1.5, 2.0)]
    for i, colour in zip(show, ap.colours(len(show))):
        t = r["times"][i]
        mc, err = np.asarray(r["particles"][i]), np.asarray(r["particles_stderr"][i])
        left.errorbar(s, mc, yerr=err, fmt="o", ms=2.5, lw=0.8, color=colour, label=f"particles, t = {t:g}")
        left.plot(s, r["discrete"][i], "-", color=colour, lw=1.2)
        left.plot(fine, r["closed_form_fine"][i], ":", color=colour, lw=1.2)
    left.plot([], [], "k-", lw=1.2, label="first-order equation, n = 64")
    left.plot([], [], "k:", lw=1.2, label="closed form, n = infinity")
    left.set_xlabel("source position s = (k + 1)/n")
    left.set_ylabel(r"soft accuracy $S_t(s)$")
    left.set_yscale("log")
    left.set_ylim(0.3, 12)
    left.legend(fontsize="x-small")
    times = np.asarray(r["times"])
    right.errorbar(times, r["right_slopes"]["particles"], yerr=r["right_slope_stderr_particles"], fmt="o", ms=3,
                   label="particles")
    right.plot(times, r["right_slopes"]["discrete"], "-", label="first-order equation, n = 64")
    right.plot(times, r["right_slopes"]["closed_form"], ":", label="closed form")
    right.axhline(0, color="0.5", lw=0.8)
    right.axvline(r["t_crit_formula"]["beta=1"], color="0.3", ls="--", lw=1,
                  label=f"t_crit = {r['t_crit_formula']['beta=1']:.4f} (slope at s = 1)")
    right.set_xlabel("t")
    right.set_ylabel(f"slope of the profile over s in [{1 - r['slope_window']:g}, 1)")
    right.legend(fontsize="x-small")
    fig.suptitle(f"causal ALiBi on the circle, n = {r['n']}, beta = {r['beta']:g}, lambda = {r['lambda']:g}, "
                 f"{r['samples']} draws ({machine_label(r['machine'])})", fontsize="medium")
    ap.save(fig, path, close=True)


def _seeds_figure(r: dict, path: Path) -> None:
    import attnflow.plot as ap

    fig, axes = ap.new_figure(2, panel=(4.8, 3.7))
    left, right = axes.ravel()
    theta = np.asarray(r["theta"])
    times = np.asarray(r["times"])
    n = theta.shape[1]
    for i, colour in zip(range(n), ap.colours(n)):
        left.plot(times, np.unwrap(theta[:, i]), "-", color=colour, lw=0.5 if i >= 10 else 1.6)
    left.set_xlabel("t")
    left.set_ylabel("angle (unwrapped); the first 10 tokens thick")
    theta0 = np.asarray(r["theta0"])
    right.scatter(theta0, np.arange(n), s=4, c="0.6", label="start of every token")
    for c in r["clusters"]:
        right.scatter([theta0[c["seed"]]], [c["seed"]], s=30, marker="o", facecolors="none", edgecolors="C3")
    right.scatter(theta[-1], np.full(n, -8), s=8, c="C0", marker="|", label=f"tokens at t = {r['t1']:g}")
    right.plot([], [], "o", mfc="none", mec="C3", label="seed (earliest token) of each cluster")
    right.set_xlabel("angle")
    right.set_ylabel("token index")
    right.legend(fontsize="x-small")
    fig.suptitle(f"causal attention on the circle, n = {r['n']}, beta = {r['beta']:g}: {len(r['clusters'])} clusters "
                 f"({machine_label(r['machine'])})", fontsize="medium")
    ap.save(fig, path, close=True)


if __name__ == "__main__":
    main()
