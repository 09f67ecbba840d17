"""Figures drawn in worker processes while the caller goes on with its files.

A job's figures cost it seconds of matplotlib on one core (importing it, laying out text, encoding
PNGs), after the computation, when the other cores are idle. :class:`FigureWorkers` starts worker
processes (``python -m attnflow.plot._worker``) at the start of a job, where they import matplotlib
while the job compiles; the job then hands each figure to them as a call ``"module:function"`` with
picklable arguments (arrays, numbers, paths) and collects the file names when it needs them. The calls
wait in one queue and go, in the order submitted, to the first worker that is free; each worker draws one
at a time, with the caller's :func:`~attnflow.plot.figure_formats`.

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
import signal
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
#: start one worker and fork the others from it once it has imported matplotlib (Linux; elsewhere each worker is
#: a process of its own): on a 2-core machine a second worker's own start-up took 0.2 s from the job's imports
FORK_SIBLINGS = sys.platform.startswith("linux") and hasattr(os, "fork")


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


class _Sibling:
    """The handle of a worker that another worker forked (not this process's child): its pipes, its process id
    (its first answer) and its end, which is when its answer pipe closes."""

    def __init__(self, calls_fd: int, answers_fd: int):
        self.stdin = os.fdopen(calls_fd, "wb")
        self.stdout = os.fdopen(answers_fd, "rb")
        self.pid: int | None = None
        self.returncode: int | None = None
        self._ended = threading.Event()

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int | None:
        self._ended.wait(timeout)
        return self.returncode

    def kill(self) -> None:
        if self.pid is not None and self.returncode is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):  # ended already
                pass

    def ended(self) -> None:
        """Its answer pipe closed: the process has ended (killed, or done); its code is not ours to read."""
        if self.returncode is None:
            self.returncode = -signal.SIGKILL
        self._ended.set()


class _Worker:
    """One worker process, its pipe and its calls in flight (answered in the order they were sent).

    ``siblings``: pipe pairs ``((calls_r, calls_w), (answers_r, answers_w))`` of the workers this one forks
    once it has imported its modules (:meth:`sibling` makes their handles here)."""

    def __init__(self, preload: tuple[str, ...], siblings: tuple = (), on_free=None):
        self.on_free = on_free
        package_root = str(Path(__file__).resolve().parents[2])  # the folder that holds attnflow/
        env = dict(os.environ, MPLBACKEND="agg")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
        theirs = [(calls[0], answers[1]) for calls, answers in siblings]  # the ends the forked workers use
        extra = ["--siblings", *(f"{r}:{w}" for r, w in theirs)] if theirs else []
        try:
            self.process = subprocess.Popen([sys.executable, "-m", WORKER_MODULE, *preload, *extra],
                                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                                            pass_fds=[fd for pair in theirs for fd in pair])
        finally:
            for fd in (fd for pair in theirs for fd in pair):
                os.close(fd)
        self._start()

    @classmethod
    def sibling(cls, calls_w: int, answers_r: int, on_free=None) -> "_Worker":
        """The handle of a worker forked by another one, from this process's ends of its pipes."""
        worker = cls.__new__(cls)
        worker.on_free = on_free
        worker.process = _Sibling(calls_w, answers_r)
        worker._start()
        return worker

    def _start(self) -> None:
        self.pending: collections.deque[Future] = collections.deque()
        self.broken = False
        self.lock = threading.Lock()
        self.reader = threading.Thread(target=self._read, name="attnflow-figure-worker", daemon=True)
        self.reader.start()

    def alive(self) -> bool:
        """Whether the worker can take a call (running, and its pipe took the last one)."""
        return not self.broken and self.process.poll() is None

    def send(self, future: Future, data: bytes) -> None:
        """Hand the pickled call ``data`` to the worker; ``future`` gets its answer."""
        with self.lock:  # the order of the pipe and of the queue must agree
            self.pending.append(future)
            try:
                self.process.stdin.write(data)
                self.process.stdin.flush()
            except (BrokenPipeError, OSError) as exc:  # the worker is gone: _read fails what it left
                self.pending.remove(future)
                self.broken = True
                raise FigureWorkerError(f"a figure worker could not take a call: {exc}") from exc

    def _read(self) -> None:
        stream = self.process.stdout
        if isinstance(self.process, _Sibling):  # a forked worker says who it is first
            try:
                self.process.pid = pickle.load(stream)
            except Exception:  # it never started: its pipe closed
                self._fail_pending()
                return
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
            if self.on_free is not None:
                self.on_free()
        self._fail_pending()

    def _fail_pending(self) -> None:
        if isinstance(self.process, _Sibling):
            self.process.ended()
        code = self.process.wait()
        with self.lock:
            left, self.pending = list(self.pending), collections.deque()
        for future in left:
            future.set_exception(FigureWorkerError(f"a figure worker exited (code {code}) before drawing its figure"))
        if self.on_free is not None:
            self.on_free()

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
        try:  # the answers' pipe, read to its end by the reader
            self.process.stdout.close()
        except OSError:
            pass

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
    always imported), so that the first call does not pay for them. A call's arguments are pickled when it is
    submitted; the calls wait in one queue, in the order submitted, and each goes to the first worker that is
    free (a long figure holds one worker, not the calls behind it); where none is left alive (or none could
    start), a call runs here when submitted, and the calls still queued fail. Leaving the ``with`` block waits for
    every call; an exception in the block kills the workers instead. ``draw=False`` starts no worker and draws
    nothing: every call's future holds ``[]`` (no file written), for runs that only want the tables.

    Example:
        >>> import tempfile, pathlib
        >>> from attnflow.plot._workers import FigureWorkers
        >>> out = pathlib.Path(tempfile.mkdtemp())
        >>> with FigureWorkers(1) as pool:
        ...     names = pool.submit("attnflow.plot._worker:example_figure", out / "line.png")
        >>> names.result(), (out / "line.png").exists()
        (['line.png'], True)
        >>> with FigureWorkers(2, draw=False) as pool:
        ...     skipped = pool.submit("attnflow.plot._worker:example_figure", out / "none.png")
        >>> pool.size, skipped.result(), (out / "none.png").exists()
        (0, [], False)
    """

    def __init__(self, workers: int = 2, preload: tuple[str, ...] | list[str] = (), *, draw: bool = True):
        self._workers: list[_Worker] = []
        self._lock = threading.Lock()
        self._queue: collections.deque[tuple[Future, bytes]] = collections.deque()
        self._submitted: list[Future] = []
        self.draw = bool(draw)
        count = max(0, int(workers)) if self.draw else 0
        if count > 1 and FORK_SIBLINGS:  # one worker starts, the others are forked from it once it is ready
            try:
                pipes = [(os.pipe(), os.pipe()) for _ in range(count - 1)]
            except OSError:
                pipes = []
            try:
                self._workers.append(_Worker(tuple(preload), siblings=tuple(pipes), on_free=self._dispatch))
            except OSError:  # no subprocesses here: draw in this process (the forked workers' ends are closed)
                for calls, answers in pipes:
                    os.close(calls[1])
                    os.close(answers[0])
                return
            for calls, answers in pipes:
                self._workers.append(_Worker.sibling(calls[1], answers[0], on_free=self._dispatch))
            return
        for _ in range(count):
            try:
                self._workers.append(_Worker(tuple(preload), on_free=self._dispatch))
            except OSError:  # no subprocesses here: draw in this process
                break

    @property
    def size(self) -> int:
        """Worker processes started (0: calls run in this process)."""
        return len(self._workers)

    def submit(self, target: str, *args, **kwargs) -> Future:
        """Draw ``target(*args, **kwargs)`` (``"module:function"``) in a worker, with this context's figure formats
        (with ``draw=False``: nothing, the future holds ``[]``)."""
        if not self.draw:
            skipped: Future = Future()
            skipped.set_result([])
            return skipped
        formats = current_formats()
        if any(w.alive() for w in self._workers):
            future: Future = Future()
            data = pickle.dumps((target, formats, args, kwargs), protocol=pickle.HIGHEST_PROTOCOL)
            with self._lock:
                self._queue.append((future, data))
                self._submitted.append(future)
            self._dispatch()
            return future
        future = Future()
        with figure_formats(*formats):
            future.set_result(_call(target, args, kwargs))  # an error is raised here, where it happens
        return future

    def _dispatch(self) -> None:
        """Hand the queued calls, oldest first, to the workers that are free; where no worker is alive, the calls
        left fail (called on every submit and by each worker's reader when it answers or ends)."""
        left = []
        with self._lock:
            while self._queue:
                live = [w for w in self._workers if w.alive()]
                if not live:
                    left, self._queue = list(self._queue), collections.deque()
                    break
                free = [w for w in live if not w.pending]
                if not free:
                    break
                future, data = self._queue.popleft()
                try:
                    free[0].send(future, data)
                except FigureWorkerError:  # it died since: the call waits for another (or fails with the last)
                    self._queue.appendleft((future, data))
        for future, _ in left:  # outside the lock: a future's callbacks may submit again
            future.set_exception(FigureWorkerError("every figure worker exited before this figure was drawn"))

    def close(self) -> None:
        """Wait for every call to be answered (at most :data:`CLOSE_TIMEOUT` seconds for any one of them), then
        end the workers; a call still unanswered then fails with :class:`FigureWorkerError`."""
        with self._lock:
            waiting, self._submitted = self._submitted, []
        for future in waiting:
            try:
                future.exception(CLOSE_TIMEOUT)
            except TimeoutError:
                break
        self._end(0.0)

    def _end(self, timeout: float) -> None:
        with self._lock:
            left, self._queue = list(self._queue), collections.deque()
        for future, _ in left:
            future.set_exception(FigureWorkerError("the figure workers were ended before this figure was drawn"))
        for w in self._workers:
            w.close(timeout)
        self._workers = []

    def __enter__(self) -> "FigureWorkers":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:  # interrupted or failed: the figures are not wanted
            for w in self._workers:
                w.kill()
            self._end(0.0)
