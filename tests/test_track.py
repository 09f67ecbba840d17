"""``attnflow track`` and ``attnflow heads``: the run folder, its numbers, resuming, bad input."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnflow import InputError
from attnflow.cli.main import main
from attnflow.models import forward, load_model, load_tokenizer, tokenize, track
from attnflow.models._layerwise import token_stats
from model_fixtures import write_albert

SENTENCES = ["Tokens are particles .", "Layers are time and attention is the interaction .",
             "Clusters emerge ."]


@pytest.fixture(scope="module")
def albert(tmp_path_factory):
    folder = tmp_path_factory.mktemp("albert_track")
    write_albert(folder, dtype=np.float32)
    return folder


def test_track_default_model_single_sentence(tmp_path, capsys):
    """The built-in MiniLM through the CLI: forward.npz (float32, the documented shapes) equals the
    forward pass; the report, summary, figures and provenance are there."""
    out = tmp_path / "run"
    text = "Attention is all you need."
    assert main(["track", text, "--out", str(out), "--no-progress"]) == 0
    assert "report:" in capsys.readouterr().out
    z = np.load(out / "forward.npz")
    n = len(z["input_ids"])
    assert z["hidden_states"].shape == (7, n, 384) and z["attentions"].shape == (6, 12, n, n)
    assert z["hidden_states"].dtype == np.float32 and z["attentions"].dtype == np.float32
    model = load_model()
    ids = tokenize(load_tokenizer(model.source, 512), text).input_ids
    np.testing.assert_array_equal(z["input_ids"], ids)
    tokens = np.load(out / "forward.npz", allow_pickle=False)["tokens"]  # token strings, no pickle
    assert tokens.dtype.kind == "U" and tokens.shape == (n,)
    assert tokens.tolist() == list(tokenize(load_tokenizer(model.source, 512), text).tokens)
    ref = forward(model, ids)
    np.testing.assert_allclose(z["hidden_states"], np.asarray(ref.hidden_states), rtol=0, atol=1e-5)
    np.testing.assert_allclose(z["attentions"].sum(-1), 1.0, atol=1e-5)
    s = json.loads((out / "summary.json").read_text())
    assert s["def41"]["heads"] == 72 and len(s["assumption_table"]) == 72
    assert s["def41"]["cond1"] == sum(r["cond1"] for r in s["assumption_table"])
    for f in s["figures"]:
        assert (out / f).stat().st_size > 1000
    report = (out / "report.md").read_text()
    assert report.startswith("# attnflow track") and "| 0 | 9 |" in report
    assert json.loads((out / "provenance.json").read_text())["versions"]["jax"]


def test_track_multi_sentence_albert_and_resume(albert, tmp_path, capsys):
    """Three sentences on the tiny ALBERT: per-sentence records, aggregates equal the mean of the
    records, the observables recomputed from the stored arrays, and an identical rerun resumes
    (records untouched) while other settings (another config) are refused."""
    texts = tmp_path / "sentences.txt"
    texts.write_text("\n".join(SENTENCES) + "\n\n")
    out = tmp_path / "run"
    s = track(str(texts), out, model=albert, progress=False)
    assert s["num_sentences"] == 3 and s["model"]["family"] == "albert" and s["model"]["parameter_layers"] == 1
    assert s["selected_head"]["layer"] == 0 and s["selected_head"]["head"] == 0  # the good head, largest gap
    recs = [dict(np.load(out / "sentences" / f"{i:05d}.npz")) for i in range(3)]
    for r in recs:
        r.pop("__meta__")  # the stored identity and checksum
    lens = [len(r["input_ids"]) for r in recs]
    assert lens == [6, 11, 5]  # [CLS] words [SEP]
    np.testing.assert_allclose(s["real"]["mean_cos_mean"], np.mean([r["mean_cos"] for r in recs], axis=0))
    for r in recs:
        with jax.enable_x64(True):  # as the job computes them
            c, m = token_stats(jnp.asarray(r["hidden_states"], jnp.float64), 0.2)
        np.testing.assert_array_equal(np.asarray(c), r["clusters"])
        assert r["ideal_clusters"].shape == (1, 5, 4) and r["ideal_selected_attentions"].shape[0] == 3
        # the idealised run starts from the model's own embedding output
        np.testing.assert_allclose(r["ideal_selected_tokens"][0], r["hidden_states"][0], rtol=0, atol=1e-6)
    stamp = [(out / "sentences" / f"{i:05d}.npz").stat().st_mtime_ns for i in range(3)]
    s2 = track(str(texts), out, model=albert, progress=False)
    assert [(out / "sentences" / f"{i:05d}.npz").stat().st_mtime_ns for i in range(3)] == stamp
    assert s2["real"] == s["real"]
    # a stored sentence replaced by another one's is never used: it is analysed again
    sent = out / "sentences"
    (sent / "00001.npz").write_bytes((sent / "00000.npz").read_bytes())
    capsys.readouterr()
    s3 = track(str(texts), out, model=albert, progress=False)
    assert "00001.npz" in capsys.readouterr().err and (sent / "00001.npz.damaged").exists()
    assert s3["real"] == s["real"]
    with pytest.raises(InputError, match="another config"):
        track(str(texts), out, model=albert, progress=False, cluster_tol=0.3)


def test_heads_command_and_bad_input(albert, tmp_path, capsys):
    assert main(["heads", "--model", str(albert)]) == 0
    printed = capsys.readouterr().out
    assert "Def 4.1(1): 3 of 5 heads; good triples: 2" in printed
    assert main(["heads", "--model", str(albert), "--layer", "3"]) == 2  # one sentence on stderr
    assert "--layer must lie in [0, 1)" in capsys.readouterr().err
    with pytest.raises(InputError, match="LAYER:HEAD"):
        track("Tokens are particles .", tmp_path / "a", model=albert, head="five", progress=False)
    with pytest.raises(InputError, match="outside this model"):
        track("Tokens are particles .", tmp_path / "b", model=albert, head="0:7", progress=False)
    with pytest.raises(InputError, match="does not exist"):
        track("sentencs.txt", tmp_path / "f", model=albert, progress=False)
    with pytest.raises(InputError, match="empty"):
        track("  ", tmp_path / "c", model=albert, progress=False)
    with pytest.raises(InputError, match="unknown track option"):
        track("Tokens .", tmp_path / "d", model=albert, progress=False, tolerance=0.1)
    with pytest.raises(InputError, match="cluster_tol"):
        track("Tokens .", tmp_path / "e", model=albert, progress=False, cluster_tol=5.0)


def test_padded_analysis_equals_unpadded(albert):
    """One compilation per length bucket: the sentence padded to 16 with masks gives the same
    observables as the unpadded run (float64 model: integers exactly, floats to 1e-9, i.e. rounding
    amplified by a few layers; the stored float32 arrays to float32 rounding)."""
    import jax

    from attnflow.models import head_weights
    from attnflow.models._layerwise import TRACK_DEFAULTS, analyse_sentence

    ids = np.array([2, 9, 10, 11, 12, 3])
    with jax.enable_x64(True):
        model = load_model(albert, dtype=jnp.float64)  # float64 forward: padding changes only rounding
        w = head_weights(model, jnp.float64)
        a = analyse_sentence(model, w, ids, (0, 0), {**TRACK_DEFAULTS, "pad_multiple": 1})
        b = analyse_sentence(model, w, ids, (0, 0), {**TRACK_DEFAULTS, "pad_multiple": 16})
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].shape == b[k].shape, k
        if a[k].dtype.kind in "biu":
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)
        else:
            tol = 1e-6 if a[k].dtype == np.float32 else 1e-9
            np.testing.assert_allclose(a[k], b[k], rtol=0, atol=tol, err_msg=k)
