"""Each job's config is parsed once, at the edge, into a frozen, typed object that the job reads.

The reproduce config (attnflow.report._config), the extensions config
(attnflow.report._extensions_config) and the probe configs (attnflow.probe._config): the parse checks
every key (the refusals themselves are tested in test_config_validation.py and
test_probe_verdicts.py); the parsed object cannot be changed; its dict is the resolved config; the
probe's fingerprint is the one earlier folders were written with; and no other module of these jobs
reads a config key.
"""

import ast
import dataclasses
import pathlib

import pytest

from attnflow.probe import parse_probe_config, read_probe_config
from attnflow.report import parse_reproduce_config, resolve_settings
from attnflow.report._extensions_config import check_extensions_config, parse_extensions_config
from attnflow.runio import config_fingerprint, load_config

ROOT = pathlib.Path(__file__).resolve().parents[1] / "attnflow"


def test_the_reproduce_config_is_frozen_and_resolves_like_the_dict():
    raw = load_config(None, "reproduce.toml")
    c = parse_reproduce_config(raw)
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.seed = 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.full["thm2_1"].n = 3
    with pytest.raises(TypeError):
        c.full["thm2_1"] = None
    assert c.as_dict() == raw and c.as_dict() is not c.as_dict()
    s = resolve_settings(c, "thm8_5", False)
    assert s.as_dict() == {**{k: raw[k] for k in ("dtype", "batch", "rel_tol", "rank_tol", "num_saves", "max_steps",
                                                  "gif_frames")}, **raw["thm8_5"]}
    quick = resolve_settings(c, "remark7_9", True)
    assert (quick.n, quick.t1, quick.batch) == (None, raw["quick"]["t1"], raw["quick"]["batch"])


def test_the_extensions_config_is_frozen_with_tuples():
    raw = load_config(None, "extensions.toml")
    c = parse_extensions_config(raw)
    sphere = c.full["sphere"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        sphere.betas = (1.0,)
    assert isinstance(sphere.betas, tuple) and isinstance(c.full["sec12_2"].V[0], tuple)
    assert sphere.as_dict() == raw["sphere"]  # the config.json "resolved" table, lists and key order
    assert list(sphere.as_dict()) == list(raw["sphere"])
    assert c.quick["albert"].clouds == raw["quick"]["clouds"] != c.full["albert"].clouds
    assert list(check_extensions_config(c, ["causal", "albert"], True)) == ["causal", "albert"]


@pytest.mark.parametrize("name", ["probe-beyond-pd.toml", "probe-distance-to-failure.toml", "probe-sensitivity.toml"])
def test_a_probe_config_is_frozen_and_keeps_its_fingerprint(name):
    c = read_probe_config(name)
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.seed = 3
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.dynamics.dt = 1.0
    raw = c.as_dict()
    assert c.fingerprint == config_fingerprint({**raw, **c.identity})  # what earlier folders hold
    assert parse_probe_config(raw) == c
    assert c.dynamics.layers == round(raw["dynamics"]["t1"] / raw["dynamics"]["dt"])


def test_a_weights_file_is_read_once_into_the_parsed_config(tmp_path):
    import numpy as np

    V = np.array([[1.0, 0.2], [0.0, 0.4]])
    np.savez(tmp_path / "w.npz", Q=np.eye(2), K=np.eye(2), V=V)
    cfg = tmp_path / "c.toml"
    cfg.write_text('study = "distance-to-failure"\n[system]\nweights_file = "w.npz"\n')
    c = read_probe_config(cfg)
    assert set(c.identity) == {"weights_sha256"} and c.weights[2].shape == (1, 2, 2)
    assert np.array_equal(c.weights[2][0], V)


_CONFIG_NAMES = {"cfg", "config", "ctx", "head_cfg", "settings"}
_PARSERS = {ROOT / "report" / "_config.py", ROOT / "report" / "_extensions_config.py", ROOT / "probe" / "_config.py"}


def _key_reads(path: pathlib.Path) -> list[str]:
    """``name["key"]`` and ``name.get("key")`` on a config-like name, outside the parsers."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id in _CONFIG_NAMES \
                and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
            found.append(f"{path.name}:{node.lineno} {node.value.id}[{node.slice.value!r}]")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
                and isinstance(node.func.value, ast.Name) and node.func.value.id in _CONFIG_NAMES:
            found.append(f"{path.name}:{node.lineno} {node.func.value.id}.get")
    return found


def test_the_parse_is_the_only_place_config_keys_are_read():
    files = [p for folder in ("report", "probe") for p in (ROOT / folder).glob("*.py") if p not in _PARSERS]
    files += [ROOT / "cli" / name for name in ("reproduce.py", "probe.py", "extensions.py")]
    reads = [r for p in files for r in _key_reads(p)]
    assert not reads, reads


def test_the_case_order_is_written_out_not_registered_by_import():
    import attnflow.report._cases as cases
    from attnflow.report._catalogue import CASES, EULER_STEPS, ORDER

    assert list(CASES) == [fn.info.name for fn in ORDER]
    assert list(CASES)[-1] == "negative_controls"
    assert EULER_STEPS == {"thm3_1_euler_dt01": 0.1, "thm3_1_euler_dt1": 1.0, "thm4_2_euler_dt01": 0.1,
                           "thm4_2_euler_dt1": 1.0}
    defined = {fn.info.name for fn in vars(cases).values() if callable(fn) and hasattr(fn, "info")}
    assert defined <= set(CASES)
