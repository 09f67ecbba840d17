"""Real model heads: do a trained transformer's heads satisfy the assumptions?

Which heads of a trained transformer meet Definition 4.1 (top eigenvalue of V_h real, positive
and simple; <Q phi_1, K phi_1> > 0), and does a head that does behave like the idealised
dynamics? The script loads all-MiniLM-L6-v2 (built in), writes every head in the paper's
convention (V_h = W_O W_V, Q_h^T K_h), and draws each head's spectrum of V_h with its top
eigenvalue coloured by its Definition 4.1 status. For the good triple with the largest gap it
then runs the idealised flow, that head alone shared across Euler layers from the model's own
embedding of a sentence, and shows its attention matrices against the real head's.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

import attnflow as af
import attnflow.plot as ap
from attnflow.models import (
    assumption_table,
    default_model_path,
    forward,
    head_factors,
    head_weights,
    load_model,
    load_tokenizer,
    tokenize,
)

NAME = "06_real_model_heads"
SIZES = {
    "default": dict(text="The quick brown fox jumps over the lazy dog near the river bank.", layers=None),
    "smoke": dict(text="Tokens cluster.", layers=[0, 3]),
}


def main(size: str = "default", out: str | Path = ".") -> list[Path]:
    """Tabulate the heads, run one head's idealised flow, draw; return the files written."""
    import matplotlib.pyplot as plt

    cfg = SIZES[size]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)

    model = load_model()
    rows = assumption_table(model, layers=cfg["layers"])
    wo, wv = head_factors(model)
    # the non-zero spectrum of V_h = W_O W_V is that of the small d_k x d_k matrix W_V W_O
    spectra = {(r.layer, r.head): np.linalg.eigvals(np.asarray(wv[r.layer, r.head] @ wo[r.layer, r.head],
                                                               dtype=np.float64)) for r in rows}
    fig = ap.head_spectra(spectra, rows)
    files = [out / name for name in ap.save(fig, out / f"{NAME}.png", close=True)]

    good = [r for r in rows if r.good]
    chosen = max(good or rows, key=lambda r: r.gap)
    tokens = tokenize(load_tokenizer(default_model_path(), 512), cfg["text"])
    ids = np.asarray(tokens.input_ids)
    real = forward(model, ids)
    L = real.attentions.shape[0]
    w = head_weights(model).take("layer", chosen.layer).head(chosen.head)
    sim = af.simulate(real.hidden_states[0], w, method="euler", dt=1.0, t1=float(L), return_attention=True)

    fig = plt.figure(figsize=(14.5, 3.6), layout="constrained")
    left, right = fig.subfigures(1, 2, width_ratios=[1.0, 4.0])
    ax = left.subplots()
    ax.imshow(np.asarray(real.attentions[chosen.layer, chosen.head]), vmin=0.0, vmax=1.0, cmap="viridis")
    ax.set_title(f"real P, layer {chosen.layer} head {chosen.head}", fontsize="medium")
    ax.set_xlabel("key token j")
    ax.set_ylabel("query token i")
    ap.attention_maps(sim, times=[0, chosen.layer, L // 2, L - 1], order=None, fig=right,
                      title=f"idealised flow: head {chosen.layer}:{chosen.head} shared by {L} layers "
                            f"(lambda_1 = {chosen.lambda1_re:.2f})")
    files += [out / name for name in ap.save(fig, out / f"{NAME}_attention.png", close=True)]

    print(f"{NAME}: {len(good)} of {len(rows)} heads are good triples (Def 4.1), "
          f"{sum(r.cond1 for r in rows)} meet Def 4.1(1); idealised flow of head {chosen.layer}:{chosen.head} "
          f"on {len(ids)} tokens")
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
