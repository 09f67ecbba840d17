"""A figure worker process (``python -m attnflow.plot._worker [MODULE ...]``), run by
:class:`attnflow.plot._workers.FigureWorkers`.

It imports matplotlib's pyplot, :mod:`attnflow.plot` and the given modules, draws one small figure
(fonts and the Agg canvas load on first use), then reads calls ``(target, formats, args, kwargs)`` as
pickles on its standard input until it closes, and answers each with ``(True, result)`` or
``(False, traceback)`` on its standard output, in order. Whatever the drawing code prints goes to
standard error, so that the answers stay readable. Ctrl-C is left to the parent, which stops its
workers by closing their input or killing them.
"""

from __future__ import annotations

import importlib
import os
import pickle
import signal
import sys
import traceback


def example_figure(path) -> list[str]:
    """A one-line figure saved to ``path`` (the workers' own test call).

    Example:
        >>> import tempfile, pathlib
        >>> from attnflow.plot._worker import example_figure
        >>> example_figure(pathlib.Path(tempfile.mkdtemp()) / "line.png")
        ['line.png']
    """
    from . import new_axes, save

    fig, ax = new_axes()
    ax.plot([0, 1], [0, 1])
    ax.set_xlabel("x")
    ax.set_ylabel("y")
    return save(fig, path, close=True)


def _warm_up() -> None:
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(1, 1))
    fig.text(0.5, 0.5, "0")
    fig.canvas.draw()
    plt.close(fig)


def main(argv: list[str]) -> int:
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # prints go to stderr, the answers to the original stdout
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from . import figure_formats  # attnflow.plot: imported before the first call
    from ._workers import _call

    for module in argv:
        importlib.import_module(module)
    _warm_up()
    calls = sys.stdin.buffer
    while True:
        try:
            target, formats, args, kwargs = pickle.load(calls)
        except EOFError:
            return 0
        try:
            with figure_formats(*formats):
                answer = (True, _call(target, args, kwargs))
        except BaseException:  # noqa: BLE001 - every failure goes back to the caller
            answer = (False, traceback.format_exc())
        try:
            data = pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:  # an unpicklable result: say so instead
            data = pickle.dumps((False, traceback.format_exc()), protocol=pickle.HIGHEST_PROTOCOL)
        answers.write(data)
        answers.flush()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
