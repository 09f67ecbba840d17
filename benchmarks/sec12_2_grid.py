"""Section 12.2 (feed-forward) investigation grid: which setting shows the paper's observations?

SPEC 3 states the paper's feed-forward flow as dz_i/dt = W sigma(V sum_j P_ij (z_j - z_i)), P from
x = e^{tV} z, with three observations (ReLU, W = I: three hyperplanes; tanh, W = I: collapse to 0;
ReLU, random W: collapse to 0). The paper gives neither V, Q, K nor the horizon. This script runs,
for every combination of

* picture:  "z"  the SPEC form above (``attnflow.dynamics.section12_2_flow``);
            "x"  the nonlinearity on the raw attention output, dx_i/dt = W sigma(sum_j P_ij V x_j)
                 (``Wrapped(AttentionFlow(Q, K, V), W, activation)``), read in z = e^{-tV} x;
* V:        "good"  [[1, 0.3], [0.2, 0.4]] (lambda = 1.087, 0.313: the report's V);
            "identity";  "mixed" [[1, 0.3], [0.2, -0.5]] (lambda = 1.039, -0.539: lambda_1 > 0 > lambda_2);
* Q, K:     "gaussian" (Gaussian, <Q phi_1, K phi_1> > 0.1, as the report) or "identity" (Q^T K = I);
* beta:     1 and 4;
* setting:  identity/W = I (control), ReLU/W = I, tanh/W = I, ReLU/random W (N(0, 1/d) entries),

forward-Euler layers (dt = 0.05) from 4 clouds of 32 Gaussian tokens in d = 2, and records at
t = 5, 10, 20, 40: the number of levels of phi_1^*(z) (gap tolerance 0.01 max_i |phi_1^*(z_i(0))|,
the report's), and the collapse ratio max_i |z_i(t)| / max_i |z_i(0)| (collapse: <= 0.01, the
report's). All float64.

    PYTHONPATH=. python benchmarks/sec12_2_grid.py [--out results/sec12_2_grid] [--betas 1 4]

Writes grid.json (every number) and grid.md (the table). Not a test: ~2-4 min on a 2-core CPU.
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg

from attnflow import AttentionFlow
from attnflow.dynamics import Wrapped, section12_2_flow
from attnflow.observables import leading_vectors, num_levels
from attnflow.report import good_qk, run_layers

V_KINDS = {"good": [[1.0, 0.3], [0.2, 0.4]], "identity": [[1.0, 0.0], [0.0, 1.0]],
           "mixed": [[1.0, 0.3], [0.2, -0.5]]}
SETTINGS = {"identity, W=I": ("identity", "I"), "ReLU, W=I": ("relu", "I"), "tanh, W=I": ("tanh", "I"),
            "ReLU, random W": ("relu", "random")}
TIMES = (5.0, 10.0, 20.0, 40.0)
LEVEL_TOL, COLLAPSE_TOL = 0.01, 0.01


def one_case(V, Q, K, W, act, picture, beta, z0, dt, layers, every):
    if picture == "z":
        field = section12_2_flow(Q, K, V, W=W, activation=act, beta=beta)
    else:
        field = Wrapped(AttentionFlow(Q, K, V, beta), W, act)
    ts, y = run_layers(field, z0, dt=dt, layers=layers, save_every=every)
    z = np.empty_like(y)
    for k, t in enumerate(ts):
        z[:, k] = y[:, k] if picture == "z" else y[:, k] @ scipy.linalg.expm(-t * V).T
    return ts, z


def observe(ts, z, phi_dual):
    s = z @ phi_dual
    scale = np.abs(s[:, 0]).max(axis=1)
    norm0 = np.linalg.norm(z[:, 0], axis=-1).max(axis=1)
    out = {}
    for t in TIMES:
        k = int(np.argmin(np.abs(ts - t)))
        levels = [int(num_levels(jnp.asarray(s[b, k]), LEVEL_TOL * scale[b])) for b in range(z.shape[0])]
        ratio = np.linalg.norm(z[:, k], axis=-1).max(axis=1) / norm0
        out[f"{t:g}"] = {"levels": levels, "ratio": [float(r) for r in ratio]}
    return out


def verdicts(obs: dict) -> dict:
    """The paper's three observations at t = 40, per cloud majority (all clouds must agree)."""
    last = obs[f"{TIMES[-1]:g}"]
    three = all(lv <= 3 for lv in last["levels"]) and all(r > COLLAPSE_TOL for r in last["ratio"])
    collapse = all(r <= COLLAPSE_TOL for r in last["ratio"])
    return {"three_hyperplanes": three, "collapse": collapse}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="results/sec12_2_grid")
    ap.add_argument("--betas", type=float, nargs="+", default=[1.0, 4.0])
    ap.add_argument("--clouds", type=int, default=4)
    ap.add_argument("--n", type=int, default=32)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    dt, t1 = 0.05, TIMES[-1]
    layers, every = int(round(t1 / dt)), int(round(TIMES[0] / dt))
    rows = []
    start = time.perf_counter()
    with jax.enable_x64(True):
        for vk, qk in itertools.product(V_KINDS, ("gaussian", "identity")):
            V = np.asarray(V_KINDS[vk])
            rng = np.random.default_rng([12, 2, list(V_KINDS).index(vk), qk == "identity"])
            Q, K = good_qk(rng, V) if qk == "gaussian" else (np.eye(2), np.eye(2))
            W_rand = rng.normal(size=(2, 2)) / np.sqrt(2)
            z0 = rng.normal(size=(args.clouds, args.n, 2))
            _, phi_dual, lam = leading_vectors(V)
            for picture, beta, (name, (act, w)) in itertools.product(("z", "x"), args.betas, SETTINGS.items()):
                W = np.eye(2) if w == "I" else W_rand
                ts, z = one_case(V, Q, K, W, act, picture, beta, z0, dt, layers, every)
                obs = observe(ts, z, phi_dual)
                rows.append({"V": vk, "QK": qk, "picture": picture, "beta": beta, "setting": name,
                             "lambda": [float(np.real(e)) for e in np.linalg.eigvals(V)], "observed": obs,
                             **verdicts(obs)})
                print(f"{vk:8s} {qk:8s} {picture} beta={beta:g} {name:15s} "
                      + " ".join(f"t={t}: L={np.median(o['levels']):.0f} r={np.median(o['ratio']):.2g}"
                                 for t, o in obs.items()), flush=True)
    seconds = time.perf_counter() - start
    meta = {"dt": dt, "times": TIMES, "level_tol": LEVEL_TOL, "collapse_tol": COLLAPSE_TOL, "clouds": args.clouds,
            "n": args.n, "d": 2, "seconds": round(seconds, 1), "V_kinds": V_KINDS}
    (out / "grid.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    lines = [f"Section 12.2 grid ({args.clouds} clouds x {args.n} tokens, d = 2, dt = {dt}; {seconds:.0f} s). "
             "Cells: median over clouds of 'levels of phi_1^*(z) / max|z(t)| / max|z(0)|' at t = "
             + ", ".join(f"{t:g}" for t in TIMES) + ".", "",
             "| V | Q, K | picture | beta | setting | " + " | ".join(f"t = {t:g}" for t in TIMES)
             + " | 3 hyperplanes at t=40 | collapse at t=40 |",
             "|" + "---|" * (7 + len(TIMES))]
    for r in rows:
        cells = [f"{np.median(o['levels']):.0f} / {np.median(o['ratio']):.2g}" for o in r["observed"].values()]
        lines.append(f"| {r['V']} | {r['QK']} | {r['picture']} | {r['beta']:g} | {r['setting']} | "
                     + " | ".join(cells) + f" | {'yes' if r['three_hyperplanes'] else 'no'} | "
                     f"{'yes' if r['collapse'] else 'no'} |")
    (out / "grid.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out / 'grid.md'} ({seconds:.0f} s)")


if __name__ == "__main__":
    main()
