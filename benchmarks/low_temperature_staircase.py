#!/usr/bin/env python
r"""The energy staircase at low temperature: n = 5 tokens on the circle, beta = 500 to 4000, against a collision model.

The field is post-LN attention with Q = K = V = I and the 1/n normalisation divided by :math:`e^\beta` (the sphere
field's ``identity_weights=True, normalisation="mean", log_scale=beta``), i.e. the normalisation of Geshkovski,
Koubbi, Polyanskiy, Rigollet (arXiv 2410.06833),

.. math::  \dot x_i = \mathrm{Proj}_{x_i^\perp}\Big(\frac1n\sum_j e^{\beta(\langle x_i, x_j\rangle - 1)} x_j\Big),

in its own time :math:`\tau` (the plain 1/n field's time is :math:`t = e^{-\beta}\tau`), and the energy is
:math:`E = \frac{1}{2\beta n^2}\sum_{ij} e^{\beta(\langle x_i, x_j\rangle - 1)}`; the script records
:math:`2\beta n^2 E = \sum_{ij} e^{\beta(\langle x_i,x_j\rangle-1)}`, which sits at :math:`\sum_k m_k^2` for clusters of
m_k tokens (5 for five singletons, 25 for one cluster). Time is read as :math:`s = \log\tau/\log\beta`.

**Start.** Five tokens at angles with consecutive gaps :math:`g_k\,u(\beta)`, :math:`u = \sqrt{2\log\beta/\beta}`
(``GAPS``): a gap :math:`\theta = g\,u` has :math:`\beta(1-\cos\theta) \approx g^2\log\beta`, so the pull across it,
:math:`e^{\beta(\cos\theta-1)} \approx \beta^{-g^2}`, acts on the time scale :math:`\tau \approx \beta^{g^2}` and the
staircase sits at the same s for every beta (to logarithmic corrections).

**Collision model** (:func:`collision_model`). Clusters are points of mass m (token counts) that move only in pairs
of neighbours: for two clusters a, b at gap :math:`\theta`, the field gives
:math:`\dot\theta = -\frac{m_a+m_b}{n}\, e^{\beta(\cos\theta-1)}\sin\theta` (the own cluster's pull is radial and
projected away; the other's is :math:`\frac{m_b}{n}e^{\beta(\cos\theta-1)}\sin\theta` along the circle), which keeps
the mass-weighted mean angle. The pair's energy jump :math:`2m_am_b e^{\beta(\cos\theta-1)}` is half done when
:math:`e^{\beta(\cos\theta-1)} = 1/2`, after

.. math::  T(\theta_0) = \frac{n}{m_a+m_b}\int_{\theta_{1/2}}^{\theta_0}\frac{e^{\beta(1-\cos\phi)}}{\sin\phi}\,d\phi
           \;\approx\; \frac{n}{m_a+m_b}\,\frac{e^{\beta(1-\cos\theta_0)}}{\beta\sin^2\theta_0}.

Each neighbour pair keeps a clock from the time it became neighbours (0, or the merge that made one of them), the
earliest clock to run out merges its pair into one cluster at the mass-weighted mean angle, and the pairs that touch
the new cluster start new clocks. Leading order: a merge at :math:`s \approx \beta(1-\cos\theta)/\log\beta`; the
merge times do not add, in s each is set by the gap it closes.

**Point-cluster model** (:func:`point_cluster_model`). The same clusters as points of mass m, but every cluster
moves all the time under every other one, :math:`\dot\theta_a = \frac1n\sum_b m_b e^{\beta(\cos(\theta_b-\theta_a)-1)}
\sin(\theta_b-\theta_a)` (the field of the tokens when those of a cluster coincide), integrated in s (SciPy's DOP853),
a pair merging at the mass-weighted mean when its gap reaches the middle of its jump, :math:`e^{\beta(\cos\theta-1)}
= 1/2`. It differs from the collision model only in keeping each gap's progress from the start instead of restarting
a pair's clock at the merge that made it; with the pulls restricted to neighbours its times move by < 0.1%.

**Integration.** :class:`attnflow.integrate.ODESolver` with diffrax's Kvaerno5 (implicit: a merged cluster relaxes at
the rate m/n while the next merge is :math:`\beta^{s}` away) and a Newton root finder, from save time to save time,
each interval's end renormalised onto the circle (the post-LN projection, as the layer stepper's ``sphere_shift``).
The merges are the decreases of the running minimum of the cluster count (:func:`attnflow.meanfield.circle_clusters`,
gaps wider than u/4); each count's level is the median energy while it lasts, and a jump's time is where the energy
crosses the middle of two consecutive levels (interpolated in log time). The flat steps of
:func:`attnflow.observables.energy_plateaus` (2%) are recorded too: at beta = 500 the level of four clusters lasts
a factor 3 in time only, and is not flat to 2%.

**Floor of float64.** Inside a cluster the drift is a difference of two nearly equal vectors (the tangent
projection of :math:`\frac1n\sum_j e^{\ldots}x_j \approx \frac{m}{n}x_i`), computed to about :math:`10^{-17}`; the
pull across a gap is :math:`\approx\beta^{-g^2}`, so merges past :math:`g^2\log\beta \approx 35` (s about 5.5 at
beta = 500, 4.2 at beta = 4000) are below rounding, and this design's last merge is close to it at beta = 4000.

Writes a JSON record and a figure (``--out``, ``--figure``), labelled with the machine (the documented run:
``--out benchmarks/runs/low_temperature_staircase.json --figure docs/figures/low-temperature-staircase.png``, about
1 minute on a 2-core AMD EPYC). ``--quick``: beta = 500 only.
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

from benchmarks.common import add_record_arguments, machine_info, redrawn  # noqa: E402

#: consecutive gaps of the five tokens, in units of u(beta) = sqrt(2 log beta / beta)
GAPS = (1.055, 0.616, 0.777, 0.81)
#: number of tokens
N = 5
#: rescaled times s = log tau / log beta of the saves
S_RANGE = (-0.5, 4.0)
#: tolerances of the implicit solver (the drift inside a cluster is rounding noise of ~1e-17: tighter
#: tolerances cap the step near 1/(noise/atol) and cost steps without changing the jump times)
RTOL, ATOL = 1e-9, 1e-12
#: relative tolerance of an energy plateau (the jumps here are >= 2 out of <= 25)
REL_TOL = 0.02
BETAS = (500.0, 1000.0, 2000.0, 4000.0)
MACHINE_LABEL = "2-core AMD EPYC, jax 0.10.2 CPU"


def start_angles(beta: float, gaps=GAPS) -> np.ndarray:
    """The five starting angles: consecutive gaps g_k u(beta), centred on 0."""
    u = math.sqrt(2 * math.log(beta) / beta)
    phi = np.concatenate([[0.0], np.cumsum(np.asarray(gaps) * u)])
    return phi - phi.mean()


def middle_gap(beta: float) -> float:
    r"""The gap :math:`\theta_{1/2}` at the middle of a pair's energy jump, :math:`e^{\beta(\cos\theta-1)} = 1/2`."""
    return math.acos(1 - math.log(2) / beta)


def pair_time(theta0: float, mass: float, beta: float, n: int = N) -> float:
    r"""The two-cluster time to the middle of the energy jump, :math:`T(\theta_0)` of the module docstring
    (trapezoid rule on 20001 points; 0 when the gap is already inside the jump)."""
    half = middle_gap(beta)
    if theta0 <= half:
        return 0.0
    phi = np.linspace(half, theta0, 20001)
    f = np.exp(beta * (1 - np.cos(phi))) / np.sin(phi)
    return n / mass * float(np.sum((f[1:] + f[:-1]) * np.diff(phi)) / 2)


def collision_model(angles, beta: float, n: int = N) -> dict:
    """The collision model of the module docstring from the angles (sorted, on an arc shorter than pi): merge times
    tau_k, their s_k, the energy levels sum m^2 after each merge, and the leading-order s of each merge."""
    clusters = [(float(a), 1) for a in np.sort(angles)]
    clocks = [(0.0, pair_time(b[0] - a[0], a[1] + b[1], beta, n)) for a, b in zip(clusters[:-1], clusters[1:])]
    taus, leading, levels = [], [], [float(sum(m * m for _, m in clusters))]
    while len(clusters) > 1:
        ends = [start + T for start, T in clocks]
        k = int(np.argmin(ends))
        tau = ends[k]
        (a, ma), (b, mb) = clusters[k], clusters[k + 1]
        leading.append(beta * (1 - math.cos(b - a)) / math.log(beta))
        clusters[k:k + 2] = [((ma * a + mb * b) / (ma + mb), ma + mb)]
        clocks[k:k + 1] = []
        for j in (k - 1, k):  # the pairs that touch the new cluster start new clocks
            if 0 <= j < len(clusters) - 1:
                (p, mp), (q, mq) = clusters[j], clusters[j + 1]
                clocks[j] = (tau, pair_time(q - p, mp + mq, beta, n))
        taus.append(tau)
        levels.append(float(sum(m * m for _, m in clusters)))
    return {"tau": taus, "s": [math.log(t) / math.log(beta) for t in taus], "leading_s": leading, "levels": levels}


def point_cluster_model(angles, beta: float, n: int = N, s_range=(S_RANGE[0], 6.0)) -> dict:
    """The point-cluster model of the module docstring from the angles (on an arc shorter than pi): the s of each
    merge and the energy levels sum m^2 after each (merges past ``s_range[1]`` are not reached)."""
    from scipy.integrate import solve_ivp

    log_beta = math.log(beta)
    half = middle_gap(beta)
    theta, mass = np.sort(np.asarray(angles, dtype=np.float64)), np.ones(len(angles))
    s, merges, levels = float(s_range[0]), [], [float(np.sum(mass ** 2))]
    while len(theta) > 1:
        m = mass.copy()

        def rhs(s, th):  # d theta / ds = tau log(beta) d theta / d tau, tau = beta^s
            diff = th[None, :] - th[:, None]
            return beta ** s * log_beta / n * (m[None, :] * np.exp(beta * (np.cos(diff) - 1)) * np.sin(diff)).sum(1)

        def middle_of_a_jump(s, th):
            return float(np.min(np.diff(th))) - half

        middle_of_a_jump.terminal, middle_of_a_jump.direction = True, -1
        sol = solve_ivp(rhs, (s, s_range[1]), theta, method="DOP853", events=middle_of_a_jump, rtol=1e-10,
                        atol=1e-13)
        if not sol.t_events[0].size:
            break
        s, th = float(sol.t_events[0][0]), sol.y_events[0][0]
        k = int(np.argmin(np.diff(th)))
        merged = (m[k] * th[k] + m[k + 1] * th[k + 1]) / (m[k] + m[k + 1])
        theta, mass = np.r_[th[:k], merged, th[k + 2:]], np.r_[m[:k], m[k] + m[k + 1], m[k + 2:]]
        merges.append(s)
        levels.append(float(np.sum(mass ** 2)))
    return {"s": merges, "levels": levels}


def _solver():
    import diffrax
    import optimistix as optx

    return diffrax.Kvaerno5(root_finder=optx.Newton(rtol=1e-10, atol=1e-12))


def run_staircase(beta: float, num_saves: int = 300, s_range=S_RANGE) -> dict:
    """One run at ``beta``: the energy :math:`2\\beta n^2 E` and cluster count at each save, the plateaus, the
    jumps and their times, and the collision model's (module docstring)."""
    import jax
    import jax.numpy as jnp

    from attnflow.fields import build_field
    from attnflow.integrate import RESULTS, ODESolver
    from attnflow.meanfield import circle_clusters
    from attnflow.observables import energy_plateaus

    log_beta = math.log(beta)
    taus = np.exp(np.linspace(*s_range, num_saves) * log_beta)
    phi = start_angles(beta)
    with jax.enable_x64(True):
        I = jnp.eye(2)
        field = build_field("sphere", I, I, I, beta=beta, identity_weights=True, normalisation="mean",
                            log_scale=beta)

        @jax.jit
        def interval(x, t0, t1):
            sol = ODESolver(t0, t1, solver=_solver(), rtol=RTOL, atol=ATOL, max_steps=8192).solve(field, x)
            y = sol.ys[-1]
            return y / jnp.linalg.norm(y, axis=-1, keepdims=True), sol.num_steps, sol.result

        x = jnp.asarray(np.stack([np.cos(phi), np.sin(phi)], axis=1))
        states, steps, t_prev, failed = [], 0, 0.0, None
        for tau in taus:
            x, k, result = interval(x, jnp.asarray(t_prev), jnp.asarray(tau))
            steps += int(k)
            if int(result) != RESULTS.successful:
                failed = float(tau)
                break
            states.append(np.asarray(x))
            t_prev = tau
    states = np.asarray(states)
    taus = taus[:len(states)]
    energy = np.exp(beta * (np.einsum("tid,tjd->tij", states, states) - 1)).sum(axis=(1, 2))
    theta = np.arctan2(states[..., 1], states[..., 0])
    u = math.sqrt(2 * log_beta / beta)
    counts = [circle_clusters(th, 0.25 * u)["count"] or 1 for th in theta]
    flat = energy_plateaus(taus, energy, REL_TOL)  # the flat steps (a short step at small beta is not flat)
    running = np.minimum.accumulate(counts)
    drops = np.flatnonzero(np.diff(running) < 0) + 1  # saves at which clusters have merged
    bounds = np.r_[0, drops, len(running)]
    levels = [float(np.median(energy[a:b])) for a, b in zip(bounds[:-1], bounds[1:])]
    jumps_s = []
    for (lo, hi), k0 in zip(zip(levels[:-1], levels[1:]), drops):
        middle = (lo + hi) / 2
        k = int(np.flatnonzero(energy >= middle)[0]) if energy.max() >= middle else int(k0)
        a, b = energy[k - 1] - middle, energy[k] - middle
        s_a, s_b = math.log(taus[k - 1]) / log_beta, math.log(taus[k]) / log_beta
        jumps_s.append(s_a + (s_b - s_a) * (-a) / (b - a))
    model = collision_model(phi, beta)
    points = point_cluster_model(phi, beta)
    return {"beta": beta, "tau": taus.tolist(), "s": (np.log(taus) / log_beta).tolist(), "energy": energy.tolist(),
            "counts": [int(c) for c in counts], "levels": levels, "jumps": len(levels) - 1, "jump_s": jumps_s,
            "flat_steps": [p.energy for p in flat],
            "model_s": model["s"], "model_leading_s": model["leading_s"], "model_levels": model["levels"],
            "point_model_s": points["s"], "point_model_levels": points["levels"],
            "solver_steps": steps, "failed_at_tau": failed, "start_angles": phi.tolist()}


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--beta", type=float, nargs="+", default=list(BETAS), help="inverse temperatures (default %(default)s)")
    p.add_argument("--saves", type=int, default=300, help="save times, evenly spaced in s (default %(default)s)")
    p.add_argument("--quick", action="store_true", help="beta = 500 only, 120 saves (seconds)")
    add_record_arguments(p, "low_temperature_staircase")
    args = p.parse_args(argv)
    saved = redrawn(args, _figure)
    if saved is not None:
        return saved
    betas, saves = ([500.0], 120) if args.quick else (args.beta, args.saves)
    machine = machine_info()
    start = time.perf_counter()
    runs = []
    for beta in betas:
        t = time.perf_counter()
        run = run_staircase(beta, saves)
        run["seconds"] = time.perf_counter() - t
        runs.append(run)
        print(f"beta = {beta:g}: {run['jumps']} jumps, {run['solver_steps']} steps, {run['seconds']:.1f} s",
              file=sys.stderr, flush=True)
    record = {"machine": machine, "machine_label": MACHINE_LABEL, "n": N, "gaps_in_u": list(GAPS), "rtol": RTOL,
              "atol": ATOL, "runs": runs, "seconds": time.perf_counter() - start}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"n = {N} on the circle, 1/n field divided by e^beta, s = log(tau)/log(beta) ({MACHINE_LABEL})")
    print(f"{'beta':>6} {'jumps':>5} {'levels':>28}  jump s (measured / collision model / rel. error of tau)")
    for r in runs:
        cells = "  ".join(f"{m:.3f}/{c:.3f}/{(r['beta'] ** (m - c) - 1):+.1%}"
                          for m, c in zip(r["jump_s"], r["model_s"]))
        print(f"{r['beta']:>6g} {r['jumps']:>5} {str([round(v, 2) for v in r['levels']]):>28}  {cells}")
        cells = "  ".join(f"{m:.3f}/{c:.3f}/{(r['beta'] ** (m - c) - 1):+.1%}"
                          for m, c in zip(r["jump_s"], r["point_model_s"]))
        print(f"{'':>41}  point-cluster model: {cells}")
    _figure(record, args.figure)
    return record


def _figure(record: dict, path: Path) -> None:
    import attnflow.plot as ap

    fig, axes = ap.new_figure(2, panel=(4.8, 3.6))
    left, right = axes.ravel()
    for run, colour in zip(record["runs"], ap.colours(len(record["runs"]))):
        left.plot(run["s"], run["energy"], color=colour, lw=1.3, label=f"beta = {run['beta']:g}")
        for s in run["model_s"]:
            left.axvline(s, color=colour, lw=0.8, ls=":")
        right.plot(run["model_s"][:len(run["jump_s"])], run["jump_s"], "o", color=colour, ms=4,
                   label=f"beta = {run['beta']:g}")
        right.plot(run["point_model_s"][:len(run["jump_s"])], run["jump_s"][:len(run["point_model_s"])], "x",
                   color=colour, ms=5)
    lims = [0, max(max(r["model_s"]) for r in record["runs"]) + 0.3]
    right.plot(lims, lims, "k-", lw=0.8)
    left.set_xlabel(r"$s = \log\tau / \log\beta$")
    left.set_ylabel(r"$2\beta n^2 E = \sum_{ij} e^{\beta(\langle x_i,x_j\rangle-1)}$")
    left.set_yscale("log")
    left.legend(fontsize="small", title="dotted: collision model", title_fontsize="small")
    right.set_xlabel("model: s of the jump (o collision, x point clusters)")
    right.set_ylabel("measured: s of the jump")
    right.legend(fontsize="small")
    fig.suptitle(f"energy staircase, n = {record['n']} on the circle, 1/n attention "
                 f"({record['machine_label']})", fontsize="medium")
    ap.save(fig, path, close=True)


if __name__ == "__main__":
    main()
