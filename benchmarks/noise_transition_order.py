#!/usr/bin/env python
r"""The order of the noisy transition against beta, from the stationary clustered branch: softmax and 1/n attention.

:func:`attnflow.meanfield.stationary_branch` traces the zero-flux stationary states :math:`\rho \propto
e^{\gamma\Phi[\rho]}` of the noisy mean field on :math:`S^{d-1}` (d = 2, 3) by their order parameter r. Near the
uniform state :math:`\sigma^2/\sigma_c^2 - 1 \approx c\,r^2`: c > 0 is a subcritical bifurcation (a discontinuous
transition, clustered states stable above :math:`\sigma_c` up to the fold :math:`\sigma_{fold}`, bistable with the
uniform state in between), c < 0 a supercritical one (continuous). Measured for each beta: c (from r = 0.02, 0.05,
0.1), the kind, and for a discontinuous transition the fold (the largest :math:`\sigma/\sigma_c` along the branch,
r from 0.02 to 0.96 in steps of 0.01, refined by steps of 0.001 about the largest) and the r where it sits: the
bistable range against beta. For 1/n attention the sign of c must change at :math:`\beta^*(d)` (2.4469, 1.8162).

Writes a JSON record and a figure (``--out``, ``--figure``) and prints the table, labelled with the machine.
``--quick``: four betas (seconds).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from benchmarks.common import add_record_arguments, machine_info, redrawn  # noqa: E402

BETAS = (0.5, 1.0, 1.5, 1.8, 2.0, 2.2, 2.4, 2.6, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 32.0, 64.0)
QUICK = (1.0, 2.0, 4.0, 8.0)
SMALL = (0.02, 0.05, 0.1)


def fold(beta: float, d: int) -> dict:
    """The largest sigma / sigma_c along the 1/n branch and its r (a grid of 0.01, then 0.001 about the largest)."""
    from attnflow.meanfield import stationary_branch

    coarse = np.round(np.arange(0.02, 0.961, 0.01), 3)
    b = stationary_branch(beta, coarse, d=d, degree=192, nodes=768)
    i = int(np.nanargmax(b["ratio"]))
    fine = np.round(np.arange(max(coarse[max(i - 1, 0)], 0.011), coarse[min(i + 1, coarse.size - 1)] + 1e-9, 0.001), 4)
    f = stationary_branch(beta, fine, d=d, degree=192, nodes=768)
    j = int(np.nanargmax(f["ratio"]))
    return {"fold_ratio": float(f["ratio"][j]), "fold_r": float(fine[j]), "tail": float(np.max(b["tail"])),
            "converged": bool(b["converged"].all() and f["converged"].all())}


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="four betas (seconds)")
    add_record_arguments(p, "noise_transition_order")
    args = p.parse_args(argv)
    record = redrawn(args, _figure)
    if record is not None:
        return record
    from attnflow.meanfield import stationary_branch, tricritical_beta

    machine = machine_info()
    start = time.perf_counter()
    rows = []
    for d in (2, 3):
        for normalisation in ("mean", "softmax"):
            for beta in (QUICK if args.quick else BETAS):
                b = stationary_branch(beta, SMALL, d=d, normalisation=normalisation)
                row = {"d": d, "normalisation": normalisation, "beta": beta, "landau": b["landau"], "kind": b["kind"],
                       "converged": bool(b["converged"].all()), "fold_ratio": None, "fold_r": None}
                if b["kind"] == "discontinuous":
                    row.update(fold(beta, d))
                rows.append(row)
                print(f"d = {d} {normalisation:7s} beta = {beta:<5g} c = {row['landau']:+.5f} {row['kind']}"
                      + (f", fold at {row['fold_ratio']:.5f} sigma_c (r = {row['fold_r']:.3f})"
                         if row["fold_ratio"] else ""), file=sys.stderr, flush=True)
    record = {"machine": machine, "rows": rows, "beta_star": {"2": tricritical_beta(2), "3": tricritical_beta(3)},
              "small_amplitudes": list(SMALL), "quick": args.quick, "seconds": time.perf_counter() - start}
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    _print(record)
    _figure(record, args.figure)
    return record


def _print(r: dict) -> None:
    m = r["machine"]
    print(f"the order of the noisy transition ({m.get('cpu', '')}, {m.get('cpu_count', '')} cores; "
          f"{r['seconds']:.0f} s); beta*(2) = {r['beta_star']['2']:.4f}, beta*(3) = {r['beta_star']['3']:.4f}")
    print(f"{'d':>2} {'normalisation':>13} {'beta':>6} {'c':>10} {'kind':>14} {'sigma_fold/sigma_c':>19} {'r at fold':>10}")
    for row in r["rows"]:
        f = "" if row["fold_ratio"] is None else f"{row['fold_ratio']:.5f}"
        fr = "" if row["fold_r"] is None else f"{row['fold_r']:.3f}"
        print(f"{row['d']:>2} {row['normalisation']:>13} {row['beta']:>6g} {row['landau']:>+10.5f} {row['kind']:>14} "
              f"{f:>19} {fr:>10}")


def _figure(r: dict, path: Path) -> None:
    import attnflow.plot as ap

    fig, axes = ap.new_figure(2, panel=(4.6, 3.6))
    left, right = axes[0]
    for (d, norm), colour in zip([(2, "mean"), (3, "mean"), (2, "softmax"), (3, "softmax")], ap.colours(4)):
        rows = [x for x in r["rows"] if x["d"] == d and x["normalisation"] == norm]
        beta = np.array([x["beta"] for x in rows])
        c = np.array([x["landau"] for x in rows])
        name = f"{'1/n' if norm == 'mean' else 'softmax'}, {'circle' if d == 2 else '$S^2$'}"
        left.plot(beta, c, "o-", ms=3, color=colour, label=name)
        folds = [(x["beta"], x["fold_ratio"] - 1) for x in rows if x["fold_ratio"]]
        if folds:
            right.plot(*zip(*folds), "o-", ms=3, color=colour, label=name)
            right.axvline(r["beta_star"][str(d)], color=colour, lw=0.8, ls=":")
    left.axhline(0, color="0.5", lw=0.8)
    left.set_yscale("symlog", linthresh=0.01)
    for ax in (left, right):
        ax.set_xscale("log")
        ax.set_xticks([0.5, 1, 2, 4, 8, 16, 32, 64], ["0.5", "1", "2", "4", "8", "16", "32", "64"])
        ax.minorticks_off()
    left.set_xlabel(r"$\beta$")
    left.set_ylabel(r"$c$ in $\sigma^2/\sigma_c^2 - 1 \approx c\,r^2$ (symmetric log)")
    left.set_title("> 0: discontinuous, < 0: continuous", fontsize="small")
    left.legend(fontsize="x-small")
    right.set_yscale("log")
    right.set_xlabel(r"$\beta$ (dotted: $\beta^*(d)$)")
    right.set_ylabel(r"$\sigma_{fold}/\sigma_c - 1$ (bistable range)")
    right.legend(fontsize="x-small")
    m = r["machine"]
    fig.suptitle(f"The order of the noisy transition from the stationary branch ({m.get('cpu', '')})", fontsize=9)
    ap.save(fig, path, formats=("png",), dpi=130, close=True)


if __name__ == "__main__":
    main()
