#!/usr/bin/env python
r"""The (gamma, n) phase diagram of the circle at beta_n = gamma log n, read from an `attnflow phase` run of
``configs/phase-long-context.toml`` (n = 10^2 .. 10^5), and the cost of a cloud-layer at each n.

From the run folder's cells.csv (``--run DIR``): at the last checkpoint, per (gamma, n), the fraction of clustered
pairs, the cluster count and the order parameter with their intervals, set against the mean field's fastest mode
:math:`k^*(\beta_n) = \arg\max_k k^2 I_k(\beta_n)` (:func:`attnflow.meanfield.most_unstable_mode`): after the linear
phase a cloud holds about :math:`k^*` clusters, so at large n the diagram is a function of :math:`\beta_n` alone.
``--time``: each group's ensemble (:func:`attnflow.phase.ensemble`, the job's own program) with 2 systems per
gamma, called twice, the second call timed: seconds per cloud-layer at each n (the groups above 4096 tokens run
the Fourier path and the sorted-angle statistics).

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
    p.add_argument("--run", type=Path, help="an `attnflow phase phase-long-context --out DIR` folder")
    p.add_argument("--time", action="store_true", help="also time each group's ensemble (2 systems per gamma)")
    add_record_arguments(p, "long_context_phase")
    args = p.parse_args(argv)
    record = redrawn(args, _figure)
    if record is not None:
        return record
    if args.run is None:
        p.error("give --run DIR (an attnflow phase run of configs/phase-long-context.toml) or --redraw RECORD")
    from attnflow.meanfield import most_unstable_mode

    rows = read_cells(args.run)
    for r in rows:
        r["k_star"] = int(most_unstable_mode(r["beta"], num_modes=max(64, int(4 * math.sqrt(2 * r["beta"])))).k)
    record = {"machine": machine_info(), "run": str(args.run), "rows": rows, "timing": None}
    if args.time:
        record["timing"] = _timing(json.loads((args.run / "config.json").read_text()))
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    _print(record)
    _figure(record, args.figure)
    return record


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
    print(f"(gamma, n) on the circle, beta_n = gamma log n, t = {r['rows'][0]['t']:g} ({m.get('cpu', '')}, "
          f"{m.get('cpu_count', '')} cores)")
    print("clustered pairs / clusters / order parameter, and k*(beta_n), per n:")
    print(f"{'gamma':>6} " + " ".join(f"{'n = ' + str(n):>26}" for n in ns))
    for g in sorted({round(row["gamma"], 9) for row in r["rows"]}):
        cells = []
        for n in ns:
            row = next(x for x in r["rows"] if x["n"] == n and abs(x["gamma"] - g) < 1e-6)
            cells.append(f"{row['pairs_clustered']:.3f} / {row['clusters']:4.1f} / {row['order']:.2f}  "
                         f"k*={row['k_star']:<2}")
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
    left.step([g[0] for g in grid], [g[1] for g in grid], "k--", where="mid", lw=1, label=r"$k^*(\beta_n)$")
    left.set_xscale("log")
    left.set_xlabel(r"$\beta_n = \gamma \log n$")
    left.set_ylabel(f"clusters at t = {r['rows'][0]['t']:g}")
    left.legend(fontsize="x-small")
    right.set_xlabel(r"$\gamma$")
    right.set_ylabel(f"fraction of clustered pairs at t = {r['rows'][0]['t']:g}")
    right.legend(fontsize="x-small")
    m = r["machine"]
    fig.suptitle(f"The circle at $\\beta_n = \\gamma\\log n$, n = {ns[0]}..{ns[-1]} ({m.get('cpu', '')})", fontsize=9)
    ap.save(fig, path, formats=("png",), dpi=130, close=True)


if __name__ == "__main__":
    main()
