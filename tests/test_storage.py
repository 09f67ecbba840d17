"""Stored results are verified, run folders are locked, file-system problems are found early."""

import collections
import errno
import io
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import optax
import pytest

from attnflow import runio
from attnflow.errors import InputError
from attnflow.probe import optimize
from attnflow.report import reproduce
from attnflow.sweep import load_sweep_config, run_sweep
from attnflow import runs
from attnflow.runs import Chunk, plan_chunks, run_chunks
from attnflow.runs import _atomic, _folder, _verified

REPO = Path(__file__).resolve().parent.parent

SPECTRAL_TOML = """
kind = "spectral"
ensembles = ["ginibre"]
d = [3]
samples = [30]
[run]
chunk_size = 10
progress = false
"""

ID = {"kind": "chunk", "name": "g000-000000010", "fingerprint": "f1"}


def _spectral(tmp_path):
    p = tmp_path / "s.toml"
    p.write_text(SPECTRAL_TOML)
    return load_sweep_config(p)


def _stored(tmp_path) -> Path:
    path = tmp_path / "g000-000000010.npz"
    runio.save_verified_npz(path, {"x": np.arange(4.0), "label": np.array(["a", "b", "c", "d"])}, ID)
    return path


def test_compressed_files_deflate_what_shrinks_and_read_back_exactly(tmp_path):
    import zipfile

    rng = np.random.default_rng(7)
    arrays = {"clusters": rng.integers(1, 5, size=(300, 200)).astype(np.float64),  # counts: deflate pays
              "energy": rng.normal(size=(300, 200)),  # float64 measurements: stored as they are
              "finite": np.ones(300, bool), "empty": np.zeros((0, 3)),
              # repeats at its start only (as a phase job's energies at its smallest beta): judged on samples
              "late_noise": np.concatenate([np.ones((200_000,)), rng.normal(size=1_800_000)])}
    path = tmp_path / "g000.npz"
    runio.save_verified_npz(path, arrays, ID, compress=True)
    members = {i.filename: i for i in zipfile.ZipFile(path).infolist()}
    assert members["clusters.npy"].compress_type == zipfile.ZIP_DEFLATED
    assert members["clusters.npy"].compress_size < 0.2 * members["clusters.npy"].file_size
    assert members["energy.npy"].compress_type == zipfile.ZIP_STORED
    assert members["late_noise.npy"].compress_type == zipfile.ZIP_STORED
    back = runio.load_verified_npz(path, ID, then="recomputing it")
    assert set(back) == set(arrays)
    for k, a in arrays.items():
        assert back[k].dtype == a.dtype and np.array_equal(back[k], a)
    runio.save_verified_npz(path, arrays, ID)  # without compress: every member stored
    assert {i.compress_type for i in zipfile.ZipFile(path).infolist()} == {zipfile.ZIP_STORED}
    assert [p.name for p in tmp_path.iterdir()] == ["g000.npz"]  # no temporary file left


def _plain_npz(path: Path, **arrays) -> None:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    path.write_bytes(buf.getvalue())


def _edited(path: Path) -> None:  # the labels changed, the identity and checksum kept
    with np.load(path) as f:
        arrays = {k: f[k] for k in f.files}
    arrays["label"] = np.array(["a", "b", "c", "z"])
    _plain_npz(path, **arrays)


def _misplaced(path: Path) -> None:
    runio.save_verified_npz(path, {"x": np.arange(4.0)}, {**ID, "name": "g000-000000020"})


def _other_config(path: Path) -> None:
    runio.save_verified_npz(path, {"x": np.arange(4.0)}, {**ID, "fingerprint": "f2"})


def _directory(path: Path) -> None:
    path.unlink()
    path.mkdir()
    (path / "inside").write_text("x")


DAMAGE = {
    "truncated": (lambda p: p.write_bytes(p.read_bytes()[:50]), r"not a readable \.npz file \(BadZipFile"),
    "garbage": (lambda p: p.write_bytes(b"not an archive at all" * 10), r"not an \.npz file \(it does not begin"),
    "npy": (lambda p: np.save(p.with_suffix(".npy"), np.arange(4)) or p.with_suffix(".npy").replace(p),
            r"not an \.npz file"),
    "empty": (lambda p: p.write_bytes(b""), r"an empty file \(0 bytes\)"),
    "directory": (_directory, r"a folder, not a file"),
    "no identity": (lambda p: _plain_npz(p, x=np.arange(4.0)), r"no identity or checksum inside"),
    "edited": (_edited, r"its checksum does not match its contents"),
    "misplaced": (_misplaced, r"content is chunk g000-000000020, not chunk g000-000000010 \(misplaced\)"),
    "other config": (_other_config, r"written by a run of another config \(fingerprint f2, this run f1\)"),
}


@pytest.mark.parametrize("case", list(DAMAGE))
def test_a_damaged_stored_file_is_set_aside_with_one_line_saying_why(case, tmp_path, capfd):
    path = _stored(tmp_path)
    data = runio.load_verified_npz(path, ID, then="recomputing it")
    assert data["x"].tolist() == [0.0, 1.0, 2.0, 3.0] and data["label"].tolist() == ["a", "b", "c", "d"]
    assert runio.load_verified_npz(tmp_path / "absent.npz", ID, then="recomputing it") is None
    damage, reason = DAMAGE[case]
    damage(path)
    capfd.readouterr()
    assert runio.load_verified_npz(path, ID, then="recomputing it") is None
    err = capfd.readouterr().err
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"{path}: ") and err.rstrip().endswith(
        "; moved to g000-000000010.npz.damaged, recomputing it."), err
    assert re.search(reason, err), err
    assert not os.path.lexists(path) and os.path.lexists(tmp_path / "g000-000000010.npz.damaged")
    # written again, it is used again (an older set-aside copy is replaced next time)
    _stored(tmp_path)
    assert runio.load_verified_npz(path, ID, then="recomputing it") is not None


def test_resumed_sweep_recomputes_misplaced_and_damaged_chunks_to_the_same_table(tmp_path, capfd):
    cfg = _spectral(tmp_path)
    ref = tmp_path / "ref"
    run_sweep(cfg, ref)
    table = (ref / "table.csv").read_bytes()
    chunks = ref / "chunks"
    shutil.copy(chunks / "g000-000000020.npz", chunks / "g000-000000010.npz")  # rows 10-19 replaced by 20-29
    (chunks / "g000-000000000.npz").write_bytes(b"")
    capfd.readouterr()
    s = run_sweep(cfg, ref)
    err = capfd.readouterr().err
    assert f"{chunks / 'g000-000000010.npz'}: content is chunk g000-000000020, not chunk g000-000000010 " \
           "(misplaced); moved to g000-000000010.npz.damaged, recomputing it." in err, err
    assert f"{chunks / 'g000-000000000.npz'}: an empty file (0 bytes)" in err, err
    assert s["chunks_computed_here"] == 2
    assert (ref / "table.csv").read_bytes() == table


def test_process_0_verifies_the_other_processes_chunks_when_it_reads_them_all(tmp_path, capfd):
    def compute(c: Chunk) -> dict:
        return {"row": np.arange(c.start, c.stop)}

    chunks = plan_chunks([30], 10)
    (tmp_path / "chunks").mkdir()
    # the chunk of process 1 (index 1 of 3) is there, but holds another chunk's rows
    runio.save_verified_npz(tmp_path / "chunks" / "g000-000000010.npz", compute(chunks[2]),
                            {"kind": "chunk", "name": "g000-000000020", "group": 0, "start": 20, "stop": 30,
                             "fingerprint": None})
    parts, computed = run_chunks(tmp_path, chunks, compute, progress=False, process_index=0, process_count=2)
    assert np.concatenate([p["row"] for p in parts]).tolist() == list(range(30))
    assert computed == 3  # its own two, and the damaged one of process 1
    assert "g000-000000010.npz: content is chunk g000-000000020, not chunk g000-000000010" in capfd.readouterr().err


def test_process_0_reads_back_only_the_chunks_it_did_not_compute_or_verify(tmp_path, monkeypatch):
    def compute(c: Chunk) -> dict:
        return {"row": np.arange(c.start, c.stop), "half": np.arange(c.start, c.stop) / 2}

    reads = []
    load = _verified.load_verified_npz
    monkeypatch.setattr(runs._units, "load_verified_npz", lambda path, *a, **k: reads.append(Path(path).name) or load(path, *a, **k))
    chunks = plan_chunks([30], 10)
    parts, computed = run_chunks(tmp_path, chunks, compute, progress=False)
    assert computed == 3 and np.concatenate([p["row"] for p in parts]).tolist() == list(range(30))
    assert reads == [c.file for c in chunks]  # each looked for once, before computing: none read back
    assert parts[1]["half"].dtype == np.float64 and np.array_equal(parts[1]["half"], np.arange(10, 20) / 2)
    (tmp_path / "chunks" / chunks[1].file).unlink()  # resumed: two verified, one computed again
    reads.clear()
    again, computed = run_chunks(tmp_path, chunks, compute, progress=False)
    assert computed == 1 and reads == [c.file for c in chunks]
    for a, b in zip(parts, again):
        assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) and a[k].dtype == b[k].dtype for k in a)


def test_a_callers_writer_keeps_the_last_chunk_file_and_its_block_writes_it(tmp_path):
    """run_chunks(writer=...) returns without waiting for the last chunk's file (held closed here until the
    caller's block goes on: a run that waited for it would never return) and leaving the block writes it: a second
    run resumes every chunk."""
    import threading

    gate = threading.Event()

    chunks = plan_chunks([30], 10)

    class Gated(runs.WriteBehind):  # the last chunk's write waits for the gate
        def __call__(self, write, name, *args, **kwargs):
            held = name == chunks[-1].name
            super().__call__(lambda: (held and gate.wait(60), write(name, *args, **kwargs)))

    def compute(c: Chunk) -> dict:
        return {"row": np.arange(c.start, c.stop)}

    returned = []
    with Gated() as writer:
        worker = threading.Thread(target=lambda: returned.append(
            run_chunks(tmp_path, chunks, compute, progress=False, writer=writer)))
        worker.start()
        worker.join(30)
        assert returned, "run_chunks waited for the chunk file its caller's writer holds"
        parts, computed = returned[0]
        assert computed == 3 and np.concatenate([p["row"] for p in parts]).tolist() == list(range(30))
        assert not (tmp_path / "chunks" / chunks[-1].file).exists()  # still the writer's
        gate.set()
    assert all((tmp_path / "chunks" / c.file).is_file() for c in chunks)
    assert run_chunks(tmp_path, chunks, compute, progress=False)[1] == 0  # every chunk resumed


KILLED_WRITE = textwrap.dedent("""
    import os, signal, sys
    from attnflow import runio
    os.replace = lambda src, dst: os.kill(os.getpid(), signal.SIGKILL)  # killed between write and rename
    runio.atomic_write_bytes(sys.argv[1], b"state")
""")


def test_a_temporary_file_left_by_a_killed_write_is_removed_on_resume(tmp_path):
    cfg = _spectral(tmp_path)
    out = tmp_path / "run"
    run_sweep(cfg, out)
    table = (out / "table.csv").read_bytes()
    p = subprocess.run([sys.executable, "-c", KILLED_WRITE, str(out / "checkpoints" / "clustering.npz")],
                       cwd=REPO, capture_output=True, text=True, timeout=120)
    assert p.returncode == -9, p.stderr
    left = list((out / "checkpoints").iterdir())
    assert len(left) == 1 and left[0].name.startswith(".clustering.npz.") and left[0].name.endswith(".tmp")
    with runio.atomic_path(tmp_path / "table.parquet") as tmp:  # named .table.<random>.tmp.parquet
        assert tmp.name.startswith(".table.") and tmp.name.endswith(".tmp.parquet")
    stale = [out / ".provenance.json.0a1b2c3d.tmp", out / "chunks" / ".g000-000000010.npz.abcdefgh.tmp",
             out / ".table.0a1b2c3d.tmp.parquet"]
    for f in stale:
        f.write_text("half written")
    kept = [out / "notes.tmp", out / "chunks" / ".keep", out / ".hidden.tmp"]  # not attnflow's temporaries
    for f in kept:
        f.write_text("mine")
    run_sweep(cfg, out)
    assert not list((out / "checkpoints").iterdir())
    assert not [f for f in stale if f.exists()] and all(f.exists() for f in kept)
    assert (out / "table.csv").read_bytes() == table


HOLD = textwrap.dedent("""
    import sys, time
    from attnflow.runio import claim_output_dir
    claim_output_dir(sys.argv[1], "sweep")
    print("holding", flush=True)
    time.sleep(120)
""")


def test_a_folder_in_use_by_another_process_is_refused(tmp_path):
    out = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        # the holder has claimed the folder but written no marker yet: in use, not "no attnflow-run.json"
        with pytest.raises(InputError, match=rf"^--out {re.escape(str(out))} is in use by another attnflow process "
                                             rf"\(pid {holder.pid}\); wait for it to finish or choose another "
                                             r"folder\.$"):
            run_sweep(_spectral(tmp_path), out)
        assert not (out / "chunks").exists()
        # process 1 of a multi-process sweep takes the lock of its share, beside process 0's
        assert runio.claim_output_dir(out, "sweep", process=1) == (out, False)
    finally:
        holder.kill()
        holder.wait()
    assert runio.claim_output_dir(out, "sweep") == (out, False)  # a killed holder's lock is released
    assert runio.claim_output_dir(out, "sweep") == (out, False)  # and this process may claim it again


def test_unwritable_or_full_folders_are_refused_before_any_work(tmp_path, monkeypatch):
    cfg = _spectral(tmp_path)
    with pytest.raises(InputError, match=r"^--out /dev/null/x cannot be created \(Not a directory\); choose a "
                                         r"folder you can write to\.$"):
        run_sweep(cfg, "/dev/null/x")
    out = tmp_path / "ro"
    out.mkdir()
    if os.geteuid() == 0:  # root writes through file modes: the OS refusal is simulated where files are made
        real = _atomic._create_temp

        def refused(path, suffix=""):
            if path.parent == out:
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))
            return real(path, suffix)

        monkeypatch.setattr(_atomic, "_create_temp", refused)
    else:
        out.chmod(0o555)
    try:
        for run in (lambda: run_sweep(cfg, out), lambda: reproduce(out, quick=True, cases=["remark7_9"],
                                                                    progress=False)):
            with pytest.raises(InputError, match=rf"^--out {re.escape(str(out))} cannot be written \(Permission denied\); choose "
                                                 r"a folder you can write to or change its permissions\.$"):
                run()
        assert list(out.iterdir()) == []
    finally:
        out.chmod(0o755)
    monkeypatch.undo()
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(_folder.shutil, "disk_usage", lambda p: usage(2**40, 2**40 - 10 * 2**20, 10 * 2**20))
    full = tmp_path / "full"
    with pytest.raises(InputError, match=rf"^--out {re.escape(str(full))} is on a disk with only 10.0 MiB free, less than the "
                                         r"50.0 MiB a run needs; free some space or choose a folder on another "
                                         r"disk\.$"):
        run_sweep(cfg, full)
    assert list(full.iterdir()) == []


def test_atomic_writes_give_the_mode_the_umask_says(tmp_path):
    old = os.umask(0o027)
    try:
        runio.atomic_write_bytes(tmp_path / "a.bin", b"x")
        with runio.atomic_path(tmp_path / "b.txt") as tmp:
            tmp.write_text("y")
        os.umask(0o002)
        runio.atomic_write_json(tmp_path / "c.json", {"k": 1})
    finally:
        os.umask(old)
    modes = {p.name: p.stat().st_mode & 0o777 for p in tmp_path.iterdir()}
    assert modes == {"a.bin": 0o640, "b.txt": 0o640, "c.json": 0o664}


def test_probe_checkpoints_are_verified_on_resume(tmp_path, capfd):
    def run(path, **kw):
        return optimize(lambda p, c: (jnp.sum((p - c) ** 2), p.sum()), jnp.zeros((2, 3)), jnp.array([[1.0], [2.0]]),
                        optimizer=optax.sgd(0.1), num_steps=6, checkpoint=path, fingerprint="f1",
                        checkpoint_every=2, progress=False, **kw)

    ref = run(None)
    a, b = tmp_path / "clustering.npz", tmp_path / "def41.npz"
    with pytest.raises(KeyboardInterrupt):
        run(a, interrupt_after=3)
    shutil.copy(a, b)  # the checkpoint of another search, copied in
    capfd.readouterr()
    again = run(b)
    err = capfd.readouterr().err
    assert again.resumed_from == 0 and np.array_equal(again.params, ref.params)
    assert f"{b}: content is probe checkpoint clustering, not probe checkpoint def41 (misplaced); moved to " \
           "def41.npz.damaged, starting this search from step 0." in err, err
    resumed = run(a)  # its own checkpoint: resumed at step 3, bit for bit the uninterrupted run
    assert resumed.resumed_from == 3 and np.array_equal(resumed.params, ref.params)
    assert np.array_equal(resumed.losses, ref.losses)


CLAIM = textwrap.dedent("""
    import sys
    from attnflow.errors import InputError
    from attnflow.runio import claim_output_dir
    try:
        claim_output_dir(sys.argv[1], "sweep")
        print("claimed")
    except InputError as err:
        print("refused:", err)
""")


def _claim_elsewhere(out: Path) -> str:
    return subprocess.run([sys.executable, "-c", CLAIM, str(out)], cwd=REPO, capture_output=True, text=True,
                          check=True).stdout.strip()


def test_a_job_unlocks_its_folder_when_it_returns(tmp_path):
    out = tmp_path / "run"

    @runio.releases_output_dirs
    def job():
        runio.claim_output_dir(out, "sweep")
        runio.write_marker(out, "sweep")
        return _claim_elsewhere(out)

    assert job().startswith("refused: --out") and "in use by another attnflow process" in job()
    assert _claim_elsewhere(out) == "claimed"  # after the job, another process may take the folder


def test_a_failed_first_run_leaves_no_folder_behind(tmp_path):
    out = tmp_path / "run"
    runio.claim_output_dir(out, "sweep")
    runio.discard_output_dir(out)
    assert not out.exists()
    runio.claim_output_dir(out, "sweep")
    runio.write_marker(out, "sweep")
    runio.discard_output_dir(out)  # a folder with results in it is kept
    assert (out / runio.MARKER).exists()
