"""A model folder is a boundary: sizes in config.json are bounded and match the headers, only
files inside the folder (or its Hugging Face cache's blobs/) are read, every malformed file is
an InputError naming it, and no length is read before it is checked against the file size."""

import json
import re
import struct
import time

import numpy as np
import pytest
from safetensors.numpy import save_file
from tokenizers import Tokenizer, normalizers, pre_tokenizers
from tokenizers.models import WordLevel

from attnflow import InputError
from attnflow.models import load_tokenizer, read_checkpoint, read_config, resolve_model_path, tokenize
from model_fixtures import ALBERT_CONFIG, BERT_CONFIG, WORDS, write_albert, write_bert


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bert")
    return folder, write_bert(folder)


def _folder(tmp_path, tensors, config=BERT_CONFIG, name="m"):
    folder = tmp_path / name
    folder.mkdir()
    save_file(tensors, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def _config(tmp_path, **changes):
    folder = tmp_path / "c"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps({**BERT_CONFIG, **changes}))
    return folder


# ---------------------------------------------------------------- sizes in config.json


@pytest.mark.parametrize("key, value", [
    ("num_hidden_layers", 10**8), ("num_hidden_layers", 1e8), ("num_hidden_layers", "6"), ("num_hidden_layers", True),
    ("num_hidden_layers", 0), ("hidden_size", 10**6), ("num_attention_heads", -2), ("intermediate_size", 1.5),
    ("vocab_size", 2**30), ("max_position_embeddings", None), ("type_vocab_size", 0), ("type_vocab_size", "2"),
    ("layer_norm_eps", float("nan")), ("layer_norm_eps", True), ("layer_norm_eps", "1e-12"),
])
def test_config_sizes_are_positive_bounded_integers(tmp_path, key, value):
    folder = _config(tmp_path, **{key: value})
    start = time.perf_counter()
    match = rf"'{key}' in .*config\.json must be a positive .*got {re.escape(repr(value))}"
    with pytest.raises(InputError, match=match):
        read_checkpoint(folder)
    assert time.perf_counter() - start < 5


@pytest.mark.parametrize("changes, match", [
    (dict(pad_token_id=len(WORDS)), r"'pad_token_id' in .*config\.json must be a token id in \[0, 24\)"),
    (dict(pad_token_id="0"), "'pad_token_id'.*got '0'"),
    (dict(model_type="albert", embedding_size=8, num_hidden_groups="1"), "'num_hidden_groups'.*got '1'"),
    (dict(model_type="albert", embedding_size=8, inner_group_num="x"), "inner_group_num.*must be 1.*got 'x'"),
])
def test_other_config_values_are_checked(tmp_path, changes, match):
    with pytest.raises(InputError, match=match):
        read_config(_config(tmp_path, **changes))


def test_layer_counts_must_match_the_headers(bert, tmp_path):
    folder, tensors = bert
    for i, layers in enumerate((3, 1)):
        with pytest.raises(InputError, match=rf"'num_hidden_layers' in .*config\.json is {layers}, but the "
                                             r"checkpoint .* holds 2 parameter layers; set it to 2"):
            read_checkpoint(_folder(tmp_path, tensors, {**BERT_CONFIG, "num_hidden_layers": layers}, f"b{i}"))
    albert = tmp_path / "albert"
    write_albert(albert, tokenizer=False)
    (albert / "config.json").write_text(json.dumps({**ALBERT_CONFIG, "num_hidden_groups": 3}))
    with pytest.raises(InputError, match="'num_hidden_groups' .* is 3, but .* holds 1 parameter layers"):
        read_checkpoint(albert)


# ---------------------------------------------------------------- only files inside the folder


def _outside(tmp_path, bert_tensors):
    out = tmp_path / "outside"
    out.mkdir()
    save_file(bert_tensors, str(out / "model.safetensors"))
    (out / "config.json").write_text(json.dumps(BERT_CONFIG))
    return out


@pytest.mark.parametrize("shard", ["../outside/model.safetensors", "ABSOLUTE", "a/../../outside/model.safetensors"])
def test_index_names_outside_the_folder_are_refused(bert, tmp_path, shard):
    out = _outside(tmp_path, bert[1])
    shard = str(out / "model.safetensors") if shard == "ABSOLUTE" else shard
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(BERT_CONFIG))
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {k: shard for k in bert[1]}}))
    with pytest.raises(InputError, match=r"the file name .* in .*index\.json leaves the model folder"):
        read_checkpoint(folder)


@pytest.mark.parametrize("name", ["model.safetensors", "config.json", "tokenizer.json", "shards"])
def test_links_out_of_the_folder_are_refused(bert, tmp_path, name):
    src, tensors = bert
    out = _outside(tmp_path, tensors)
    (out / "tokenizer.json").write_bytes((src / "tokenizer.json").read_bytes())
    folder = tmp_path / "m"
    folder.mkdir()
    for f in ("model.safetensors", "config.json", "tokenizer.json"):
        if f != name:
            (folder / f).write_bytes((src / f).read_bytes())
    if name == "shards":  # a linked sub-folder named by the index
        (folder / "model.safetensors").unlink()
        (folder / "shards").symlink_to(out)
        (folder / "model.safetensors.index.json").write_text(
            json.dumps({"weight_map": {k: "shards/model.safetensors" for k in tensors}}))
    else:
        (folder / name).symlink_to(out / name)
    with pytest.raises(InputError, match=r"is a link to .*outside.*, outside the model folder"):
        read_checkpoint(folder) if name != "tokenizer.json" else load_tokenizer(folder, 16)


def test_links_inside_the_folder_and_sharded_folders_load(bert, tmp_path):
    src, tensors = bert
    folder = tmp_path / "m"
    (folder / "real").mkdir(parents=True)
    names = sorted(tensors)
    save_file({k: tensors[k] for k in names[:10]}, str(folder / "real" / "part-1.safetensors"))
    save_file({k: tensors[k] for k in names[10:]}, str(folder / "real" / "part-2.safetensors"))
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {
        k: f"real/part-{1 if i < 10 else 2}.safetensors" for i, k in enumerate(names)}}))
    (folder / "real" / "config.json").write_text(json.dumps(BERT_CONFIG))
    (folder / "config.json").symlink_to("real/config.json")
    ckpt = read_checkpoint(folder)
    np.testing.assert_array_equal(ckpt.tensors["layers.1.query_w"],
                                  tensors["encoder.layer.1.attention.self.query.weight"])
    save_file({k: tensors[k] for k in names[:11]}, str(folder / "real" / "part-1.safetensors"))  # one tensor twice
    with pytest.raises(InputError, match=r"tensor '.*' is stored both in .*part-1.* and in .*part-2.*keep one copy"):
        read_checkpoint(folder)


def _hf_cache(tmp_path, src):
    """models--org--tiny/{blobs/<sha>, snapshots/<rev>/<name> -> ../../blobs/<sha>, refs/main}."""
    repo = tmp_path / "hub" / "models--org--tiny"
    (repo / "blobs").mkdir(parents=True)
    (repo / "refs").mkdir()
    snap = repo / "snapshots" / "0123abcd"
    snap.mkdir(parents=True)
    for i, name in enumerate(("config.json", "model.safetensors", "tokenizer.json")):
        (repo / "blobs" / f"{i:040x}").write_bytes((src / name).read_bytes())
        (snap / name).symlink_to(f"../../blobs/{i:040x}")
    (repo / "refs" / "main").write_text("0123abcd")
    return repo, snap


def test_hugging_face_cache_snapshots_load(bert, tmp_path):
    src, tensors = bert
    repo, snap = _hf_cache(tmp_path, src)
    ckpt = read_checkpoint(snap)
    assert ckpt.config.num_layers == 2
    np.testing.assert_array_equal(ckpt.tensors["embeddings.word"], tensors["embeddings.word_embeddings.weight"])
    assert tokenize(load_tokenizer(snap, 16), "tokens are particles").input_ids.tolist() == [2, 4, 5, 6, 3]
    (snap / "config.json").unlink()
    (snap / "config.json").symlink_to("../../refs/main")  # inside the cache, but not in blobs/
    with pytest.raises(InputError, match="is a link to .*refs/main, outside the model folder"):
        read_checkpoint(snap)


# ---------------------------------------------------------------- malformed files


@pytest.mark.parametrize("content, match", [
    (b"{not json", r"config\.json is not valid JSON"),
    (b"[1, 2]", r"config\.json must hold a JSON object .*got a JSON array"),
    (b'"bert"', "got a JSON string"),
    ('{"model_type": "b\u00e9rt"}'.encode("latin-1"), r"config\.json is not UTF-8 text \(byte 17"),
    (b"[" * 100000 + b"]" * 100000, r"config\.json is not valid JSON"),
])
def test_malformed_config_json(tmp_path, content, match):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_bytes(content)
    with pytest.raises(InputError, match=match):
        read_config(folder)


def test_oversized_json_is_refused_before_reading(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    with open(folder / "config.json", "wb") as fh:
        fh.truncate(2**30)  # a sparse gigabyte: reading it would take long
    with pytest.raises(InputError, match=r"config\.json holds 1\.0 GiB, more than the 16\.0 MiB"):
        read_config(folder)


@pytest.mark.parametrize("content, match", [
    (b"{", "EOF while parsing"), (b"[]", "invalid type"), (b"{}", "Model missing"),
    (b'{"model": 5}', "did not match"), (b"\xff\xfe{}", r"not UTF-8 text \(byte 0"),
])
def test_malformed_tokenizer_json(tmp_path, content, match):
    (tmp_path / "tokenizer.json").write_bytes(content)
    with pytest.raises(InputError, match=rf"tokenizer\.json .*{match}"):
        load_tokenizer(tmp_path, 16)


def test_tokenizer_arguments_and_empty_encodings(bert, tmp_path):
    with pytest.raises(InputError, match="max_length must be a positive integer.*got 0"):
        load_tokenizer(bert[0], 0)
    tok = Tokenizer(WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    tok.normalizer = normalizers.Replace("x", "")
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(tmp_path / "tokenizer.json"))
    with pytest.raises(InputError, match="the text 'xx' gives no tokens"):
        tokenize(load_tokenizer(tmp_path, 16), "xx")
    with pytest.raises(InputError, match="the model must be a folder path.*got int"):
        resolve_model_path(5)


def _corrupt(path):
    """Files that break one safetensors rule each (name -> bytes), from a valid one."""
    good = path.read_bytes()
    n = struct.unpack("<Q", good[:8])[0]
    header = json.loads(good[8:8 + n])
    name = "embeddings.LayerNorm.bias"
    entry = header[name]

    def with_entry(**change):
        h = json.dumps({**header, name: {**entry, **change}}).encode()
        return struct.pack("<Q", len(h)) + h + good[8 + n:]

    begin, end = entry["data_offsets"]
    return {
        "empty": b"",
        "garbage": bytes(np.random.default_rng(0).integers(0, 256, 200, dtype=np.uint8)),
        "huge length": struct.pack("<Q", 10**15) + good[8:],
        "truncated": good[: len(good) // 2],
        "header not json": struct.pack("<Q", 6) + b"{oops}" + good[8 + n:],
        "header list": struct.pack("<Q", 2) + b"[]",
        "shape vs offsets": with_entry(shape=[9]),
        "offsets beyond": with_entry(data_offsets=[begin, len(good)]),
        "negative shape": with_entry(shape=[-8]),
        "entry not object": with_entry(dtype=None),
    }


@pytest.mark.parametrize("case", ["empty", "garbage", "huge length", "truncated", "header not json", "header list",
                                  "shape vs offsets", "offsets beyond", "negative shape", "entry not object"])
def test_malformed_safetensors(bert, tmp_path, case):
    src, tensors = bert
    folder = _folder(tmp_path, tensors)
    (folder / "model.safetensors").write_bytes(_corrupt(src / "model.safetensors")[case])
    start = time.perf_counter()
    with pytest.raises(InputError, match=r"model\.safetensors (is not a safetensors file|has a safetensors header "
                                         r"that is not|declares tensor).*download it again"):
        read_checkpoint(folder)
    assert time.perf_counter() - start < 5


def test_tensors_of_the_wrong_dtype_or_shape_and_missing_ones(bert, tmp_path):
    _, tensors = bert
    name = "encoder.layer.0.attention.self.key.weight"
    with pytest.raises(InputError, match=rf"tensor '{name}' .* has dtype I32; a float dtype \(F16, F32, F64\)"):
        read_checkpoint(_folder(tmp_path, {**tensors, name: tensors[name].astype(np.int32)}, name="i32"))
    with pytest.raises(InputError, match=rf"tensor '{name}' .* has shape \(8, 4\), expected \(8, 8\)"):
        read_checkpoint(_folder(tmp_path, {**tensors, name: tensors[name][:, :4].copy()}, name="shape"))
    with pytest.raises(InputError, match=rf"missing tensor '{name}'"):
        read_checkpoint(_folder(tmp_path, {k: v for k, v in tensors.items() if k != name}, name="missing"))


@pytest.mark.parametrize("index, match", [
    ({"weight_map": ["model.safetensors"]}, r"'weight_map' in .*index\.json must be a non-empty JSON object"),
    ({"weight_map": {"a": 1}}, "'weight_map' .* mapping tensor names to shard file names"),
    ({"weight_map": {}}, "'weight_map' .* non-empty"),
    ({"metadata": {}}, r"'weight_map' .* got null"),
    ([], r"index\.json must hold a JSON object"),
    ({"weight_map": {"a": "gone.safetensors"}}, r"the shard .*gone\.safetensors listed .* is missing"),
])
def test_malformed_shard_index(tmp_path, index, match):
    folder = _config(tmp_path)
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(InputError, match=match):
        read_checkpoint(folder)


def test_memory_is_checked_before_the_tensors_are_read(bert, monkeypatch):
    monkeypatch.setenv("ATTNFLOW_MEMORY_LIMIT", "1000")
    with pytest.raises(InputError, match="loading the checkpoint in .* needs about .*use a smaller model"):
        read_checkpoint(bert[0])
