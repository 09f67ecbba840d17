"""``attnflow`` entry point; each sub-command lives in its own module and registers itself.

The top-level parser is lazy: the sub-commands' names and one-line help come from the table
in :mod:`attnflow.cli._commands`, and only the chosen sub-command's module is imported, so
``attnflow --help`` does not load JAX.

A sub-command's module registers ``func(args)`` with ``set_defaults``; with ``before_jax(args)`` beside it (a
context manager, entered before JAX is imported: the phase command's figure workers, which then start on the
cores this process leaves idle while it imports JAX) it registers ``func(args, early)``, ``early`` the value of
that context.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import sys

from ._commands import COMMANDS, FIGURE_COMMANDS, FIGURE_FORMATS

_DESCRIPTION = ("Simulate self-attention as an interacting particle system "
                "(tokens = particles, layers = time) and measure the cluster geometry.")


def figure_formats_arg(text: str) -> tuple[str, ...]:
    """Parse ``--figure-formats``: comma-separated formats among png, pdf, svg.

    Example:
        >>> figure_formats_arg("png, PDF")
        ('png', 'pdf')
    """
    formats = tuple(dict.fromkeys(f.strip().lower().lstrip(".") for f in text.split(",") if f.strip()))
    bad = [f for f in formats if f not in FIGURE_FORMATS]
    if not formats or bad:
        raise argparse.ArgumentTypeError(
            f"give comma-separated formats among {', '.join(FIGURE_FORMATS)} (e.g. png,pdf), got {text!r}")
    return formats


def _chosen_command(argv: list[str]) -> str | None:
    """The sub-command named in ``argv``: its first positional (the top level has only -h)."""
    for arg in argv:
        if arg == "--":
            return None
        if not arg.startswith("-"):
            return arg if arg in COMMANDS else None
    return None


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The ``attnflow`` parser; only the sub-command that ``argv`` names is fully built.

    Without ``argv`` every sub-command is built (this imports all their modules).
    """
    parser = argparse.ArgumentParser(
        prog="attnflow", description=_DESCRIPTION,
        epilog="Compiled XLA programs are kept between runs in ~/.cache/attnflow/xla ($XDG_CACHE_HOME/attnflow/xla), "
        "and the phase job's traced programs in its programs/ folder: a command that runs the same programs again "
        "skips tracing and XLA's compile. Set ATTNFLOW_COMPILE_CACHE to a folder to move it, or to off to trace and "
        "compile every time.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    wanted = list(COMMANDS) if argv is None else [c for c in [_chosen_command(argv)] if c]
    for name in wanted:
        if name not in sub.choices:
            importlib.import_module(COMMANDS[name][0]).add_parser(sub)
    for name, (_, summary) in COMMANDS.items():  # the others: name and one-line help only
        if name not in sub.choices:
            sub.add_parser(name, help=summary, add_help=False)
    # list the sub-commands in the table's order whichever was built first
    order = {name: i for i, name in enumerate(COMMANDS)}
    sub._choices_actions.sort(key=lambda a: order.get(a.dest, len(order)))
    for name in FIGURE_COMMANDS:
        if name in wanted:
            sub.choices[name].add_argument(
                "--figure-formats", type=figure_formats_arg, default=("png",), metavar="FORMATS",
                help=f"comma-separated formats every figure is written in, among {', '.join(FIGURE_FORMATS)} "
                "(default: png; e.g. png,pdf writes each figure as PNG and PDF)")
    return parser


#: the exit status of a command interrupted by Ctrl-C (SIGINT): 128 + 2, as a shell reports it
INTERRUPTED = 130


def main(argv: list[str] | None = None) -> int:
    """Run the command ``argv`` names; returns its exit status: the command's own (0, or 1 where a check
    failed), 2 for an :class:`~attnflow.errors.AttnflowError` (one line on stderr), :data:`INTERRUPTED`
    for Ctrl-C: one line on stderr saying how much of the work was kept (:func:`attnflow.runs.count_kept`,
    which every job advances as it stores its units) instead of a traceback.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    command = _chosen_command(argv) or "attnflow"
    try:
        parser = build_parser(argv)
        args = parser.parse_args(argv)
        command = args.command
        from ..errors import AttnflowError

        try:
            # a command's ``before_jax(args)`` (a context manager: the phase job's figure workers) starts before
            # JAX is imported, so that its processes start on the cores this one leaves idle meanwhile; its value
            # is the command's second argument
            before_jax = getattr(args, "before_jax", None)
            with before_jax(args) if before_jax else contextlib.nullcontext() as early:
                from .._x64 import float64_scope

                with float64_scope(), _figures_in(getattr(args, "figure_formats", None)):
                    # the jobs compute their checks in float64; scoped, not global
                    return int((args.func(args, early) if before_jax else args.func(args)) or 0)
        except AttnflowError as err:
            print(f"attnflow {command}: error: {err}", file=sys.stderr)
            return 2
    except KeyboardInterrupt:
        from ..runs import interrupted_sentence

        lead = "\n" if sys.stderr.isatty() else ""  # a terminal's cursor may stand after "^C" or a progress bar
        print(f"{lead}attnflow {command}: {interrupted_sentence()}", file=sys.stderr, flush=True)
        return INTERRUPTED


def run() -> None:
    """The ``attnflow`` command's process: :func:`main`, then the process ends with its exit status.

    Once the command has returned, every result is written and closed (atomically, :mod:`attnflow.runs`)
    and the figure workers have ended, so the process flushes its streams, runs its ``atexit`` handlers
    (JAX's, logging's, tqdm's, ...) and ends with ``os._exit``: the interpreter's own teardown (module
    globals, then XLA's C++ destructors) took 0.35-0.5 s after every job and writes nothing. An exception
    leaves through Python's normal exit (traceback, full teardown).

    The command keeps its compiled XLA programs between runs (:func:`attnflow.runs.enable_compile_cache`:
    ``~/.cache/attnflow/xla``, its traced programs in ``programs/`` there; ``ATTNFLOW_COMPILE_CACHE=off`` disables
    both, a folder moves them); :func:`main`
    called from Python does not.
    """
    import warnings

    from ..runs import enable_compile_cache

    enable_compile_cache()
    warnings.showwarning = functools.partial(_warning_line, _chosen_command(sys.argv[1:]) or "attnflow")
    code = main()
    import atexit
    import os

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing left to flush
            pass
    atexit._run_exitfuncs()
    os._exit(code)


def _warning_line(command: str, message, category, filename: str, lineno: int, file=None, line=None) -> None:
    """A warning as the command's one line on stderr (``warnings.showwarning`` of the ``attnflow`` process):
    ``attnflow COMMAND: warning: MESSAGE (Category)``, without the source line Python would print under it; a
    warning from outside attnflow also names where it came from.

    Example:
        >>> import sys
        >>> import attnflow.probe
        >>> _warning_line("probe", "3 members were frozen", RuntimeWarning, attnflow.probe.__file__, 9, sys.stdout)
        attnflow probe: warning: 3 members were frozen (RuntimeWarning)
        >>> jax_file = "/y/attnflow/site-packages/jax/_src/api.py"
        >>> _warning_line("phase", "slow path", UserWarning, jax_file, 12, sys.stdout)
        attnflow phase: warning: slow path (UserWarning, from jax/_src/api.py:12)
    """
    import os

    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # attnflow/
    path = os.path.abspath(str(filename))
    where = ""
    if os.path.commonpath([package, path]) != package:
        parts = path.split(os.sep)
        tail = parts[next((i for i in range(len(parts) - 1, -1, -1) if parts[i] == "site-packages"), -1) + 1:]
        where = f", from {'/'.join(tail)}:{lineno}"
    text = f"attnflow {command}: warning: {message} ({category.__name__}{where})\n"
    stream = sys.stderr if file is None else file
    try:
        stream.write(text)
    except (OSError, ValueError):  # a closed stream: the warning is lost, as Python's own would be
        pass


def _figures_in(formats: tuple[str, ...] | None):
    """Every figure saved with :func:`attnflow.plot.save` inside is written in ``formats``."""
    if formats is None:
        return contextlib.nullcontext()
    from ..plot import figure_formats

    return figure_formats(*formats)


if __name__ == "__main__":  # pragma: no cover
    run()
