r"""Tokens of a real model tracked layer by layer, next to the idealised dynamics of its heads.

Per sentence (all jnp, jit/vmap-able observables of :mod:`attnflow.observables`):

* the real forward pass: hidden states :math:`x^{(l)}` (L+1, n, d), attention matrices
  :math:`P^{l,h}` (L, H, n, n);
* per state: the number of clusters of the **normalised** tokens :math:`u_i = x_i/|x_i|` with
  a FIXED tolerance (two tokens are linked when :math:`|u_i - u_j| \le` ``cluster_tol``, default
  0.2, i.e. cosine :math:`\ge 0.98`; clusters are the connected components), and the mean
  pairwise cosine similarity :math:`\frac{2}{n(n-1)}\sum_{i<j}\langle u_i, u_j\rangle`;
* per attention matrix: numerical rank (singular values above ``rank_tol`` = 1e-3 times the
  largest, which is >= 1 for a row-stochastic P), Booleanness (max-norm distance to the nearest
  Boolean row-stochastic matrix, :math:`\max_i(1 - \max_j P_{ij})`), mean off-leader mass, and
  the leader tokens (columns that receive more than half of some row);
* the idealised dynamics of :mod:`attnflow.models._idealised` for EVERY head, started from the
  embedding output, for L layers, with the same observables.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float

from ..observables import directions, leaders, num_clusters, numerical_rank, off_leader_mass
from .._weights import AttentionWeights
from ._encoder import TransformerModel, forward
from ._heads import HeadAssumptions
from ._idealised import idealised_runs

__all__ = ["TRACK_DEFAULTS", "token_stats", "attention_stats", "analyse_sentence", "select_head", "forward_padded"]

TRACK_DEFAULTS = {
    "cluster_tol": 0.2,  # chord distance between normalised tokens (cosine >= 1 - 0.2^2/2 = 0.98)
    "rank_tol": 1e-3,  # singular values above 1e-3 * sigma_1 count
    "leader_threshold": 0.5,
    "pad_multiple": 16,  # sentences are padded (and masked) to a multiple of this: fewer compilations
}


def mean_pairwise_cosine(x: Float[Array, "n d"], valid: Bool[Array, " n"] | None = None) -> Float[Array, ""]:
    r"""Mean of :math:`\langle x_i/|x_i|, x_j/|x_j|\rangle` over pairs i < j of valid tokens
    (``valid`` (n,): False marks padding; 1 when fewer than two tokens are valid).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.models._layerwise import mean_pairwise_cosine
        >>> round(float(mean_pairwise_cosine(jnp.array([[1.0, 0.0], [0.0, 2.0], [3.0, 0.0]]))), 6)
        0.333333
    """
    valid = jnp.ones(x.shape[0], bool) if valid is None else valid
    u = jnp.where(valid[:, None], directions(x), 0.0)
    nv = jnp.sum(valid)
    total = jnp.sum(u @ u.T) - jnp.sum(u * u)
    return jnp.where(nv > 1, total / jnp.maximum(nv * (nv - 1), 1), 1.0)


@jax.jit
def token_stats(xs: Float[Array, "*T n d"], cluster_tol: float, valid: Bool[Array, " n"] | None = None):
    """(clusters, mean pairwise cosine) of the normalised tokens of every state in ``xs``,
    counting only ``valid`` tokens (padded rows are replaced by copies of token 0, which join
    its cluster at distance 0; token 0 must be valid).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.models._layerwise import token_stats
        >>> x = jnp.array([[[1.0, 0.0], [2.0, 0.01], [0.0, 1.0], [-1.0, 0.0]]])
        >>> c, m = token_stats(x, 0.2)
        >>> c.tolist(), token_stats(x, 0.2, jnp.array([True, True, True, False]))[0].tolist()
        ([3], [2])
    """
    valid = jnp.ones(xs.shape[-2], bool) if valid is None else valid
    lead = xs.shape[:-2]
    flat = xs.reshape((-1,) + xs.shape[-2:])

    def one(x):
        u = directions(x)
        u = jnp.where(valid[:, None], u, u[0])
        return num_clusters(u, cluster_tol, 1.0), mean_pairwise_cosine(x, valid)

    c, m = jax.vmap(one)(flat)
    return c.reshape(lead), m.reshape(lead)


@jax.jit
def attention_stats(Ps: Float[Array, "*T n n"], rank_tol: float, threshold: float,
                    valid: Bool[Array, " n"] | None = None):
    """(rank, Booleanness, mean off-leader mass, leader mask (..., n)) of every P in ``Ps``,
    restricted to the ``valid`` rows and columns (padded keys must carry no weight).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.models._layerwise import attention_stats
        >>> r, b, m, lead = attention_stats(jnp.array([[[0.9, 0.1], [0.8, 0.2]]]), 1e-3, 0.5)
        >>> r.tolist(), lead.tolist()
        ([2], [[True, False]])
    """
    valid = jnp.ones(Ps.shape[-1], bool) if valid is None else valid
    keep = valid[:, None] & valid[None, :]
    lead = Ps.shape[:-2]
    flat = jnp.where(keep, Ps.reshape((-1,) + Ps.shape[-2:]), 0.0)  # zero rows/columns add no rank

    def one(P):
        off = jnp.where(valid, off_leader_mass(P), 0.0)
        return (numerical_rank(P, rank_tol), jnp.max(off), jnp.sum(off) / jnp.sum(valid),
                leaders(P, threshold))

    r, b, m, ld = jax.vmap(one)(flat)
    return r.reshape(lead), b.reshape(lead), m.reshape(lead), ld.reshape(lead + (Ps.shape[-1],))


def pad_ids(input_ids: np.ndarray, multiple: int, max_length: int, pad_id: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Ids padded with ``pad_id`` to a multiple of ``multiple`` (at most ``max_length``), and the
    valid-token mask.

    Example:
        >>> import numpy as np
        >>> from attnflow.models._layerwise import pad_ids
        >>> ids, valid = pad_ids(np.array([101, 7, 102]), 4, 512)
        >>> ids.tolist(), valid.tolist()
        ([101, 7, 102, 0], [True, True, True, False])
    """
    n = len(input_ids)
    size = max(n, min(-(-n // multiple) * multiple, max_length))
    ids = np.full(size, pad_id, np.int32)
    ids[:n] = input_ids
    return ids, np.arange(size) < n


def forward_padded(model: TransformerModel, input_ids: np.ndarray, multiple: int = 16):
    """:func:`~attnflow.models.forward` on ids padded with the pad token to a multiple of
    ``multiple`` (padding masked out as keys, padded rows dropped): one compilation per
    length bucket. Same numbers as the unpadded pass (masked keys get weight exactly 0).

    Example:
        >>> import numpy as np
        >>> from attnflow.models import load_model
        >>> from attnflow.models._layerwise import forward_padded
        >>> out = forward_padded(load_model(), np.array([101, 7592, 102]))
        >>> out.hidden_states.shape, out.attentions.shape
        ((7, 3, 384), (6, 12, 3, 3))
    """
    n = len(input_ids)
    ids, valid = pad_ids(input_ids, multiple, model.config.max_position, model.config.pad_token_id)
    out = forward(model, ids, attention_mask=valid)
    return type(out)(out.hidden_states[:, :n], out.attentions[:, :, :n, :n])


@jax.jit
def _run_stats(xs, Ps, cluster_tol, rank_tol, threshold, valid):
    clusters, cos = token_stats(xs, cluster_tol, valid)
    rank, boolean, offl, _ = attention_stats(Ps, rank_tol, threshold, valid)
    return dict(clusters=clusters, mean_cos=cos, rank=rank, boolean=boolean, off_leader=offl)


def analyse_sentence(model: TransformerModel, weights64: AttentionWeights, input_ids: np.ndarray,
                     selected: tuple[int, int], cfg: dict) -> dict[str, np.ndarray]:
    """Everything ``attnflow track`` records for one sentence, as NumPy arrays.

    ``weights64``: :func:`~attnflow.models.head_weights` in float64 (call inside
    ``jax.enable_x64(True)``); ``selected`` = (parameter layer, head) whose idealised run is
    kept in full (tokens and attention matrices) for the side-by-side figure.

    Example:
        >>> import jax, jax.numpy as jnp, numpy as np
        >>> from attnflow.models import load_model, head_weights
        >>> from attnflow.models._layerwise import TRACK_DEFAULTS, analyse_sentence
        >>> m = load_model()
        >>> with jax.enable_x64(True):
        ...     rec = analyse_sentence(m, head_weights(m, jnp.float64), np.array([101, 7592, 102]), (3, 9),
        ...                            TRACK_DEFAULTS)
        >>> rec["attentions"].shape, rec["ideal_clusters"].shape, rec["ideal_selected_tokens"].shape
        ((6, 12, 3, 3), (6, 12, 7), (7, 3, 384))
    """
    L = model.config.num_layers
    n = len(input_ids)
    # everything runs at the padded length (one compilation per length bucket), padding masked
    ids, valid = pad_ids(np.asarray(input_ids), cfg["pad_multiple"], model.config.max_position,
                         model.config.pad_token_id)
    out = forward(model, ids, attention_mask=valid)
    valid = jnp.asarray(valid)
    hs, att = out.hidden_states.astype(jnp.float64), out.attentions.astype(jnp.float64)
    real = _run_stats(hs, att, cfg["cluster_tol"], cfg["rank_tol"], cfg["leader_threshold"], valid)
    *_, lead = attention_stats(att, cfg["rank_tol"], cfg["leader_threshold"], valid)
    xs, Ps, ok = idealised_runs(weights64, hs[0], L, mask=valid[None, :] & jnp.ones((len(ids), 1), bool))
    ideal = _run_stats(xs, Ps, cfg["cluster_tol"], cfg["rank_tol"], cfg["leader_threshold"], valid)
    ideal["finite"] = ok
    s, h = selected
    rec = {
        "input_ids": np.asarray(input_ids, np.int32),
        "hidden_states": np.asarray(out.hidden_states[:, :n], np.float32),
        "attentions": np.asarray(out.attentions[:, :, :n, :n], np.float32),
        "leaders": np.asarray(lead[..., :n]),
        "ideal_selected_tokens": np.asarray(xs[s, h, :, :n]),
        "ideal_selected_attentions": np.asarray(Ps[s, h, :, :n, :n]),
    }
    rec.update({k: np.asarray(v) for k, v in real.items()})
    rec.update({f"ideal_{k}": np.asarray(v) for k, v in ideal.items()})
    return rec


def select_head(rows: list[HeadAssumptions], choice: str = "auto") -> tuple[int, int]:
    """The head whose idealised dynamics is shown in full: ``"L:H"`` (parameter layer, head,
    from 0), or ``"auto"``: the good triple with the largest gap, else the Def 4.1(1) head with
    the largest gap, else the head with the largest Re lambda_1.

    Example:
        >>> from attnflow.models import HeadAssumptions
        >>> from attnflow.models._layerwise import select_head
        >>> mk = lambda l, h, lam, c1, good, gap: HeadAssumptions(l, h, lam, 0.0, 0.1, gap, c1, 0.1, good,
        ...     good, False, -1.0, 1.0, False)
        >>> select_head([mk(0, 0, 2.0, True, False, 1.0), mk(0, 1, 1.0, True, True, 0.5)])
        (0, 1)
    """
    from ..errors import InputError

    if choice != "auto":
        try:
            s, h = (int(p) for p in choice.split(":"))
        except ValueError:
            raise InputError(f"--head must be 'auto' or 'LAYER:HEAD' (counted from 0), got {choice!r}.") from None
        if not any(r.layer == s and r.head == h for r in rows):
            layers = max(r.layer for r in rows) + 1
            heads = max(r.head for r in rows) + 1
            raise InputError(f"--head {choice} is outside this model's {layers} parameter layer(s) x {heads} heads.")
        return s, h
    for key in (lambda r: r.good, lambda r: r.cond1):
        cands = [r for r in rows if key(r)]
        if cands:
            best = max(cands, key=lambda r: r.gap)
            return best.layer, best.head
    best = max(rows, key=lambda r: r.lambda1_re)
    return best.layer, best.head
