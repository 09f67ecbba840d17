#!/usr/bin/env python
r"""Past the linear phase on the circle at large n: metastable cluster states, their lifetimes and the barrier law.

n tokens drawn uniformly on the circle follow the sphere flow's layer stepper (Q = K = V = I, softmax, forward
Euler of step ``--dt`` renormalised onto the circle) on the O(n K) Fourier path, to ``--t1``, with the state
saved at layers spaced evenly within each octave. At every save: the clusters (:func:`attnflow.meanfield.circle_clusters`: arcs between
gaps wider than ``--max-gap`` rad, holding at least 1% of the tokens) with their positions, masses and the smallest gap between neighbours. The
saves where every cluster is tight (half-width <= 0.1 rad) are *gathered*; the
metastable plateaus of their cluster count (:func:`attnflow.observables.plateaus`: runs of the running-minimum
count >= 2 that last at least as long as the time taken to reach them; the last one censored at t1) give each
state's lifetime T, with the geometry at its start. Each lifetime is set against the two-cluster barrier law
of the n = 2 reduction, :math:`T_2(\Delta) = e^{\beta(1-\cos\Delta)}/(2\beta\sin^2\Delta)`, at the state's
smallest gap :math:`\Delta_{min}`, and the slope of :math:`\log T` against :math:`\beta(1-\cos\Delta_{min})` is
fitted over the uncensored states (Student-t interval) and over every state, the censored ones as lower bounds
(:func:`attnflow.stats.censored_lognormal_fit`, the interval robust to the states of one cloud sharing it), and the
mean of log(T / T_2) over them, pooled over clouds
and betas, with its Student-t interval. The duration of the quasi-linear phase is the time of
the first save with clusters. With several clouds per beta (``--seeds``) each kind of state, (beta, cluster count),
gets the centre of its lifetimes and of their ratios to the law, with intervals, the censored states as lower
bounds (:func:`attnflow.stats.censored_lognormal_mean`).

``--d 3``: the same study on the sphere S^2 (uniform tokens on S^2, the O(n L^2) harmonic path, the clusters of
:func:`attnflow.observables.sphere_clusters`: the components of the threshold graph at angle ``--max-gap``, exact,
without an n x n graph; k* is then the fastest degree l*). The two-cluster law is the same: two clusters span a great
circle, and their relative motion is the circle's.

Writes a JSON record and a figure (``--out``, ``--figure``), labelled with the machine. ``--quick``: n = 10^4,
beta = 4 and 8, t1 = 200 (a smoke run).
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

#: a save counts as gathered when every cluster's half-width is at most this (rad)
MAX_SPREAD = 0.1
#: clusters lighter than this fraction of the tokens (stray tokens between clusters) are not counted
MIN_MASS = 0.01


def octave_layers(layers: int, per_octave: int) -> list[int]:
    """Save layers ``per_octave`` equally spaced in each octave [2^j, 2^(j+1)) up to ``layers``: log-spaced in
    the large, with one run of equal gaps per octave (a set of many distinct gaps compiles slowly: each run is
    its own loop in the program)."""
    out, low = {0}, max(per_octave, 1)
    out.update(range(1, low))
    while low < layers:
        high = min(2 * low, layers)
        out.update(range(low, high, max((high - low) // per_octave, 1)))
        low = high
    out.add(layers)
    return sorted(out)


def gathered_count(geometry: dict | None, n: int, max_spread: float) -> int:
    """The cluster count of a save where every cluster is tight (half-width <= ``max_spread``), else n (not
    gathered: still spreading out, or two clusters in the middle of a merge)."""
    if geometry is None or geometry["count"] == 0 or geometry["spread"] > max_spread:
        return n
    return geometry["count"]


def run(beta: float, n: int, t1: float, dt: float, saves: int, max_gap: float, seed: int, d: int = 2) -> dict:
    import jax
    import jax.numpy as jnp

    from attnflow.dynamics import normalise, sphere_flow
    from attnflow.integrate import EulerStepper, SaveLayers, sphere_shift
    from attnflow.meanfield import circle_clusters, most_unstable_mode, sphere_growth_rates
    from attnflow.observables import plateaus, sphere_clusters

    layers = int(round(t1 / dt))
    I = jnp.eye(d)
    if d == 2:
        theta = jax.random.uniform(jax.random.key(seed), (n,), jnp.float32, 0.0, 2 * np.pi)
        x0 = jnp.stack([jnp.cos(theta), jnp.sin(theta)], axis=1)
        field = sphere_flow(I, I, I, beta, attention_impl="fourier", fourier_max_score=beta)
        clusters, k_star = circle_clusters, int(most_unstable_mode(beta))
    else:  # S^2: the harmonic path; the exact threshold-graph clusters (no n x n graph); l* from Funk-Hecke
        x0 = normalise(jax.random.normal(jax.random.key(seed), (n, 3), jnp.float32))
        field = sphere_flow(I, I, I, beta, attention_impl="harmonic")
        clusters, k_star = sphere_clusters, int(np.argmax(np.asarray(sphere_growth_rates(beta, 3, 64))))
    save_at = SaveLayers(octave_layers(layers, saves))
    # one loop body over the save intervals (loop="fori"): the octaves' runs as scan blocks compile for tens of
    # seconds; forward only, so no checkpointing
    stepper = EulerStepper(dt, layers, shift=sphere_shift, save_at=save_at, loop="fori", checkpoint=None)
    start = time.perf_counter()
    traj = jax.jit(lambda x: stepper.solve(field, x))(x0)
    ys = np.asarray(traj.ys)
    seconds = time.perf_counter() - start
    ts = np.asarray(traj.ts, float)
    finite = np.all(np.isfinite(ys), axis=(1, 2))
    geometry = [clusters(y, max_gap, MIN_MASS) if ok else None for y, ok in zip(ys, finite)]
    counts = np.array([gathered_count(g, n, MAX_SPREAD) for g in geometry])
    use = finite & (ts > 0)
    series = counts[use]
    states = []
    for p in plateaus(ts[use], series):
        k = int(np.flatnonzero(ts == p.start)[0])
        g = geometry[k]
        gap = g["smallest_gap"]
        barrier = beta * (1 - math.cos(gap))
        law = math.exp(barrier) / (2 * beta * math.sin(gap) ** 2)
        states.append({"count": p.count, "start": p.start, "end": p.end, "censored": p.censored,
                       "lifetime": p.duration, "smallest_gap": gap, "barrier": barrier, "two_cluster_law": law,
                       "positions": np.asarray(g["positions"]).tolist(), "masses": np.asarray(g["masses"]).tolist(),
                       "spread": g["spread"]})
    clustered = ts[(counts < n) & finite]
    return {"beta": beta, "n": n, "d": d, "dt": dt, "t1": t1, "seconds": seconds, "k_star": k_star,
            "quasi_linear_end": float(clustered[0]) if clustered.size else None,
            "first_count": int(counts[(counts < n) & finite][0]) if clustered.size else None,
            "t": ts.tolist(), "counts": counts.tolist(), "nonfinite_saves": int((~finite).sum()), "states": states}


def two_cluster_time(beta: float, gap: float, end: float = MAX_SPREAD) -> float:
    r"""The n = 2 reduction's merge time itself, not its Laplace estimate: two tokens at angle :math:`\Delta` close it
    as :math:`\dot\Delta = -2\sin\Delta / (1 + e^{\beta(1-\cos\Delta)})` (softmax, Q = K = V = I, self-attention
    included), so :math:`T = \int_{end}^{\Delta_0} \frac{1 + e^{\beta(1-\cos\Delta)}}{2\sin\Delta}\,d\Delta` (to
    ``end``, the width below which two clusters count as one). Where :math:`\beta\sin\Delta_0` is large this is
    :math:`T_2 = e^{\beta(1-\cos\Delta_0)}/(2\beta\sin^2\Delta_0)`; near the antipode :math:`T_2` diverges like
    :math:`1/\sin^2`, the integral only like :math:`\log(1/(\pi - \Delta_0))` (the pair leaves the antipode at an
    exponential rate, not at the law's vanishing speed).

    Example:
        >>> T = two_cluster_time(16.0, 1.2)
        >>> law = math.exp(16.0 * (1 - math.cos(1.2))) / (2 * 16.0 * math.sin(1.2) ** 2)
        >>> 1.0 < T / law < 1.2, two_cluster_time(4.0, 3.05) < 0.2 * math.exp(4.0 * (1 - math.cos(3.05))) / (8 * math.sin(3.05) ** 2)
        (True, True)
    """
    from scipy.integrate import quad

    if gap <= end:
        return 0.0
    rate = lambda a: (1.0 + math.exp(beta * (1.0 - math.cos(a)))) / (2.0 * math.sin(a))
    return float(quad(rate, end, gap, limit=200)[0]) if gap < math.pi else math.inf


def per_state(rows: list[dict], confidence: float = 0.95) -> list[dict]:
    """Each kind of metastable state, (beta, cluster count), over the clouds that formed one: the centre of its
    lifetimes T and of their ratios to the two-cluster law at each state's own smallest gap, T / T_2, with
    intervals (:func:`attnflow.stats.censored_lognormal_mean`: log-normal, the censored states as lower bounds;
    None with fewer than two merges)."""
    from attnflow.stats import censored_lognormal_mean

    groups: dict[tuple[float, int], list[dict]] = {}
    for r in rows:
        for s in r["states"]:
            if s["lifetime"] > 0:
                groups.setdefault((r["beta"], s["count"]), []).append(s)
    out = []
    for (beta, count), states in sorted(groups.items(), key=lambda kv: (kv[0][0], -kv[0][1])):
        life = np.array([s["lifetime"] for s in states])
        censored = np.array([s["censored"] for s in states])
        law = np.array([s["two_cluster_law"] for s in states])
        exact = np.array([two_cluster_time(beta, s["smallest_gap"]) for s in states])
        T = censored_lognormal_mean(life, censored, confidence)
        ratio = censored_lognormal_mean(life / law, censored, confidence)
        ratio_exact = censored_lognormal_mean(life / exact, censored, confidence)
        out.append({"beta": beta, "count": count, "states": len(states), "merges": int((~censored).sum()),
                    "lifetime": [T["median"], T["median_lo"], T["median_hi"]], "sigma": T["sigma"],
                    "ratio_to_law": [ratio["median"], ratio["median_lo"], ratio["median_hi"]],
                    "ratio_to_exact": [ratio_exact["median"], ratio_exact["median_lo"], ratio_exact["median_hi"]],
                    "exact_median": float(np.median(exact)),
                    "law_median": float(np.median(law)),
                    "smallest_gap": [float(np.min([s["smallest_gap"] for s in states])),
                                     float(np.max([s["smallest_gap"] for s in states]))]})
    return out


def fit(rows: list[dict]) -> dict:
    from attnflow.stats import censored_lognormal_fit, fit_slope, mean_interval

    pts = [(s["barrier"], math.log(s["lifetime"]), math.log(s["two_cluster_law"])) for r in rows for s in r["states"]
           if not s["censored"] and s["lifetime"] > 0]
    if len(pts) < 3:
        return {"points": len(pts), "per_state": per_state(rows)}
    b, logt, logl = (np.asarray(a) for a in zip(*pts))
    out = fit_slope(b, logt)
    mean, lo, hi = mean_interval((logt - logl)[:, None], 0.95)  # every merge of every cloud and beta, pooled
    # every state, the censored ones as lower bounds (log-normal likelihood; interval robust to the states of one
    # cloud sharing it): the uncensored-only fit above drops the longest-lived states
    every = [(s["barrier"], s["lifetime"], s["censored"], i) for i, r in enumerate(rows) for s in r["states"]
             if s["lifetime"] > 0]
    x_all, life, cens, cloud = (np.asarray(a) for a in zip(*every))
    censored = censored_lognormal_fit(x_all, life, cens.astype(bool), 0.95, clusters=cloud)
    # the same merges against the n = 2 reduction's merge time itself (the law is its Laplace estimate, which fails
    # near the antipode): log T on log T_exact, whose slope is 1 where the reduction holds
    merged = [(r["beta"], s) for r in rows for s in r["states"] if not s["censored"] and s["lifetime"] > 0]
    log_exact = np.log([two_cluster_time(beta, s["smallest_gap"]) for beta, s in merged])
    on_exact = fit_slope(log_exact, logt)
    e_mean, e_lo, e_hi = mean_interval((logt - log_exact)[:, None], 0.95)
    return {"points": len(pts), "slope": out["slope"], "lo": out["lo"], "hi": out["hi"],
            "on_exact": {"slope": on_exact["slope"], "lo": on_exact["lo"], "hi": on_exact["hi"],
                         "log_ratio_mean": float(e_mean[0]), "log_ratio_lo": float(e_lo[0]),
                         "log_ratio_hi": float(e_hi[0]), "log_ratio_min": float(np.min(logt - log_exact)),
                         "log_ratio_max": float(np.max(logt - log_exact))},
            "censored": {"slope": censored["slope"], "lo": censored["slope_lo"], "hi": censored["slope_hi"],
                         "sigma": censored["sigma"], "states": len(every), "censored_states": int(cens.sum()),
                         "clouds": censored["clusters"], "interval": censored["interval"]},
            "log_ratio_to_law": {"median": float(np.median(logt - logl)), "min": float(np.min(logt - logl)),
                                 "max": float(np.max(logt - logl)), "mean": float(mean[0]), "mean_lo": float(lo[0]),
                                 "mean_hi": float(hi[0])},
            "per_state": per_state(rows)}


def figure(rows: list[dict], result: dict, path: Path, machine: str) -> None:
    """Left: the gathered cluster count against t (one colour per beta). Middle: each metastable state's lifetime
    T against the n = 2 reduction's merge time at its smallest gap (:func:`two_cluster_time`; open triangles:
    censored at t1, lower bounds), with T equal to it. Right, when some kind of state, (beta, count), merged in
    two clouds or more: its median ratio T / (n = 2 time) with the 95% interval (censored states as lower bounds)."""
    import attnflow.plot as ap

    kinds = [g for g in result.get("per_state", []) if g.get("ratio_to_exact", [None])[0] is not None]
    fig, axes = ap.new_figure(3 if kinds else 2, panel=(4.6, 3.8))
    left, middle = axes[0][0], axes[0][1]
    betas = sorted({r["beta"] for r in rows})
    colour = {b: f"C{i % 10}" for i, b in enumerate(betas)}
    laws, labelled = [], set()
    for r in rows:
        t, c = np.asarray(r["t"]), np.asarray(r["counts"])
        keep = (t > 0) & (c < r["n"])
        star = "k^*" if r.get("d", 2) == 2 else "l^*"
        label = None if r["beta"] in labelled else f"$\\beta$ = {r['beta']:g} (${star}$ = {r['k_star']})"
        labelled.add(r["beta"])
        left.step(t[keep], c[keep], where="post", color=colour[r["beta"]], alpha=0.8, label=label)
        for s in r["states"]:
            exact = two_cluster_time(r["beta"], s["smallest_gap"])
            if not math.isfinite(exact):
                continue  # an exactly antipodal pair: no merge in the reduction
            laws.append(exact)
            middle.plot(exact, s["lifetime"], ">" if s["censored"] else "o", color=colour[r["beta"]],
                        ms=6, mfc="none" if s["censored"] else colour[r["beta"]])
    span = np.geomspace(min(laws + [10.0]) / 3, max(laws + [1e4]) * 3, 10)
    middle.plot(span, span, "k--", lw=1, label="T = n = 2 merge time")
    left.set_xscale("log")
    left.yaxis.get_major_locator().set_params(integer=True)
    left.set_xlabel("t"), left.set_ylabel("clusters (>= 1% of the tokens each)")
    left.legend(fontsize=7)
    middle.set_xscale("log"), middle.set_yscale("log")
    middle.set_xlabel("n = 2 merge time at the smallest gap")
    middle.set_ylabel("lifetime T (open: censored at t1)")
    if "on_exact" in result:
        e = result["on_exact"]
        middle.set_title(f"log T on log(n = 2 time): slope {e['slope']:.2f} [{e['lo']:.2f}, {e['hi']:.2f}], "
                         f"{result['points']} merges", fontsize=8)
    middle.legend(fontsize=7)
    if kinds:
        right = axes[0][2]
        for i, g in enumerate(kinds):
            mid, lo, hi = g["ratio_to_exact"]
            low = mid - lo if lo is not None else 0.0
            high = hi - mid if hi is not None else 0.0
            right.errorbar(i, mid, yerr=[[low], [high]], fmt="o", color=colour.get(g["beta"], "k"), capsize=3)
            right.annotate(f"{g['merges']}/{g['states']}", (i, mid), textcoords="offset points", xytext=(6, -3),
                           fontsize=7)
        right.axhline(1.0, color="k", ls="--", lw=1)
        right.set_yscale("log")
        low, high = right.get_ylim()
        ticks = [v for v in (0.0625, 0.125, 0.25, 0.5, 0.7, 1.0, 1.4, 2.0, 4.0, 8.0, 16.0) if low <= v <= high]
        right.set_yticks(ticks, [f"{v:g}" for v in ticks])
        right.minorticks_off()
        right.set_xticks(range(len(kinds)))
        right.set_xticklabels([f"$\\beta$={g['beta']:g}\n{g['count']} cl." for g in kinds], fontsize=7)
        right.set_ylabel("T / (n = 2 merge time), median and 95% interval")
        right.set_title("each kind of state over clouds (merges / states)", fontsize=8)
    where = "the circle" if rows[0].get("d", 2) == 2 else "the sphere $S^2$"
    fig.suptitle(f"Metastable states on {where}, n = {rows[0]['n']} tokens, softmax; {machine}", fontsize=8)
    ap.save(fig, path, formats=("png",), dpi=130, close=True)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--betas", type=float, nargs="+", default=[4.0, 6.0, 8.0, 12.0, 16.0], help="inverse temperatures")
    p.add_argument("--n", type=int, default=100_000, help="tokens (default 10^5)")
    p.add_argument("--t1", type=float, default=3000.0, help="end time (default 3000)")
    p.add_argument("--dt", type=float, default=0.1, help="layer step (default 0.1)")
    p.add_argument("--saves", type=int, default=8, help="saved layers per octave of layers (default 8)")
    p.add_argument("--max-gap", type=float, default=0.05, help="gap (rad) that separates clusters (default 0.05)")
    p.add_argument("--seeds", type=int, default=1, help="clouds per beta (default 1)")
    p.add_argument("--d", type=int, default=2, choices=[2, 3],
                   help="2: the circle (Fourier path); 3: the sphere S^2 (harmonic path, exact threshold-graph clusters)")
    p.add_argument("--quick", action="store_true", help="n = 10^4, beta = 4 and 8, t1 = 200 (seconds)")
    p.add_argument("--refit", type=Path, default=None, help="recompute the fits of this saved record, write it back")
    add_record_arguments(p, "circle_long_times")
    args = p.parse_args(argv)
    record = redrawn(args, lambda rec, path: figure(rec["rows"], rec["fit"], path, rec["machine"].get("cpu", "")))
    if record is not None:
        return record
    if args.refit is not None:  # the fits of a saved record recomputed (and written back)
        out = json.loads(args.refit.read_text())
        out["fit"] = fit(out["rows"])
        args.refit.write_text(json.dumps(out) + "\n")
        print(f"log T against beta (1 - cos Delta_min): {out['fit']}")
        return out
    if args.quick:
        args.n, args.betas, args.t1 = 10_000, [4.0, 8.0], 200.0
    machine = machine_info()
    rows = []
    for beta in args.betas:
        for seed in range(args.seeds):
            r = run(beta, args.n, args.t1, args.dt, args.saves, args.max_gap, seed, args.d)
            rows.append(r)
            lives = ", ".join(f"{s['count']} clusters {s['lifetime']:.3g}{'+' if s['censored'] else ''} "
                              f"(gap {s['smallest_gap']:.2f}, law {s['two_cluster_law']:.3g})" for s in r["states"])
            print(f"beta {beta:g} seed {seed}: k* = {r['k_star']}, clusters from t = {r['quasi_linear_end']} "
                  f"({r['first_count']} first); states: {lives or 'none'}; {r['seconds']:.1f} s", flush=True)
    result = fit(rows)
    print(f"log T against beta (1 - cos Delta_min), uncensored states: {result}")
    out = {"machine": machine, "rows": rows, "fit": result}
    args.out.write_text(json.dumps(out) + "\n")
    figure(rows, result, args.figure, machine.get("cpu", ""))
    return out


if __name__ == "__main__":
    main()
