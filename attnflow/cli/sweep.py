"""``attnflow sweep CONFIG --out DIR``: a spectral or dynamics sweep over random weights."""

from __future__ import annotations

import argparse

from ._commands import add_run_options, run_options, share_line, summary


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "sweep",
        help=summary("sweep"),
        description="Run the sweep described by CONFIG (kind = \"spectral\" or \"dynamics\"; the shipped "
        "configs/ginibre-spectral.toml and configs/ginibre-dynamics.toml are the defaults and the schema). "
        "Finished chunks are kept: running the same command again after an interruption resumes.",
    )
    p.add_argument("config", help="TOML config (a path, or the name of a shipped config such as ginibre-spectral.toml)")
    p.add_argument("--out", required=True, help="output folder (created; an earlier run of the same config resumes)")
    add_run_options(p)
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from ..sweep import load_sweep_config, parse_sweep_config, run_sweep

    config = parse_sweep_config(load_sweep_config(args.config))
    summary = run_sweep(config, args.out, **run_options(args))
    resumed, computed = summary.get("chunks_resumed_here", 0), summary["chunks_computed_here"]
    if summary.get("process_count", 1) > 1:
        print(share_line(summary, computed, summary["chunks"], "chunks",
                         f"{resumed} of its share resumed from an earlier run"))
    if summary.get("process_index", 0) == 0:
        for line in headline_lines(summary):
            print(line)
        chunks = "" if summary.get("process_count", 1) > 1 else (
            f"{summary['chunks']} chunks: {min(resumed, summary['chunks'] - computed)} resumed, {computed} computed; ")
        print(f"{chunks}results in {args.out}")
    return 0


def headline_lines(summary: dict) -> list[str]:
    """The headline numbers of a sweep's summary (spectral or dynamics), one line each.

    Spectral: per group, the fraction of matrices satisfying Def 4.1(1) with its confidence
    interval, and the paper comparison when the run has it. Dynamics: the number of systems, the
    non-finite runs left out, the fraction per observed limit geometry with 95% intervals, and
    how often the predicted geometry is the observed one.

    Example:
        >>> s = {"confidence": 0.95, "headline": None, "groups": [{"ensemble": "ginibre", "d": 4, "n": 100,
        ...      "frac_cond1": 0.31, "frac_cond1_ci": [0.23, 0.41]}]}
        >>> headline_lines(s)
        ['P(Def 4.1(1)) = 0.310 [0.230, 0.410] (95% CI) over 100 systems: ginibre, d = 4']
    """
    from ..sweep import wilson_interval

    lines = []
    if "frac_cond1_ci" in (summary.get("groups") or [{}])[0]:  # spectral
        conf = summary.get("confidence", 0.95)
        for g in summary["groups"]:
            lo, hi = g["frac_cond1_ci"]
            lines.append(f"P(Def 4.1(1)) = {g['frac_cond1']:.3f} [{lo:.3f}, {hi:.3f}] ({100 * conf:.0f}% CI) "
                         f"over {g['n']} systems: {g['ensemble']}, d = {g['d']}")
        if summary.get("headline"):
            lines.append(summary["headline"])
        return lines
    if "crosstab_predicted_observed" not in summary:  # dynamics
        return lines
    counts: dict[str, int] = {}
    for g in summary["groups"]:
        for table in (g.get("observed_good", {}), g.get("observed_not_good", {})):
            for geometry, k in table.items():
                counts[geometry] = counts.get(geometry, 0) + int(k)
    nonfinite = int(summary.get("nonfinite", counts.pop("nonfinite", 0)))
    counts.pop("nonfinite", None)
    finite = summary["systems"] - nonfinite
    lines.append(f"{summary['systems']} systems; {nonfinite} non-finite run(s) left out of the fractions")
    if finite > 0:
        parts = []
        for geometry, k in sorted(counts.items(), key=lambda kv: -kv[1]):
            lo, hi = wilson_interval(k, finite, 0.95)
            parts.append(f"{geometry} {k / finite:.3f} [{lo:.3f}, {hi:.3f}]")
        lines.append(f"observed limit geometry over {finite} finite systems (95% CI): " + "; ".join(parts))
    frac = summary.get("frac_consistent_where_predicted")
    if frac is not None:
        lines.append(f"predicted geometry observed for {frac:.3f} of the systems with a prediction")
    return lines
