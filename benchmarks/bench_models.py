#!/usr/bin/env python
r"""The real-model forward pass: attnflow (JAX, jit) against PyTorch eager, side by side.

all-MiniLM-L6-v2 (the built-in default model, 6 layers, d = 384, 12 heads) on one 128-token
sentence, float32, both returning every layer's hidden states and every head's attention
matrix: attnflow's :func:`attnflow.models.forward` (compiled once, warm-up call excluded) and
Hugging Face transformers' ``BertModel`` with ``attn_implementation="eager"`` under
``torch.no_grad()`` on the same local folder. Timed calls alternate between the two, so both
sample the same load of a shared machine; the ratio is the number to read. The two outputs are
also compared (max |difference| of the hidden states).

Usage: ``python benchmarks/bench_models.py [--tokens 128] [--repeats 20] [--out bench_models.json]``;
``make bench`` runs it as part of the suite.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # allow `python benchmarks/bench_models.py`; benchmarks/profile.py would
    sys.path[0] = str(Path(__file__).resolve().parents[1])  # shadow the stdlib module torch imports

TEXT = ("Tokens are particles and layers are time: self-attention moves every token towards the tokens it attends "
        "to, and after a few layers the tokens of a trained transformer may gather into clusters, as the theory of "
        "interacting particle systems predicts for the idealised model with shared weights. ")


def run(tokens: int = 128, repeats: int = 20, torch_rows: bool = True) -> dict:
    """Time both forward passes on one ``tokens``-token input; returns a JSON-ready dict."""
    import jax
    import numpy as np

    from attnflow.models import default_model_path, forward, load_model, load_tokenizer

    folder = default_model_path()
    tok = load_tokenizer(folder, tokens)
    # a text cut to exactly `tokens` tokens by the tokenizer's own truncation (attnflow's tokenize refuses
    # a text longer than its limit, as `attnflow track` must; this benchmark wants the cut on purpose)
    ids = np.asarray(tok.encode(TEXT * (1 + tokens // 40)).ids, np.int32)
    assert len(ids) == tokens, len(ids)
    model = load_model(folder)

    def jax_call():
        return jax.block_until_ready(forward(model, ids))

    t = time.perf_counter()
    out = jax_call()
    result = {"model": "all-MiniLM-L6-v2", "tokens": tokens, "dtype": "float32", "repeats": repeats,
              "attnflow_first_call_s": time.perf_counter() - t}
    calls = {"attnflow (jax jit)": jax_call}
    torch_out = None
    if torch_rows:
        try:
            import torch
            import transformers
        except ImportError as err:
            result["torch_note"] = f"skipped: {err} (pip install '.[test,bench]')"
        else:
            tm = transformers.BertModel.from_pretrained(str(folder), attn_implementation="eager",
                                                        local_files_only=True).eval()
            x = torch.tensor(ids[None].astype(np.int64))

            def torch_call():
                with torch.no_grad():
                    return tm(x, output_hidden_states=True, output_attentions=True)

            torch_out = torch_call()  # warm-up
            calls["pytorch eager (transformers)"] = torch_call
            result["torch_threads"] = torch.get_num_threads()
            result["versions"] = {"torch": torch.__version__, "transformers": transformers.__version__}
    times = {name: [] for name in calls}
    for _ in range(repeats):
        for name, fn in calls.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    result["rows"] = [{"method": name, "median_ms": 1e3 * statistics.median(ts), "min_ms": 1e3 * min(ts)}
                      for name, ts in times.items()]
    if torch_out is not None:
        ref = np.stack([h[0].numpy() for h in torch_out.hidden_states])
        result["max_abs_diff_hidden_states"] = float(np.abs(np.asarray(out.hidden_states) - ref).max())
        med = {r["method"]: r["median_ms"] for r in result["rows"]}
        result["attnflow_time_over_torch"] = med["attnflow (jax jit)"] / med["pytorch eager (transformers)"]
    return result


def format_result(r: dict) -> str:
    lines = [f"forward pass of {r['model']} on {r['tokens']} tokens ({r['dtype']}), median of {r['repeats']}:",
             "| method | median ms | min ms |", "|---|---|---|"]
    lines += [f"| {row['method']} | {row['median_ms']:.2f} | {row['min_ms']:.2f} |" for row in r["rows"]]
    if "attnflow_time_over_torch" in r:
        lines.append(f"attnflow time / PyTorch eager time = {r['attnflow_time_over_torch']:.2f} (target <= 2); "
                     f"max |hidden-state difference| = {r['max_abs_diff_hidden_states']:.2g}")
    if "torch_note" in r:
        lines.append("PyTorch row " + r["torch_note"])
    return "\n".join(lines)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokens", type=int, default=128, help="sentence length in tokens (default 128)")
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--no-torch", dest="torch", action="store_false")
    p.add_argument("--out", default="bench_models.json", help="JSON output path")
    args = p.parse_args(argv)
    if not 3 <= args.tokens <= 512 or args.repeats < 1:
        p.error("--tokens must lie in [3, 512] and --repeats be >= 1")
    r = run(args.tokens, args.repeats, args.torch)
    print(format_result(r))
    from attnflow.runs import atomic_write_json

    atomic_write_json(args.out, r)
    return r


if __name__ == "__main__":
    main()
