"""``attnflow track``: the run folder (report.md, summary.json, forward.npz, figures, provenance).

One sentence, or a text file with one sentence a line (multi-sentence mode, with a progress
bar). Each sentence's arrays are written atomically to ``sentences/NNNNN.npz`` as soon as it is
done; a killed run started again with the same arguments skips the finished sentences.
``forward.npz`` (top level) holds the first sentence's ``input_ids`` (n,), their token strings
``tokens`` (n,) (a fixed-width unicode array: ``np.load`` reads it without pickle),
``hidden_states`` (L+1, n, d) and ``attentions`` (L, H, n, n), float32.
"""

from __future__ import annotations

import collections
import io
import os
import time
from pathlib import Path

import numpy as np

from .. import _validate as v
from ..errors import InputError
from ..runs import (
    UnitStore,
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
    config_fingerprint,
    count_kept,
    open_run,
    releases_output_dirs,
)

__all__ = ["track", "read_texts", "KIND"]

KIND = "track"
_NPZ_KEYS_FORWARD = ("input_ids", "hidden_states", "attentions")


def read_texts(text_or_file: str) -> list[str]:
    """A path to an existing text file -> its non-empty lines; anything else -> ``[text]``.

    Example:
        >>> from attnflow.models import read_texts
        >>> read_texts("Tokens are particles.")
        ['Tokens are particles.']
    """
    path = Path(text_or_file)
    try:
        is_file = path.is_file()
    except OSError:  # a long sentence is not a valid path
        is_file = False
    if not is_file and " " not in text_or_file.strip() and path.suffix.lower() in (".txt", ".text", ".lst"):
        raise InputError(f"the text file {path} does not exist (give an existing file with one sentence a line, "
                         "or the sentence itself).")
    if is_file:
        try:
            lines = [ln.strip() for ln in path.read_text(encoding="utf-8").splitlines()]
        except UnicodeDecodeError as err:
            raise InputError(f"the text file {path} is not UTF-8 text (byte {err.start}: {err.reason}); "
                             "save it as UTF-8, one sentence a line.") from None
        except OSError as err:
            raise InputError(f"the text file {path} cannot be read ({err.strerror}).") from None
        lines = [ln for ln in lines if ln]
        if not lines:
            raise InputError(f"the text file {path} holds no non-empty line; give one sentence a line.")
        return lines
    if not text_or_file.strip():
        raise InputError("the TEXT to track is empty; give a sentence or a file with one sentence a line.")
    return [text_or_file]


def _save_npz(path: Path, arrays: dict) -> None:
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    atomic_write_bytes(path, buf.getvalue())


def _validate(cfg: dict) -> None:
    v.check_number("cluster_tol", cfg["cluster_tol"], "a chord distance on the unit sphere", low=0, high=2)
    v.check_number("rank_tol", cfg["rank_tol"], "relative to the largest singular value", low=0, high=1)
    v.check_number("leader_threshold", cfg["leader_threshold"], "a share of a row's attention", low=0, high=1)
    v.check_int("pad_multiple", cfg["pad_multiple"], 1, "the token count is padded to a multiple of it")


@releases_output_dirs
def track(text_or_file: str, out: str | os.PathLike, *, model: str | os.PathLike | None = None, head: str = "auto",
          progress: bool = True, **options) -> dict:
    """Run the ``attnflow track`` job and write the report folder ``out``; returns the summary.

    ``options`` override :data:`attnflow.models._layerwise.TRACK_DEFAULTS` (``cluster_tol``,
    ``rank_tol``, ``leader_threshold``, ``pad_multiple``).

    Example:
        >>> import tempfile, json, pathlib
        >>> from attnflow.models import track
        >>> out = pathlib.Path(tempfile.mkdtemp()) / "run"
        >>> s = track("Tokens are particles.", out, progress=False)
        >>> s["num_sentences"], sorted(p.name for p in out.glob("*.npz"))
        (1, ['forward.npz'])
    """
    import jax
    import jax.numpy as jnp
    from tqdm.auto import tqdm

    from ._checkpoint import resolve_model_path
    from ._encoder import load_model
    from ._heads import assumption_table, ginibre_baseline, head_factors, head_weights, table_records
    from ._tokenize import load_tokenizer, tokenize
    from ._layerwise import TRACK_DEFAULTS, analyse_sentence, select_head

    unknown = set(options) - set(TRACK_DEFAULTS)
    if unknown:
        raise InputError(f"unknown track option(s) {sorted(unknown)}; known: {sorted(TRACK_DEFAULTS)}.")
    cfg = {**TRACK_DEFAULTS, **options}
    _validate(cfg)
    texts = read_texts(text_or_file)
    folder = resolve_model_path(model)
    t_start = time.time()
    with jax.enable_x64(True):
        # the model folder, the tokenizer and --head are checked before the output folder is claimed
        net = load_model(folder)
        tok = load_tokenizer(folder, net.config.max_position)
        items = [tokenize(tok, t) for t in texts]
        rows = assumption_table(net)
        selected = select_head(rows, head)
        resolved = {"model": str(folder), "head": f"{selected[0]}:{selected[1]}", **cfg,
                    "texts_sha": config_fingerprint({"texts": texts})}
        # before any long work: never writes into a foreign folder, nor into a run of other settings
        run = open_run(out, KIND, resolved, record={**resolved, "texts": texts}, marker={"complete": False})
        out = run.out
        w64 = head_weights(net, jnp.float64)
        sentences = UnitStore(out / "sentences", "track sentence", run.fingerprint, then="analysing the sentence again",
                              compress=True)
        records = []
        kept = count_kept(len(items), "sentences")
        bar = tqdm(items, desc="attnflow track", unit="sentence", disable=not progress or len(items) == 1)
        for i, item in enumerate(bar):
            records.append(sentences.get(f"{i:05d}", lambda: analyse_sentence(net, w64, item.input_ids, selected, cfg)))
            kept.add()
        _save_npz(out / "forward.npz", {**{k: records[0][k] for k in _NPZ_KEYS_FORWARD},
                                        "tokens": np.asarray(list(items[0].tokens), dtype=np.str_)})
        wo, wv = (np.asarray(a, np.float64) for a in head_factors(net))
        spectra = {(r.layer, r.head): np.linalg.eigvals(wv[r.layer, r.head] @ wo[r.layer, r.head]) for r in rows}
        baseline = ginibre_baseline(net.config.head_dim)
    summary = _summarise(net, rows, baseline, selected, items, records, cfg, resolved)
    summary["seconds"] = round(time.time() - t_start, 2)
    summary["figures"] = _figures(out, rows, spectra, selected, items, records, summary)
    summary["assumption_table"] = table_records(rows)
    atomic_write_json(out / "summary.json", summary)
    run.write_provenance()
    atomic_write_text(out / "report.md", _markdown(summary, rows, items, records))
    run.mark(complete=True)
    return summary


def _summarise(net, rows, baseline, selected, items, records, cfg, resolved) -> dict:
    c = net.config
    s, h = selected
    n = np.array([len(it.tokens) for it in items])
    stack = lambda k: np.stack([r[k] for r in records])
    L = c.num_layers
    status = collections.Counter(r.status for r in rows)
    num_heads = len(rows)
    cond1 = sum(r.cond1 for r in rows)
    # leader tokens of each real head, counted over sentences
    leaders = {}
    for l in range(L):
        for hh in range(c.num_heads):
            cnt = collections.Counter()
            for it, r in zip(items, records):
                for j in np.flatnonzero(r["leaders"][l, hh]):
                    cnt[it.tokens[j]] += 1
            leaders[f"{l}:{hh}"] = cnt.most_common(5)
    ideal_final = lambda k: stack(k)[..., -1]
    groups = {}
    for st in ("good", "cond1", "complex", "real<0"):
        sel = [(r.layer, r.head) for r in rows if r.status == st]
        if sel:
            idx = tuple(np.array(sel).T)
            groups[st] = {
                "heads": len(sel),
                "final_clusters_per_token": float(np.mean(ideal_final("ideal_clusters")[:, idx[0], idx[1]] / n[:, None])),
                "final_mean_cos": float(np.mean(ideal_final("ideal_mean_cos")[:, idx[0], idx[1]])),
                "final_boolean": float(np.mean(ideal_final("ideal_boolean")[:, idx[0], idx[1]])),
            }
    return {
        "kind": KIND,
        "model": {"path": resolved["model"], "family": c.family, "layers": L, "parameter_layers": c.num_param_layers,
                  "heads": c.num_heads, "d_model": c.hidden_size, "d_k": c.head_dim},
        "settings": {k: resolved[k] for k in ("cluster_tol", "rank_tol", "leader_threshold", "pad_multiple", "head")},
        "num_sentences": len(items),
        "tokens_per_sentence": {"mean": float(n.mean()), "min": int(n.min()), "max": int(n.max())},
        "def41": {"heads": num_heads, "cond1": cond1, "good": status.get("good", 0), "by_status": dict(status),
                  "ginibre_fraction": baseline["fraction"], "ginibre_ci95": baseline["ci95"],
                  "ginibre_expected_cond1": baseline["fraction"] * num_heads, "ginibre_size": baseline["size"]},
        "real": {
            "clusters_mean": stack("clusters").mean(0).tolist(),
            "clusters_per_token_mean": (stack("clusters") / n[:, None]).mean(0).tolist(),
            "mean_cos_mean": stack("mean_cos").mean(0).tolist(),
            "rank_mean": stack("rank").mean(0).tolist(),
            "boolean_mean": stack("boolean").mean(0).tolist(),
            "off_leader_mean": stack("off_leader").mean(0).tolist(),
            "leader_tokens": leaders,
        },
        "selected_head": {"layer": s, "head": h, "status": next(r.status for r in rows if (r.layer, r.head) == (s, h)),
                          "ideal_clusters_mean": stack("ideal_clusters")[:, s, h].mean(0).tolist(),
                          "ideal_mean_cos_mean": stack("ideal_mean_cos")[:, s, h].mean(0).tolist(),
                          "ideal_boolean_mean": stack("ideal_boolean")[:, s, h].mean(0).tolist(),
                          "real_boolean_head_mean": stack("boolean")[:, :, h].mean(0).tolist()},
        "idealised_by_status": groups,
        "idealised_all_finite": bool(stack("ideal_finite").all()),
    }


def _figures(out: Path, rows, spectra, selected, items, records, summary) -> list[str]:
    from . import _figures as figures

    s, h = selected
    row = next(r for r in rows if (r.layer, r.head) == (s, h))
    n_mean = summary["tokens_per_sentence"]["mean"]
    stack = lambda k: np.stack([r[k] for r in records])
    return [
        figures.eigenvalue_panels(spectra, rows, out / "eigenvalues.png"),
        figures.side_by_side(records[0], row, spectra[(s, h)], list(items[0].tokens), out / "side_by_side.png"),
        figures.real_head_maps(np.asarray(summary["real"]["rank_mean"]), np.asarray(summary["real"]["boolean_mean"]),
                               n_mean, out / "real_heads.png"),
        figures.idealised_vs_spectrum(rows, stack("ideal_mean_cos")[..., -1].mean(0),
                                      stack("ideal_clusters")[..., -1].mean(0), n_mean, out / "idealised_vs_spectrum.png"),
    ]


def _markdown(summary, rows, items, records) -> str:
    from ._heads import format_table

    m, d41, real, sel = summary["model"], summary["def41"], summary["real"], summary["selected_head"]
    st = summary["settings"]
    L = m["layers"]
    ntok = summary["tokens_per_sentence"]
    lines = [
        "# attnflow track: a real model's tokens, layer by layer, against the idealised dynamics", "",
        "| quantity | value |", "|---|---|",
        f"| model | {m['family']}, {L} layers ({m['parameter_layers']} parameter sets), {m['heads']} heads, "
        f"d_model {m['d_model']}, d_k {m['d_k']} (`{m['path']}`) |",
        f"| sentences / tokens per sentence | {summary['num_sentences']} / mean {ntok['mean']:.1f} "
        f"(min {ntok['min']}, max {ntok['max']}) |",
        f"| heads with Def 4.1(1) (lambda_1 of largest modulus real, > 0, simple) | {d41['cond1']} of {d41['heads']} "
        f"(real Ginibre {d41['ginibre_size']}x{d41['ginibre_size']}: fraction {d41['ginibre_fraction']:.3f}, "
        f"95% CI [{d41['ginibre_ci95'][0]:.3f}, {d41['ginibre_ci95'][1]:.3f}], i.e. "
        f"{d41['ginibre_expected_cond1']:.1f} expected) |",
        f"| good triples (Def 4.1 (1) and (2)) | {d41['good']} of {d41['heads']} |",
        f"| real model: clusters of normalised tokens, embedding -> last layer (mean over sentences) | "
        f"{real['clusters_mean'][0]:.2f} -> {real['clusters_mean'][-1]:.2f} (of {ntok['mean']:.1f} tokens) |",
        f"| real model: mean pairwise cosine, embedding -> last layer | {real['mean_cos_mean'][0]:.3f} -> "
        f"{real['mean_cos_mean'][-1]:.3f} |",
        f"| idealised run of head {sel['layer']}:{sel['head']} ({sel['status']}), shared over {L} layers: clusters "
        f"-> last layer | {sel['ideal_clusters_mean'][-1]:.2f} (mean cosine {sel['ideal_mean_cos_mean'][-1]:.3f}) |",
        f"| every idealised run finite | {'yes' if summary['idealised_all_finite'] else 'NO'} |",
        f"| run time | {summary['seconds']} s |", "",
        "Tolerances (fixed, not relative to the data): two normalised tokens u_i = x_i/|x_i| belong to one cluster "
        f"when linked by a chain of pairs with |u_i - u_j| <= {st['cluster_tol']} (cosine >= "
        f"{1 - st['cluster_tol'] ** 2 / 2:.4g}); numerical rank of P counts singular values above {st['rank_tol']} "
        "times the largest (which is >= 1 for a row-stochastic matrix); Booleanness is the max-norm distance to "
        "the nearest Boolean row-stochastic matrix, max_i (1 - max_j P_ij) (0 = every row on one token); a leader "
        f"token receives more than {st['leader_threshold']} of some row's attention.", "",
        "## Real model, per layer (mean over sentences)", "",
        "| layer | clusters | clusters / tokens | mean pairwise cosine |", "|---|---|---|---|",
    ]
    for l in range(L + 1):
        lines.append(f"| {'embedding' if l == 0 else l} | {real['clusters_mean'][l]:.2f} | "
                     f"{real['clusters_per_token_mean'][l]:.3f} | {real['mean_cos_mean'][l]:.3f} |")
    lines += ["", f"## Idealised dynamics of head {sel['layer']}:{sel['head']} next to the real model", "",
              f"The head's weights (Q_h, K_h, V_h, beta, biases) are shared across {L} Euler layers (dt = 1), from "
              "the model's own embedding output; no feed-forward, no LayerNorm, no other head, no output bias. "
              "'real Booleanness' is head "
              f"{sel['head']} of each real layer. Figure: side_by_side.png (first sentence).", "",
              "| layer | real clusters | idealised clusters | real cosine | idealised cosine | real Booleanness "
              "| idealised Booleanness |", "|---|---|---|---|---|---|---|"]
    for l in range(L + 1):
        rb = f"{sel['real_boolean_head_mean'][l]:.3f}" if l < L else "-"
        ib = f"{sel['ideal_boolean_mean'][l]:.3f}" if l < L else "-"
        lines.append(f"| {l} | {real['clusters_mean'][l]:.2f} | {sel['ideal_clusters_mean'][l]:.2f} | "
                     f"{real['mean_cos_mean'][l]:.3f} | {sel['ideal_mean_cos_mean'][l]:.3f} | {rb} | {ib} |")
    lines += ["", "## Idealised runs of every head, grouped by Definition 4.1 (last layer, mean over heads and "
              "sentences)", "", "| status | heads | clusters / tokens | mean cosine | Booleanness |", "|---|---|---|---|---|"]
    for stt, g in summary["idealised_by_status"].items():
        lines.append(f"| {stt} | {g['heads']} | {g['final_clusters_per_token']:.3f} | {g['final_mean_cos']:.3f} | "
                     f"{g['final_boolean']:.3f} |")
    lines += ["", "Figure: idealised_vs_spectrum.png (each head against Re lambda_1 of its V_h).", "",
              "## Assumption table (per head; layer and head from 0)", "",
              "V_h = W_O[:, head] W_V[head] (rank d_k), Q_h^T K_h = W_Q[head]^T W_K[head] / sqrt(d_k); biases are "
              "not part of Definition 4.1. Figure: eigenvalues.png.", "", format_table(rows), "",
              "## Real heads: attention structure (mean over sentences) and leader tokens", "",
              "| layer | head | rank | Booleanness | mean off-leader mass | leader tokens (sentences) |",
              "|---|---|---|---|---|---|"]
    for l in range(L):
        for h in range(m["heads"]):
            ld = ", ".join(f"`{t}` ({c})" for t, c in real["leader_tokens"][f"{l}:{h}"]) or "-"
            lines.append(f"| {l} | {h} | {real['rank_mean'][l][h]:.2f} | {real['boolean_mean'][l][h]:.3f} | "
                         f"{real['off_leader_mean'][l][h]:.3f} | {ld} |")
    lines += ["", "## Files", "",
              "* `forward.npz`: the first sentence's `input_ids` (n,), their token strings `tokens` (n,), "
              "`hidden_states` (L+1, n, d_model: the embedding output, then every layer), `attentions` (L, H, n, n), "
              "float32;",
              "* `sentences/NNNNN.npz`: the same and every statistic, per sentence;",
              "* `summary.json`, `config.json`, `provenance.json`; figures: " + ", ".join(summary["figures"]) + ".", ""]
    return "\n".join(lines)
