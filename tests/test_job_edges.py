"""The edges of the jobs: Ctrl-C says in one line what was kept (exit 130), work that cannot finish is refused
before it starts (with the size that would), an impossible search stops in one sentence, and
``attnflow.load`` names what a file that is not a simulation is."""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import attnflow
from attnflow import runio
from attnflow.errors import InputError

REPO = Path(__file__).resolve().parent.parent


class WorkStarted(BaseException):
    """Raised by a stand-in for a job's first unit of work: the refusal should have come before it (a
    BaseException, so that a job that records its failing cases does not swallow it)."""


def _starts_work(*args, **kwargs):
    raise WorkStarted("the job started work it should have refused")


@pytest.fixture
def limit(monkeypatch):
    """An hour-long limit would depend on the machine's cores; 600 s makes each refusal below hold on any
    machine (each case needs at least 1000 s of sequential steps, whatever the rate)."""
    monkeypatch.setenv("ATTNFLOW_WORK_LIMIT", "600")


# -- Ctrl-C ---------------------------------------------------------------------------------------------

SWEEP_TOML = """
kind = "dynamics"
v_ensembles = ["positive", "ginibre"]
qk_ensembles = ["identity"]
d = [2]
systems = 120
n = 6
clouds = 1
t1 = 8.0
dt = 0.1
[run]
chunk_size = 3
progress = false
"""


def test_ctrl_c_prints_one_line_with_the_chunks_kept_exits_130_and_the_same_command_resumes(tmp_path):
    cfg = tmp_path / "s.toml"
    cfg.write_text(SWEEP_TOML)
    out = tmp_path / "out"
    # `python -m attnflow sweep ...`, with Ctrl-C's default handling restored first: a pytest-xdist worker
    # ignores SIGINT, and an ignored signal stays ignored across exec (the sweep would run to its end)
    launch = ("import runpy, signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
              "runpy.run_module('attnflow', run_name='__main__', alter_sys=True)")
    cmd = [sys.executable, "-c", launch, "sweep", str(cfg), "--out", str(out), "--no-progress"]
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    p = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 240
    # finished chunks only: pathlib's glob also matches a chunk's hidden temporary file (.name.random.tmp.npz),
    # which an interruption removes
    while p.poll() is None and time.time() < deadline and not list(out.glob("chunks/[!.]*.npz")):
        time.sleep(0.01)
    assert p.poll() is None, "the sweep ended before its first chunk was seen; make it longer"
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 130, err
    lines = err.splitlines()
    assert len(lines) == 1, err
    # 80 chunks (2 groups x 120 systems in chunks of 3) of 80 layers: enough that the sweep cannot finish between
    # the first chunk file and the signal, even when the chunk files are written behind a busy machine's
    # computation
    m = re.fullmatch(r"attnflow sweep: interrupted: (\d+) of 80 chunks kept; the same command resumes", lines[0])
    assert m, lines[0]
    kept = int(m[1])
    assert 1 <= kept == len(list(out.glob("chunks/[!.]*.npz"))) < 80
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert f"resuming: {kept} of 80 chunks already done" in done.stderr
    assert f"80 chunks: {kept} resumed, {80 - kept} computed" in done.stdout


def test_an_interrupted_command_names_its_count_in_one_line(monkeypatch, capsys):
    import importlib

    cli = importlib.import_module("attnflow.cli.main")
    probe = importlib.import_module("attnflow.cli.probe")

    def interrupted(args):
        kept = runio.count_kept(20, "units", kept=5)
        kept.add(2)
        raise KeyboardInterrupt

    monkeypatch.setattr(probe, "_run", interrupted)
    assert cli.main(["probe", "probe-beyond-pd.toml", "--out", "unused"]) == 130
    assert capsys.readouterr().err == "attnflow probe: interrupted: 7 of 20 units kept; the same command resumes\n"
    runio.count_kept(14, "cases", kept=3, resumes=False)
    monkeypatch.setattr(probe, "_run", lambda args: (_ for _ in ()).throw(KeyboardInterrupt()))
    assert cli.main(["probe", "x.toml", "--out", "unused"]) == 130
    assert capsys.readouterr().err.startswith("attnflow probe: interrupted after 3 of 14 cases; nothing is kept")


# -- work that cannot finish -----------------------------------------------------------------------------


def test_a_sweep_of_a_billion_layers_is_refused_before_any_chunk(limit, monkeypatch, tmp_path):
    from attnflow.sweep import _dynamics, load_sweep_config, run_sweep

    path = tmp_path / "s.toml"
    path.write_text(SWEEP_TOML.replace("dt = 0.1", "dt = 8e-9"))  # t1 / dt = 10^9 layers
    monkeypatch.setattr(_dynamics, "make_chunk_fn", _starts_work)
    with pytest.raises(InputError, match=r"the dynamics sweep .* 1000000000 layers\) needs at least .*; lower "
                                         r"t1 / dt \(layers\) to at most about"):
        run_sweep(load_sweep_config(path), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_reproduce_with_a_huge_n_is_refused_before_its_case_runs(limit, monkeypatch, tmp_path):
    from attnflow.report import _catalogue, reproduce

    monkeypatch.setenv("ATTNFLOW_MEMORY_LIMIT", "1e18")  # it would fit: the work alone refuses it
    title, theorem, _ = _catalogue.CASES["thm2_1"]
    monkeypatch.setitem(_catalogue.CASES, "thm2_1", (title, theorem, _starts_work))
    # 4 runs x 121 saves x the singular values of a 10^5 x 10^5 P: 1.9e18 flops, > 600 s at 3e15 flop/s
    with pytest.raises(InputError, match=r"case thm2_1 \(4 runs of 100000 tokens, 121 saves\) needs at least .*"
                                         r"lower thm2_1\.n to at most about"):
        reproduce(tmp_path / "r", cases=["thm2_1"], progress=False, figures=False,
                  overrides={"thm2_1": {"n": 100_000}})
    assert not (tmp_path / "r").exists()


def test_extensions_with_a_huge_layer_count_are_refused_before_the_study_runs(limit, monkeypatch, tmp_path):
    from attnflow.report import _extensions

    cfg = tmp_path / "e.toml"
    cfg.write_text("[sphere]\nlayers = 1000000000\n")  # 7 betas x 10^9 layers, one after another: >= 7000 s
    monkeypatch.setitem(_extensions.STUDIES, "sphere", ("sphere", _starts_work))
    with pytest.raises(InputError, match=r"the sphere study .* needs at least .*; lower sphere\.layers to at most "
                                         r"about 8\.57e\+07"):
        _extensions.run_extensions(tmp_path / "x", config=cfg, studies=["sphere"], progress=False)
    assert not (tmp_path / "x").exists()


LONG_TEXT = " ".join(["tokens move like particles in the flow of attention"] * 500)  # 4500 words, 5002 tokens


def test_a_text_longer_than_the_models_positions_is_refused_with_its_token_count(monkeypatch, tmp_path):
    from attnflow.models import _layerwise, default_model_path, load_tokenizer, track
    from attnflow.models._tokenize import tokenize

    with pytest.raises(InputError, match=r"gives 5002 tokens; this model takes at most 512 "
                                         r"\(its max_position_embeddings\)"):
        tokenize(load_tokenizer(default_model_path(), 512), LONG_TEXT)
    # 510 one-token words and the two special tokens fit exactly
    assert len(tokenize(load_tokenizer(default_model_path(), 512), " ".join(["cat"] * 510)).input_ids) == 512
    monkeypatch.setattr(_layerwise, "analyse_sentence", _starts_work)
    with pytest.raises(InputError, match="5002 tokens"):
        track(LONG_TEXT, tmp_path / "t", progress=False)
    assert not (tmp_path / "t").exists()


def test_a_good_triple_search_with_an_impossible_gap_stops_in_one_sentence():
    from attnflow.probe._systems import sample_good_triples

    def too_long(*_):
        raise TimeoutError("the search ran past 30 s")

    signal.signal(signal.SIGALRM, too_long)
    signal.alarm(30)  # the search used to try 10^5 draws (about 6 minutes)
    try:
        t = time.perf_counter()
        with pytest.raises(InputError, match=r"system\.min_gap = 100: only 0 of the 2 good triples .* in 2000 draws"):
            sample_good_triples(0, 2, 3, 4, 100.0)
    finally:
        signal.alarm(0)
    assert time.perf_counter() - t < 30
    # a condition that can be met: the same triples as the search without its bound
    Q, K, V, x0 = sample_good_triples(0, 3, 3, 4, 0.1)
    assert V.shape == (3, 3, 3) and x0.shape == (3, 4, 3)


def test_check_work_names_the_key_and_the_size_that_would_finish(monkeypatch):
    from attnflow._resources import check_work, work_seconds

    monkeypatch.setenv("ATTNFLOW_WORK_LIMIT", "100")
    assert check_work("a small run", 0.0, [("layers", 10, 10, 1)], steps=1e7) == pytest.approx(10.0)
    with pytest.raises(InputError, match=r"lower layers to at most about 1e\+08 "):
        check_work("a long run", 0.0, [("n", 32, 32, 2), ("layers", 1e9, 120, 1)], steps=1e9)
    assert work_seconds(0.0, 1e9) == pytest.approx(1000.0)  # the sequential floor: 1 us a step
    monkeypatch.setenv("ATTNFLOW_WORK_LIMIT", "soon")
    with pytest.raises(InputError, match="ATTNFLOW_WORK_LIMIT must be a positive number of seconds"):
        check_work("a run", 1.0, [("n", 1, 1, 1)])


# -- attnflow.load -------------------------------------------------------------------------------------


@pytest.mark.parametrize("content, what", [(b"", "it is an empty file (0 bytes)"),
                                           (b"t, x\n0, 1\n", "it is not an .npz file"),
                                           (None, "it is a single NumPy array")])
def test_load_of_a_file_that_is_not_a_simulation_says_what_it_is(tmp_path, content, what):
    path = tmp_path / "sim.npz"
    if content is None:
        with open(path, "wb") as fh:
            np.save(fh, np.arange(3.0))
    else:
        path.write_bytes(content)
    with pytest.raises(InputError) as err:
        attnflow.load(path)
    text = str(err.value)
    assert text.startswith(f"{path} is not an attnflow simulation") and what in text
    assert "pickle" not in text and text.count(". ") == 0  # one sentence, no advice from numpy


def test_a_probe_weights_file_that_is_not_an_npz_archive_is_refused_in_one_sentence(tmp_path):
    from attnflow.probe import read_probe_config

    weights = tmp_path / "w.npz"
    weights.write_bytes(b"")
    cfg = tmp_path / "p.toml"
    cfg.write_text(f'study = "distance-to-failure"\n[system]\nweights_file = "{weights.name}"\n')
    with pytest.raises(InputError, match=r"system\.weights_file' = .* must be a readable \.npz file with arrays Q, K "
                                         r"and V .*; it is an empty file \(0 bytes\)\.$"):
        read_probe_config(cfg)
