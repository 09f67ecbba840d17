r"""The reproduce config, parsed once: :func:`parse_reproduce_config` checks every key of a
resolved ``configs/reproduce.toml`` (globally, in ``[quick]`` and in every case's table, selected
or not) and returns a frozen :class:`ReproduceConfig`; :func:`resolve_settings` gives one case's
:class:`~attnflow.report.CaseSettings` (refusing an Euler horizon that is not a whole number
of layers, and a saved trajectory that cannot fit in memory). Nothing downstream reads the
config's keys. A refusal is one :class:`~attnflow.errors.InputError` sentence naming the key.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

from .. import _validate as v
from .._resources import attention_flops, check_count, check_fits, check_work
from ..runs import JobConfig, load_config
from ._base import CaseSettings
from ._catalogue import CASES, EULER_STEPS

__all__ = ["ReproduceConfig", "parse_reproduce_config", "resolve_settings", "case_work", "GLOBAL_KEYS"]

#: the settings every case has (the config's top level; a case's table or [quick] may override them)
GLOBAL_KEYS = ("dtype", "batch", "rel_tol", "rank_tol", "num_saves", "max_steps", "gif_frames")

_fraction = lambda meaning: lambda key, x: v.check_number(key, x, meaning, low=0, high=1)
_positive = lambda meaning: lambda key, x: v.check_number(key, x, meaning, low=0)
#: the check of every setting a reproduce config may hold (globally, in [quick] or in a case's table)
_SETTINGS = {
    "dtype": lambda key, x: v.check_choice(key, x, ("float32", "float64"), "the precision of the solves"),
    "batch": lambda key, x: v.check_int(key, x, 1, "random initial configurations per case"),
    "n": lambda key, x: v.check_int(key, x, 1, "tokens"),
    "d": lambda key, x: v.check_int(key, x, 1, "the token dimension"),
    "num_saves": lambda key, x: v.check_int(key, x, 2, "save times from 0 to t1"),
    "max_steps": lambda key, x: check_count(key, v.check_int(key, x, 1, "steps of an adaptive solve"),
                                            fix=f"lower {key}"),
    "gif_frames": lambda key, x: v.check_int(key, x, 0, "frames per animation; 0: none"),
    "rel_tol": _fraction("the cluster and level tolerance, a fraction of the initial size"),
    "rank_tol": _fraction("the numerical rank's threshold, relative to the largest singular value"),
    "t1": _positive("the horizon"),
    "eps": _positive("the perturbation's size"),
    "x0_scale": _positive("the initial tokens' standard deviation"),
}


def _check_table(table: dict, prefix: str) -> None:
    """Check every known setting of one table of the config (``prefix``: ``""``, ``"quick."``, ``"thm2_1."``)."""
    for key, value in table.items():
        if key in _SETTINGS:
            _SETTINGS[key](f"{prefix}{key}", value)


@dataclass(frozen=True)
class ReproduceConfig(JobConfig):
    """A checked reproduce config: the seed, the cases it selects (empty: all), and every case's
    settings in a full and a ``--quick`` run (global keys, overlaid by the case's table, overlaid
    by ``[quick]``). :meth:`as_dict` is the resolved TOML as a dict (config.json, provenance).

    Example:
        >>> from attnflow.report import parse_reproduce_config
        >>> from attnflow.runs import load_config
        >>> c = parse_reproduce_config(load_config(None, "reproduce.toml"))
        >>> c.seed, c.full["thm2_1"].n, c.quick["thm2_1"].n, c.quick["remark7_9"].n
        (0, 20, 8, None)
    """

    seed: int
    cases: tuple[str, ...]
    defaults: CaseSettings  # the global keys
    full: Mapping[str, CaseSettings]
    quick: Mapping[str, CaseSettings]
    kind = "reproduce"


def _resolve(cfg: dict, name: str, quick: bool) -> CaseSettings:
    """Global settings, overlaid by the case's table, overlaid by [quick] (with ``--quick``) for the keys
    the case has."""
    s = {k: cfg[k] for k in GLOBAL_KEYS}
    s.update(cfg.get(name, {}))
    if quick:
        for key, value in cfg["quick"].items():
            if key in s or key in GLOBAL_KEYS:
                s[key] = value
    return CaseSettings(**s)


def parse_reproduce_config(cfg: dict) -> ReproduceConfig:
    """Check every key of a resolved reproduce config (seed, cases, the global settings, [quick] and
    every case's table, selected or not) and return it as a frozen :class:`ReproduceConfig`."""
    v.check_int("seed", cfg["seed"], 0, "the seed of every case's draws")
    v.check_names("cases", cfg["cases"], list(CASES), "the cases to run; empty: all", allow_empty=True)
    _check_table({k: cfg[k] for k in GLOBAL_KEYS}, "")
    _check_table(cfg["quick"], "quick.")
    for name in CASES:
        _check_table(cfg.get(name, {}), f"{name}.")
    return ReproduceConfig(
        seed=cfg["seed"], cases=tuple(cfg["cases"]), defaults=CaseSettings(**{k: cfg[k] for k in GLOBAL_KEYS}),
        full=MappingProxyType({name: _resolve(cfg, name, False) for name in CASES}),
        quick=MappingProxyType({name: _resolve(cfg, name, True) for name in CASES}),
        source=json.loads(json.dumps(cfg)))


def _saves(name: str, s: CaseSettings) -> int:
    """The states case ``name`` saves: every layer of an Euler case, else ``num_saves``."""
    return round(s.t1 / EULER_STEPS[name]) + 1 if name in EULER_STEPS else s.num_saves


def case_work(name: str, s: CaseSettings) -> tuple[float, float, list]:
    """The least work of case ``name`` with settings ``s``, for :func:`attnflow._resources.check_work`: (flops,
    sequential steps, the keys it grows with). Per run of the batch: the field at every layer of an Euler case
    (:func:`attnflow._resources.attention_flops`; an adaptive solve takes at least one step), and at every
    save the diagnostics of P (its singular values, about 4 n^3 flops) and P itself.

    Example:
        >>> from attnflow.report import parse_reproduce_config
        >>> from attnflow.report._config import case_work
        >>> from attnflow.runs import load_config
        >>> c = parse_reproduce_config(load_config(None, "reproduce.toml"))
        >>> flops, steps, keys = case_work("thm3_1_euler_dt01", c.full["thm3_1_euler_dt01"])
        >>> f"{flops:.3g}", steps
        ('6.02e+07', 100.0)
    """
    n = 2 if s.n is None else s.n  # the cases without n: two tokens (Remark 7.9)
    d = 3 if s.d is None else s.d  # cases without d: d <= 3
    saves = _saves(name, s)
    steps = float(saves - 1) if name in EULER_STEPS else 1.0
    flops = s.batch * (steps * attention_flops(n, d) + saves * (4.0 * n**3 + attention_flops(n, d)))
    default = load_config(None, "reproduce.toml")
    keys = [("batch", s.batch, default["batch"], 1), ("num_saves", s.num_saves, default["num_saves"], 1)]
    if s.n is not None:
        keys.append((f"{name}.n", n, default[name]["n"], 3))
    if name in EULER_STEPS:
        keys.append((f"{name}.t1", s.t1, default[name]["t1"], 1))
    return flops, steps, keys


def resolve_settings(config: ReproduceConfig | dict, name: str, quick: bool) -> CaseSettings:
    """Case ``name``'s settings (with ``--quick``: overlaid by [quick]); refuses an Euler case whose t1
    is not a whole number of its layers, a saved trajectory (P at every save: batch x saves x n x n; an
    Euler case saves every layer) that cannot fit in memory, and work that cannot finish
    (:func:`case_work`, :func:`attnflow._resources.check_work`). A dict is parsed first
    (:func:`parse_reproduce_config`)."""
    if not isinstance(config, ReproduceConfig):
        config = parse_reproduce_config(config)
    s = (config.quick if quick else config.full)[name]
    if name in EULER_STEPS:
        v.check_layers(f"{name}.t1", s.t1, "its Euler step dt", EULER_STEPS[name])
    default = load_config(None, "reproduce.toml")
    saves = _saves(name, s)
    if s.n is not None:
        n, batch, d = s.n, s.batch, 3 if s.d is None else s.d  # cases without d: d <= 3
        keys = [(f"{name}.n", n, default[name]["n"], 2), ("batch", batch, default["batch"], 1)]
        keys.append((f"{name}.t1", s.t1, default[name]["t1"], 1) if name in EULER_STEPS else
                    ("num_saves", saves, default["num_saves"], 1))
        check_fits(f"case {name} ({batch} runs of {n} tokens, {saves} saves)",
                   3.0 * batch * saves * n * n * 8 + 4.0 * batch * saves * n * d * 8, keys)  # P; tokens, states
    flops, steps, keys = case_work(name, s)
    check_work(f"case {name} ({s.batch} runs of {2 if s.n is None else s.n} tokens, {saves} saves)", flops, keys,
               steps=steps)
    return s
