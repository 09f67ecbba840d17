r"""The extensions config, parsed once: :func:`parse_extensions_config` checks every key of a
resolved ``configs/extensions.toml`` (every study's table, selected or not) and returns a frozen
:class:`ExtensionsConfig` whose studies' settings are frozen, typed tables (lists become tuples);
:func:`check_extensions_config` adds the selected studies and their memory. Nothing downstream
reads the config's keys. A refusal is one :class:`~attnflow.errors.InputError` sentence naming
the key.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from types import MappingProxyType
from typing import Mapping, Union

import numpy as np

from .. import _validate as v
from .._resources import attention_flops, check_count, check_fits, check_work
from ..errors import InputError
from ..runs import JobConfig, load_config
from ..spectral import check_good_triple

__all__ = ["STUDY_NAMES", "SAVES", "save_every", "Sec12_2Settings", "MultiheadSettings", "AlbertSettings",
           "SphereSettings", "ExtensionsConfig", "parse_extensions_config", "check_extensions_config"]

#: the studies, in report order
STUDY_NAMES = ("sec12_2", "multihead", "albert", "causal", "sphere")
#: saves per layer stack of each study that records a trajectory (its figures' resolution in time)
SAVES = {"sec12_2": 40, "multihead": 60, "causal": 100, "sphere": 100}


def save_every(study: str, layers: int) -> int:
    """Layers between two saves of ``study``'s stacks (``layers`` must be a multiple of it).

    Example:
        >>> from attnflow.report._extensions_config import save_every
        >>> save_every("sec12_2", 800), save_every("albert", 300)
        (20, 300)
    """
    return max(1, layers // SAVES[study]) if study in SAVES else layers


class _Table:
    def as_dict(self) -> dict:
        """The table as a dict in the config's key order (tuples as lists: as written to config.json)."""
        plain = lambda x: [plain(y) for y in x] if isinstance(x, tuple) else x
        return {f.name: plain(getattr(self, f.name)) for f in fields(self)}


@dataclass(frozen=True)
class Sec12_2Settings(_Table):
    """``[sec12_2]``: the good V (d x d), n tokens, clouds, Euler layers of step dt, the random W draws,
    the hyperplane-level gap and the collapse threshold."""

    V: tuple[tuple[float, ...], ...]
    n: int
    clouds: int
    dt: float
    layers: int
    random_W_draws: int
    level_tol: float
    collapse_tol: float


@dataclass(frozen=True)
class MultiheadSettings(_Table):
    """``[multihead]``: the head counts H, n tokens in d dimensions, clouds, layers, the level gap."""

    heads: tuple[int, ...]
    n: int
    d: int
    clouds: int
    dt: float
    layers: int
    level_tol: float


@dataclass(frozen=True)
class AlbertSettings(_Table):
    """``[albert]``: the relative sizes epsilon of the per-layer perturbation, n, clouds, layers, level gap."""

    epsilons: tuple[float, ...]
    n: int
    clouds: int
    dt: float
    layers: int
    level_tol: float


@dataclass(frozen=True)
class SphereSettings(_Table):
    """``[causal]`` and ``[sphere]``: n tokens on the unit sphere of R^d, clouds, inverse temperatures,
    layers, the chordal cluster tolerance."""

    n: int
    d: int
    clouds: int
    betas: tuple[float, ...]
    dt: float
    layers: int
    cluster_tol: float


StudySettings = Union[Sec12_2Settings, MultiheadSettings, AlbertSettings, SphereSettings]
_TYPES = {"sec12_2": Sec12_2Settings, "multihead": MultiheadSettings, "albert": AlbertSettings,
          "causal": SphereSettings, "sphere": SphereSettings}


@dataclass(frozen=True)
class ExtensionsConfig(JobConfig):
    """A checked extensions config: the seed, the studies it selects (empty: all), ``[quick]``'s clouds,
    and every study's settings in a full and a ``--quick`` run. :meth:`as_dict`: the resolved TOML.

    Example:
        >>> from attnflow.report._extensions_config import parse_extensions_config
        >>> from attnflow.runs import load_config
        >>> c = parse_extensions_config(load_config(None, "extensions.toml"))
        >>> c.full["sphere"].clouds, c.quick["sphere"].clouds, c.full["sphere"].betas[:2]
        (4, 2, (0.5, 1.0))
    """

    seed: int
    studies: tuple[str, ...]
    quick_clouds: int
    full: Mapping[str, StudySettings]
    quick: Mapping[str, StudySettings]
    kind = "extensions"


#: the counts of a study's table: (smallest value, meaning)
_COUNTS = {"n": (1, "tokens per cloud"), "clouds": (1, "initial clouds per setting"), "layers": (1, "Euler layers"),
           "random_W_draws": (1, "draws of the random W"), "d": (1, "the token dimension")}
#: the tolerances of a study's table: (largest value, meaning)
_TOLS = {"level_tol": (1.0, "hyperplane gap tolerance, a fraction of the initial spread"),
         "collapse_tol": (1.0, "collapse threshold, a fraction of the initial size"),
         "cluster_tol": (2.0, "chordal distance on the unit sphere")}


def _check_V(rows) -> None:
    """``sec12_2.V``: a square matrix of finite numbers whose top-modulus eigenvalue is real, positive, simple."""
    square = bool(rows) and all(isinstance(r, list) and len(r) == len(rows) for r in rows)
    if not square or not np.all(np.isfinite(V := np.asarray(rows, float))) \
            or not check_good_triple(np.eye(len(V)), np.eye(len(V)), V).condition1:
        raise InputError(f"sec12_2.V must be a square matrix of finite numbers whose top-modulus eigenvalue is "
                         f"real, positive and simple (Def 4.1 (1)), got {rows}.")


def _settings(cfg: dict, name: str, quick: bool) -> StudySettings:
    """Study ``name``'s table (overlaid by ``[quick]`` with ``--quick``), every key checked."""
    s = dict(cfg[name])
    if quick:
        s.update({k: value for k, value in cfg["quick"].items() if k in s})
    key = lambda k: f"{name}.{k}"
    for k, (low, meaning) in _COUNTS.items():
        if k in s:
            v.check_int(key(k), s[k], low, meaning)
    v.check_number(key("dt"), s["dt"], "the layer step", low=0)
    check_count(key("layers"), s["layers"], fix=f"lower {name}.layers")
    if name in SAVES and s["layers"] % save_every(name, s["layers"]):
        raise InputError(f"{name}.layers must be a multiple of {save_every(name, s['layers'])} (the "
                         f"study saves every layers // {SAVES[name]} layers), got {s['layers']}.")
    for k, (high, meaning) in _TOLS.items():
        if k in s:
            v.check_number(key(k), s[k], meaning, low=0, high=high)
    if "betas" in s:
        v.check_list(key("betas"), s["betas"], "inverse temperatures",
                     item=lambda n, b: v.check_number(n, b, "an inverse temperature", low=0))
    if "epsilons" in s:
        v.check_list(key("epsilons"), s["epsilons"], "relative sizes of the per-layer perturbation",
                     item=lambda n, e: v.check_number(n, e, "a relative size", low=0, closed="low"))
    if "heads" in s:
        v.check_list(key("heads"), s["heads"], "head counts", item=lambda n, h: v.check_int(n, h, 1, "heads"))
    if "V" in s:
        _check_V(s["V"])
    frozen = lambda x: tuple(frozen(y) for y in x) if isinstance(x, list) else x
    return _TYPES[name](**{k: frozen(x) for k, x in s.items()})


def parse_extensions_config(cfg: dict) -> ExtensionsConfig:
    """Check every key of a resolved extensions config (seed, studies, [quick] and every study's table,
    selected or not) and return it as a frozen :class:`ExtensionsConfig`."""
    v.check_int("seed", cfg["seed"], 0, "the seed of every study's draws")
    v.check_names("studies", cfg["studies"], list(STUDY_NAMES), "the studies to run; empty: all",
                  allow_empty=True)
    v.check_int("quick.clouds", cfg["quick"]["clouds"], 1, "initial clouds per setting with --quick")
    full = {name: _settings(cfg, name, False) for name in STUDY_NAMES}
    quick = {name: _settings(cfg, name, True) for name in STUDY_NAMES}
    return ExtensionsConfig(seed=cfg["seed"], studies=tuple(cfg["studies"]), quick_clouds=cfg["quick"]["clouds"],
                            full=MappingProxyType(full), quick=MappingProxyType(quick), source=json.loads(json.dumps(cfg)))


def _check_memory(name: str, s: StudySettings) -> None:
    """Refuse a layer stack of study ``name`` (settings ``s``) whose attention scores (clouds x heads x n x n),
    saved tokens (clouds x saves x n x d) and per-layer weights cannot fit in memory."""
    V, epsilons = getattr(s, "V", None), getattr(s, "epsilons", None)
    n, clouds, d = s.n, s.clouds, len(V) if V is not None else getattr(s, "d", 2)
    saves = s.layers // save_every(name, s.layers) + 1 if name in SAVES else 2
    heads, default = max(getattr(s, "heads", [1])), load_config(None, "extensions.toml")[name]
    nbytes = 4.0 * clouds * heads * n * n * 8 + 4.0 * clouds * saves * n * d * 8  # scores; saved tokens
    keys = [(f"{name}.n", n, default["n"], 2), (f"{name}.clouds", clouds, default["clouds"], 1)]
    if epsilons is not None:  # one perturbed weight triple per layer
        nbytes += 2.0 * s.layers * 3 * d * d * 8
        keys.append((f"{name}.layers", s.layers, default["layers"], 1))
    check_fits(f"a layer stack of the {name} study ({clouds} clouds of {n} tokens, {saves} saves)", nbytes, keys)


def study_work(name: str, s: StudySettings) -> tuple[str, float, float, list]:
    """The least work of study ``name`` with settings ``s``, for :func:`attnflow._resources.check_work`: (what,
    flops, sequential steps, the keys it grows with). Each of the study's layer stacks (sec12_2: two readings
    x four (sigma, W); multihead: one per head count, its heads each; albert: one per epsilon; causal: causal
    and full per beta; sphere: one per beta) runs ``clouds`` clouds through ``layers`` evaluations of the
    attention field (:func:`attnflow._resources.attention_flops`), one stack after another.

    Example:
        >>> from attnflow.report._extensions_config import parse_extensions_config, study_work
        >>> from attnflow.runs import load_config
        >>> what, flops, steps, keys = study_work("sphere", parse_extensions_config(load_config(None,
        ...     "extensions.toml")).full["sphere"])
        >>> what, f"{flops:.3g}", steps
        ('the sphere study (7 layer stack(s) of 4 clouds of 32 tokens, 600 layers)', '2.35e+08', 4200.0)
    """
    V = getattr(s, "V", None)
    d = len(V) if V is not None else getattr(s, "d", 2)
    stacks, fields_ = {"sec12_2": (8, 8), "multihead": (len(getattr(s, "heads", ())), sum(getattr(s, "heads", ()))),
                       "albert": (len(getattr(s, "epsilons", ())),) * 2,
                       "causal": (2 * len(getattr(s, "betas", ())),) * 2,
                       "sphere": (len(getattr(s, "betas", ())),) * 2}[name]
    flops = float(s.clouds) * s.layers * fields_ * attention_flops(s.n, d)
    default = load_config(None, "extensions.toml")[name]
    keys = [(f"{name}.layers", s.layers, default["layers"], 1), (f"{name}.n", s.n, default["n"], 2),
            (f"{name}.clouds", s.clouds, default["clouds"], 1)]
    what = f"the {name} study ({stacks} layer stack(s) of {s.clouds} clouds of {s.n} tokens, {s.layers} layers)"
    return what, flops, float(s.layers) * stacks, keys


def check_extensions_config(config: ExtensionsConfig | dict, selected: list[str],
                            quick: bool) -> dict[str, StudySettings]:
    """The studies ``selected`` checked (a dict config is parsed first, every key checked), the memory of
    their layer stacks and their work (:func:`study_work`); returns their settings, in the order selected.

    Example:
        >>> from attnflow.report._extensions_config import check_extensions_config
        >>> from attnflow.runs import load_config
        >>> list(check_extensions_config(load_config(None, "extensions.toml"), ["albert"], True))
        ['albert']
    """
    if not isinstance(config, ExtensionsConfig):
        config = parse_extensions_config(config)
    v.check_names("the selected studies", selected, list(STUDY_NAMES), "the studies to run")
    settings = config.quick if quick else config.full
    for name in selected:
        _check_memory(name, settings[name])
        what, flops, steps, keys = study_work(name, settings[name])
        check_work(what, flops, keys, steps=steps)
    return {name: settings[name] for name in selected}
