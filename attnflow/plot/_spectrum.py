"""Spectra of value matrices in the complex plane, coloured by Definition 4.1.

Definition 4.1(1) asks that the eigenvalue of V of **largest modulus** be real, positive and
simple. :func:`eigenvalues` marks, in each spectrum, that eigenvalue (when the condition holds),
the eigenvalues that violate it (every eigenvalue of largest modulus when it fails) and the
rest; :func:`head_spectra` draws the spectra of every attention head of a model, one panel per
parameter layer, with each head's lambda_1 labelled by its index.
"""

from __future__ import annotations

import numpy as np

from ._checks import Inputs
from ._style import colours, label, legend, new_axes

__all__ = ["EIGEN_CLASSES", "STATUS_COLOURS", "STATUS_LABELS", "eigenvalue_classes", "eigenvalues", "head_spectra"]

#: Classes of :func:`eigenvalue_classes`, in drawing order, with their legend labels.
EIGEN_CLASSES = {
    "other": r"$|\lambda| < |\lambda_1|$",
    "top": r"$\lambda_1$: largest modulus, real > 0, simple",
    "violation": "largest modulus, violates Def 4.1(1)",
}
_CLASS_COLOURS = {"other": "0.6", "top": "#009E73", "violation": "#D55E00"}

#: Colours and labels of a head's Definition 4.1 status (``HeadAssumptions.status``).
STATUS_COLOURS = {"good": "#009E73", "cond1": "#E69F00", "complex": "#D55E00", "real<0": "#CC79A7"}
STATUS_LABELS = {"good": "good triple (Def 4.1)", "cond1": "Def 4.1(1) only", "complex": r"$\lambda_1$ complex",
                 "real<0": r"$\lambda_1$ real, not > 0 / not simple"}


def eigenvalue_classes(eigs, *, rtol: float = 1e-9) -> np.ndarray:
    """The Definition 4.1(1) class of every eigenvalue: ``"top"``, ``"violation"`` or ``"other"``.

    Args:
        eigs: one spectrum ``(d,)`` or many ``(S, d)`` (complex or real).
        rtol: relative tolerance for "same modulus" and "real".

    Returns:
        A string array of the shape of ``eigs``.

    Example:
        >>> eigenvalue_classes([2.0, 1.0, -0.5]).tolist()
        ['top', 'other', 'other']
        >>> eigenvalue_classes([1 + 1j, 1 - 1j, 0.1]).tolist()
        ['violation', 'violation', 'other']
    """
    lam = np.atleast_2d(Inputs("eigenvalue_classes").array("eigs", eigs, ("d",), ("S", "d"), dtype=complex))
    out = np.full(lam.shape, "other", dtype=object)
    for s, row in enumerate(lam):
        ok = np.isfinite(row)
        if not ok.any():
            continue
        mod = np.where(ok, np.abs(row), -np.inf)
        top = mod.max()
        tie = ok & (mod >= top * (1 - rtol) - 1e-300)
        i = int(np.argmax(mod))
        good = tie.sum() == 1 and row[i].real > 0 and abs(row[i].imag) <= rtol * max(top, 1e-300)
        if good:
            out[s, i] = "top"
        else:
            out[s, tie] = "violation"
    return out.reshape(np.shape(eigs)).astype(str)


def _include(ax, x=None, y=None):
    """Extend the limits so that the reference values ``x`` / ``y`` lie inside."""
    if x is not None:
        lo, hi = ax.get_xlim()
        ax.set_xlim(min(lo, x), max(hi, x))
    if y is not None:
        lo, hi = ax.get_ylim()
        ax.set_ylim(min(lo, y), max(hi, y))


def eigenvalues(eigs, *, classes=None, ax=None, title=None, unit_circle: bool = True):
    """Eigenvalues in the complex plane, coloured by their Definition 4.1(1) class.

    Reference lines: the real and imaginary axes, the circle of radius lambda_1's modulus
    (dashed: Def 4.1(1) compares moduli) and, optionally, the unit circle (dotted). Non-finite
    eigenvalues are left out and counted in the title.

    Args:
        eigs: one spectrum ``(d,)`` or many ``(S, d)``; all are scattered.
        classes: optional labels of the shape of ``eigs`` (default :func:`eigenvalue_classes`).
        ax: Axes to draw on (default: a new figure).
        title: panel title.
        unit_circle: draw the unit circle.

    Returns:
        The Axes.

    Example:
        >>> import numpy as np
        >>> import attnflow.plot as ap
        >>> ax = ap.eigenvalues(np.linalg.eigvals(np.random.default_rng(0).normal(size=(5, 5))))
        >>> ax.get_xlabel()
        'Re $\\\\lambda$'
    """
    from matplotlib.patches import Circle

    check = Inputs("eigenvalues")
    lam = check.array("eigs", eigs, ("d",), ("S", "d"), dtype=complex)
    if classes is None:
        cls = np.asarray(eigenvalue_classes(lam), dtype=str)
    else:
        cls = check.array("classes", classes, ("d",) if lam.ndim == 1 else ("S", "d"), dtype=str)
    fig, ax = new_axes(ax, figsize=(4.6, 4.2))
    ok = np.isfinite(lam)
    lam_f, cls_f = lam[ok], cls[ok]
    names = list(dict.fromkeys([c for c in EIGEN_CLASSES if c in set(cls_f)] + sorted(set(cls_f) - set(EIGEN_CLASSES))))
    extra = iter(colours(len(names) + 3)[3:])
    for name in names:
        sel = cls_f == name
        big = name != "other"
        ax.scatter(lam_f[sel].real, lam_f[sel].imag, s=36 if big else 10, zorder=3 if big else 2,
                   c=_CLASS_COLOURS.get(name) or next(extra), edgecolors="k" if big else "none", linewidths=0.4,
                   label=f"{EIGEN_CLASSES.get(name, name)} ({int(sel.sum())})")
    ax.axhline(0.0, color="k", lw=0.5, zorder=1)
    ax.axvline(0.0, color="k", lw=0.5, zorder=1)
    radius = float(np.max(np.abs(lam_f))) if lam_f.size else 1.0
    if lam.ndim == 1 and lam_f.size:
        ax.add_patch(Circle((0, 0), radius, fill=False, ls="--", lw=0.7, ec="0.4", label=r"$|\lambda| = |\lambda_1|$"))
    if unit_circle:
        ax.add_patch(Circle((0, 0), 1.0, fill=False, ls=":", lw=0.7, ec="0.3", label="unit circle"))
    r = max(radius, 1.0 if unit_circle else 0.0) * 1.08 or 1.0
    ax.set_xlim(-r, r)
    ax.set_ylim(-r, r)
    ax.set_aspect("equal")
    note = f"{int((~ok).sum())} non-finite eigenvalue(s) not shown" if (~ok).any() else None
    full = "; ".join(t for t in (title, note) if t) or None
    label(ax, r"Re $\lambda$", r"Im $\lambda$", full)
    legend(ax, max_inside=0)
    return ax


def _head_axes(ax, spectra, rows, title, *, max_label_rows: int = 40):
    """One panel: every head's eigenvalues (grey), its lambda_1 (coloured by status) and a
    column of head labels outside the right edge, joined to the points by thin lines."""
    pts = []
    for lam in spectra:
        lam = np.asarray(lam, dtype=complex)
        lam = lam[np.isfinite(lam)]
        ax.scatter(lam.real, lam.imag, s=4, c="0.72", linewidths=0, zorder=2)
        pts.append(lam)
    for r in rows:
        ax.scatter([r.lambda1_re], [r.lambda1_im], s=40, c=STATUS_COLOURS.get(r.status, "k"), edgecolors="k",
                   linewidths=0.5, zorder=4)
    ax.axhline(0.0, c="k", lw=0.4, zorder=1)
    ax.axvline(0.0, c="k", lw=0.4, zorder=1)
    allp = np.concatenate(pts + [np.array([complex(r.lambda1_re, r.lambda1_im) for r in rows])]) if rows else np.zeros(1)
    allp = allp[np.isfinite(allp)]
    m = float(np.max(np.abs(allp))) if allp.size else 1.0
    m = m * 1.1 or 1.0
    ax.set_xlim(-m, m)
    ax.set_ylim(-m, m)
    ax.set_aspect("equal")
    label(ax, r"Re $\lambda$", r"Im $\lambda$", title)
    # labels: a column right of the axes, ordered as the points' heights, evenly spaced
    order = sorted(range(len(rows)), key=lambda i: -rows[i].lambda1_im)
    k = len(order)
    if not k:
        return ax
    fontsize = 6 if k <= max_label_rows else max(3.5, 6 * max_label_rows / k)
    ys = np.linspace(0.98, 0.02, k) if k > 1 else np.array([0.5])
    for y, i in zip(ys, order):
        r = rows[i]
        ax.annotate(str(r.head), xy=(r.lambda1_re, r.lambda1_im), xycoords="data", xytext=(1.06, y),
                    textcoords="axes fraction", fontsize=fontsize, va="center", ha="left", annotation_clip=False,
                    arrowprops=dict(arrowstyle="-", lw=0.3, color="0.5", shrinkA=0, shrinkB=2))
    ax.text(1.06, 1.0, "head", transform=ax.transAxes, fontsize=fontsize, va="bottom", ha="left")
    return ax


def head_spectra(spectra: dict, rows: list, *, fig=None, ncols: int = 3):
    """One panel per parameter layer: each head's eigenvalues of V_h (grey) and its lambda_1
    (coloured by its Definition 4.1 status), labelled by head in a column beside the panel.

    Args:
        spectra: ``{(layer, head): eigenvalues}``.
        rows: objects with ``layer``, ``head``, ``lambda1_re``, ``lambda1_im`` and ``status``
            (:class:`attnflow.models.HeadAssumptions`).
        fig: Figure to draw in (default: a new one).
        ncols: panels per row.

    Returns:
        The Figure.

    Example:
        >>> import numpy as np
        >>> from types import SimpleNamespace as R
        >>> import attnflow.plot as ap
        >>> rows = [R(layer=0, head=h, lambda1_re=1.0 + h, lambda1_im=0.0, status="good") for h in range(3)]
        >>> spectra = {(0, h): np.array([1.0 + h, 0.5j, -0.5j]) for h in range(3)}
        >>> fig = ap.head_spectra(spectra, rows)
        >>> len(fig.axes)
        1
    """
    import matplotlib.pyplot as plt

    check = Inputs("head_spectra")
    check.mapping("spectra", spectra, ())
    rows = check.fields("rows", check.sequence("rows", rows), ("layer", "head", "lambda1_re", "lambda1_im", "status"))
    missing = [(r.layer, r.head) for r in rows if (r.layer, r.head) not in spectra]
    if missing:
        check.fail(f"spectra lacks the (layer, head) keys {missing[:4]}, expected the eigenvalues of every head in rows.")
    for key in {(r.layer, r.head) for r in rows}:
        check.array(f"spectra[{key}]", spectra[key], (f"d of head {key}",), dtype=complex)
    layers = sorted({r.layer for r in rows})
    cols = max(1, min(ncols, len(layers)))
    nrows = -(-len(layers) // cols) if layers else 1
    if fig is None:
        fig = plt.figure(figsize=(4.4 * cols, 3.9 * nrows + 0.5), layout="constrained")
    axes = fig.subplots(nrows, cols, squeeze=False)
    for ax, s in zip(axes.flat, layers):
        sel = [r for r in rows if r.layer == s]
        _head_axes(ax, [spectra[(s, r.head)] for r in sel], sel, f"layer {s}: eigenvalues of $V_h$")
    for ax in list(axes.flat)[len(layers):]:
        fig.delaxes(ax)
    _status_legend(fig)
    return fig


def _status_legend(fig, statuses=None):
    from matplotlib.lines import Line2D

    statuses = list(STATUS_COLOURS) if statuses is None else statuses
    handles = [Line2D([], [], ls="", marker="o", ms=7, mfc=STATUS_COLOURS[s], mec="k", mew=0.5) for s in statuses]
    handles.append(Line2D([], [], ls="", marker="o", ms=3, mfc="0.72", mec="none"))
    names = [STATUS_LABELS[s] for s in statuses] + ["other eigenvalues of $V_h$"]
    return fig.legend(handles, names, loc="outside lower center", ncol=min(5, len(handles)), fontsize="small",
                      frameon=False)
