r"""Per-head weights of a real model in the paper's convention (SPEC section 5), and the
assumption table.

For head h of a layer with ``nn.Linear`` weights :math:`W_Q, W_K, W_V` (d, d), :math:`W_O` (d, d)
and biases, rows :math:`r_h = [h d_k, (h+1) d_k)`:

.. math::
    Q_h = W_Q[r_h],\ K_h = W_K[r_h]\ (d_k\times d),\quad \beta = 1/\sqrt{d_k},\quad
    V_h = W_O[:, r_h]\, W_V[r_h]\ (d\times d,\ \mathrm{rank}\ d_k),\\
    b_{q,h} = b_Q[r_h],\ b_{k,h} = b_K[r_h],\quad b_{v,h} = W_O[:, r_h]\, b_V[r_h]\ (\in\mathbb R^d),

so that the layer's self-attention output is, exactly,

.. math:: a_i = \sum_h \sum_j P^h_{ij}\,(V_h x_j + b_{v,h}) + b_O,\qquad
          P^h_{ij} = \mathrm{softmax}_j\,\beta\langle Q_h x_i + b_{q,h}, K_h x_j + b_{k,h}\rangle,

with the output bias :math:`b_O` a layer-level constant (``LayerParams.out_b``). Tokens act at
LayerNorm scale (:math:`|x| \approx \sqrt{d}` times the LayerNorm gain), not on the unit sphere.
"""

from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from ..fields import build_field
from ..errors import InputError
from ..spectral import check_good_triple, paranormal_split
from .._weights import AttentionWeights
from ._encoder import TransformerModel

__all__ = ["head_factors", "head_weights", "head_assumptions", "symmetric_part_spectrum", "multihead_attention", "HeadAssumptions", "assumption_table", "ginibre_baseline",
           "format_table"]


def head_factors(model: TransformerModel, dtype=None):
    r"""Per-head factors :math:`W_O[:, r_h]` (S, H, d, d_k) and :math:`W_V[r_h]` (S, H, d_k, d), with
    :math:`V_h = W_O[:, r_h] W_V[r_h]`.

    Example:
        >>> from attnflow.models import load_model, head_factors
        >>> wo, wv = head_factors(load_model())
        >>> wo.shape, wv.shape
        ((6, 12, 384, 32), (6, 12, 32, 384))
    """
    cfg = model.config
    S, H, dk, d = cfg.num_param_layers, cfg.num_heads, cfg.head_dim, cfg.hidden_size
    p = model.layers if dtype is None else jax.tree_util.tree_map(lambda a: a.astype(dtype), model.layers)
    wo = p.out_w.reshape(S, d, H, dk).transpose(0, 2, 1, 3)
    return wo, p.value_w.reshape(S, H, dk, d)


def head_weights(model: TransformerModel, dtype=None) -> AttentionWeights:
    r"""Every head of every parameter layer as one ``AttentionWeights`` with axes
    ("layer", "head"): Q, K (S, H, d_k, d), V (S, H, d, d), beta = 1/sqrt(d_k), biases
    q_bias, k_bias (S, H, d_k) and v_bias (S, H, d). S is the number of distinct parameter
    layers (L for BERT, 1 for ALBERT, whose layers share it).

    Example:
        >>> from attnflow.models import load_model, head_weights
        >>> w = head_weights(load_model())
        >>> w.axes, w.Q.shape, w.V.shape, w.v_bias.shape, round(float(w.beta[0, 0]), 6)
        (('layer', 'head'), (6, 12, 32, 384), (6, 12, 384, 384), (6, 12, 384), 0.176777)
    """
    cfg = model.config
    S, H, dk, d = cfg.num_param_layers, cfg.num_heads, cfg.head_dim, cfg.hidden_size
    p = model.layers if dtype is None else jax.tree_util.tree_map(lambda a: a.astype(dtype), model.layers)
    wo, wv = head_factors(model, dtype)
    rows = lambda w: w.reshape(S, H, dk, d)  # W[r_h] for every head
    V = jnp.einsum("shik,shkj->shij", wo, wv)
    v_bias = jnp.einsum("shik,shk->shi", wo, p.value_b.reshape(S, H, dk))
    return AttentionWeights(
        rows(p.query_w), rows(p.key_w), V, jnp.asarray(1.0 / math.sqrt(dk), p.query_w.dtype),
        q_bias=p.query_b.reshape(S, H, dk), k_bias=p.key_b.reshape(S, H, dk), v_bias=v_bias,
        axes=("layer", "head"),
    )


def multihead_attention(weights: AttentionWeights, x: Float[Array, "n d"], out_bias=None) -> Float[Array, "n d"]:
    r"""The multi-head attention field :math:`\sum_h \sum_j P^h_{ij}(V_h x_j + b_{v,h}) (+ b_O)` of a
    stack of heads (axes ("head",)): the vector field of the registry's ``multihead`` field
    (:class:`attnflow.AttentionFlow`) plus b_O.

    With the per-head weights of a layer and its ``out_b`` this is that layer's self-attention
    output (see the module docstring).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from attnflow.models import load_model, head_weights, multihead_attention, self_attention
        >>> m = load_model()
        >>> x = jax.random.normal(jax.random.key(0), (5, 384))
        >>> a = multihead_attention(head_weights(m).layer(0), x, m.layer(0).out_b)
        >>> b, _ = self_attention(m.layer(0), x, 12)
        >>> bool(jnp.allclose(a, b, atol=1e-4))
        True
    """
    out = build_field("multihead", weights, attention_impl="dense").vector_field(0.0, x, None)
    return out if out_bias is None else out + out_bias


@dataclass(frozen=True)
class HeadAssumptions:
    r"""One row of the assumption table (layer and head counted from 0).

    ``qk_value`` is :math:`\beta\langle Q_h\varphi_1, K_h\varphi_1\rangle` (NaN when
    :math:`\lambda_1` is complex); ``gap`` is :math:`\mathrm{Re}\,\lambda_1 - |\lambda_2|`;
    ``sym_min_eig``/``sym_max_eig`` bound the spectrum of the symmetric part of
    :math:`\beta Q_h^T K_h`.
    """

    layer: int
    head: int
    lambda1_re: float
    lambda1_im: float
    abs_lambda2: float
    gap: float
    cond1: bool  # Def 4.1(1)
    qk_value: float
    cond2: bool  # Def 4.1(2)
    good: bool
    paranormal: bool
    sym_min_eig: float
    sym_max_eig: float
    qk_positive: bool  # symmetric part of Q^T K positive definite

    @property
    def status(self) -> str:
        """'good' (Def 4.1 holds), 'cond1' (only (1) holds), 'real<0' or 'complex'."""
        if self.good:
            return "good"
        if self.cond1:
            return "cond1"
        return "complex" if self.lambda1_im != 0.0 else "real<0"


def symmetric_part_spectrum(Q, K) -> np.ndarray:
    r"""Eigenvalues (ascending) of the symmetric part :math:`S = (Q^T K + K^T Q)/2` (d x d) for
    Q, K of shape (m, d), in O(d m^2) work: with :math:`B = [Q; K]` (2m x d) and
    :math:`C = \tfrac12\begin{pmatrix}0&I\\I&0\end{pmatrix}`, :math:`S = B^T C B`, whose non-zero
    eigenvalues are those of :math:`G^{1/2} C G^{1/2}` with the Gram matrix :math:`G = B B^T`
    (2m x 2m); the other :math:`d - 2m` eigenvalues are 0 when :math:`d > 2m`.

    Example:
        >>> import numpy as np
        >>> from attnflow.models._heads import symmetric_part_spectrum
        >>> rng = np.random.default_rng(0); Q, K = rng.normal(size=(2, 2, 7))
        >>> ref = np.linalg.eigvalsh((Q.T @ K + K.T @ Q) / 2)
        >>> bool(np.allclose(symmetric_part_spectrum(Q, K), ref))
        True
    """
    Q, K = np.asarray(Q, np.float64), np.asarray(K, np.float64)
    m, d = Q.shape
    if d <= 2 * m:
        return np.linalg.eigvalsh(0.5 * (Q.T @ K + K.T @ Q))
    B = np.concatenate([Q, K])
    g, W = np.linalg.eigh(B @ B.T)
    root = (W * np.sqrt(np.clip(g, 0.0, None))) @ W.T
    C = 0.5 * np.block([[np.zeros((m, m)), np.eye(m)], [np.eye(m), np.zeros((m, m))]])
    ev = np.linalg.eigvalsh(root @ C @ root)
    return np.sort(np.concatenate([ev, np.zeros(d - 2 * m)]))


def head_assumptions(Q, K, Wo, Wv, beta: float, layer: int = 0, head: int = 0) -> HeadAssumptions:
    r"""The assumption-table row of one head :math:`(Q_h, K_h, V_h = W_O W_V)` (float64, host).

    The spectrum of :math:`V_h` (d x d, rank :math:`d_k`) is computed through the reduced triple
    :math:`M = W_V W_O` (:math:`d_k\times d_k`), :math:`Q' = Q_h W_O`, :math:`K' = K_h W_O`:
    the non-zero eigenvalues of :math:`V_h` are those of M (the other :math:`d - d_k` are 0),
    :math:`M u = \lambda u \Rightarrow V_h (W_O u) = \lambda W_O u`, and
    :math:`\langle Q'u, K'u\rangle = \langle Q_h\varphi, K_h\varphi\rangle` for
    :math:`\varphi = W_O u`; V_h is paranormal iff M is (the zero eigenvalues lie in G). So
    Def 4.1 and 5.1 are decided by :func:`~attnflow.spectral.check_good_triple` and
    :func:`~attnflow.spectral.paranormal_split` on :math:`d_k\times d_k` matrices (d_k^3 instead of
    d^3 work); ``qk_value`` is reported for the unit vector :math:`\varphi/|\varphi|` of
    :math:`\mathbb R^d` and includes :math:`\beta`. Requires :math:`W_O` of full column rank.

    Example:
        >>> import numpy as np
        >>> from attnflow.models import head_assumptions
        >>> Wo = np.vstack([np.eye(2), np.zeros((1, 2))]); Wv = np.diag([2.0, 0.5]) @ Wo.T
        >>> r = head_assumptions(Wo.T, Wo.T, Wo, Wv, beta=1.0)
        >>> r.lambda1_re, r.abs_lambda2, r.good, r.qk_value
        (2.0, 0.5, True, 1.0)
    """
    Q, K, Wo, Wv = (np.asarray(a, np.float64) for a in (Q, K, Wo, Wv))
    d, dk = Wo.shape
    c = check_good_triple(beta * Q @ Wo, K @ Wo, Wv @ Wo)
    lam = c.eig.eigenvalues
    if d > dk:
        lam = np.concatenate([lam, np.zeros(d - dk)])
    qk = float(c.qk_value)
    if c.condition1 or np.isfinite(qk):
        qk = qk / float(np.sum((Wo @ c.eig.phi) ** 2)) if np.isrealobj(c.eig.phi) else qk
    ev = symmetric_part_spectrum(beta * Q, K)
    real = abs(c.lambda1.imag) <= 1e-10 * max(1.0, abs(c.lambda1))
    return HeadAssumptions(
        layer=int(layer), head=int(head), lambda1_re=float(c.lambda1.real),
        lambda1_im=0.0 if real else float(c.lambda1.imag),
        abs_lambda2=float(abs(lam[1])) if lam.size > 1 else 0.0, gap=float(c.gap), cond1=c.condition1,
        qk_value=qk, cond2=c.condition2, good=c.good,
        paranormal=bool(paranormal_split(Wv @ Wo).paranormal) if c.condition1 else False,
        sym_min_eig=float(ev[0]), sym_max_eig=float(ev[-1]), qk_positive=bool(ev[0] > 0),
    )


def assumption_table(model: TransformerModel, layers=None) -> list[HeadAssumptions]:
    r"""Definition 4.1 (1) and (2) with margins, Definition 5.1 (paranormality) and positivity
    of the symmetric part of :math:`\beta Q_h^T K_h`, for every head of the given parameter
    layers (default all), with :func:`head_assumptions`.

    Example:
        >>> from attnflow.models import load_model, assumption_table
        >>> rows = assumption_table(load_model(), layers=[0])
        >>> len(rows), sum(r.good for r in rows), sum(r.cond1 for r in rows)
        (12, 0, 5)
    """
    cfg = model.config
    wo, wv = (np.asarray(a, np.float64) for a in head_factors(model))
    w = head_weights(model)
    Q, K = np.asarray(w.Q, np.float64), np.asarray(w.K, np.float64)
    beta = 1.0 / math.sqrt(cfg.head_dim)
    layers = range(cfg.num_param_layers) if layers is None else list(layers)
    if any(not (isinstance(s, int) and 0 <= s < cfg.num_param_layers) for s in layers):
        raise InputError(f"layers must be parameter-layer indices in [0, {cfg.num_param_layers}), got {layers}.")
    return [head_assumptions(Q[s, h], K[s, h], wo[s, h], wv[s, h], beta, s, h)
            for s in layers for h in range(cfg.num_heads)]


@functools.lru_cache(maxsize=8)
def ginibre_baseline(size: int, samples: int = 2000, seed: int = 0) -> dict:
    r"""Fraction of real Ginibre matrices of this size whose eigenvalue of largest modulus is
    real, positive and simple (Def 4.1(1)), estimated from ``samples`` seeded draws, with a
    95% Wilson interval. For a head, the size is :math:`d_k`: the non-zero spectrum of
    :math:`V_h = W_O[:, r_h] W_V[r_h]` is that of the :math:`d_k\times d_k` matrix
    :math:`W_V[r_h] W_O[:, r_h]`.

    Example:
        >>> from attnflow.models import ginibre_baseline
        >>> b = ginibre_baseline(2, samples=4000)   # exactly 2^(-1/2) / 2 for d = 2
        >>> bool(abs(b["fraction"] - 2 ** -1.5) < 0.02)
        True
    """
    from ..spectral import eigen_stats
    from ..stats import wilson_interval

    rng = np.random.default_rng(seed)
    V = rng.standard_normal((samples, size, size))
    with jax.enable_x64(True):
        k = int(np.asarray(eigen_stats(jnp.asarray(V, jnp.float64)).cond1).sum())
    lo, hi = wilson_interval(k, samples, 0.95, z=1.959963984540054)  # scipy's rounding of the 0.975 quantile
    return {"size": size, "samples": samples, "seed": seed, "fraction": k / samples, "ci95": [lo, hi]}


def format_table(rows: list[HeadAssumptions]) -> str:
    """The assumption table as Markdown (layer and head counted from 0; lambda_1 of largest modulus).

    Example:
        >>> from attnflow.models import HeadAssumptions, format_table
        >>> r = HeadAssumptions(0, 1, 1.5, 0.0, 0.5, 1.0, True, 0.2, True, True, False, -1.0, 2.0, False)
        >>> format_table([r]).splitlines()[2].startswith("| 0 | 1 | 1.5 |")
        True
    """
    head = ("| layer | head | lambda_1 | abs(lambda_2) | gap | Def 4.1(1) | beta<Q phi, K phi> | Def 4.1(2) "
            "| good triple | paranormal | sym(Q^T K) min / max eig | Q^T K > 0 |")
    lines = [head, "|" + "---|" * 12]
    yes = lambda b: "yes" if b else "no"
    for r in rows:
        lam = f"{r.lambda1_re:.4g}" if r.lambda1_im == 0.0 else f"{r.lambda1_re:.4g}{r.lambda1_im:+.4g}i"
        lines.append(f"| {r.layer} | {r.head} | {lam} | {r.abs_lambda2:.4g} | {r.gap:.3g} | {yes(r.cond1)} | "
                     f"{r.qk_value:.4g} | {yes(r.cond2)} | {yes(r.good)} | {yes(r.paranormal)} | "
                     f"{r.sym_min_eig:.3g} / {r.sym_max_eig:.3g} | {yes(r.qk_positive)} |")
    return "\n".join(lines)


def table_records(rows: list[HeadAssumptions]) -> list[dict]:
    """Rows as plain dicts (for JSON/CSV), with the status.

    Example:
        >>> from attnflow.models import HeadAssumptions, table_records
        >>> r = HeadAssumptions(0, 1, 1.5, 0.0, 0.5, 1.0, True, -0.2, False, False, True, -1.0, 2.0, False)
        >>> table_records([r])[0]["status"]
        'cond1'
    """
    return [{**asdict(r), "status": r.status} for r in rows]
