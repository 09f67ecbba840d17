"""Tiny Hugging Face style checkpoints written by the tests, and an independent float64 NumPy
reference of the BERT / ALBERT forward pass (no attnflow code; reads the tensors by their
checkpoint names)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
from scipy.special import erf

# ---------------------------------------------------------------- independent reference


def _ln(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def _act(name, u):
    if name == "gelu":
        return 0.5 * u * (1.0 + erf(u / math.sqrt(2.0)))
    if name in ("gelu_new", "gelu_pytorch_tanh"):
        return 0.5 * u * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (u + 0.044715 * u ** 3)))
    return np.maximum(u, 0.0)


def reference_forward(t: dict, cfg: dict, ids, prefix: str = ""):
    """Hidden states (L+1, n, d) and attentions (L, H, n, n) in float64, head by head in loops."""
    t = {k[len(prefix):]: np.asarray(v, np.float64) for k, v in t.items() if k.startswith(prefix)}
    ids = np.asarray(ids)
    n = len(ids)
    albert = cfg["model_type"] == "albert"
    eps = cfg["layer_norm_eps"]
    x = (t["embeddings.word_embeddings.weight"][ids] + t["embeddings.position_embeddings.weight"][:n]
         + t["embeddings.token_type_embeddings.weight"][0])
    x = _ln(x, t["embeddings.LayerNorm.weight"], t["embeddings.LayerNorm.bias"], eps)
    if albert:
        x = x @ t["encoder.embedding_hidden_mapping_in.weight"].T + t["encoder.embedding_hidden_mapping_in.bias"]
    H = cfg["num_attention_heads"]
    d = x.shape[1]
    dk = d // H
    hidden, atts = [x], []
    for layer in range(cfg["num_hidden_layers"]):
        if albert:
            p = "encoder.albert_layer_groups.0.albert_layers.0."
            nm = dict(q="attention.query", k="attention.key", v="attention.value", o="attention.dense",
                      ln1="attention.LayerNorm", f1="ffn", f2="ffn_output", ln2="full_layer_layer_norm")
        else:
            p = f"encoder.layer.{layer}."
            nm = dict(q="attention.self.query", k="attention.self.key", v="attention.self.value",
                      o="attention.output.dense", ln1="attention.output.LayerNorm", f1="intermediate.dense",
                      f2="output.dense", ln2="output.LayerNorm")
        W = lambda key: t[p + nm[key] + ".weight"]
        B = lambda key: t[p + nm[key] + ".bias"]
        ctx = np.zeros((n, d))
        Ps = []
        for h in range(H):
            r = slice(h * dk, (h + 1) * dk)
            q = x @ W("q")[r].T + B("q")[r]
            k = x @ W("k")[r].T + B("k")[r]
            v = x @ W("v")[r].T + B("v")[r]
            s = q @ k.T / math.sqrt(dk)
            e = np.exp(s - s.max(axis=1, keepdims=True))
            P = e / e.sum(axis=1, keepdims=True)
            Ps.append(P)
            ctx[:, r] = P @ v
        y = _ln(x + ctx @ W("o").T + B("o"), W("ln1"), B("ln1"), eps)
        f = _act(cfg["hidden_act"], y @ W("f1").T + B("f1")) @ W("f2").T + B("f2")
        x = _ln(y + f, W("ln2"), B("ln2"), eps)
        hidden.append(x)
        atts.append(np.stack(Ps))
    return np.stack(hidden), np.stack(atts)


# ---------------------------------------------------------------- tiny ALBERT checkpoint

#: per head: (kind, eigenvalues of M_h = W_V[head] W_O[:, head]); "good" heads get W_K = W_Q,
#: "cond1" heads W_K = -W_Q (so <Q phi, K phi> < 0). Like the paper's heads 5 and 14, two good
#: heads with lambda_1 = 1.31 and 0.67.
ALBERT_HEADS = [
    ("good", [1.31, 0.7, -0.4, 0.2]),
    ("cond1", [0.9, 0.5, 0.3, -0.1]),
    ("complex", None),  # 0.8 +- 0.6i (modulus 1), then 0.5, 0.2
    ("good", [0.67, -0.5, 0.3, 0.1]),
    ("real<0", [-1.2, 0.6, 0.3, 0.1]),
]
ALBERT_CONFIG = dict(model_type="albert", vocab_size=24, embedding_size=8, hidden_size=20, num_hidden_layers=3,
                     num_attention_heads=5, intermediate_size=32, max_position_embeddings=32, type_vocab_size=2,
                     layer_norm_eps=1e-12, hidden_act="gelu_new", num_hidden_groups=1, inner_group_num=1,
                     pad_token_id=0, architectures=["AlbertModel"])
WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "tokens", "are", "particles", "layers", "time", "attention", "is",
         "the", "interaction", "clusters", "emerge", "heads", "see", "a", "sentence", "of", "words", "and", "it", "."]


def _head_matrix(kind, eig, rng):
    dk = 4
    O, _ = np.linalg.qr(rng.normal(size=(dk, dk)))
    if kind == "complex":
        D = np.zeros((dk, dk))
        D[:2, :2] = [[0.8, -0.6], [0.6, 0.8]]
        D[2, 2], D[3, 3] = 0.5, 0.2
    else:
        D = np.diag(eig)
    return O @ D @ O.T


def write_albert(folder: Path, *, dtype=np.float32, seed: int = 0, prefix: str = "", tokenizer: bool = True) -> dict:
    """Write config.json + model.safetensors (+ tokenizer.json) of a tiny ALBERT whose heads have
    the spectra of :data:`ALBERT_HEADS` by construction; returns the tensors (float64)."""
    from safetensors.numpy import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    c = ALBERT_CONFIG
    d, E, I, H = c["hidden_size"], c["embedding_size"], c["intermediate_size"], c["num_attention_heads"]
    dk = d // H
    lay = "encoder.albert_layer_groups.0.albert_layers.0."
    Wo = rng.normal(size=(d, d)) / math.sqrt(d)
    Wv = np.zeros((d, d))
    Wq = rng.normal(size=(d, d)) / math.sqrt(d)
    Wk = np.zeros((d, d))
    for h, (kind, eig) in enumerate(ALBERT_HEADS):
        r = slice(h * dk, (h + 1) * dk)
        Wo_h = Wo[:, r]
        M = _head_matrix(kind, eig, rng)
        Wv[r] = M @ np.linalg.solve(Wo_h.T @ Wo_h, Wo_h.T)  # W_V[head] W_O[:, head] = M
        Wk[r] = -Wq[r] if kind == "cond1" else Wq[r]
    t = {
        "embeddings.word_embeddings.weight": rng.normal(size=(c["vocab_size"], E)),
        "embeddings.position_embeddings.weight": 0.1 * rng.normal(size=(c["max_position_embeddings"], E)),
        "embeddings.token_type_embeddings.weight": 0.1 * rng.normal(size=(2, E)),
        "embeddings.LayerNorm.weight": 1.0 + 0.1 * rng.normal(size=E),
        "embeddings.LayerNorm.bias": 0.1 * rng.normal(size=E),
        "encoder.embedding_hidden_mapping_in.weight": rng.normal(size=(d, E)) / math.sqrt(E),
        "encoder.embedding_hidden_mapping_in.bias": 0.1 * rng.normal(size=d),
        lay + "attention.query.weight": Wq, lay + "attention.query.bias": 0.1 * rng.normal(size=d),
        lay + "attention.key.weight": Wk, lay + "attention.key.bias": 0.1 * rng.normal(size=d),
        lay + "attention.value.weight": Wv, lay + "attention.value.bias": 0.1 * rng.normal(size=d),
        lay + "attention.dense.weight": Wo, lay + "attention.dense.bias": 0.1 * rng.normal(size=d),
        lay + "attention.LayerNorm.weight": 1.0 + 0.1 * rng.normal(size=d),
        lay + "attention.LayerNorm.bias": 0.1 * rng.normal(size=d),
        lay + "ffn.weight": rng.normal(size=(I, d)) / math.sqrt(d), lay + "ffn.bias": 0.1 * rng.normal(size=I),
        lay + "ffn_output.weight": rng.normal(size=(d, I)) / math.sqrt(I),
        lay + "ffn_output.bias": 0.1 * rng.normal(size=d),
        lay + "full_layer_layer_norm.weight": 1.0 + 0.1 * rng.normal(size=d),
        lay + "full_layer_layer_norm.bias": 0.1 * rng.normal(size=d),
    }
    save_file({prefix + k: np.ascontiguousarray(v.astype(dtype)) for k, v in t.items()},
              str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(c))
    if tokenizer:
        write_wordlevel_tokenizer(folder)
    return {k: v.astype(dtype).astype(np.float64) for k, v in t.items()}


def write_wordlevel_tokenizer(folder: Path) -> None:
    """A word-level tokenizer.json over :data:`WORDS` ([CLS] ... [SEP], lower-cased)."""
    from tokenizers import Tokenizer, normalizers, pre_tokenizers, processors
    from tokenizers.models import WordLevel

    tok = Tokenizer(WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]",
                                                       special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    tok.save(str(Path(folder) / "tokenizer.json"))


# ---------------------------------------------------------------- tiny BERT checkpoint

BERT_CONFIG = dict(model_type="bert", vocab_size=len(WORDS), hidden_size=8, num_hidden_layers=2, num_attention_heads=2,
                   intermediate_size=16, max_position_embeddings=16, type_vocab_size=2, layer_norm_eps=1e-12,
                   hidden_act="gelu", pad_token_id=0)


def write_bert(folder: Path, *, seed: int = 0, tokenizer: bool = True) -> dict:
    """Write config.json + model.safetensors (+ tokenizer.json) of a tiny random BERT
    (:data:`BERT_CONFIG`, float32); returns the tensors."""
    from safetensors.numpy import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    c = BERT_CONFIG
    d, I = c["hidden_size"], c["intermediate_size"]
    shapes = {"embeddings.word_embeddings.weight": (c["vocab_size"], d),
              "embeddings.position_embeddings.weight": (c["max_position_embeddings"], d),
              "embeddings.token_type_embeddings.weight": (c["type_vocab_size"], d),
              "embeddings.LayerNorm.weight": (d,), "embeddings.LayerNorm.bias": (d,)}
    for layer in range(c["num_hidden_layers"]):
        p = f"encoder.layer.{layer}."
        for name, (rows, cols) in {"attention.self.query": (d, d), "attention.self.key": (d, d),
                                   "attention.self.value": (d, d), "attention.output.dense": (d, d),
                                   "intermediate.dense": (I, d), "output.dense": (d, I)}.items():
            shapes[p + name + ".weight"], shapes[p + name + ".bias"] = (rows, cols), (rows,)
        for name in ("attention.output.LayerNorm", "output.LayerNorm"):
            shapes[p + name + ".weight"], shapes[p + name + ".bias"] = (d,), (d,)
    t = {k: (0.3 * rng.normal(size=s)).astype(np.float32) for k, s in shapes.items()}
    save_file(t, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(c))
    if tokenizer:
        write_wordlevel_tokenizer(folder)
    return t
