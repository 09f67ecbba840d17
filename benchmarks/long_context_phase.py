#!/usr/bin/env python
r"""The (gamma, n) phase diagram at beta_n = gamma log n on the circle or on S^2, read from an `attnflow phase` run of
``configs/phase-long-context.toml`` (the circle) or ``configs/phase-long-context-sphere.toml`` (S^2, d = 3), n = 10^2
.. 10^5, and the cost of a cloud-layer at each n.

From the run folder's cells.csv (``--run DIR``): at the last checkpoint, per (gamma, n), the fraction of clustered
pairs, the cluster count and the order parameter with their intervals, set against the mean field's fastest mode.
On the circle :math:`k^*(\beta_n) = \arg\max_k k^2 I_k(\beta_n)` (:func:`attnflow.meanfield.most_unstable_mode`):
after the linear phase a cloud holds about :math:`k^*` clusters, so at large n the diagram is a function of
:math:`\beta_n` alone. On S^2 the fastest degree :math:`l^*(\beta_n)` (:func:`attnflow.meanfield.sphere_growth_rates`)
and the maxima of a random harmonic of that degree, 1 and 2 for l* = 1, 2 and about :math:`l^{*2}/(2\sqrt3)` above
(a heuristic: the mean-field guide's degree selection). ``--time``: each group's ensemble
(:func:`attnflow.phase.ensemble`, the job's own program) with 2 systems per gamma, called twice, the second call
timed: seconds per cloud-layer at each n (the groups above 4096 tokens run the Fourier path and the sorted-angle
statistics on the circle, the sphere path and the host's k-d tree statistics on S^2).

Writes a JSON record and a figure (``--out``, ``--figure``), labelled with the machine.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from benchmarks.common import add_record_arguments, machine_info, redrawn  # noqa: E402


def read_cells(run: Path) -> list[dict]:
    rows = list(csv.DictReader((run / "cells.csv").open()))
    t_last = max(float(r["t"]) for r in rows)
    out = []
    for r in rows:
        if float(r["t"]) != t_last:
            continue
        n, beta = int(r["n"]), float(r["beta"])
        out.append({"n": n, "beta": beta, "gamma": beta / math.log(n), "t": t_last, "systems": int(r["systems"]),
                    **{k: float(r[k]) for k in ("pairs_clustered", "pairs_clustered_lo", "pairs_clustered_hi",
                                                "clusters", "clusters_lo", "clusters_hi", "order", "order_lo",
                                                "order_hi")}})
    return sorted(out, key=lambda r: (r["n"], r["beta"]))


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", type=Path, help="an `attnflow phase phase-long-context --out DIR` folder (or of "
                   "phase-long-context-sphere)")
    p.add_argument("--time", action="store_true", help="also time each group's ensemble (2 systems per gamma)")
    add_record_arguments(p, "long_context_phase")
    args = p.parse_args(argv)
    record = redrawn(args, _figure)
    if record is not None:
        return record
    if args.run is None:
        p.error("give --run DIR (an attnflow phase run of configs/phase-long-context.toml or "
                "phase-long-context-sphere.toml) or --redraw RECORD")
    d = int(np.ravel(json.loads((args.run / "config.json").read_text())["d"])[0])
    rows = read_cells(args.run)
    for r in rows:
        r.update(fastest_mode(r["beta"], d))
    record = {"machine": machine_info(), "run": str(args.run), "d": d, "rows": rows, "timing": None}
    if args.time:
        record["timing"] = _timing(json.loads((args.run / "config.json").read_text()))
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    _print(record)
    _figure(record, args.figure)
    return record


def fastest_mode(beta: float, d: int) -> dict:
    """The mean field's fastest mode at beta and the cluster count it predicts: on the circle (d = 2) ``k_star`` =
    k*, the count; on S^2 (d = 3) ``l_star``, the fastest degree, and ``k_star`` the maxima of a random harmonic of
    that degree (1, 2, then about l*^2 / (2 sqrt 3))."""
    if d == 2:
        from attnflow.meanfield import most_unstable_mode

        return {"k_star": int(most_unstable_mode(beta, num_modes=max(64, int(4 * math.sqrt(2 * beta)))).k)}
    from attnflow.meanfield import sphere_growth_rates

    top = max(16, int(4 * math.sqrt(2 * beta)))
    l_star = int(np.argmax(np.asarray(sphere_growth_rates(beta, d, top))))
    return {"l_star": l_star, "k_star": l_star if l_star <= 2 else l_star ** 2 / (2 * math.sqrt(3))}


def _timing(config: dict) -> list[dict]:
    from attnflow.phase import check_phase_config, ensemble

    config = {k: v for k, v in config.items() if k not in ("source",)}
    config["systems"] = 2
    checked = check_phase_config(config)
    out = []
    for i, group in enumerate(checked.groups):
        ensemble(config, i)  # compiles
        start = time.perf_counter()
        ensemble(config, i)
        seconds = time.perf_counter() - start
        cloud_layers = len(checked.beta) * checked.systems * checked.num_layers
        out.append({"n": group.n, "seconds": seconds, "cloud_layers": cloud_layers,
                    "per_cloud_layer_s": seconds / cloud_layers})
        print(f"n = {group.n}: {seconds:.2f} s for {cloud_layers} cloud-layers, "
              f"{seconds / cloud_layers * 1e3:.3f} ms each", file=sys.stderr, flush=True)
    return out


def _print(r: dict) -> None:
    m = r["machine"]
    ns = sorted({row["n"] for row in r["rows"]})
    where = "S^2" if r.get("d", 2) == 3 else "the circle"
    print(f"(gamma, n) on {where}, beta_n = gamma log n, t = {r['rows'][0]['t']:g} ({m.get('cpu', '')}, "
          f"{m.get('cpu_count', '')} cores)")
    print("clustered pairs / clusters / order parameter, and the fastest mode's count k*(beta_n), per n:")
    print(f"{'gamma':>6} " + " ".join(f"{'n = ' + str(n):>26}" for n in ns))
    for g in sorted({round(row["gamma"], 9) for row in r["rows"]}):
        cells = []
        for n in ns:
            row = next(x for x in r["rows"] if x["n"] == n and abs(x["gamma"] - g) < 1e-6)
            mode = f"l*={row['l_star']} " if "l_star" in row else ""
            cells.append(f"{row['pairs_clustered']:.3f} / {row['clusters']:5.1f} / {row['order']:.2f}  "
                         f"{mode}k*={row['k_star']:<4.3g}")
        print(f"{g:>6.2f} " + " ".join(f"{c:>26}" for c in cells))
    for t in r.get("timing") or []:
        print(f"n = {t['n']}: {t['per_cloud_layer_s'] * 1e3:.3f} ms per cloud-layer ({t['cloud_layers']} in "
              f"{t['seconds']:.2f} s)")


def _figure(r: dict, path: Path) -> None:
    import attnflow.plot as ap

    fig, axes = ap.new_figure(2, panel=(5.0, 3.8))
    left, right = axes[0]
    ns = sorted({row["n"] for row in r["rows"]})
    for n, colour in zip(ns, ap.colours(len(ns))):
        rows = [row for row in r["rows"] if row["n"] == n]
        b = np.array([row["beta"] for row in rows])
        left.errorbar(b, [row["clusters"] for row in rows],
                      yerr=[[row["clusters"] - row["clusters_lo"] for row in rows],
                            [row["clusters_hi"] - row["clusters"] for row in rows]],
                      fmt="o-", ms=3, color=colour, label=f"n = {n}")
        right.errorbar([row["gamma"] for row in rows], [row["pairs_clustered"] for row in rows],
                       yerr=[[row["pairs_clustered"] - row["pairs_clustered_lo"] for row in rows],
                             [row["pairs_clustered_hi"] - row["pairs_clustered"] for row in rows]],
                       fmt="o-", ms=3, color=colour, label=f"n = {n}")
    grid = sorted({(row["beta"], row["k_star"]) for row in r["rows"]})
    sphere = r.get("d", 2) == 3
    label = r"maxima of a degree-$l^*(\beta_n)$ harmonic" if sphere else r"$k^*(\beta_n)$"
    left.step([g[0] for g in grid], [g[1] for g in grid], "k--", where="mid", lw=1, label=label)
    left.set_xscale("log")
    if sphere:
        left.set_yscale("log")
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    marks = np.array([1, 2, 3, 5, 10, 20, 30, 50, 100])  # plain numbers: the log axes span one or two decades
    betas = np.array([row["beta"] for row in r["rows"]])
    left.set_xticks(marks[(marks >= betas.min() / 1.2) & (marks <= betas.max() * 1.2)])
    if sphere:
        counts = np.array([row["clusters"] for row in r["rows"]] + [g[1] for g in grid])
        left.set_yticks(marks[(marks >= counts.min() / 1.5) & (marks <= counts.max() * 1.5)])
    for axis in (left.xaxis, left.yaxis):
        axis.set_major_formatter(ScalarFormatter())
        axis.set_minor_formatter(NullFormatter())
    left.set_xlabel(r"$\beta_n = \gamma \log n$")
    left.set_ylabel(f"clusters at t = {r['rows'][0]['t']:g}")
    left.legend(fontsize="x-small")
    right.set_xlabel(r"$\gamma$")
    right.set_ylabel(f"fraction of clustered pairs at t = {r['rows'][0]['t']:g}")
    right.legend(fontsize="x-small")
    m = r["machine"]
    where = "$S^2$" if sphere else "The circle"
    fig.suptitle(f"{where} at $\\beta_n = \\gamma\\log n$, n = {ns[0]}..{ns[-1]} ({m.get('cpu', '')})", fontsize=9)
    ap.save(fig, path, formats=("png",), dpi=130, close=True)


if __name__ == "__main__":
    main()
