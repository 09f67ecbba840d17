"""A phase diagram: when do tokens on the sphere cluster, as a function of beta and time?

The field's main figure: for each inverse temperature beta, many random clouds of tokens on the
circle follow post-LN attention (Q = K = V = I); the heat map shows the mean fraction of token
pairs with <x_i, x_j> >= 0.999 over beta and time, with the time an equiangular cloud needs to
get there (the dashed line). One call to attnflow.phase.run_phase runs every cell (all betas in
one compiled program per chunk), writes the tables and figures of `attnflow phase`, and the
example redraws the heat map from its cells.csv.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import attnflow.plot as ap
from attnflow.phase import load_phase_config, read_cells, run_phase

NAME = "08_phase_diagram"
SIZES = {
    "default": dict(beta={"start": 0.5, "stop": 9.0, "num": 18}, n=32, systems=32, t1=30.0, checkpoints=100),
    "smoke": dict(beta=[1.0, 4.0, 9.0], n=8, systems=4, t1=3.0, checkpoints=7),
}


def main(size: str = "default", out: str | Path = ".") -> list[Path]:
    """Run the phase diagram in a temporary folder, redraw its heat map; return the files written."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    config = load_phase_config(None)                        # configs/phase.toml: sphere, Q = K = V = I
    config.update(d=2, **SIZES[size])
    config["run"]["progress"] = False
    with tempfile.TemporaryDirectory() as tmp:
        summary = run_phase(config, Path(tmp) / "run")
        values, beta, t = read_cells(Path(tmp) / "run", "pairs_clustered")
    line = next(iter(summary["theory"].values()))             # the equiangular model's time per beta
    within = [(tb, b) for tb, b in zip(line["t"], line["beta"]) if tb == tb and tb <= t[-1]]
    overlay = ([tb for tb, _ in within], [b for _, b in within], "equiangular cloud reaches 0.999")
    ax = ap.phase_diagram(values, beta=beta, t=t, vmin=0.0, vmax=1.0, overlay=overlay,
                          title=f"{config['systems']} clouds of {config['n']} tokens on the circle per cell")
    files = [out / name for name in ap.save(ax.figure, out / f"{NAME}.png", close=True)]
    head = summary["groups"][0]["pairs_clustered_at_t1"]
    print(f"{NAME}: fraction of clustered pairs at t = {summary['t_last']:g}: {head['beta_min']:.2f} at "
          f"beta = {beta[0]:g}, {head['beta_max']:.2f} at beta = {beta[-1]:g}")
    return files


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=f"Writes {NAME}.png into --out and prints a one-line result.")
    parser.add_argument("--size", choices=sorted(SIZES), default="default",
                        help="default: the full example (under a minute on a laptop CPU); smoke: tiny sizes, seconds")
    parser.add_argument("--out", default=".", help="folder for the figures (default: the current folder)")
    args = parser.parse_args()
    for f in main(args.size, args.out):
        print(f)
