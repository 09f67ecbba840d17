"""Every key of the sweep, extensions and reproduce configs is checked before any work.

A bad value raises one :class:`InputError` sentence naming the key, before anything compiles and
before the run folder is created; sizes that cannot fit are refused with the size that would.
"""

import copy
import subprocess
import sys
from pathlib import Path

import pytest

from attnflow.errors import InputError
from attnflow.report import reproduce
from attnflow.report._extensions import STUDIES, check_extensions_config, run_extensions
from attnflow.report import parse_reproduce_config
from attnflow.report import case_names, resolve_settings
from attnflow.runio import load_config
from attnflow.sweep import load_sweep_config, run_sweep, wilson_interval
from attnflow.sweep._dynamics import check_dynamics_config, check_dynamics_sizes
from attnflow.sweep._spectral import check_spectral_config, check_spectral_sizes

REPO = Path(__file__).resolve().parent.parent
# small runs (seconds) as bases, so that a check that stopped working fails a test instead of starting a long run
SMALL = {
    "dynamics": {"kind": "dynamics", "v_ensembles": ["positive"], "qk_ensembles": ["identity"], "d": [2],
                 "systems": 2, "n": 4, "clouds": 1, "t1": 0.2, "dt": 0.1, "run.chunk_size": 2},
    "spectral": {"kind": "spectral", "d": [2], "samples": [4], "run.chunk_size": 4},
    "extensions": {"studies": ["albert"], "albert.epsilons": [0.0], "albert.n": 4, "albert.clouds": 1,
                   "albert.layers": 2},
    "reproduce": {"cases": ["thm2_1"], "batch": 1, "num_saves": 2, "gif_frames": 0, "thm2_1.n": 4, "thm2_1.t1": 0.1},
}
JOB = {"dynamics": "sweep", "spectral": "sweep", "extensions": "extensions", "reproduce": "reproduce"}


def _toml(values: dict) -> str:
    """TOML text of {key or "table.key": value} (floats with repr: nan and inf are TOML literals)."""
    fmt = lambda x: (str(x).lower() if isinstance(x, bool) else f'"{x}"' if isinstance(x, str)
                     else f"[{', '.join(map(fmt, x))}]" if isinstance(x, list) else repr(x))
    tables: dict = {}
    for key, value in values.items():
        table, _, name = key.rpartition(".")
        tables.setdefault(table, []).append(f"{name} = {fmt(value)}")
    return "\n".join(("" if t == "" else f"[{t}]\n") + "\n".join(lines) for t, lines in
                     sorted(tables.items())) + "\n"


# (config, overrides of its small base, key the message must name)
BAD = [
    ("dynamics", {"rel_tol": float("nan")}, "rel_tol"),
    ("dynamics", {"rel_tol": -1.0}, "rel_tol"),
    ("dynamics", {"rel_tol": 1.5}, "rel_tol"),
    ("dynamics", {"max_clusters": -3}, "max_clusters"),
    ("dynamics", {"max_clusters": 1000}, "max_clusters"),
    ("dynamics", {"density": 5.0}, "density"),
    ("dynamics", {"density": float("nan")}, "density"),
    ("dynamics", {"dtype": "float16"}, "dtype"),
    ("dynamics", {"v_ensembles": []}, "v_ensembles"),
    ("dynamics", {"qk_ensembles": []}, "qk_ensembles"),
    ("dynamics", {"v_ensembles": ["ginibre", "ginibre"]}, "v_ensembles"),
    ("dynamics", {"v_ensembles": ["gaussian"]}, "v_ensembles"),
    ("dynamics", {"d": []}, "d"),
    ("dynamics", {"d": [0]}, "d[0]"),
    ("dynamics", {"d": [3, 3]}, "d"),
    ("dynamics", {"t1": float("inf")}, "t1"),
    ("dynamics", {"t1": -1.0}, "t1"),
    ("dynamics", {"dt": 0.0}, "dt"),
    ("dynamics", {"dt": 0.07}, "dt"),
    ("dynamics", {"dt": 1e-12}, "dt"),
    ("dynamics", {"systems": 0}, "systems"),
    ("dynamics", {"n": 0}, "n"),
    ("dynamics", {"n": 1e7}, "'n'"),
    ("dynamics", {"clouds": 0}, "clouds"),
    ("dynamics", {"seed": -1}, "seed"),
    ("dynamics", {"dynamics": "rnn"}, "dynamics"),
    ("dynamics", {"dynamics": "multihead", "heads": 0}, "heads"),
    ("dynamics", {"activation": "softplus"}, "activation"),
    ("dynamics", {"epsilon": -0.1}, "epsilon"),
    ("dynamics", {"epsilon": float("nan")}, "epsilon"),
    ("dynamics", {"ff_hidden": -1}, "ff_hidden"),
    ("dynamics", {"dynamics": "layered"}, "dtype"),
    ("dynamics", {"run.chunk_size": 0}, "run.chunk_size"),
    ("dynamics", {"run.eig_route": "gpu"}, "run.eig_route"),
    ("dynamics", {"run.table_formats": []}, "run.table_formats"),
    ("dynamics", {"run.table_formats": ["csv", "csv"]}, "run.table_formats"),
    ("dynamics", {"run.devices": -1}, "run.devices"),
    ("spectral", {"confidence": float("nan")}, "confidence"),
    ("spectral", {"confidence": 1.5}, "confidence"),
    ("spectral", {"confidence": 0.0}, "confidence"),
    ("spectral", {"ensembles": []}, "ensembles"),
    ("spectral", {"ensembles": ["ginibre", "ginibre"]}, "ensembles"),
    ("spectral", {"d": []}, "d"),
    ("spectral", {"samples": []}, "samples"),
    ("spectral", {"samples": [0]}, "samples[0]"),
    ("spectral", {"samples": [1, 2, 3]}, "samples"),
    ("spectral", {"dtype": "float16"}, "dtype"),
    ("spectral", {"density": 0.0}, "density"),
    ("extensions", {"seed": -1}, "seed"),
    ("extensions", {"studies": ["nope"]}, "studies"),
    ("extensions", {"studies": ["albert", "albert"]}, "studies"),
    ("extensions", {"quick.clouds": 0}, "quick.clouds"),
    ("extensions", {"causal.betas": [-1.0]}, "causal.betas"),
    ("extensions", {"sphere.betas": []}, "sphere.betas"),
    ("extensions", {"sphere.dt": float("inf")}, "sphere.dt"),
    ("extensions", {"causal.cluster_tol": 3.0}, "causal.cluster_tol"),
    ("extensions", {"albert.epsilons": [0.1, 0.1]}, "albert.epsilons"),
    ("extensions", {"albert.epsilons": [-0.5]}, "albert.epsilons"),
    ("extensions", {"albert.level_tol": float("nan")}, "albert.level_tol"),
    ("extensions", {"sec12_2.collapse_tol": 1.5}, "sec12_2.collapse_tol"),
    ("extensions", {"sec12_2.V": [[1.0, 2.0], [3.0]]}, "sec12_2.V"),
    ("extensions", {"sec12_2.V": [[-1.0, 0.0], [0.0, 0.5]]}, "sec12_2.V"),
    ("extensions", {"sec12_2.random_W_draws": 0}, "sec12_2.random_W_draws"),
    ("extensions", {"multihead.heads": []}, "multihead.heads"),
    ("extensions", {"multihead.layers": 301}, "multihead.layers"),
    ("extensions", {"multihead.d": 0}, "multihead.d"),
    ("reproduce", {"seed": -1}, "seed"),
    ("reproduce", {"dtype": "float16"}, "dtype"),
    ("reproduce", {"num_saves": 1}, "num_saves"),
    ("reproduce", {"gif_frames": -1}, "gif_frames"),
    ("reproduce", {"max_steps": 0}, "max_steps"),
    ("reproduce", {"rank_tol": float("nan")}, "rank_tol"),
    ("reproduce", {"cases": ["thm2_1", "thm2_1"]}, "cases"),
    ("reproduce", {"quick.num_saves": 0}, "quick.num_saves"),
    ("reproduce", {"thm2_1.t1": float("inf")}, "thm2_1.t1"),
    ("reproduce", {"remark7_9.t1": -1.0}, "remark7_9.t1"),
    ("reproduce", {"cases": ["thm3_1_euler_dt1"], "thm3_1_euler_dt1.t1": 10.5}, "thm3_1_euler_dt1.t1"),
    ("reproduce", {"cases": ["thm4_2_euler_dt01"], "thm4_2_euler_dt01.t1": 0.05}, "thm4_2_euler_dt01.t1"),
    ("reproduce", {"thm8_5.x0_scale": -4.0}, "thm8_5.x0_scale"),
    ("reproduce", {"remark7_9.eps": 0.0}, "remark7_9.eps"),
]


def _run_job(config: str, overrides: dict, tmp_path: Path):
    """Write the small base of ``config`` with ``overrides`` and run its job into ``tmp_path / "out"``."""
    path, out = tmp_path / "c.toml", tmp_path / "out"
    path.write_text(_toml({**SMALL[config], "run.progress": False, **overrides} if JOB[config] == "sweep"
                          else {**SMALL[config], **overrides}))
    if JOB[config] == "sweep":
        return run_sweep(load_sweep_config(path), out, progress=False)
    if JOB[config] == "extensions":
        return run_extensions(out, config=path, progress=False)
    return reproduce(out, config=path, progress=False, figures=False)


def test_small_bases_pass_the_checks():
    """The bases of the tables are valid: each bad value is the only thing wrong."""
    for config, base in SMALL.items():
        _checked(config, {k: v for k, v in base.items() if k not in ("studies", "cases")})


@pytest.mark.parametrize("config, overrides, key", BAD, ids=[f"{c}:{o}" for c, o, _ in BAD])
def test_bad_value_is_refused_naming_its_key_before_the_folder(tmp_path, config, overrides, key):
    with pytest.raises(InputError) as err:
        _run_job(config, overrides, tmp_path)
    message = str(err.value)
    assert key in message, message
    assert "\n" not in message and "Traceback" not in message
    assert not (tmp_path / "out").exists()


def test_shipped_configs_validate(monkeypatch):
    monkeypatch.setenv("ATTNFLOW_MEMORY_LIMIT", "8e9")
    for name, check, sizes in (("ginibre-dynamics.toml", check_dynamics_config, check_dynamics_sizes),
                               ("ginibre-spectral.toml", check_spectral_config, check_spectral_sizes)):
        cfg = load_config(None, name)
        sizes(check(cfg), 1)
    cfg = load_config(None, "extensions.toml")
    for quick in (False, True):
        assert list(check_extensions_config(cfg, list(STUDIES), quick)) == list(STUDIES)
    parsed = parse_reproduce_config(load_config(None, "reproduce.toml"))
    for quick in (False, True):
        for name in case_names():
            resolve_settings(parsed, name, quick)


def test_a_dict_config_is_checked_like_a_file(tmp_path):
    cfg = load_config(None, "ginibre-dynamics.toml")
    for change, key in ((lambda c: c.pop("rel_tol"), "rel_tol"), (lambda c: c.update(n=8.0), "'n'"),
                        (lambda c: c["run"].pop("chunk_size"), "run.chunk_size"),
                        (lambda c: c.update(kind="spectral"), "kind"), (lambda c: c.update(typo=1), "typo")):
        bad = copy.deepcopy(cfg)
        change(bad)
        with pytest.raises(InputError, match=key):
            check_dynamics_config(bad)


def test_wilson_interval_refuses_a_confidence_outside_0_1():
    with pytest.raises(InputError, match="confidence"):
        wilson_interval(3, 10, 1.5)


@pytest.mark.parametrize("name", ["ginibre-dynamics.toml", "extensions.toml"])
def test_non_utf8_config_is_refused_naming_the_file(tmp_path, name):
    bad = tmp_path / "latin1.toml"
    bad.write_bytes('kind = "dynamics"\n# d\xe9faut\n'.encode("latin-1"))
    with pytest.raises(InputError, match="latin1.toml.*UTF-8"):
        load_config(bad, name)
    with pytest.raises(InputError, match="latin1.toml.*UTF-8"):
        load_sweep_config(bad)


def _checked(config: str, overrides: dict) -> None:
    """The shipped config with ``overrides`` through its job's checks, sizes included (one device)."""
    name = {"dynamics": "ginibre-dynamics.toml", "spectral": "ginibre-spectral.toml"}.get(config, f"{config}.toml")
    cfg = load_config(None, name)
    for key, value in overrides.items():
        *tables, last = key.split(".")
        table = cfg
        for t in tables:
            table = table[t]
        table[last] = value
    if config == "dynamics":
        check_dynamics_sizes(check_dynamics_config(cfg), 1)
    elif config == "spectral":
        check_spectral_sizes(check_spectral_config(cfg), 1)
    elif config == "extensions":
        check_extensions_config(cfg, list(STUDIES), False)
    else:
        parsed = parse_reproduce_config(cfg)
        for case in case_names():
            resolve_settings(parsed, case, False)


# (config, overrides of the shipped config, the fix the refusal names)
TOO_BIG = [
    ("dynamics", {"n": 10_000_000}, "lower n to at most about"),
    ("dynamics", {"clouds": 10**9}, "lower clouds to at most about"),
    ("dynamics", {"d": [3, 100_000]}, "lower d to at most about"),
    ("dynamics", {"dynamics": "multihead", "heads": 10**7, "dtype": "float64"}, "lower heads to at most about"),
    ("dynamics", {"systems": 10**12}, "lower systems to at most about"),
    ("dynamics", {"systems": 10**8, "run.chunk_size": 10**8}, "lower run.chunk_size to at most about"),
    ("dynamics", {"dynamics": "layered", "dtype": "float64", "t1": 1e5, "dt": 1e-4},
     "lower t1 / dt (layers) to at most about"),
    ("spectral", {"d": [100_000], "samples": [10]}, "lower d to at most about"),
    ("spectral", {"samples": [10**12]}, "lower samples to at most about"),
    ("extensions", {"sphere.n": 10**6}, "lower sphere.n to at most about"),
    ("extensions", {"sec12_2.clouds": 10**9}, "lower sec12_2.clouds to at most about"),
    ("extensions", {"albert.layers": 10**9}, "lower albert.layers to at most about"),
    ("reproduce", {"thm2_1.n": 10**5}, "lower thm2_1.n to at most about"),
    ("reproduce", {"batch": 10**9}, "lower batch to at most about"),
    ("reproduce", {"num_saves": 10**9}, "lower num_saves to at most about"),
]


@pytest.mark.parametrize("config, overrides, fix", TOO_BIG, ids=[f"{c}:{o}" for c, o, _ in TOO_BIG])
def test_size_that_cannot_fit_is_refused_with_the_size_that_would(monkeypatch, config, overrides, fix):
    monkeypatch.setenv("ATTNFLOW_MEMORY_LIMIT", "1e9")
    with pytest.raises(InputError, match="needs about .* of memory, more than the 762.9 MiB") as err:
        _checked(config, overrides)
    assert fix in str(err.value), str(err.value)
    _checked(config, {})  # the shipped config fits in the same memory


@pytest.mark.parametrize("config", list(SMALL))
def test_size_refusal_comes_before_the_folder(tmp_path, monkeypatch, config):
    monkeypatch.setenv("ATTNFLOW_MEMORY_LIMIT", "100")
    with pytest.raises(InputError, match="needs about .* of memory"):
        _run_job(config, {}, tmp_path)
    assert not (tmp_path / "out").exists()


def test_a_layer_count_beyond_32_bits_is_refused():
    with pytest.raises(InputError, match="layers t1 / dt = 1e\\+10 exceeds 2147483647.*larger dt"):
        _checked("dynamics", {"t1": 1000.0, "dt": 1e-7})
    with pytest.raises(InputError, match="sphere.layers = 3e\\+09 exceeds 2147483647"):
        _checked("extensions", {"sphere.layers": 3 * 10**9})
    with pytest.raises(InputError, match="max_steps = 1.1e\\+12 exceeds 2147483647"):
        _checked("reproduce", {"max_steps": 2**40})


def test_cli_reports_a_bad_key_in_one_line_with_exit_status_2(tmp_path):
    config = tmp_path / "bad.toml"
    config.write_text(_toml({**SMALL["dynamics"], "d": []}))
    r = subprocess.run([sys.executable, "-m", "attnflow", "sweep", str(config), "--out", str(tmp_path / "o")],
                       cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("attnflow sweep: error: d must be a non-empty list"), r.stderr
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("argv, config, overrides, key", [
    (["extensions"], "extensions", {"causal.betas": [-1.0]}, "causal.betas"),
    (["reproduce", "--quick"], "reproduce", {"quick.t1": float("inf")}, "quick.t1"),
])
def test_cli_in_process_refuses_before_the_folder(tmp_path, capsys, argv, config, overrides, key):
    from attnflow.cli.main import main

    path = tmp_path / "bad.toml"
    path.write_text(_toml({**SMALL[config], **overrides}))
    assert main(argv + ["--config", str(path), "--out", str(tmp_path / "o"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and key in err, err
    assert not (tmp_path / "o").exists()


def test_a_bare_name_finds_the_shipped_config_and_a_missing_file_is_named(tmp_path, monkeypatch):
    """`attnflow meanfield meanfield-sphere`: a bare name that is no file here is the shipped config of that name
    (with or without .toml), for every job's loader; a file of that name in the working folder comes first; a
    missing path is refused naming it. The shipped S^2 overlay fits in memory and checks."""
    from attnflow.meanfield import check_meanfield_config, load_meanfield_config
    from attnflow.meanfield._run import check_meanfield_sizes
    from attnflow.phase import load_phase_config
    from attnflow.runs import CONFIG_DIR, config_path

    monkeypatch.chdir(tmp_path)
    assert config_path("meanfield-sphere") == CONFIG_DIR / "meanfield-sphere.toml"
    assert config_path("meanfield-sphere.toml") == CONFIG_DIR / "meanfield-sphere.toml"
    cfg = check_meanfield_config(load_meanfield_config("meanfield-sphere"))
    assert cfg.d == 3 and cfg.growth.n == 16384
    monkeypatch.setenv("ATTNFLOW_MEMORY_LIMIT", "8e9")
    assert check_meanfield_sizes(cfg)["units"] == 55
    assert load_phase_config("phase")["dynamics"] == "sphere"
    (tmp_path / "meanfield-sphere.toml").write_text("d = 2\n")
    assert check_meanfield_config(load_meanfield_config("meanfield-sphere.toml")).d == 2  # the local file
    with pytest.raises(InputError, match="no-such-config"):
        load_meanfield_config("no-such-config")
    with pytest.raises(InputError, match="sub/meanfield-sphere"):
        load_meanfield_config("sub/meanfield-sphere")  # a path with a folder is never a shipped name
