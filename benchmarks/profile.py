"""Where the time of one attention-flow step goes, from XLA's own tools.

For one (B, n, d) it compiles one batched Euler step with each attention
implementation and prints, per variant: XLA's cost analysis (flops, bytes accessed),
the temporary memory of the compiled program, the fusions and dots of the optimised HLO
(what XLA actually runs), and the interleaved median time of the step. ``--trace DIR``
also records a ``jax.profiler`` trace of a few steps (open it in Perfetto or TensorBoard);
``--hlo DIR`` writes the optimised HLO text.

    python -m benchmarks.profile --size 16x1024x64 [--trace /tmp/trace] [--hlo /tmp/hlo]
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import attnflow  # noqa: E402,F401
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from attnflow import AttentionFlow  # noqa: E402
from benchmarks.common import attention_flops, make_problem  # noqa: E402


def step_fn(impl: str, dt: float = 0.01):
    def step(x0, Q, K, V):
        dyn = AttentionFlow(Q, K, V, attention_impl=impl)
        return jax.vmap(lambda x: x + dt * dyn.vector_field(0.0, x, None))(x0)

    return jax.jit(step)


def hlo_summary(text: str) -> dict:
    """Counts of the top-level operations of the optimised HLO's entry computation."""
    entry = text[text.index("ENTRY"):]
    entry = entry[: entry.index("\n}\n")] if "\n}\n" in entry else entry
    ops = Counter()
    for line in entry.splitlines()[1:]:
        m = re.search(r"=\s*\S+\s+([a-z\-]+)\(", line)
        if m:
            ops[m.group(1)] += 1
    kinds = Counter(re.findall(r"kind=(k\w+)", entry))
    dots = len(re.findall(r"\bdot\(", text))
    return {"entry_ops": dict(ops), "fusion_kinds": dict(kinds), "dots_total": dots}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size", default="16x1024x64")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--impls", default="dense,chunked")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--trace", default=None)
    p.add_argument("--hlo", default=None)
    args = p.parse_args(argv)
    B, n, d = (int(float(v)) for v in args.size.split("x"))
    xs = [jnp.asarray(a, jnp.dtype(args.dtype)) for a in make_problem(B, n, d)]
    flops = attention_flops(B, n, d)
    fns = {}
    for impl in args.impls.split(","):
        f = step_fn(impl)
        compiled = f.lower(*xs).compile()
        cost = compiled.cost_analysis()
        cost = cost[0] if isinstance(cost, (list, tuple)) else cost
        mem = compiled.memory_analysis()
        text = compiled.as_text()
        if args.hlo:
            Path(args.hlo).mkdir(parents=True, exist_ok=True)
            Path(args.hlo, f"step_{impl}_{args.size}.hlo.txt").write_text(text)
        print(f"[{impl}] XLA cost: {cost.get('flops', float('nan')) / 1e9:.2f} GFLOP (counted {flops / 1e9:.2f}), "
              f"{cost.get('bytes accessed', float('nan')) / 1e6:.1f} MB accessed; temp memory "
              f"{(mem.temp_size_in_bytes if mem else float('nan')) / 2**20:.1f} MiB")
        print(f"[{impl}] HLO: {hlo_summary(text)}")
        jax.block_until_ready(f(*xs))
        fns[impl] = f
    times = {k: [] for k in fns}
    for _ in range(args.repeats):
        for k, f in fns.items():
            t = time.perf_counter()
            jax.block_until_ready(f(*xs))
            times[k].append(time.perf_counter() - t)
    for k, ts in times.items():
        med = statistics.median(ts)
        print(f"[{k}] step {1e3 * med:.2f} ms (median of {len(ts)}, interleaved), {flops / med / 1e9:.1f} GF/s")
    if args.trace:
        with jax.profiler.trace(args.trace):
            for f in fns.values():
                for _ in range(3):
                    jax.block_until_ready(f(*xs))
        print(f"profiler trace written under {args.trace}")


if __name__ == "__main__":
    main()
