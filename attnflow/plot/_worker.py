"""A figure worker process (``python -m attnflow.plot._worker [MODULE ...]``), run by
:class:`attnflow.plot._workers.FigureWorkers`.

It imports matplotlib's pyplot, :mod:`attnflow.plot` and the given modules, draws one small figure
(fonts and the Agg canvas load on first use), then reads calls ``(target, formats, args, kwargs)`` as
pickles on its standard input until it closes, and answers each with ``(True, result)`` or
``(False, traceback)`` on its standard output, in order. Whatever the drawing code prints goes to
standard error, so that the answers stay readable. Ctrl-C is left to the parent, which stops its
workers by closing their input or killing them.

``--siblings R:W ...`` (Linux): once ready, the worker forks one more worker per pair of pipe ends it was
given, which reads its calls from R and answers on W (its process id first) with the modules already
imported: a worker's start-up (0.5 s of one core, mostly matplotlib's import) is paid once, not once a
worker, while the job that started them imports JAX on the same cores.
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


def _serve(calls, answers) -> int:
    """Answer the calls of the stream ``calls`` on ``answers``, in order, until ``calls`` closes."""
    from . import figure_formats
    from ._workers import _call

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


def _fork_siblings(siblings: list[tuple[int, int]], own: list[int]) -> None:
    """Fork one worker per pipe pair (calls read end, answers write end); ``own``: this worker's own pipe
    descriptors, which a sibling closes (the caller must see this worker's pipes close when it ends)."""
    for i, (calls_fd, answers_fd) in enumerate(siblings):
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the sibling: its own two pipe ends only
            code = 1
            try:
                for fd in own + [fd for pair in siblings[i + 1:] for fd in pair]:
                    os.close(fd)
                answers = os.fdopen(answers_fd, "wb")
                pickle.dump(os.getpid(), answers, protocol=pickle.HIGHEST_PROTOCOL)
                answers.flush()
                code = _serve(os.fdopen(calls_fd, "rb"), answers)
            except BaseException:  # noqa: BLE001 - said on stderr; its caller sees its pipe close
                traceback.print_exc()
            finally:
                sys.stderr.flush()
                os._exit(code)  # never this worker's own exit path (its streams, its atexit handlers)
        os.close(calls_fd)
        os.close(answers_fd)
    # the siblings end when their caller is done: the kernel reaps them (no zombie under this worker)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)


def main(argv: list[str]) -> int:
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # prints go to stderr, the answers to the original stdout
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from . import figure_formats  # noqa: F401 - attnflow.plot: imported before the first call

    modules, siblings = list(argv), []
    if "--siblings" in modules:
        at = modules.index("--siblings")
        siblings = [tuple(int(fd) for fd in pair.split(":")) for pair in modules[at + 1:]]
        modules = modules[:at]
    for module in modules:
        importlib.import_module(module)
    _warm_up()
    if siblings:
        _fork_siblings(siblings, [0, answers.fileno()])
    return _serve(sys.stdin.buffer, answers)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
