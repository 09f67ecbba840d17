"""Accuracy of the phase job with the 1/n normalisation: the order of its rescaled layers, as for the softmax.

The job steps the 1/n field divided by s(beta) = max(sqrt(beta) e^(beta - 1/2), 1)
(:func:`attnflow.phase.step_scale`); :func:`attnflow.phase.sphere_convergence` with ``normalisation="mean"``
measures those layers against diffrax Tsit5 (float64, rtol = atol = 1e-12) on the same rescaled field, on
the ladder of ``benchmarks/phase_accuracy.py`` (``LADDERS``: 8 clouds of 32 tokens, t = 5, dt from 0.2 to
0.00625, beta = 1, 4, 9, d = 2 and 3). Prints one line per (d, beta) and writes ``summary.json`` under
``--out``; it also records the largest step dt |f| / s of the start clouds at dt = 0.1, and that of the
unscaled field.

    PYTHONPATH=. python benchmarks/phase_accuracy_mean.py --out results/phase-accuracy-mean     # about a minute
    PYTHONPATH=. python benchmarks/phase_accuracy_mean.py --quick --out /tmp/phase-accuracy-mean

Not a test.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


from benchmarks.phase_accuracy import convergence


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="folder for summary.json")
    p.add_argument("--quick", action="store_true", help="toy sizes (smoke test)")
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = convergence("quick" if args.quick else "full", normalisation="mean")
    (out / "summary.json").write_text(json.dumps({"convergence": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
