"""Figures drawn in worker processes while the caller goes on with its files.

A job's figures cost it seconds of matplotlib on one core (importing it, laying out text, encoding
PNGs), after the computation, when the other cores are idle. :class:`FigureWorkers` starts worker
processes (``python -m attnflow.plot._worker``) at the start of a job, where they import matplotlib
while the job compiles; the job then hands each figure to them as a call ``"module:function"`` with
picklable arguments (arrays, numbers, paths) and collects the file names when it needs them. Each
worker draws its calls in order, one at a time, with the caller's :func:`~attnflow.plot.figure_formats`.

Nothing changes in the caller's process (no backend, no ``rcParams``); the workers use matplotlib's
non-interactive Agg backend, since they only write files. Where no worker can start (a platform
without subprocesses, ``workers=0``), each call runs in the caller's process as it is submitted, so
a job's figures never depend on the workers being there. An error in a worker is raised in the
caller with the worker's traceback; a worker that dies fails its pending calls with its exit code.
"""

from __future__ import annotations

import collections
import os
import pickle
import subprocess
import sys
import threading
import time
from concurrent.futures import Future
from pathlib import Path

from ._style import current_formats, figure_formats

__all__ = ["FigureWorkers", "FigureWorkerError", "worker_count"]

#: the module each worker runs (``python -m``)
WORKER_MODULE = "attnflow.plot._worker"
#: seconds :meth:`FigureWorkers.close` waits for a worker's calls to be answered before it ends the worker
CLOSE_TIMEOUT = 60.0


class FigureWorkerError(RuntimeError):
    """A figure call failed in a worker process (the message ends with the worker's traceback)."""


def worker_count(figures: int, cores: int | None = None) -> int:
    """The workers worth starting for ``figures`` figures: one per figure, at most 4 and at most the
    cores this process may use; none on a single core (there a worker only takes the core from the job).

    Example:
        >>> from attnflow.plot._workers import worker_count
        >>> worker_count(4, cores=2), worker_count(8, cores=16), worker_count(1, cores=16), worker_count(4, cores=1)
        (2, 4, 1, 0)
    """
    if cores is None:
        from .._resources import available_cores

        cores = available_cores()
    return 0 if cores < 2 else max(0, min(figures, cores, 4))


def _call(target: str, args: tuple, kwargs: dict):
    """Run ``"module:function"`` on the arguments."""
    import importlib

    module, name = target.split(":")
    return getattr(importlib.import_module(module), name)(*args, **kwargs)


class _Worker:
    """One worker process, its pipe and its calls in flight (answered in the order they were sent)."""

    def __init__(self, preload: tuple[str, ...]):
        package_root = str(Path(__file__).resolve().parents[2])  # the folder that holds attnflow/
        env = dict(os.environ, MPLBACKEND="agg")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
        self.process = subprocess.Popen([sys.executable, "-m", WORKER_MODULE, *preload], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, env=env)
        self.pending: collections.deque[Future] = collections.deque()
        self.lock = threading.Lock()
        self.reader = threading.Thread(target=self._read, name="attnflow-figure-worker", daemon=True)
        self.reader.start()

    def send(self, message: tuple) -> Future:
        future: Future = Future()
        with self.lock:  # the order of the pipe and of the queue must agree
            self.pending.append(future)
            try:
                pickle.dump(message, self.process.stdin, protocol=pickle.HIGHEST_PROTOCOL)
                self.process.stdin.flush()
            except (BrokenPipeError, OSError) as exc:  # the worker is gone: _read fails what it left
                self.pending.remove(future)
                raise FigureWorkerError(f"a figure worker could not take a call: {exc}") from exc
        return future

    def _read(self) -> None:
        stream = self.process.stdout
        while True:
            try:
                ok, value = pickle.load(stream)
            except Exception:  # EOF (the worker exited) or a torn message
                break
            with self.lock:
                future = self.pending.popleft()
            if ok:
                future.set_result(value)
            else:
                future.set_exception(FigureWorkerError(f"a figure failed in its worker process:\n{value}"))
        code = self.process.wait()
        with self.lock:
            left, self.pending = list(self.pending), collections.deque()
        for future in left:
            future.set_exception(FigureWorkerError(f"a figure worker exited (code {code}) before drawing its figure"))

    def close(self, timeout: float) -> None:
        """Wait until every call is answered (at most ``timeout`` seconds), then end the process: each answer
        comes after its files were written, so an answered worker holds nothing (ending it at once spares the
        caller its interpreter's shutdown, about 0.3 s of matplotlib's)."""
        with self.lock:
            waiting = list(self.pending)
        deadline = time.monotonic() + timeout
        for future in waiting:
            try:
                future.exception(max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                break
        try:
            self.process.stdin.close()
        except OSError:
            pass
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self.reader.join()

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.close(0.0)


class FigureWorkers:
    """A pool of figure worker processes; ``submit("module:function", *args, **kwargs)`` returns a
    :class:`concurrent.futures.Future` of the call's result (for the jobs' figure functions: the names of
    the files written).

    ``workers``: processes to start (0: every call runs in this process when submitted); ``preload``:
    modules each worker imports when it starts (the drawing functions' modules, matplotlib's pyplot is
    always imported), so that the first call does not pay for them. Calls go to the worker with the
    fewest in flight; where none is left alive (or none could start), the call runs here. Leaving the ``with``
    block waits for every call; an exception in the block kills the workers instead.

    Example:
        >>> import tempfile, pathlib
        >>> from attnflow.plot._workers import FigureWorkers
        >>> out = pathlib.Path(tempfile.mkdtemp())
        >>> with FigureWorkers(1) as pool:
        ...     names = pool.submit("attnflow.plot._worker:example_figure", out / "line.png")
        >>> names.result(), (out / "line.png").exists()
        (['line.png'], True)
    """

    def __init__(self, workers: int = 2, preload: tuple[str, ...] | list[str] = ()):
        self._workers: list[_Worker] = []
        for _ in range(max(0, int(workers))):
            try:
                self._workers.append(_Worker(tuple(preload)))
            except OSError:  # no subprocesses here: draw in this process
                break

    @property
    def size(self) -> int:
        """Worker processes started (0: calls run in this process)."""
        return len(self._workers)

    def submit(self, target: str, *args, **kwargs) -> Future:
        """Draw ``target(*args, **kwargs)`` (``"module:function"``) in a worker, with this context's figure formats."""
        formats = current_formats()
        live = [w for w in self._workers if w.process.poll() is None]
        if live:
            worker = min(live, key=lambda w: len(w.pending))
            try:
                return worker.send((target, formats, args, kwargs))
            except FigureWorkerError:  # it died since: this call is drawn here
                pass
        future: Future = Future()
        with figure_formats(*formats):
            future.set_result(_call(target, args, kwargs))  # an error is raised here, where it happens
        return future

    def close(self) -> None:
        """Wait for every call to be answered (at most :data:`CLOSE_TIMEOUT` seconds a worker), then end the workers;
        a call still unanswered then fails with :class:`FigureWorkerError`."""
        for w in self._workers:
            w.close(CLOSE_TIMEOUT)
        self._workers = []

    def __enter__(self) -> "FigureWorkers":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:  # interrupted or failed: the figures are not wanted
            for w in self._workers:
                w.kill()
            self._workers = []
