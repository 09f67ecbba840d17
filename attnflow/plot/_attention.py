r"""Heat maps of the attention matrix :math:`P(t)`, :math:`P_{ij} = \mathrm{softmax}_j \langle Q x_i, K x_j\rangle`.

In the clustered regimes the rows of :math:`P(t)` become (nearly) Boolean: row i puts its mass on
one leader column. Ordering the tokens by their leader in the final matrix makes that block
structure visible at every time.
"""

from __future__ import annotations

import numpy as np

from ._checks import Inputs
from ._style import new_figure
from ._trajectories import masked_note

__all__ = ["attention_maps", "leader_order"]


def leader_order(P_final) -> np.ndarray:
    """Token order grouping tokens by their leader: sort by argmax_j P_ij of the final matrix, then by index.

    Rows with no finite entry go last.

    Example:
        >>> import numpy as np
        >>> from attnflow.plot import leader_order
        >>> P = np.array([[0.1, 0.0, 0.9], [0.8, 0.2, 0.0], [0.0, 0.1, 0.9]])
        >>> leader_order(P).tolist()
        [1, 0, 2]
    """
    P = Inputs("leader_order").array("P_final", P_final, ("n", "n"))
    ok = np.isfinite(P)
    lead = np.argmax(np.where(ok, P, -np.inf), axis=1)
    lead = np.where(ok.any(axis=1), lead, P.shape[1])
    return np.lexsort((np.arange(len(P)), lead))


def _unpack(P, ts, system: int, head):
    """(ts (T,), P (T, n, n), head note) of one system and one head (or the head mean)."""
    check = Inputs("attention_maps")
    batched = False
    if hasattr(P, "attention") and hasattr(P, "ts"):
        if P.attention is None:
            check.fail("P is a Simulation without attention matrices, expected one run with return_attention=True.")
        batched = np.ndim(P.states) == 4 if not isinstance(P.states, (tuple, list, dict)) else np.ndim(P.ts) == 2
        ts = P.ts if ts is None else ts
        P = P.attention
    if batched:
        A = check.array("P", P, ("B", "T", "n", "n"), ("B", "T", "H", "n", "n"))
        if not -A.shape[0] <= int(system) < A.shape[0]:
            check.fail(f"system is {system}, expected an index into the batch of {A.shape[0]} systems.")
        A = A[system]
    else:
        A = check.array("P", P, ("T", "n", "n"), ("T", "H", "n", "n"))
    what = ""
    if A.ndim == 4:  # (T, H, n, n)
        if head is None:
            A, what = A.mean(axis=1), f"mean over {A.shape[1]} heads"
        else:
            if not -A.shape[1] <= int(head) < A.shape[1]:
                check.fail(f"head is {head}, expected an index into the {A.shape[1]} heads.")
            A, what = A[:, int(head)], f"head {int(head)}"
    if ts is None:
        t = np.arange(len(A), dtype=float)
    else:
        t = check.array("ts", ts, ("T",), ("B", "T"))
        t = t[system] if t.ndim == 2 else t
    return check, t, A, what


def _ticks(ax, n: int, order: np.ndarray) -> None:
    step = max(1, int(np.ceil(n / 8)))
    pos = np.arange(0, n, step)
    ax.set_xticks(pos, [str(int(order[p])) for p in pos], fontsize="x-small")
    ax.set_yticks(pos, [str(int(order[p])) for p in pos], fontsize="x-small")


def attention_maps(P, *, ts=None, times=None, order: str | None = "cluster", ranks=None, head: int | None = None,
                   system: int = 0, fig=None, title: str | None = None):
    r"""P(t) at a few times, on one colour scale [0, 1] with one labelled colour bar.

    Args:
        P: attention matrices (T, n, n) or (T, H, n, n), or a :class:`attnflow.Simulation` run with
            ``return_attention=True``.
        ts: save times (T,) (default: the Simulation's, else the save index).
        times: the times to show (the nearest saves are drawn); default: four spread over the run.
        order: "cluster" orders the tokens (rows and columns alike) by their leader in the final
            matrix (:func:`leader_order`); None keeps the input order. Tick labels are the tokens' indices.
        ranks: numerical rank of P per save (T,), written in the panel titles.
        head: for (T, H, n, n): the head to show (default: the mean over heads).
        system: which system of a batched Simulation.
        fig: Figure to draw into (default: a new one).
        title: the figure title.

    Returns:
        The Figure; its last Axes is the colour bar.

    Example:
        >>> import numpy as np
        >>> import attnflow.plot as ap
        >>> P = np.random.default_rng(0).dirichlet(np.ones(5), size=(6, 5))
        >>> fig = ap.attention_maps(P, ts=np.linspace(0, 1, 6))
        >>> len(fig.axes), fig.axes[-1].get_ylabel()
        (5, 'attention weight $P_{ij}$')
    """
    check, t, A, what = _unpack(P, ts, system, head)
    if ranks is not None:
        check.array("ranks", ranks, ("T",))
    if times is not None:
        check.array("times", np.atleast_1d(np.asarray(times, dtype=object)), ("times",))
    T, n, _ = A.shape
    if times is None:
        idx = np.linspace(0, T - 1, min(4, T)).round().astype(int)
    else:
        idx = np.array([int(np.argmin(np.abs(t - float(s)))) for s in np.atleast_1d(times)])
    idx = np.array(sorted(set(idx.tolist())))
    if order == "cluster":
        perm = leader_order(A[-1])
    elif order is None:
        perm = np.arange(n)
    else:
        check.fail(f'order is {order!r}, expected "cluster" or None.')
    shown = A[np.ix_(idx, perm, perm)]
    note = masked_note(shown)
    if fig is None:
        fig, axes = new_figure(len(idx), panel=(2.9, 2.9))
        axes = axes[0]
    else:
        axes = np.atleast_1d(fig.subplots(1, len(idx), squeeze=False)[0])
    import matplotlib

    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="#D9D9D9")
    image = None
    for j, (ax, k) in enumerate(zip(axes, idx)):
        image = ax.imshow(np.ma.masked_invalid(shown[j]), vmin=0.0, vmax=1.0, cmap=cmap, interpolation="nearest")
        head_txt = f"t = {t[k]:.3g}"
        if ranks is not None:
            r = np.asarray(ranks, float)[k]
            head_txt += f", rank {int(r)}" if np.isfinite(r) else ", rank n/a"
        ax.set_title(head_txt, fontsize="small")
        _ticks(ax, n, perm)
        ax.set_xlabel("key token j")
        if j == 0:
            ax.set_ylabel("query token i")
    cbar = fig.colorbar(image, ax=list(axes), shrink=0.85)
    cbar.set_label("attention weight $P_{ij}$")
    extra = [s for s in (what, "tokens ordered by leader" if order == "cluster" else "",
                         note.strip("()") + " (grey)" if note else "") if s]
    full = title or "attention P(t)"
    if extra:
        full += " (" + "; ".join(extra) + ")"
    fig.suptitle(full, fontsize="medium")
    return fig
