"""Shared figure conventions of :mod:`attnflow.plot`: axes, colours, legends, colour bars, saving.

Every figure function of the package goes through these helpers, so that the defaults a
referee expects hold everywhere: labelled axes, readable ticks, legends that never sit on the
data (outside the axes when there are many entries), colours that stay distinct for up to 20
series, and output in PNG with PDF / SVG beside it on request.

Nothing here changes matplotlib's global state: no backend is forced (matplotlib chooses a
non-interactive one on a machine without a display), and no ``rcParams`` are written.
"""

from __future__ import annotations

import contextlib
import contextvars
import io
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from ..errors import InputError

_FORMATS: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar("attnflow_figure_formats", default=("png",))
_KNOWN_FORMATS = ("png", "pdf", "svg")

#: Okabe-Ito palette (distinguishable under the common colour-vision deficiencies), then tab20.
_BASE_COLOURS = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")


@contextlib.contextmanager
def figure_formats(*formats: str) -> Iterator[tuple[str, ...]]:
    """Within the block, :func:`save` writes each figure in every one of ``formats``.

    Example:
        >>> import attnflow.plot as ap
        >>> with ap.figure_formats("png", "pdf") as chosen:
        ...     chosen
        ('png', 'pdf')
    """
    chosen = tuple(dict.fromkeys(f.lower().lstrip(".") for f in formats)) or ("png",)
    bad = [f for f in chosen if f not in _KNOWN_FORMATS]
    if bad:
        raise InputError(f"figure_formats: the formats {bad} are not known, expected formats among {_KNOWN_FORMATS}.")
    token = _FORMATS.set(chosen)
    try:
        yield chosen
    finally:
        _FORMATS.reset(token)


def current_formats() -> tuple[str, ...]:
    """The formats :func:`save` writes by default here (``("png",)`` unless inside :func:`figure_formats`).

    Example:
        >>> import attnflow.plot as ap
        >>> ap.current_formats()
        ('png',)
    """
    return _FORMATS.get()


def new_axes(ax=None, *, figsize: tuple[float, float] = (5.0, 3.8), projection: str | None = None):
    """``(fig, ax)``: the given Axes and its Figure, or a new Figure with one Axes.

    A new figure is made with :mod:`matplotlib.pyplot`, so that ``plt.show()`` and notebooks
    display it; the jobs close it when they have saved it.

    Example:
        >>> import attnflow.plot as ap
        >>> fig, ax = ap.new_axes()
        >>> ap.new_axes(ax)[1] is ax
        True
    """
    if ax is not None:
        return ax.figure, ax
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=figsize, layout="constrained")
    ax = fig.add_subplot(projection=projection)
    return fig, ax


def new_figure(ncols: int = 1, nrows: int = 1, *, panel: tuple[float, float] = (3.4, 3.2), **subplot_kw):
    """``(fig, axes)``: a constrained-layout Figure with an ``(nrows, ncols)`` array of Axes.

    Example:
        >>> import attnflow.plot as ap
        >>> fig, axes = ap.new_figure(3, 2)
        >>> axes.shape
        (2, 3)
    """
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(nrows, ncols, figsize=(panel[0] * ncols, panel[1] * nrows), layout="constrained",
                             squeeze=False, subplot_kw=subplot_kw or None)
    return fig, axes


def colours(k: int) -> list:
    """``k`` distinct colours: the Okabe-Ito palette for up to 8, tab20 up to 20, then a perceptual map.

    Example:
        >>> import attnflow.plot as ap
        >>> ap.colours(2), len(set(map(str, ap.colours(18))))
        (['#0072B2', '#E69F00'], 18)
    """
    import matplotlib

    if k <= len(_BASE_COLOURS):
        return list(_BASE_COLOURS[:k])
    if k <= 20:
        cmap = matplotlib.colormaps["tab20"]
        return [cmap(i) for i in range(k)]
    cmap = matplotlib.colormaps["viridis"]
    return [cmap(x) for x in np.linspace(0.0, 0.95, k)]


def legend(ax, *, max_inside: int = 4, title: str | None = None, **kwargs):
    """A legend that does not cover data: ``loc="best"`` for a few entries, outside on the right otherwise.

    Example:
        >>> import attnflow.plot as ap
        >>> fig, ax = ap.new_axes()
        >>> for k in range(6):
        ...     _ = ax.plot([0, 1], [k, k], label=f"line {k}")
        >>> ap.legend(ax).get_bbox_to_anchor() is not None   # six entries: outside, right of the axes
        True
    """
    handles, labels = ax.get_legend_handles_labels()
    if not handles:
        return None
    if _twinned(ax):  # "best" sees only this Axes' data, not its twin's: below the axes, under the x label
        return ax.legend(loc="upper center", bbox_to_anchor=(0.5, 0.0), bbox_transform=_below_xlabel(ax),
                         ncol=min(len(handles), 4), fontsize="small", title=title, frameon=False, **kwargs)
    if len(handles) <= max_inside:
        return ax.legend(loc="best", fontsize="small", title=title, framealpha=0.85, **kwargs)
    ncol = 1 if len(handles) <= 14 else 2
    return ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, fontsize="small",
                     title=title, ncol=ncol, frameon=False, **kwargs)


def _twinned(ax) -> bool:
    """Whether another Axes with data shares ``ax``'s place and x axis (a ``twinx``)."""
    here = ax.get_position().bounds
    return any(other is not ax and other.get_position().bounds == here and (other.lines or other.collections)
               for other in ax.get_shared_x_axes().get_siblings(ax))


def _below_xlabel(ax):
    """A transform of axes coordinates shifted down past the x tick labels and the x label (in points, from
    their font sizes and pads), so that a legend anchored at y = 0 in it starts under the label."""
    from matplotlib.font_manager import FontProperties
    from matplotlib.transforms import offset_copy

    axis = ax.xaxis
    tick = axis.get_major_ticks()[0] if axis.get_major_ticks() else None
    tick_size = FontProperties(size=tick.label1.get_fontsize()).get_size_in_points() if tick else 10.0
    pad = (tick.get_tick_padding() + tick.get_pad()) if tick else 7.0
    text = axis.label.get_text()
    lines = text.count("\n") + 1 if text else 0
    drop = pad + 1.25 * tick_size + axis.labelpad + 1.3 * lines * axis.label.get_fontsize() + 3.0
    return offset_copy(ax.transAxes, fig=ax.figure, y=-drop, units="points")


def colorbar(mappable, ax, label: str):
    """A labelled colour bar beside ``ax``.

    Example:
        >>> import numpy as np
        >>> import attnflow.plot as ap
        >>> fig, ax = ap.new_axes()
        >>> ap.colorbar(ax.imshow(np.eye(3)), ax, "weight").ax.get_ylabel()
        'weight'
    """
    cbar = ax.figure.colorbar(mappable, ax=ax, shrink=0.9)
    cbar.set_label(label)
    return cbar


def label(ax, xlabel: str, ylabel: str, title: str | None = None, zlabel: str | None = None):
    """Label both axes (and z for a 3-d Axes); every figure function calls this."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if zlabel is not None and hasattr(ax, "set_zlabel"):
        ax.set_zlabel(zlabel)
    if title:
        ax.set_title(title, fontsize="medium")
    return ax


def plain_ticks(axis, *, log_too: bool = False) -> None:
    """Plain tick labels (``2.5``, never ``2.5x10^0`` or an offset) on a linear axis, and on a log axis
    when ``log_too``; otherwise a log axis keeps its powers of ten.

    Example:
        >>> import attnflow.plot as ap
        >>> from attnflow.plot._style import plain_ticks
        >>> fig, ax = ap.new_axes()
        >>> plain_ticks(ax.yaxis)
        >>> type(ax.yaxis.get_major_formatter()).__name__
        'ScalarFormatter'
    """
    from matplotlib.ticker import ScalarFormatter

    if log_too or axis.get_scale() == "linear":
        fmt = ScalarFormatter(useOffset=False)
        fmt.set_scientific(False)
        axis.set_major_formatter(fmt)


def log_ticks(axis, *, minor_decades: float = 2.0) -> None:
    """Plain numbers (``0.2``, ``2``, ``10``, ``30``) at the major ticks of a log axis, never ``2 x 10^0`` or
    ``2e-01``, and at the minor ticks 2, 3, ... when the axis spans at most ``minor_decades`` decades
    (fewer for a horizontal axis, whose labels sit side by side).

    Example:
        >>> import attnflow.plot as ap
        >>> from attnflow.plot._style import log_ticks
        >>> fig, ax = ap.new_axes()
        >>> ax.set_yscale("log")
        >>> ax.set_ylim(0.15, 3.0)
        (0.15, 3.0)
        >>> log_ticks(ax.yaxis)
        >>> [ax.yaxis.get_minor_formatter()(x) for x in (0.2, 0.3, 2.0)]
        ['0.2', '0.3', '2']
    """
    from matplotlib.ticker import LogFormatter

    class PlainLog(LogFormatter):
        def __call__(self, x, pos=None):
            return f"{x:g}" if super().__call__(x, pos) else ""

    axis.set_major_formatter(PlainLog())
    axis.set_minor_formatter(PlainLog(labelOnlyBase=False, minor_thresholds=(minor_decades, 0.4 * minor_decades)))


def finite(values, what: str = "values") -> np.ndarray:
    """``values`` as a float array with non-finite entries masked (NaN), never silently plotted as numbers."""
    a = np.asarray(values, dtype=float)
    return np.where(np.isfinite(a), a, np.nan)


def save(fig, path: str | os.PathLike, *, formats: Sequence[str] | None = None, dpi: int = 150,
         close: bool = False) -> list[str]:
    """Write ``fig`` atomically in each format (default: :func:`current_formats`); return the file names.

    ``path``'s suffix is replaced by each format's (``a.png`` -> ``a.png``, ``a.pdf``).

    Example:
        >>> import tempfile, pathlib
        >>> import attnflow.plot as ap
        >>> fig, ax = ap.new_axes()
        >>> _ = ax.plot([0, 1], [0, 1])
        >>> ap.save(fig, pathlib.Path(tempfile.mkdtemp()) / "line.png", formats=("png", "svg"), close=True)
        ['line.png', 'line.svg']
    """
    from ..runs import atomic_write_bytes

    chosen = tuple(formats) if formats is not None else current_formats()
    path = Path(path)
    names = []
    # a constrained layout already fits every label, colour bar and legend inside the figure; a tight
    # bounding box there would only draw the figure a second time (about a third of the cost)
    from matplotlib.layout_engine import ConstrainedLayoutEngine

    bbox = None if isinstance(fig.get_layout_engine(), ConstrainedLayoutEngine) else "tight"
    for fmt in chosen:
        target = path.with_suffix("." + fmt)
        buf = io.BytesIO()
        fig.savefig(buf, format=fmt, dpi=dpi, bbox_inches=bbox)
        atomic_write_bytes(target, buf.getvalue())
        names.append(target.name)
    if close:
        import matplotlib.pyplot as plt

        plt.close(fig)
    return names
