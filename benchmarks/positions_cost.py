#!/usr/bin/env python
r"""What an ALiBi bias costs on the tiled path: one attention evaluation at n tokens with and without the bias.

For tokens x (n, d) on the circle (d = 2 by default, the studies' case, where the bias is the largest share of the
work per score), ``attend(beta x, x, x, impl="chunked")`` against the same call with
``positions=Positions(alibi=1.0)`` (the bias :math:`-|i - j|/n` built per tile from indices), both jitted, called
in alternation (``--repeats`` rounds of: plain, biased; the order flips every round) so that the load of a shared
machine falls on both alike. Prints min / median / max seconds of each and the ratio of the medians and of the
minima; ``--causal`` uses the causal mask for both. Writes a JSON record (``--out``); ``--figure`` draws the
rounds, labelled with the machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from benchmarks.common import add_record_arguments, machine_info  # noqa: E402


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=100_000, help="tokens (default 100000)")
    p.add_argument("--d", type=int, default=2, help="token dimension = query/key/value width (default 2)")
    p.add_argument("--repeats", type=int, default=3, help="alternating rounds (default 3)")
    p.add_argument("--causal", action="store_true", help="causal mask on both")
    add_record_arguments(p, "positions_cost", redraw=False)
    args = p.parse_args(argv)
    import jax
    import jax.numpy as jnp

    from attnflow.kernels import Positions, attend
    from benchmarks.positions_lost_in_middle import machine_label

    machine = machine_info()
    x = jax.random.normal(jax.random.key(0), (args.n, args.d), jnp.float32)
    x = x / jnp.linalg.norm(x, axis=1, keepdims=True)
    mask = "causal" if args.causal else None
    calls = {
        "plain": jax.jit(lambda x: attend(4.0 * x, x, x, impl="chunked", mask=mask)),
        "alibi": jax.jit(lambda x: attend(4.0 * x, x, x, impl="chunked", mask=mask, positions=Positions(alibi=1.0))),
    }
    compile_s = {}
    for name, f in calls.items():
        t = time.perf_counter()
        f(x).block_until_ready()
        compile_s[name] = time.perf_counter() - t
    seconds = {name: [] for name in calls}
    for r in range(args.repeats):
        for name in (("plain", "alibi") if r % 2 == 0 else ("alibi", "plain")):
            t = time.perf_counter()
            calls[name](x).block_until_ready()
            seconds[name].append(time.perf_counter() - t)
    stats = {name: {"min": min(s), "median": statistics.median(s), "max": max(s)} for name, s in seconds.items()}
    record = {"machine": machine, "label": machine_label(machine), "n": args.n, "d": args.d, "causal": args.causal,
              "repeats": args.repeats, "first_call_seconds": compile_s, "seconds": seconds, "stats": stats,
              "ratio_median": stats["alibi"]["median"] / stats["plain"]["median"],
              "ratio_min": stats["alibi"]["min"] / stats["plain"]["min"]}
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"tiled attention, n = {args.n}, d = {args.d}{', causal' if args.causal else ''} ({record['label']}); "
          f"{args.repeats} alternating rounds")
    for name, s in stats.items():
        print(f"{name:>6}: min {s['min']:.3f} s  median {s['median']:.3f} s  max {s['max']:.3f} s")
    print(f"alibi / plain: {record['ratio_median']:.3f} (medians), {record['ratio_min']:.3f} (minima)")
    _figure(record, args.figure)
    return record


def _figure(r: dict, path: Path) -> None:
    import attnflow.plot as ap

    fig, axes = ap.new_figure(1, panel=(4.8, 3.4))
    ax = np.ravel(axes)[0]
    for name, marker in (("plain", "o"), ("alibi", "s")):
        ax.plot(np.arange(1, r["repeats"] + 1), r["seconds"][name], marker + "-", label=name)
    ax.set_xlabel("round")
    ax.set_ylabel("seconds per evaluation")
    ax.legend(fontsize="small")
    ax.set_title(f"tiled attention, n = {r['n']}: alibi / plain = {r['ratio_median']:.3f}\n({r['label']})",
                 fontsize="medium")
    ap.save(fig, path, close=True)


if __name__ == "__main__":
    main()
