"""``attnflow meanfield [CONFIG] --out DIR``: the flow on the circle or on S^2 against its continuity equation."""

from __future__ import annotations

import argparse

from ._commands import add_process_options, process_options, share_line, summary


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "meanfield",
        help=summary("meanfield"),
        description="Run the mean-field study described by CONFIG (the shipped configs/meanfield.toml is the default "
        "and the schema): tokens on the circle with Q = K = V = I, for softmax and 1/n attention. (1) n particles "
        "drawn from a smooth density against the continuity equation from that density: the exact W1 distance at "
        "fixed times against n, with the fitted rate; (2) near-uniform starts: the growth rate of every Fourier "
        "mode (particles and PDE) against the linearised prediction, the clusters that form and their lifetime; "
        "(3) one run of the largest n on the Fourier fast path, timed; (4) with a [transition] beta list, the "
        "phase transition of noisy tokens. With d = 3 in the config (the shipped meanfield-sphere.toml) the same "
        "studies run on the sphere S^2: harmonic degrees for modes, the harmonic distance D of degrees 1-3 for W1, "
        "the O(n L^2) harmonic path, Mollweide maps of the density. Writes convergence.csv, rates.csv, "
        "growth.csv, figures, report.md and summary.json. Finished units of work are kept: the same command "
        "after an interruption resumes.",
    )
    p.add_argument("config", nargs="?", default=None,
                   help="TOML config (a path, or the name of a shipped config such as meanfield-sphere); default: "
                   "configs/meanfield.toml")
    p.add_argument("--out", required=True, help="output folder (created; an earlier run of the same config resumes)")
    p.add_argument("--no-figures", action="store_true",
                   help="write the tables, summary.json and report.md only (no figures; the same command without it "
                   "later resumes every unit and draws them)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_process_options(p, "units of work")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from ..meanfield import check_meanfield_config, load_meanfield_config, run_meanfield

    config = check_meanfield_config(load_meanfield_config(args.config))
    s = run_meanfield(config, args.out, progress=not args.no_progress, processes=process_options(args),
                      figures=not args.no_figures)
    if s["process_count"] > 1:
        print(share_line(s, s["units_computed"], s["units"], "units",
                         f"{s['units_resumed']} of its share resumed from an earlier run"))
        if s["process_index"] != 0:
            return 0
    sphere = config.d == 3
    for norm, c in s["convergence"].items():
        rates = ", ".join(f"t = {r['t']:g}: {r['rate']:.2f} [{r['lo']:.2f}, {r['hi']:.2f}]" for r in c["rates"]
                          if r["rate"] is not None)
        print(f"{norm}: {'D' if sphere else 'W1'}(particles, PDE) ~ n^-r with r at {rates}")
    for norm, a in s["growth"]["agreement"].items():
        p = a["particles"]
        print(f"{norm}: {'degree growth near l*' if sphere else 'mode growth near k*'}, median relative error "
              "against the linear theory "
              f"{p['median_rel_error']:.2g} (particles), {a['pde']['median_rel_error']:.2g} (PDE)")
    lg = s["largest"]
    print(f"largest run: {lg['run_s']:.3g} s; {s['units_computed']} units computed, {s['units_resumed']} resumed; "
          f"results in {args.out}")
    return 0
