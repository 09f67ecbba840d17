"""attnflow.models: loading, the forward pass against independent implementations, per-head
weights in the paper's convention, and the assumption table (MiniLM and a tiny ALBERT whose
head spectra are known by construction)."""

import json
import math

import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from attnflow import InputError
from attnflow.models import (
    assumption_table,
    default_model_path,
    forward,
    head_weights,
    load_model,
    load_tokenizer,
    multihead_attention,
    read_checkpoint,
    self_attention,
    tokenize,
)
from attnflow.models._idealised import idealised_runs
from attnflow.models._layerwise import forward_padded
from attnflow.spectral import check_good_triple
from attnflow import AttentionWeights
from model_fixtures import ALBERT_CONFIG, ALBERT_HEADS, reference_forward, write_albert

pytestmark = pytest.mark.usefixtures("x64")  # compared with float64 references at float64 tolerances

SENTENCE = "Clusters emerge in self-attention dynamics."


@pytest.fixture(scope="module")
def minilm():
    folder = default_model_path()
    tok = load_tokenizer(folder, 512)
    ids = tokenize(tok, SENTENCE).input_ids
    cfg = json.loads((folder / "config.json").read_text())
    return folder, ids, cfg


@pytest.fixture(scope="module")
def minilm64():
    return load_model(dtype=jnp.float64)


@pytest.fixture(scope="module")
def albert_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("albert")
    tensors = write_albert(folder, dtype=np.float64)
    return folder, tensors


def test_tokenizer_no_padding(minilm):
    folder, ids, _ = minilm
    assert ids[0] == 101 and ids[-1] == 102 and 5 < len(ids) < 20  # [CLS] ... [SEP], not padded to 128


def test_forward_matches_numpy_float64_reference(minilm, minilm64):
    """attnflow's JAX forward (float64) == an independent head-by-head NumPy float64 forward on the
    tensors read straight from the file, to rounding (1e-10: six layers of O(1) float64 arithmetic)."""
    folder, ids, cfg = minilm
    ref_h, ref_a = reference_forward(load_file(str(folder / "model.safetensors")), cfg, ids)
    out = forward(minilm64, ids)
    np.testing.assert_allclose(np.asarray(out.hidden_states), ref_h, rtol=0, atol=1e-10)
    np.testing.assert_allclose(np.asarray(out.attentions), ref_a, rtol=0, atol=1e-12)
    # float32 (the stored precision): hidden states are LayerNorm outputs with entries of order 1-10;
    # float32 rounding through 6 layers stays far below 1e-4 absolute
    out32 = forward(load_model(folder), ids)
    assert out32.hidden_states.dtype == jnp.float32
    assert np.abs(np.asarray(out32.hidden_states) - ref_h).max() < 1e-4
    assert np.abs(np.asarray(out32.attentions) - ref_a).max() < 1e-5


def test_forward_matches_transformers_bert(minilm):
    """Against Hugging Face transformers' BertModel (torch, eager attention) on the same local folder,
    float32 vs float32: max |difference| < 1e-4 on hidden states (entries of order 1-10; float32
    rounding differences through 6 layers are ~1e-6) and < 1e-5 on attention probabilities."""
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    folder, ids, _ = minilm
    tm = transformers.BertModel.from_pretrained(str(folder), attn_implementation="eager", local_files_only=True)
    with torch.no_grad():
        o = tm.eval()(torch.tensor(ids[None].astype(np.int64)), output_hidden_states=True, output_attentions=True)
    ref_h = np.stack([h[0].numpy() for h in o.hidden_states])
    ref_a = np.stack([a[0].numpy() for a in o.attentions])
    out = forward(load_model(folder), ids)
    assert np.abs(np.asarray(out.hidden_states) - ref_h).max() < 1e-4
    assert np.abs(np.asarray(out.attentions) - ref_a).max() < 1e-5


def test_albert_forward_matches_references(albert_dir, tmp_path):
    """The tiny ALBERT (factorised embedding, one shared layer, gelu_new): float64 against the NumPy
    reference to rounding; float32 against transformers' AlbertModel."""
    folder, tensors = albert_dir
    ids = np.array([2, 4, 5, 6, 17, 18, 3])
    ref_h, ref_a = reference_forward(tensors, ALBERT_CONFIG, ids)
    out = forward(load_model(folder, dtype=jnp.float64), ids)
    assert out.hidden_states.shape == (4, 7, 20) and out.attentions.shape == (3, 5, 7, 7)
    np.testing.assert_allclose(np.asarray(out.hidden_states), ref_h, rtol=0, atol=1e-11)
    np.testing.assert_allclose(np.asarray(out.attentions), ref_a, rtol=0, atol=1e-12)
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    f32 = tmp_path / "albert32"
    write_albert(f32, dtype=np.float32, prefix="albert.", tokenizer=False)  # task-head style prefix
    tm = transformers.AlbertModel.from_pretrained(str(f32), attn_implementation="eager", local_files_only=True)
    with torch.no_grad():
        o = tm.eval()(torch.tensor(ids[None]), output_hidden_states=True, output_attentions=True)
    out32 = forward(load_model(f32), ids)
    ref_h = np.stack([h[0].numpy() for h in o.hidden_states])
    assert np.abs(np.asarray(out32.hidden_states)[1:] - ref_h[-3:]).max() < 1e-4
    assert np.abs(np.asarray(out32.attentions) - np.stack([a[0].numpy() for a in o.attentions])).max() < 1e-5


def test_padding_with_mask_changes_nothing(minilm):
    folder, ids, _ = minilm
    model = load_model(folder, dtype=jnp.float64)
    a = forward(model, ids)
    b = forward_padded(model, ids, multiple=16)  # padded to 16 tokens, padding masked out as keys
    np.testing.assert_allclose(np.asarray(b.hidden_states), np.asarray(a.hidden_states), rtol=0, atol=1e-12)
    np.testing.assert_allclose(np.asarray(b.attentions), np.asarray(a.attentions), rtol=0, atol=1e-14)


def test_head_weights_paper_convention(minilm64):
    w = head_weights(minilm64)
    m = minilm64.layer(2)
    d, dk = 384, 32
    h = 5
    r = slice(h * dk, (h + 1) * dk)
    assert np.asarray(w.Q[2, h]).shape == (dk, d)  # head h's query rows of the (d, d) projection
    np.testing.assert_array_equal(np.asarray(w.Q[2, h]), np.asarray(m.query_w[r]))
    np.testing.assert_array_equal(np.asarray(w.k_bias[2, h]), np.asarray(m.key_b[r]))
    Wo, Wv = np.asarray(m.out_w[:, r]), np.asarray(m.value_w[r])
    np.testing.assert_allclose(np.asarray(w.V[2, h]), Wo @ Wv, rtol=0, atol=1e-14)
    np.testing.assert_allclose(np.asarray(w.v_bias[2, h]), Wo @ np.asarray(m.value_b[r]), rtol=0, atol=1e-14)
    assert w.axes == ("layer", "head") and np.all(np.asarray(w.beta) == 1.0 / math.sqrt(dk))
    assert np.linalg.matrix_rank(np.asarray(w.V[2, h])) == dk


@pytest.mark.parametrize("layer", [0, 4])
def test_multihead_field_equals_layer_self_attention(minilm64, layer):
    """sum_h sum_j P^h_ij (V_h x_j + b_v,h) + b_O == the layer's self-attention output, to rounding
    (float64, entries of order 1); without the biases it is visibly different."""
    rng = np.random.default_rng(layer)
    x = jnp.asarray(rng.normal(size=(9, 384)))  # LayerNorm scale: |x_i| ~ sqrt(d)
    w = head_weights(minilm64).layer(layer)
    p = minilm64.layer(layer)
    real, _ = self_attention(p, x, 12)
    field = multihead_attention(w, x, p.out_b)
    np.testing.assert_allclose(np.asarray(field), np.asarray(real), rtol=0, atol=1e-12)
    bare = multihead_attention(AttentionWeights(w.Q, w.K, w.V, w.beta, axes=("head",)), x)
    assert np.linalg.norm(bare - real) / np.linalg.norm(real) > 0.05  # biases are part of the model


def test_minilm_layer0_assumption_table(minilm64):
    """The finding on all-MiniLM-L6-v2 layer 0: no good triple; 5 heads with a real positive
    simple lambda_1 but <Q phi_1, K phi_1> < 0; the other 7 with a complex (or negative) lambda_1.
    Cross-checked against check_good_triple on the full 384 x 384 V_h for two heads."""
    rows = assumption_table(minilm64, layers=[0])
    assert not any(r.good for r in rows)
    cond1 = [r for r in rows if r.cond1]
    assert [r.head for r in cond1] == [0, 3, 4, 6, 9]
    assert all(r.qk_value < 0 and r.lambda1_im == 0 and r.lambda1_re > 0 for r in cond1)
    others = [r for r in rows if not r.cond1]
    assert len(others) == 7 and all(r.lambda1_im != 0 or r.lambda1_re <= 0 for r in others)
    w = head_weights(minilm64)
    for h in (0, 1):
        c = check_good_triple(float(w.beta[0, h]) * np.asarray(w.Q[0, h]), np.asarray(w.K[0, h]), np.asarray(w.V[0, h]))
        r = rows[h]
        assert abs(c.lambda1 - complex(r.lambda1_re, r.lambda1_im)) < 1e-10
        assert c.condition1 == r.cond1 and c.condition2 == r.cond2
        if r.cond1:
            assert abs(c.qk_value - r.qk_value) < 1e-10
    # the symmetric part of Q_h^T K_h has rank <= 2 d_k < d: never positive definite
    assert not any(r.qk_positive for r in rows) and all(r.sym_min_eig < 0 < r.sym_max_eig for r in rows)


def test_albert_assumption_table_finds_the_constructed_heads(albert_dir):
    """Heads built with known spectra: exactly heads 0 and 3 (the paper's "5 and 14") are good triples,
    with lambda_1 = 1.31 and 0.67 to 1e-6; head 1 satisfies only Def 4.1(1), head 2 has a complex
    lambda_1 of modulus 1, head 4 a negative one. One parameter layer (shared by 3 layers)."""
    folder, tensors = albert_dir
    model = load_model(folder, dtype=jnp.float64)
    assert model.config.layer_groups == (0, 0, 0)
    rows = assumption_table(model)
    assert [r.status for r in rows] == [k for k, _ in ALBERT_HEADS]
    assert [r.head for r in rows if r.good] == [0, 3]
    assert abs(rows[0].lambda1_re - 1.31) < 1e-6 and abs(rows[3].lambda1_re - 0.67) < 1e-6
    assert abs(rows[1].lambda1_re - 0.9) < 1e-6 and rows[1].qk_value < 0
    assert abs(abs(complex(rows[2].lambda1_re, rows[2].lambda1_im)) - 1.0) < 1e-6
    assert abs(rows[4].lambda1_re + 1.2) < 1e-6
    assert rows[0].paranormal and rows[1].paranormal and not rows[2].paranormal
    # the reduced (d_k x d_k) route against the full 20 x 20 V_h, independently in NumPy
    w = head_weights(model)
    for r in rows:
        V = np.asarray(w.V[0, r.head])
        lam = np.linalg.eigvals(V)
        lam1 = lam[np.argmax(np.abs(lam))]
        assert abs(abs(lam1) - abs(complex(r.lambda1_re, r.lambda1_im))) < 1e-9
        c = check_good_triple(float(w.beta[0, r.head]) * np.asarray(w.Q[0, r.head]), np.asarray(w.K[0, r.head]), V)
        assert (c.condition1, c.good) == (r.cond1, r.good)
        if r.cond1:
            assert abs(c.qk_value - r.qk_value) < 1e-9


def test_idealised_runs_match_numpy_euler():
    """Every head of a (layer, head) stack run alone with its weights shared across layers
    (Euler, dt = 1, biases) against a plain NumPy loop, to rounding."""
    rng = np.random.default_rng(3)
    S, H, d, m, n, L = 2, 3, 6, 3, 5, 4
    Q, K = rng.normal(size=(2, S, H, m, d)) * 0.5
    V = rng.normal(size=(S, H, d, d)) / math.sqrt(d)
    qb, kb, vb = rng.normal(size=(S, H, m)), rng.normal(size=(S, H, m)), rng.normal(size=(S, H, d))
    beta = rng.uniform(0.5, 1.0, size=(S, H))
    x0 = rng.normal(size=(n, d))
    w = AttentionWeights(Q, K, V, beta, q_bias=qb, k_bias=kb, v_bias=vb, axes=("layer", "head"))
    xs, Ps, ok = idealised_runs(w, jnp.asarray(x0), L)
    assert xs.shape == (S, H, L + 1, n, d) and Ps.shape == (S, H, L, n, n) and bool(np.all(ok))
    for s_ in range(S):
        for h in range(H):
            x = x0.copy()
            for k in range(L):
                sc = beta[s_, h] * (x @ Q[s_, h].T + qb[s_, h]) @ (x @ K[s_, h].T + kb[s_, h]).T
                P = np.exp(sc - sc.max(1, keepdims=True))
                P /= P.sum(1, keepdims=True)
                np.testing.assert_allclose(np.asarray(Ps[s_, h, k]), P, rtol=0, atol=1e-13)
                x = x + P @ (x @ V[s_, h].T + vb[s_, h])
                np.testing.assert_allclose(np.asarray(xs[s_, h, k + 1]), x, rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------- bad input


def _copy_minilm_like(folder, tensors, config):
    folder.mkdir()
    save_file(tensors, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_missing_and_misshaped_tensors_are_named(albert_dir, tmp_path):
    folder, _ = albert_dir
    t = load_file(str(folder / "model.safetensors"))
    cfg = json.loads((folder / "config.json").read_text())
    name = "encoder.albert_layer_groups.0.albert_layers.0.attention.key.weight"
    missing = {k: v for k, v in t.items() if k != name}
    with pytest.raises(InputError, match=r"missing tensor 'encoder\.albert_layer_groups\.0\.albert_layers\.0\."
                       r"attention\.key\.weight' \(expected shape \(20, 20\)\)"):
        read_checkpoint(_copy_minilm_like(tmp_path / "a", missing, cfg))
    bad = dict(t)
    bad["embeddings.word_embeddings.weight"] = np.zeros((24, 9))
    with pytest.raises(InputError, match=r"'embeddings\.word_embeddings\.weight'.*shape \(24, 9\), expected \(24, 8\)"):
        read_checkpoint(_copy_minilm_like(tmp_path / "b", bad, cfg))


def test_pickled_checkpoints_are_refused(tmp_path):
    with pytest.raises(InputError, match="pickled checkpoint.*safetensors"):
        load_model(tmp_path / "pytorch_model.bin")
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(ALBERT_CONFIG))
    (folder / "pytorch_model.bin").write_bytes(b"\x80\x04not unpickled")
    with pytest.raises(InputError, match="never loads.*save_file"):
        load_model(folder)


def test_bad_config_and_inputs(tmp_path, albert_dir):
    folder = tmp_path / "gpt"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(InputError, match="model_type.*'bert' or 'albert'"):
        load_model(folder)
    with pytest.raises(InputError, match="neither a model folder"):
        load_model(tmp_path / "nowhere")
    model = load_model(albert_dir[0])
    with pytest.raises(InputError, match=r"input_ids must lie in \[0, 24\)"):
        forward(model, np.array([2, 99, 3]))
    with pytest.raises(InputError, match="at most 32"):
        forward(model, np.full(40, 4))
