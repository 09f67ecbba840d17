"""Figure worker processes (attnflow.plot._workers): the files they write equal those drawn in the caller's
process, the caller's figure formats reach them, a failure comes back with its traceback, a worker that dies
fails its calls instead of hanging (a forked one too), and an interrupted block leaves no process behind."""

import os
import signal
import sys
import time

import pytest

import attnflow.plot as ap
from attnflow.plot._worker import example_figure
from attnflow.plot._workers import FigureWorkerError, FigureWorkers, _Sibling

EXAMPLE = "attnflow.plot._worker:example_figure"


def test_worker_figures_are_the_files_the_caller_would_draw(tmp_path):
    (tmp_path / "here").mkdir()
    (tmp_path / "there").mkdir()
    with ap.figure_formats("png", "svg"):
        expected = example_figure(tmp_path / "here" / "line.png")
        with FigureWorkers(2) as pool:
            assert pool.size == 2
            futures = [pool.submit(EXAMPLE, tmp_path / "there" / f"line{k}.png") for k in range(3)]
        names = [f.result() for f in futures]
    assert expected == ["line.png", "line.svg"]
    assert names == [[f"line{k}.png", f"line{k}.svg"] for k in range(3)]
    for k in range(3):
        assert (tmp_path / "there" / f"line{k}.png").read_bytes() == (tmp_path / "here" / "line.png").read_bytes()


def test_no_workers_draws_in_this_process_as_each_call_is_submitted(tmp_path):
    with FigureWorkers(0) as pool:
        assert pool.size == 0
        future = pool.submit(EXAMPLE, tmp_path / "line.png")
        assert future.done() and (tmp_path / "line.png").is_file()
        with pytest.raises(TypeError):  # an inline failure is raised where it happens
            pool.submit(EXAMPLE, 5)
    assert future.result() == ["line.png"]


def test_a_failure_in_a_worker_comes_back_with_its_traceback_and_the_worker_goes_on(tmp_path):
    with FigureWorkers(1) as pool:
        bad = pool.submit(EXAMPLE, 5)
        good = pool.submit(EXAMPLE, tmp_path / "line.png")
        with pytest.raises(FigureWorkerError, match="(?s)Traceback.*TypeError"):
            bad.result()
        assert good.result() == ["line.png"]
        missing = pool.submit("attnflow.plot._worker:no_such_figure", tmp_path / "x.png")
        with pytest.raises(FigureWorkerError, match="no_such_figure"):
            missing.result()


def test_a_call_goes_to_the_first_worker_that_is_free_not_behind_a_long_one(tmp_path):
    """Three calls on two workers: the third waits for the first worker free (the one with the short call), not
    behind the long call it would have been queued after by a count of the calls each holds."""
    with FigureWorkers(2) as pool:
        long = pool.submit("time:sleep", 3.0)
        short = pool.submit("time:sleep", 0.05)
        drawn = pool.submit(EXAMPLE, tmp_path / "line.png")
        assert drawn.result(timeout=60) == ["line.png"] and short.done()
        assert not long.done()  # drawn beside it, not after it
    assert long.result() is None


def test_a_worker_that_dies_fails_its_pending_calls_and_later_calls_run_here(tmp_path):
    with FigureWorkers(1) as pool:
        worker = pool._workers[0]
        pending = pool.submit("time:sleep", 60)  # any "module:function" call: this one waits
        queued = pool.submit(EXAMPLE, tmp_path / "queued.png")  # waits for the worker to be free
        os.kill(worker.process.pid, signal.SIGKILL)
        with pytest.raises(FigureWorkerError, match="exited"):
            pending.result(timeout=30)
        with pytest.raises(FigureWorkerError, match="exited"):
            queued.result(timeout=30)
        later = pool.submit(EXAMPLE, tmp_path / "line.png")
        assert later.done() and later.result() == ["line.png"]


def test_an_exception_in_the_block_kills_the_workers(tmp_path):
    with pytest.raises(RuntimeError, match="stop"):
        with FigureWorkers(2) as pool:
            processes = [w.process for w in pool._workers]
            raise RuntimeError("stop")
    assert all(p.poll() is not None for p in processes)


def test_a_worker_draws_and_saves_a_figure_without_importing_jax(tmp_path):
    """A worker imports matplotlib and attnflow.plot; saving a figure (an atomic write of attnflow.runs) must not
    pull in JAX and the chunk runner, a second or more on the first figure of every worker."""
    import subprocess
    import sys

    code = ("import sys, pathlib; from attnflow.plot._worker import example_figure; "
            f"example_figure(pathlib.Path({str(tmp_path)!r}) / 'line.png'); "
            "print(sorted(m for m in ('jax', 'jaxlib', 'equinox') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout
    assert (tmp_path / "line.png").stat().st_size > 0


def _running(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="workers are forked from the first on Linux only")
def test_the_second_worker_is_forked_from_the_first_and_ends_with_the_pool(tmp_path):
    (tmp_path / "here").mkdir()
    example_figure(tmp_path / "here" / "line.png")
    with FigureWorkers(3) as pool:
        first, *forked = pool._workers
        assert pool.size == 3 and all(isinstance(w.process, _Sibling) for w in forked)
        # two slow calls hold the first two workers: the third call goes to the last one
        busy = [pool.submit("time:sleep", 0.5) for _ in range(2)]
        drawn = pool.submit(EXAMPLE, tmp_path / "line.png")
        assert drawn.result(timeout=30) == ["line.png"] and all(f.result(timeout=30) is None for f in busy)
        pids = [w.process.pid for w in pool._workers]
        assert len(set(pids)) == 3 and os.getpid() not in pids
    assert (tmp_path / "line.png").read_bytes() == (tmp_path / "here" / "line.png").read_bytes()
    deadline = time.monotonic() + 10
    while any(_running(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_running(pid) for pid in pids)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="workers are forked from the first on Linux only")
def test_a_forked_worker_that_dies_fails_its_pending_calls_and_the_first_goes_on(tmp_path):
    with FigureWorkers(2) as pool:
        first, forked = pool._workers
        hold = pool.submit("time:sleep", 0.3)  # the first worker's
        pending = pool.submit("time:sleep", 60)  # the forked one's
        queued = pool.submit(EXAMPLE, tmp_path / "queued.png")  # the first free worker's: the first, after hold
        deadline = time.monotonic() + 10
        while forked.process.pid is None and time.monotonic() < deadline:
            time.sleep(0.01)
        os.kill(forked.process.pid, signal.SIGKILL)
        with pytest.raises(FigureWorkerError, match="exited"):
            pending.result(timeout=30)
        assert hold.result(timeout=30) is None
        assert queued.result(timeout=30) == ["queued.png"]
        later = pool.submit(EXAMPLE, tmp_path / "line.png")
        assert later.result(timeout=30) == ["line.png"] and first.process.poll() is None
