r"""A faithful JAX forward pass of a BERT-family or ALBERT encoder (post-LayerNorm).

With tokens as rows of ``x`` (n, d), ``nn.Linear`` weights W (out, in) acting as
:math:`y = x W^T + b`, H heads of width :math:`d_k = d / H`:

.. math::
    x^{(0)} &= \mathrm{LN}(E_{\rm word}[\mathrm{ids}] + E_{\rm pos}[0..n) + E_{\rm type}[\mathrm{types}])
              \quad(\text{ALBERT: then } x^{(0)} W_{\rm in}^T + b_{\rm in})\\
    P^{h} &= \mathrm{softmax}_{\rm rows}\big((x W_Q^{h\,T} + b_Q^h)(x W_K^{h\,T} + b_K^h)^T/\sqrt{d_k}
              \text{ on unmasked keys}\big)\\
    a &= \big[P^1 (x W_V^{1\,T} + b_V^1), \dots, P^H(\cdot)\big] W_O^T + b_O,\qquad
    y = \mathrm{LN}_1(x + a)\\
    x^{(l+1)} &= \mathrm{LN}_2\big(y + \sigma(y W_1^T + b_1) W_2^T + b_2\big)

(GELU exact for ``"gelu"``, the tanh form for ``"gelu_new"``). ALBERT applies one shared
parameter set at every layer; ``layer_groups`` maps layers to parameter sets and the stack is
run by ``lax.scan``.
"""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int

from ..kernels import softmax
from ..errors import InputError
from ._checkpoint import Checkpoint, ModelConfig, read_checkpoint

__all__ = ["Embeddings", "LayerParams", "TransformerModel", "ForwardOutput", "load_model", "forward",
           "self_attention", "layer_norm"]


class Embeddings(eqx.Module):
    """Word + position + token-type embeddings, LayerNorm, and ALBERT's projection to d_model."""

    word: Float[Array, "vocab e"]
    position: Float[Array, "pos e"]
    token_type: Float[Array, "types e"]
    ln_weight: Float[Array, " e"]
    ln_bias: Float[Array, " e"]
    proj_weight: Float[Array, "d e"] | None
    proj_bias: Float[Array, " d"] | None


class LayerParams(eqx.Module):
    """One encoder layer's parameters, or a stack of them (leading axis = parameter set).

    ``out_b`` is b_O, the attention output bias: a layer-level constant, added once after the
    heads are summed (it belongs to no head).
    """

    query_w: Float[Array, "*S d d"]
    query_b: Float[Array, "*S d"]
    key_w: Float[Array, "*S d d"]
    key_b: Float[Array, "*S d"]
    value_w: Float[Array, "*S d d"]
    value_b: Float[Array, "*S d"]
    out_w: Float[Array, "*S d d"]
    out_b: Float[Array, "*S d"]
    attn_ln_weight: Float[Array, "*S d"]
    attn_ln_bias: Float[Array, "*S d"]
    ffn_in_w: Float[Array, "*S i d"]
    ffn_in_b: Float[Array, "*S i"]
    ffn_out_w: Float[Array, "*S d i"]
    ffn_out_b: Float[Array, "*S d"]
    ffn_ln_weight: Float[Array, "*S d"]
    ffn_ln_bias: Float[Array, "*S d"]


class TransformerModel(eqx.Module):
    """A loaded encoder: config (static), embeddings, stacked layer parameters.

    ``layers`` has a leading axis of ``config.num_param_layers`` parameter sets; layer l of the
    forward pass uses set ``config.layer_groups[l]`` (all 0 for ALBERT).
    """

    config: ModelConfig = eqx.field(static=True)
    embeddings: Embeddings
    layers: LayerParams
    source: str = eqx.field(static=True, default="")

    @property
    def dtype(self):
        return self.layers.query_w.dtype

    def layer(self, i: int) -> LayerParams:
        """The parameters of parameter set ``i`` (unstacked).

        Example:
            >>> from attnflow.models import load_model
            >>> load_model().layer(5).ffn_in_w.shape
            (1536, 384)
        """
        return jax.tree_util.tree_map(lambda a: a[i], self.layers)


class ForwardOutput(eqx.Module):
    """``hidden_states`` (L+1, n, d): the embedding output then every layer's output;
    ``attentions`` (L, H, n, n): every head's attention matrix (rows = queries)."""

    hidden_states: Float[Array, "L1 n d"]
    attentions: Float[Array, "L H n n"]


def load_model(model=None, *, dtype=jnp.float32) -> TransformerModel:
    """Load a BERT/MiniLM/ALBERT folder (default: the built-in all-MiniLM-L6-v2) as JAX arrays
    of ``dtype`` (float32 by default; float64 inside ``jax.enable_x64(True)``).

    Example:
        >>> from attnflow.models import load_model
        >>> m = load_model()
        >>> m.config.family, m.layers.query_w.shape
        ('bert', (6, 384, 384))
    """
    if jnp.zeros((), dtype).dtype != jnp.dtype(dtype):
        raise InputError(f"load_model(dtype={jnp.dtype(dtype).name}) needs JAX's float64 mode: call it inside "
                         "`with jax.enable_x64(True):`.")
    ckpt = model if isinstance(model, Checkpoint) else read_checkpoint(model)
    t = {k: jnp.asarray(v, dtype) for k, v in ckpt.tensors.items()}
    cfg = ckpt.config
    emb = Embeddings(t["embeddings.word"], t["embeddings.position"], t["embeddings.token_type"],
                     t["embeddings.ln_weight"], t["embeddings.ln_bias"],
                     t.get("embeddings.proj_weight"), t.get("embeddings.proj_bias"))
    fields = [f for f in LayerParams.__dataclass_fields__]
    stacked = {f: jnp.stack([t[f"layers.{i}.{f}"] for i in range(cfg.num_param_layers)])
               for f in fields}
    return TransformerModel(cfg, emb, LayerParams(**stacked), source=str(ckpt.path))


def layer_norm(x: Float[Array, "n d"], weight, bias, eps: float) -> Float[Array, "n d"]:
    r""":math:`\mathrm{LN}(x)_i = w \odot (x_i - \bar x_i)/\sqrt{\mathrm{var}(x_i) + \epsilon} + b`
    over the feature axis (biased variance, as torch).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.models import layer_norm
        >>> y = layer_norm(jnp.array([[1.0, 3.0]]), jnp.ones(2), jnp.zeros(2), 0.0)
        >>> y.tolist()
        [[-1.0, 1.0]]
    """
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + eps) * weight + bias


def _activation(name: str):
    if name == "gelu":
        return lambda u: jax.nn.gelu(u, approximate=False)
    if name in ("gelu_new", "gelu_pytorch_tanh"):
        return lambda u: jax.nn.gelu(u, approximate=True)
    return jax.nn.relu


def embed(model: TransformerModel, input_ids: Int[Array, " n"], token_type_ids=None) -> Float[Array, "n d"]:
    """The embedding output x^(0): word + position + token-type embeddings, LayerNorm, then (ALBERT)
    the projection to d_model.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.models import load_model, embed
        >>> embed(load_model(), jnp.array([101, 102])).shape
        (2, 384)
    """
    e = model.embeddings
    n = input_ids.shape[0]
    types = jnp.zeros((n,), jnp.int32) if token_type_ids is None else token_type_ids
    x = e.word[input_ids] + e.position[:n] + e.token_type[types]
    x = layer_norm(x, e.ln_weight, e.ln_bias, model.config.layer_norm_eps)
    if e.proj_weight is not None:
        x = x @ e.proj_weight.T + e.proj_bias
    return x


def self_attention(
    p: LayerParams, x: Float[Array, "n d"], num_heads: int, key_mask: Bool[Array, " n"] | None = None
) -> tuple[Float[Array, "n d"], Float[Array, "H n n"]]:
    r"""The multi-head self-attention output :math:`a = [\dots, P^h v^h, \dots] W_O^T + b_O`
    (before the residual and LayerNorm) and the attention matrices :math:`P^h` (H, n, n).

    ``key_mask`` (n,): True for real tokens, False for padding (never attended to).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from attnflow.models import load_model, self_attention
        >>> a, P = self_attention(load_model().layer(0), jax.random.normal(jax.random.key(0), (4, 384)), 12)
        >>> a.shape, P.shape, bool(jnp.allclose(P.sum(-1), 1.0, atol=1e-6))
        ((4, 384), (12, 4, 4), True)
    """
    n, d = x.shape
    dk = d // num_heads
    split = lambda u: u.reshape(n, num_heads, dk).transpose(1, 0, 2)  # (H, n, dk)
    q = split(x @ p.query_w.T + p.query_b)
    k = split(x @ p.key_w.T + p.key_b)
    v = split(x @ p.value_w.T + p.value_b)
    s = jnp.einsum("hid,hjd->hij", q, k) * (1.0 / math.sqrt(dk))
    if key_mask is not None:
        s = jnp.where(key_mask[None, None, :], s, jnp.finfo(s.dtype).min)
    P = softmax(s, axis=-1)
    ctx = jnp.einsum("hij,hjd->ihd", P, v).reshape(n, d)
    return ctx @ p.out_w.T + p.out_b, P


def _encoder_layer(p: LayerParams, x, cfg: ModelConfig, key_mask=None):
    """One post-LN encoder layer (module docstring); returns (output, attention matrices (H, n, n))."""
    a, P = self_attention(p, x, cfg.num_heads, key_mask)
    y = layer_norm(x + a, p.attn_ln_weight, p.attn_ln_bias, cfg.layer_norm_eps)
    h = _activation(cfg.hidden_act)(y @ p.ffn_in_w.T + p.ffn_in_b) @ p.ffn_out_w.T + p.ffn_out_b
    return layer_norm(y + h, p.ffn_ln_weight, p.ffn_ln_bias, cfg.layer_norm_eps), P


@eqx.filter_jit
def _forward(model: TransformerModel, input_ids, token_type_ids, key_mask):
    cfg = model.config
    x0 = embed(model, input_ids, token_type_ids)

    def step(x, group):
        p = jax.tree_util.tree_map(lambda a: a[group], model.layers)
        x, P = _encoder_layer(p, x, cfg, key_mask)
        return x, (x, P)

    _, (xs, Ps) = jax.lax.scan(step, x0, jnp.asarray(cfg.layer_groups, jnp.int32))
    return ForwardOutput(jnp.concatenate([x0[None], xs]), Ps)


def forward(
    model: TransformerModel,
    input_ids: Int[Array, " n"],
    *,
    token_type_ids: Int[Array, " n"] | None = None,
    attention_mask: Bool[Array, " n"] | None = None,
) -> ForwardOutput:
    """Run the encoder on one sequence of token ids; every layer's hidden states and every
    head's attention matrix. ``attention_mask`` (n,) marks real tokens (False = padding).
    jit-compiled once per sequence length.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.models import load_model, forward
        >>> out = forward(load_model(), jnp.array([101, 7592, 2088, 102]))
        >>> out.hidden_states.shape, out.attentions.shape
        ((7, 4, 384), (6, 12, 4, 4))
    """
    cfg = model.config
    ids = np.asarray(input_ids)
    if ids.ndim != 1 or ids.size < 1 or ids.dtype.kind not in "iu":
        raise InputError(f"input_ids must be a non-empty 1-d array of integer token ids, got shape {ids.shape} "
                         f"and dtype {ids.dtype}.")
    if ids.size > cfg.max_position:
        raise InputError(f"input_ids holds {ids.size} tokens; this model takes at most {cfg.max_position}.")
    if ids.min() < 0 or ids.max() >= cfg.vocab_size:
        raise InputError(f"input_ids must lie in [0, {cfg.vocab_size}) (the vocabulary), got "
                         f"[{ids.min()}, {ids.max()}].")
    if token_type_ids is not None:
        tt = np.asarray(token_type_ids)
        if tt.shape != ids.shape or tt.min() < 0 or tt.max() >= cfg.type_vocab_size:
            raise InputError(f"token_type_ids must have shape {ids.shape} with values in "
                             f"[0, {cfg.type_vocab_size}).")
        token_type_ids = jnp.asarray(tt, jnp.int32)
    if attention_mask is not None:
        am = np.asarray(attention_mask, bool)
        if am.shape != ids.shape or not am.any():
            raise InputError(f"attention_mask must be a boolean array of shape {ids.shape} with at least one True.")
        attention_mask = jnp.asarray(am)
    return _forward(model, jnp.asarray(ids, jnp.int32), token_type_ids, attention_mask)
