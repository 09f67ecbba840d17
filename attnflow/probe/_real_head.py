r"""One trained attention head as a probe system (``[system] source = "minilm"``).

From a BERT-family checkpoint (default: the built-in all-MiniLM-L6-v2), head h of parameter
layer l in the paper's d-dimensional form (:func:`attnflow.models.head_weights`):
:math:`Q_h, K_h` (:math:`d_k\times d`), :math:`V_h = W_O[:, r_h] W_V[r_h]` (:math:`d\times d`,
rank :math:`d_k`), :math:`\beta = 1/\sqrt{d_k}`, and (with ``biases = true``) the biases
:math:`b_q, b_k, b_v`. The tokens x0 are the hidden states that enter layer l when the model
reads the config's sentence (``forward(...).hidden_states[l]``, [CLS] and [SEP] included): the
cloud this head really acts on, at LayerNorm scale.
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from ..errors import InputError
from ._config import Head

__all__ = ["RealHead", "load_real_head"]


class RealHead(NamedTuple):
    """A trained head and the token cloud it acts on."""

    Q: Float[Array, "dk d"]
    K: Float[Array, "dk d"]
    V: Float[Array, "d d"]
    beta: Float[Array, ""]
    biases: tuple | None  # (q_bias (dk,), k_bias (dk,), v_bias (d,)) or None
    x0: Float[Array, "n d"]
    tokens: tuple[str, ...]
    assumptions: dict  # the head's attnflow.models.HeadAssumptions row
    label: str


def load_real_head(head_cfg: Head) -> RealHead:
    """The head and token cloud named by a probe config's parsed ``[head]`` table (float64: call
    inside ``jax.enable_x64(True)``, as ``attnflow probe`` does).

    Example:
        >>> import jax
        >>> from attnflow.probe._config import Head
        >>> from attnflow.probe._real_head import load_real_head
        >>> with jax.enable_x64(True):
        ...     h = load_real_head(Head(model="", layer=3, head=9, text="Hello world", biases=False))
        >>> h.Q.shape, h.V.shape, h.x0.shape, h.tokens, h.assumptions["good"]
        ((32, 384), (384, 384), (4, 384), ('[CLS]', 'hello', 'world', '[SEP]'), True)
    """
    from dataclasses import asdict

    from ..models import forward, head_factors, head_weights, load_model, load_tokenizer, resolve_model_path, tokenize
    from ..models import head_assumptions

    model = load_model(head_cfg.model or None, dtype=jnp.float64)
    cfg = model.config
    layer, head = head_cfg.layer, head_cfg.head
    if not (isinstance(layer, int) and 0 <= layer < cfg.num_param_layers):
        raise InputError(f"head.layer must be a parameter-layer index in [0, {cfg.num_param_layers}), got {layer!r}.")
    if not (isinstance(head, int) and 0 <= head < cfg.num_heads):
        raise InputError(f"head.head must be a head index in [0, {cfg.num_heads}), got {head!r}.")
    w = head_weights(model).layer(layer).head(head)
    tok = tokenize(load_tokenizer(resolve_model_path(head_cfg.model or None), cfg.max_position), head_cfg.text)
    x0 = forward(model, jnp.asarray(tok.input_ids)).hidden_states[layer]
    wo, wv = head_factors(model, jnp.float64)
    row = head_assumptions(np.asarray(w.Q), np.asarray(w.K), np.asarray(wo[layer, head]), np.asarray(wv[layer, head]),
                           float(w.beta), layer, head)
    biases = (w.q_bias, w.k_bias, w.v_bias) if head_cfg.biases else None
    name = (head_cfg.model or "all-MiniLM-L6-v2").rstrip("/").split("/")[-1]
    return RealHead(Q=w.Q, K=w.K, V=w.V, beta=w.beta, biases=biases, x0=x0, tokens=tok.tokens,
                    assumptions=asdict(row), label=f"{name} layer {layer} head {head}")
