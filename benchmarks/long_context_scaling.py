#!/usr/bin/env python
r"""beta as a function of the context length: the critical scaling beta_n = gamma log n, measured.

Three parts (attnflow.temperature; `docs/guide/long-context.md` reads the numbers):

* **The simplex, exactly** (Chen, Lin, Polyanskiy and Rigollet, arXiv 2510.05554): n token directions with
  common inner product rho = 0.5, pre-LN layers with their residual term, Q = K = V = I, beta_n = gamma log n.
  One layer's self weight a_n(gamma) (closed form) and the directions' inner product after ``--layers`` layers
  (the exact equiangular recursion, :func:`attnflow.temperature.prenorm_simplex_layers`), for n = 10^2 .. 10^12:
  where each crosses halfway, and the width of the 10-90% window, against gamma_c = 1/(1 - rho).
* **Particles**: the same layers simulated (the registry's ``prenorm`` field, :class:`EulerStepper`, dt = 1,
  one compiled run for every gamma of the grid through ``simulate(..., beta=BetaOfN(gammas), batch="beta")``),
  on exact simplices (n = 64, 256, 1024 in d = n + 1: the recursion to rounding) and on almost-simplices
  (y_i = sqrt(rho) e_0 + sqrt(1 - rho) g_i, g_i uniform on the unit sphere of the other d - 1 = 128
  coordinates: inner products rho +- (1 - rho)/sqrt(128); n = 1024 and 4096).
* **Uniform keys** (the follow-up's scale beta_n ~ n^{2/(d-1)}): one query and n i.i.d. uniform keys on S^2,
  beta = c n^{2/(d-1)} = c n; the effective number of keys 1/sum_j P_j^2 and the largest weight against c for
  n = 10^3 .. 10^6 (64 queries each): at the right exponent the curves of different n fall on one another; at
  beta = c n^{1/2} (a wrong exponent) they drift apart.

Writes a JSON record and a figure (``--out``, ``--figure``) and prints the tables; the figure is labelled with
the machine. ``--quick``: smaller n everywhere (seconds).
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

RHO = 0.5
EXACT_N = (10**2, 10**3, 10**4, 10**6, 10**8, 10**12)
PARTICLE_N = (64, 256, 1024)
ALMOST_N = (1024, 4096)
ALMOST_D = 129
KEYS_N = (10**3, 10**4, 10**5, 10**6)
KEYS_C = np.logspace(-2.5, 1.5, 17)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layers", type=int, default=10, help="pre-LN layers after which rho is read (default 10)")
    p.add_argument("--quick", action="store_true", help="smaller n everywhere (seconds)")
    add_record_arguments(p, "long_context_scaling")
    args = p.parse_args(argv)
    saved = redrawn(args, _figure)
    if saved is not None:
        return saved
    import jax

    start = time.perf_counter()
    with jax.enable_x64(True):
        record = {"machine": machine_info(), "rho": RHO, "layers": args.layers,
                  "exact": exact_part(args.layers, EXACT_N[:3] if args.quick else EXACT_N),
                  "particles": particle_part(args.layers, PARTICLE_N[:2] if args.quick else PARTICLE_N,
                                             (256,) if args.quick else ALMOST_N),
                  "keys": keys_part(KEYS_N[:2] if args.quick else KEYS_N, 16 if args.quick else 64)}
    record["seconds"] = time.perf_counter() - start
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    _print(record)
    _figure(record, args.figure)
    return record


def _crossing(gammas: np.ndarray, values: np.ndarray, level: float) -> float | None:
    """The gamma where an increasing (or decreasing) curve crosses ``level``, linearly interpolated."""
    s = np.sign(values - level)
    idx = np.nonzero(s[:-1] * s[1:] <= 0)[0]
    if not len(idx):
        return None
    i = int(idx[0])
    g0, g1, v0, v1 = gammas[i], gammas[i + 1], values[i], values[i + 1]
    return float(g0 + (level - v0) * (g1 - g0) / (v1 - v0)) if v1 != v0 else float(g0)


def exact_part(layers: int, ns) -> list[dict]:
    """Self weight and the L-layer collapse fraction (rho_L - rho)/(1 - rho) against gamma, per n."""
    from attnflow.temperature import BetaOfN, prenorm_simplex_layers, simplex_self_weight, simplex_transition

    gammas = np.linspace(0.2, 6.0, 581) / (1 - RHO)
    rows = []
    for n in ns:
        a = simplex_self_weight(gammas, n, RHO)
        collapse = np.array([(prenorm_simplex_layers(float(BetaOfN(float(g))(n)), n, RHO, layers)["rho"][-1] - RHO)
                             / (1 - RHO) for g in gammas])
        t = simplex_transition(n, RHO)
        rows.append({"n": n, "gamma": gammas.tolist(), "self_weight": a.tolist(), "collapse": collapse.tolist(),
                     "one_layer": t,
                     "layers_half": _crossing(gammas, collapse, 0.5),
                     "layers_width": _width(gammas, collapse)})
    return rows


def _width(gammas, collapse) -> float | None:
    hi, lo = _crossing(gammas, collapse, 0.1), _crossing(gammas, collapse, 0.9)
    return None if hi is None or lo is None else hi - lo


def particle_part(layers: int, ns, almost_ns) -> dict:
    """Simulated pre-LN layers on exact and almost simplices, one compiled run per n for the whole gamma grid."""
    import jax.numpy as jnp

    import attnflow
    from attnflow.fields import build_field
    from attnflow.integrate import EulerStepper
    from attnflow.temperature import BetaOfN, prenorm_simplex_layers, simplex_tokens

    gammas = np.array([0.6, 1.0, 1.4, 1.8, 2.2, 2.6, 3.0, 3.6, 4.4]) / (1 - RHO) / 2
    out = {"gamma": gammas.tolist(), "exact": [], "almost": []}
    rng = np.random.default_rng(0)
    for kind, sizes in (("exact", ns), ("almost", almost_ns)):
        for n in sizes:
            if kind == "exact":
                x0 = simplex_tokens(n, RHO)
            else:
                g = rng.standard_normal((n, ALMOST_D - 1))
                g /= np.linalg.norm(g, axis=1, keepdims=True)
                x0 = np.concatenate([np.full((n, 1), math.sqrt(RHO)), math.sqrt(1 - RHO) * g], axis=1)
            d = x0.shape[1]
            eye = jnp.eye(d)
            field = build_field("prenorm", eye, eye, eye, beta=1.0)
            t = time.perf_counter()
            sim = attnflow.simulate(jnp.asarray(x0), field, EulerStepper(1.0, layers), beta=BetaOfN(gammas),
                                    batch="beta", dtype="float64")
            xs = np.asarray(sim.states)  # (gamma, layer, n, d)
            seconds = time.perf_counter() - t
            u = xs[:, -1] / np.linalg.norm(xs[:, -1], axis=-1, keepdims=True)
            off = ~np.eye(n, dtype=bool)
            gram = np.einsum("bid,bjd->bij", u, u)[:, off]
            u0 = x0 / np.linalg.norm(x0, axis=1, keepdims=True)
            rho0 = float((u0 @ u0.T)[off].mean())
            ref = [prenorm_simplex_layers(float(BetaOfN(float(g_))(n)), n, RHO, layers)["rho"][-1] for g_ in gammas]
            out[kind].append({"n": n, "d": d, "seconds": seconds, "rho_start": rho0,
                              "rho_mean": gram.mean(axis=1).tolist(), "rho_min": gram.min(axis=1).tolist(),
                              "rho_max": gram.max(axis=1).tolist(), "recursion": [float(r) for r in ref],
                              "largest_deviation": float(np.max(np.abs(gram.mean(axis=1) - np.asarray(ref)))),
                              "nonfinite": int((~np.isfinite(xs)).any(axis=(1, 2, 3)).sum())})
            print(f"particles ({kind} simplex) n = {n}, d = {d}: {seconds:.1f} s", file=sys.stderr, flush=True)
    return out


def keys_part(ns, queries: int) -> dict:
    """One query among n i.i.d. uniform keys on S^2 at beta = c n^q, q = 2/(d-1) = 1 and q = 1/2."""
    d = 3
    rng = np.random.default_rng(1)
    out = {"c": KEYS_C.tolist(), "d": d, "queries": queries, "rows": []}
    for exponent in (2 / (d - 1), 0.5):
        for n in ns:
            eff = np.zeros((queries, len(KEYS_C)))
            top = np.zeros_like(eff)
            for qi in range(queries):
                keys = rng.standard_normal((n, d))
                keys /= np.linalg.norm(keys, axis=1, keepdims=True)
                q = rng.standard_normal(d)
                q /= np.linalg.norm(q)
                cos = keys @ q
                for ci, c in enumerate(KEYS_C):
                    s = c * n**exponent * (cos - cos.max())  # max-subtracted scores: no overflow at any beta
                    w = np.exp(s)
                    w /= w.sum()
                    eff[qi, ci] = 1.0 / np.sum(w * w)
                    top[qi, ci] = w.max()
            out["rows"].append({"exponent": exponent, "n": n, "effective_keys": np.median(eff, axis=0).tolist(),
                                "largest_weight": np.median(top, axis=0).tolist()})
    return out


def _print(record: dict) -> None:
    rho, L = record["rho"], record["layers"]
    print(f"simplex rho = {rho}: gamma_c = 1/(1 - rho) = {1 / (1 - rho):g}; collapse fraction after {L} layers")
    print(f"{'n':>8} {'1 layer: half':>14} {'width 10-90%':>13} {'width x log n':>14} {f'{L} layers: half':>16} "
          f"{'width':>8}")
    for r in record["exact"]:
        t = r["one_layer"]
        lh, lw = r["layers_half"], r["layers_width"]
        print(f"{r['n']:>8.0e} {t['gamma_half']:>14.4f} {t['width']:>13.4f} {t['width'] * math.log(r['n']):>14.4f} "
              f"{'-' if lh is None else f'{lh:.4f}':>16} {'-' if lw is None else f'{lw:.4f}':>8}")
    parts = record["particles"]
    print("particles: mean inner product of directions after the layers (recursion in brackets)")
    print(f"{'gamma':>8} " + " ".join(f"{k[0]} n={r['n']:<6}" for k in (("exact",), ("almost",))
                                      for r in parts[k[0]]))
    for i, g in enumerate(parts["gamma"]):
        cells = " ".join(f"{r['rho_mean'][i]:.4f} [{r['recursion'][i]:.4f}]" for k in ("exact", "almost")
                         for r in parts[k])
        print(f"{g:>8.3f} {cells}")
    for k in ("exact", "almost"):
        for r in parts[k]:
            print(f"  {k} n = {r['n']}: largest |mean - recursion| {r['largest_deviation']:.2e}, "
                  f"start rho {r['rho_start']:.4f}, {r['seconds']:.1f} s, non-finite runs {r['nonfinite']}")
    keys = record["keys"]
    print("uniform keys on S^2: median effective number of keys at beta = c n^q")
    for r in keys["rows"]:
        pick = [0, 4, 8, 12, 16]
        print(f"  q = {r['exponent']:.2f} n = {r['n']:>8}: " + ", ".join(
            f"c = {keys['c'][i]:.3g}: {r['effective_keys'][i]:.3g}" for i in pick))


def _figure(record: dict, path: Path) -> None:
    import attnflow.plot as ap

    fig, axes = ap.new_figure(3, panel=(4.4, 3.5))
    left, mid, right = axes.ravel()
    rho = record["rho"]
    colours = ap.colours(len(record["exact"]))
    for r, colour in zip(record["exact"], colours):
        g = np.asarray(r["gamma"]) * (1 - rho)
        left.plot(g, r["self_weight"], "-", color=colour, lw=1.2, label=f"n = {r['n']:.0e}")
        left.plot(g, 1 - np.asarray(r["collapse"]), "--", color=colour, lw=1.0)
    left.axvline(1.0, color="0.4", ls=":", lw=1)
    left.set_xlabel(r"$\gamma(1-\rho)$  ($\beta_n = \gamma\log n$)")
    left.set_ylabel(r"$a_n$ (solid); $1-$collapse after L layers (dashed)")
    left.set_xlim(0, 3)
    left.legend(fontsize="x-small")
    parts = record["particles"]
    g = np.asarray(parts["gamma"]) * (1 - rho)
    runs = [(k, r) for k in ("exact", "almost") for r in parts[k]]
    for (k, r), colour in zip(runs, ap.colours(len(runs))):
        mid.plot(g, r["recursion"], "-" if k == "exact" else ":", color=colour, lw=0.8)
        mid.plot(g, r["rho_mean"], "o" if k == "exact" else "s", ms=4, mfc=colour if k == "exact" else "none",
                 color=colour, label=f"{k} simplex, n = {r['n']}")
    mid.axvline(1.0, color="0.4", ls=":", lw=1)
    mid.set_xlabel(r"$\gamma(1-\rho)$")
    mid.set_ylabel(f"mean inner product after {record['layers']} layers")
    mid.set_title("markers: particles; lines: the recursion at that n", fontsize="small")
    mid.legend(fontsize="x-small")
    keys = record["keys"]
    markers = "ov^sD"
    for i, (r, colour) in enumerate(zip(keys["rows"], ap.colours(len(keys["rows"])))):
        right.plot(keys["c"], r["effective_keys"], "-" if r["exponent"] > 0.75 else ":", color=colour, lw=1.0,
                   marker=markers[i % len(markers)], ms=3, mfc="none",
                   label=f"q = {r['exponent']:.2g}, n = {r['n']:.0e}")
    right.set_xscale("log")
    right.set_yscale("log")
    right.set_xlabel(r"$c$ in $\beta = c\,n^q$")
    right.set_ylabel(r"effective keys $1/\sum_j P_j^2$ (median)")
    right.legend(fontsize="xx-small")
    m = record["machine"]
    fig.suptitle(f"beta as a function of n: the simplex (rho = {rho}) and uniform keys on S^2 "
                 f"({m.get('cpu', '')}, {m.get('cpu_count', '')} cores)", fontsize="medium")
    ap.save(fig, path, close=True)


if __name__ == "__main__":
    main()
