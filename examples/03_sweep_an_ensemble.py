"""Sweep an ensemble: how often does a random V satisfy the spectral assumption?

Theorem 4.2 needs the eigenvalue of V of largest modulus to be real, positive and simple
(Definition 4.1(1)). How often is that true of a random value matrix? The script runs attnflow's
spectral sweep over real Ginibre matrices (i.i.d. N(0, 1) entries) for several dimensions d in a
temporary run folder and reads its summary. The figure shows the fraction of matrices meeting
Definition 4.1(1), read correctly (largest modulus) and incorrectly (largest real part), with
95 % Wilson confidence intervals, against d, and the mean number of real eigenvalues beside
sqrt(2d/pi) + 1/2.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import attnflow.plot as ap
from attnflow.runs import load_config
from attnflow.sweep import run_spectral_sweep

NAME = "03_sweep_an_ensemble"
SIZES = {
    "default": dict(d=[2, 4, 8, 16, 32, 64], samples=400),
    "smoke": dict(d=[2, 4], samples=40),
}


def main(size: str = "default", out: str | Path = ".") -> list[Path]:
    """Run the sweep in a temporary folder, draw its summary; return the files written."""
    cfg = SIZES[size]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)

    config = load_config(None, "ginibre-spectral.toml")     # the shipped default config
    config.update(ensembles=["ginibre"], d=cfg["d"], samples=[cfg["samples"]], seed=0)
    config["run"]["progress"] = False
    with tempfile.TemporaryDirectory() as tmp:
        summary = run_spectral_sweep(config, Path(tmp) / "sweep")

    fig = ap.fraction_vs_d(summary, reference=0.14)
    files = [out / name for name in ap.save(fig, out / f"{NAME}.png", close=True)]

    groups = summary["groups"]
    fracs = ", ".join(f"d={g['d']}: {g['frac_cond1']:.2f} [{g['frac_cond1_ci'][0]:.2f}, {g['frac_cond1_ci'][1]:.2f}]"
                      for g in groups)
    print(f"{NAME}: fraction of Ginibre V with Def 4.1(1) ({cfg['samples']} per d, 95% CI): {fracs}")
    return files


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=f"Writes {NAME}.png (and any further figures) into --out and prints "
                                            "a one-line result.")
    parser.add_argument("--size", choices=sorted(SIZES), default="default",
                        help="default: the full example (under a minute on a laptop CPU); smoke: tiny sizes, seconds")
    parser.add_argument("--out", default=".", help="folder for the figures (default: the current folder)")
    args = parser.parse_args()
    for f in main(args.size, args.out):
        print(f)
