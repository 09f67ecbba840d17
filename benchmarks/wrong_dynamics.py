"""The wrong-dynamics table of docs/report.md: which checks catch which wrong vector field.

Runs the whole report (default config, figures off) once with the right field and once per
mutation of :mod:`attnflow.report._mutations`, and prints two Markdown tables:

1. per case and mutation: the number of failed graded checks ("-": the mutation does not change
   the field for that case, e.g. V transposed when V = I, and the case passes; "0!": it changes
   the field and nothing failed, a miss);
2. per check (over all cases): the mutations it catches.

    PYTHONPATH=. python benchmarks/wrong_dynamics.py [--batch 1] [--saves 61] [--json out.json]

Not a test (about 10-15 minutes on a 2-core CPU); tests/test_mutation.py runs a tiny subset.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import jax
import jax.numpy as jnp


def main() -> None:
    from attnflow.fields import make_dynamics
    from attnflow.report import (EULER_STEPS, MUTATIONS, case_names, mutated_field_factory, parse_reproduce_config,
                                 reproduce)
    from attnflow.runs import load_config

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=1, help="initial configurations per case (default 1)")
    p.add_argument("--saves", type=int, default=61, help="save times of the adaptive solves (default 61)")
    p.add_argument("--max-steps", type=int, default=4096, help="solver step budget (a wrong field that needs more "
                   "fails its case, which is recorded; default 4096)")
    p.add_argument("--cases", nargs="+", default=None, help="cases (default: all but the negative controls)")
    p.add_argument("--json", default=None, help="also write the raw results here")
    p.add_argument("--from-json", default=None, help="only print the tables of a previous --json file")
    args = p.parse_args()
    if args.from_json:
        raw = json.loads(Path(args.from_json).read_text())
        return tables(raw["results"], raw["active"], list(raw["active"][MUTATIONS[0]]), MUTATIONS)
    cases = args.cases or [c for c in case_names() if c != "negative_controls"]
    tmp = Path(tempfile.mkdtemp())
    over = {"batch": args.batch, "gif_frames": 0, "num_saves": args.saves, "max_steps": args.max_steps}
    results = {"right": reproduce(tmp / "right", cases=cases, progress=False, figures=False, overrides=over)}
    active: dict[str, dict[str, bool]] = {}
    for m in MUTATIONS:
        wrong = mutated_field_factory(m)
        seen: list[bool] = []
        order = iter([c for c in case_names() if c in cases])  # the report runs its cases in report order
        full = parse_reproduce_config(load_config(None, "reproduce.toml")).full

        def factory(Q, K, V, *, picture, method, wrong=wrong, seen=seen, order=order):
            f = wrong(Q, K, V, picture=picture, method=method)
            g = make_dynamics(Q, K, V, picture=picture, method=method)
            name = next(order)
            if method == "euler":  # the discrete rescaling is defined on the layer grid only (the stepper binds it)
                dt = EULER_STEPS[name]
                num_layers = round(full[name].t1 / dt)
                f, g = f.on_grid(dt, 0.0, num_layers), g.on_grid(dt, 0.0, num_layers)
            y = jax.random.normal(jax.random.key(0), (5, V.shape[0]), V.dtype)
            t = jnp.asarray(1.0, V.dtype)
            seen.append(float(jnp.max(jnp.abs(f.vector_field(t, y, None) - g.vector_field(t, y, None)))) > 1e-9)
            return f

        results[m] = reproduce(tmp / m, cases=cases, progress=False, figures=False, overrides=over,
                               field_factory=factory)
        active[m] = dict(zip(cases, seen))
        print(f"{m}: {results[m]['num_graded'] - results[m]['num_passed']} failed checks", flush=True)

    if args.json:
        Path(args.json).write_text(json.dumps({"active": active, "results": results}, default=str))
    tables(results, active, cases, MUTATIONS)


def tables(results, active, cases, MUTATIONS) -> None:
    def failed(summary, case):
        return [c["name"] for c in summary["checks"] if c["case"] == case and c["passed"] is False] + (
            ["(case stopped)"] if summary["failed_cases"].get(case) else [])

    print("\n| case | right field | " + " | ".join(MUTATIONS) + " |")
    print("|---|---|" + "---|" * len(MUTATIONS))
    for case in cases:
        row = [str(len(failed(results["right"], case)))]
        for m in MUTATIONS:
            k = len(failed(results[m], case))
            row.append(("0!" if k == 0 else str(k)) if active[m].get(case, True) else ("-" if k == 0 else f"{k}?"))
        print(f"| {case} | " + " | ".join(row) + " |")
    caught: dict[str, set] = {}
    for m in MUTATIONS:
        for c in results[m]["checks"]:
            if c["passed"] is False:
                caught.setdefault(c["name"], set()).add(m)
    print("\n| check | catches |")
    print("|---|---|")
    for name, ms in sorted(caught.items(), key=lambda kv: -len(kv[1])):
        print(f"| {name} | {', '.join(m for m in MUTATIONS if m in ms)} |")


if __name__ == "__main__":
    with jax.enable_x64(True):
        main()
