r"""A probe config, read and parsed once: :func:`read_probe_config` resolves a TOML file over
its study's shipped default and :func:`parse_probe_config` range-checks every key of its study
(sizes are integers >= 1, tolerances, steps and temperatures finite and > 0, lists non-empty and
finite, t1 / dt a whole number of layers), reads and checks the user's own weights
(:func:`user_weights`) and refuses sizes that cannot fit in memory, returning a frozen, typed
config (:class:`FailureConfig`, :class:`BeyondPDConfig`, :class:`SensitivityConfig`) that the
studies read; nothing downstream reads the config's keys. A refusal is one
:class:`attnflow.errors.InputError` sentence naming the key, before anything compiles or the
output folder is claimed. The config's fingerprint (the resolved dict and the sha256 of
``system.weights_file``) is computed here, the same as it always was, so earlier folders resume.
"""

from __future__ import annotations

import hashlib
import os
import json
import tomllib
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Union

import numpy as np

from .. import _validate as v
from .._resources import check_fits
from ..errors import InputError
from ..runs import JobConfig, load_config, npz_problem
from .._weights import check_shapes
from ._systems import num_layers

__all__ = ["STUDIES", "read_probe_config", "load_probe_config", "parse_probe_config", "check_probe_config",
           "user_weights", "ProbeConfig", "FailureConfig", "BeyondPDConfig", "SensitivityConfig", "Dynamics",
           "Optimizer", "Head"]

#: study name -> shipped default config
STUDIES = {
    "distance-to-failure": "probe-distance-to-failure.toml",
    "beyond-pd": "probe-beyond-pd.toml",
    "sensitivity": "probe-sensitivity.toml",
}

_FLOAT = 8  # bytes of a float64


def _count(config: dict, key: str, minimum: int = 1, meaning: str = "a count") -> int:
    section, name = key.split(".")
    return v.check_int(f"config key '{key}'", config[section][name], minimum, meaning)


def _number(config: dict, key: str, meaning: str, **bounds) -> float:
    section, name = key.split(".")
    return v.check_number(f"config key '{key}'", config[section][name], meaning, **bounds)


def _flow_bytes(members: int, layers: int, n: int, d: int) -> float:
    """Reverse-mode memory of ``members`` flows of ``layers`` Euler layers (tokens, scores and
    attention weights of every layer are kept for the backward pass)."""
    return float(_FLOAT * members * layers * (3 * n * n + 4 * n * d))


def _fits(config: dict, what: str, nbytes: float, sizes: dict[str, tuple[float, int]]) -> None:
    """Refuse a run of ``nbytes`` that cannot fit; ``sizes``: config key -> (value, power) of what
    the bytes grow with, compared with the shipped default to name the key to lower."""
    shipped = load_config(None, STUDIES[config["study"]])
    default = {key: shipped[key.split(".")[0]][key.split(".")[1]] for key in sizes if key != _LAYERS}
    default[_LAYERS] = num_layers(shipped["dynamics"]["t1"], shipped["dynamics"]["dt"])
    check_fits(what, nbytes, [(key, value, default[key], power) for key, (value, power) in sizes.items()])


_LAYERS = "the number of layers dynamics.t1 / dynamics.dt"


def _common(config: dict) -> int:
    """seed, dynamics (and the optimiser, when the study has one); returns the number of layers."""
    v.check_int("config key 'seed'", config["seed"], 0, "the seed of every random draw")
    if config["seed"] >= 2**32:
        raise InputError(f"config key 'seed' must be < 2**32 (a NumPy and JAX seed), got {config['seed']}.")
    layers = num_layers(config["dynamics"]["t1"], config["dynamics"]["dt"])
    if "optimizer" in config:
        _number(config, "optimizer.learning_rate", "Adam's step size", low=0)
        _count(config, "optimizer.num_steps", meaning="Adam steps")
        _count(config, "optimizer.checkpoint_every", meaning="steps between checkpoints")
    return layers


def _ginibre(config: dict) -> tuple[int, int, int]:
    """system.d, n, num_triples, min_gap of Ginibre-based triples; returns (d, n, num_triples)."""
    d = _count(config, "system.d", 2, "the token dimension; Def 4.1 compares lambda_1 with lambda_2")
    n = _count(config, "system.n", 2, "tokens; their initial diameter is the unit of length")
    num = _count(config, "system.num_triples", meaning="good triples")
    _number(config, "system.min_gap", "the least |lambda_1| - |lambda_2|", low=0, closed="low")
    return d, n, num


def user_weights(config: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    r"""The user's own (Q, K, V0) of a distance-to-failure config, as float64 arrays with a leading
    triple axis B (Q, K: (B, m, d), V0: (B, d, d)), from the ``[weights]`` table (``Q``, ``K``,
    ``V`` as nested lists) or from ``system.weights_file`` (an ``.npz`` with arrays Q, K, V; a
    matrix for one triple or a stack for several); None when neither is given.

    Example:
        >>> from attnflow.probe import load_probe_config
        >>> from attnflow.probe._config import user_weights
        >>> c = load_probe_config("probe-distance-to-failure.toml",
        ...                       {"weights": {"Q": [[1.0, 0.0], [0.0, 1.0]], "K": [[1.0, 0.0], [0.0, 1.0]],
        ...                                    "V": [[1.0, 0.0], [0.0, 0.5]]}})
        >>> [a.shape for a in user_weights(c)]
        [(1, 2, 2), (1, 2, 2), (1, 2, 2)]
    """
    table, file = config.get("weights", {}), config["system"].get("weights_file", "")
    if table and file:
        raise InputError(f"give the weights either as the [weights] table or as system.weights_file, not both "
                         f"(got the table and weights_file = {file!r}).")
    if not (table or file):
        return None
    if file:
        where = f"system.weights_file {file}"
        expected = (f"config key 'system.weights_file' = {file!r} must be a readable .npz file with arrays Q, K and "
                    "V (a relative path is read from the config file's folder)")
        problem = npz_problem(file) if os.path.isfile(file) else None
        if problem is not None:
            raise InputError(f"{expected}; {problem}.")
        try:
            with np.load(file, allow_pickle=False) as data:
                arrays = {k: data[k] for k in data.files}
        except (OSError, EOFError, ValueError, zipfile.BadZipFile) as err:
            raise InputError(f"{expected}: {err}.") from None
    else:
        where, arrays = "[weights]", table
    if sorted(arrays) != ["K", "Q", "V"]:
        raise InputError(f"{where} must hold exactly Q, K and V, got {', '.join(sorted(arrays)) or 'nothing'}.")
    out = {}
    for name in ("Q", "K", "V"):
        try:
            a = np.asarray(arrays[name])
        except ValueError:  # ragged nested lists
            raise InputError(f"{where} {name} must be a matrix (nested lists of equal length), got a ragged list.") from None
        v.check_array(f"{where} {name}", a, "a matrix, or a stack of matrices for several triples", ranks=(2, 3))
        out[name] = np.asarray(a, np.float64)
    Q, K, V = out["Q"], out["K"], out["V"]
    try:
        check_shapes(*(np.broadcast_to(0.0, a.shape[-2:]) for a in (Q, K, V)))  # each triple's shapes
    except InputError as err:
        raise InputError(f"{where}: {err}") from None
    sizes = {a.shape[0] for a in (Q, K, V) if a.ndim == 3}
    if len(sizes) > 1:
        raise InputError(f"{where} Q, K and V must stack the same number of triples, got {sorted(sizes)}.")
    if V.shape[-1] < 2:
        raise InputError(f"{where} V must be (d, d) with d >= 2 (Def 4.1 compares lambda_1 with lambda_2), "
                         f"got {V.shape[-2:]}.")
    B = sizes.pop() if sizes else 1
    return tuple(np.broadcast_to(a, (B,) + a.shape[-2:]).copy() for a in (Q, K, V))


def _failure(config: dict) -> tuple[dict, tuple | None]:
    layers = _common(config)
    d, n, num = _ginibre(config)
    fa = config["failure"]
    _number(config, "failure.threshold", "the hyperplane residual at which clustering is lost", low=0)
    _number(config, "failure.temperature", "the soft levels' width", low=0)
    # on the ladder ||V||_F = ||V0||_F, so ||V - V0||_F <= 2 ||V0||_F
    v.check_list("failure.radii", fa["radii"], "relative perturbation sizes",
                 item=lambda k, r: v.check_number(f"config key '{k}'", r, "a radius of the ladder", low=0, high=2))
    weights = user_weights(config)
    identity = {}
    if weights is not None:
        num, d = weights[2].shape[0], weights[2].shape[-1]
        if config["system"]["weights_file"]:
            identity["weights_sha256"] = hashlib.sha256(Path(config["system"]["weights_file"]).read_bytes()).hexdigest()
    members = num * len(fa["radii"])
    _fits(config, f"distance to failure ({members} members of {n} tokens in d = {d}, {layers} layers)",
          _flow_bytes(members, layers, n, d), {"system.n": (n, 2), _LAYERS: (layers, 1), "system.num_triples": (num, 1)})
    return identity, weights


def _beyond_pd(config: dict) -> dict:
    layers = _common(config)
    ch = config["check"]
    d = _count(config, "system.d", 2, "the token dimension (the tokens are drawn in the plane or beyond)")
    n = _count(config, "system.n", 2, "tokens; their initial diameter is the unit of length")
    starts = _count(config, "system.num_starts", meaning="independent searches")
    _number(config, "system.qk_norm", "the fixed ||Q^T K||_F", low=0)
    _number(config, "objective.temperature", "the soft cluster count's width", low=0)
    _number(config, "objective.pd_margin", "how far lambda_min(sym Q^T K) / ||Q^T K||_F stays below 0", low=0, high=1)
    _number(config, "objective.penalty", "the weight of the not-PD penalty", low=0, closed="low")
    _number(config, "check.rel_tol", "the cluster tolerance, relative to the initial diameter", low=0, high=1)
    factors = v.check_list("check.horizons", ch["horizons"], "multiples of dynamics.t1",
                           item=lambda k, f: v.check_number(f"config key '{k}'", f, "a multiple of dynamics.t1", low=0))
    if factors != sorted(factors):
        raise InputError(f"config key 'check.horizons' must be increasing (the verdict compares the first and the "
                         f"last horizon), got {factors}.")
    for i, f in enumerate(factors):
        v.check_layers(f"check.horizons[{i}] x dynamics.t1", f * config["dynamics"]["t1"], "dynamics.dt",
                       config["dynamics"]["dt"])
    _fits(config, f"beyond-pd ({starts} searches of {n} tokens in d = {d}, {layers} layers)",
          _flow_bytes(starts, layers, n, d), {"system.n": (n, 2), _LAYERS: (layers, 1), "system.num_starts": (starts, 1)})
    return {}


def _sensitivity(config: dict) -> dict:
    layers = _common(config)
    source = v.check_choice("config key 'system.source'", config["system"]["source"], ("ginibre", "minilm"),
                            "where the systems come from")
    _number(config, "levels.temperature", "the soft levels' width", low=0)
    _number(config, "check.fd_step", "the central-difference step", low=0)
    _number(config, "check.fd_tolerance", "the largest accepted relative error", low=0)
    if source == "minilm":
        _count(config, "head.layer", 0, "a parameter layer, from 0")
        _count(config, "head.head", 0, "a head, from 0")
        if not config["head"]["text"].strip():
            raise InputError("config key 'head.text' must be a non-empty sentence (the tokens the head acts on), got ''.")
        from ..models import read_config  # the model's sizes (config.json only), before any weight is read

        head = config["head"]
        model = read_config(head["model"] or None)
        for key, value, size, what in (("head.layer", head["layer"], model.num_param_layers, "parameter layer(s)"),
                                       ("head.head", head["head"], model.num_heads, "head(s) a layer")):
            if value >= size:
                raise InputError(f"config key '{key}' must be below {size} (the model has {size} {what}, counted "
                                 f"from 0), got {value}.")
        return {}
    d, n, num = _ginibre(config)
    _fits(config, f"sensitivity ({n} tokens in d = {d}, {layers} layers)", _flow_bytes(2, layers, n, d),
          {"system.n": (n, 2), _LAYERS: (layers, 1)})
    return {}


@dataclass(frozen=True)
class Dynamics:
    """``[dynamics]``: the horizon t1 and the layer step dt (``layers`` = t1 / dt, a whole number)."""

    t1: float
    dt: float
    layers: int


@dataclass(frozen=True)
class Optimizer:
    """``[optimizer]``: Adam's step size, its number of steps and the steps between checkpoints."""

    learning_rate: float
    num_steps: int
    checkpoint_every: int


@dataclass(frozen=True)
class FailureSystem:
    """distance-to-failure ``[system]``: Ginibre triples (d, num_triples, min_gap) of n tokens, or the
    user's weights file."""

    d: int
    n: int
    num_triples: int
    min_gap: float
    weights_file: str


@dataclass(frozen=True)
class FailureSearch:
    """``[failure]``: the hyperplane residual at which clustering is lost, the soft levels' width, the radii."""

    threshold: float
    temperature: float
    radii: tuple[float, ...]


@dataclass(frozen=True)
class BeyondPDSystem:
    """beyond-pd ``[system]``: d, n tokens, independent searches, the fixed ||Q^T K||_F."""

    d: int
    n: int
    num_starts: int
    qk_norm: float


@dataclass(frozen=True)
class Objective:
    """beyond-pd ``[objective]``: the soft cluster count's width, the not-PD margin and penalty."""

    temperature: float
    pd_margin: float
    penalty: float


@dataclass(frozen=True)
class ClusterCheck:
    """beyond-pd ``[check]``: the cluster tolerance and the horizons (multiples of t1) of the re-runs."""

    rel_tol: float
    horizons: tuple[float, ...]


@dataclass(frozen=True)
class SensitivitySystem:
    """sensitivity ``[system]``: the source ("ginibre" or "minilm") and the Ginibre triples' sizes."""

    source: str
    d: int
    n: int
    num_triples: int
    min_gap: float


@dataclass(frozen=True)
class Head:
    """sensitivity ``[head]``: a trained head (model folder, "" = built in; parameter layer; head),
    the sentence it reads, and whether its biases are kept."""

    model: str
    layer: int
    head: int
    text: str
    biases: bool


@dataclass(frozen=True)
class FDCheck:
    """sensitivity ``[check]``: the central-difference step and the largest accepted relative error."""

    fd_step: float
    fd_tolerance: float


@dataclass(frozen=True)
class _Parsed(JobConfig):
    """What every parsed probe config has: ``study``, ``seed``, ``dynamics``, the ``identity`` of
    what the run reads beyond the config (the sha256 of ``system.weights_file``), the ``fingerprint``
    (of the resolved config and that identity) and :meth:`as_dict` (the resolved config)."""

    seed: int
    dynamics: Dynamics
    kind = "probe"


@dataclass(frozen=True)
class FailureConfig(_Parsed):
    """A checked distance-to-failure config; ``weights``: the user's (Q, K, V0) stacks, or None."""

    system: FailureSystem = None
    failure: FailureSearch = None
    optimizer: Optimizer = None
    weights: tuple | None = field(default=None, repr=False, compare=False)
    study: str = "distance-to-failure"


@dataclass(frozen=True)
class BeyondPDConfig(_Parsed):
    """A checked beyond-pd config."""

    system: BeyondPDSystem = None
    objective: Objective = None
    optimizer: Optimizer = None
    check: ClusterCheck = None
    study: str = "beyond-pd"


@dataclass(frozen=True)
class SensitivityConfig(_Parsed):
    """A checked sensitivity config (``head`` is read when ``system.source`` is "minilm")."""

    system: SensitivitySystem = None
    levels_temperature: float = None
    check: FDCheck = None
    head: Head = None
    study: str = "sensitivity"


ProbeConfig = Union[FailureConfig, BeyondPDConfig, SensitivityConfig]


def _table(cls, table: dict):
    """The frozen dataclass ``cls`` of a checked table (lists become tuples)."""
    return cls(**{k: tuple(x) if isinstance(x, list) else x for k, x in table.items() if k in cls.__dataclass_fields__})


def _typed(config: dict, identity: dict, weights: tuple | None) -> ProbeConfig:
    dy = config["dynamics"]
    common = dict(seed=config["seed"], dynamics=Dynamics(dy["t1"], dy["dt"], num_layers(dy["t1"], dy["dt"])),
                  identity=identity, source=json.loads(json.dumps(config)))
    study = config["study"]
    if study == "distance-to-failure":
        return FailureConfig(**common, system=_table(FailureSystem, config["system"]),
                             failure=_table(FailureSearch, config["failure"]),
                             optimizer=_table(Optimizer, config["optimizer"]), weights=weights)
    if study == "beyond-pd":
        return BeyondPDConfig(**common, system=_table(BeyondPDSystem, config["system"]),
                              objective=_table(Objective, config["objective"]),
                              optimizer=_table(Optimizer, config["optimizer"]), check=_table(ClusterCheck, config["check"]))
    return SensitivityConfig(**common, system=_table(SensitivitySystem, config["system"]),
                             levels_temperature=config["levels"]["temperature"], check=_table(FDCheck, config["check"]),
                             head=_table(Head, config["head"]))


def parse_probe_config(config: dict) -> ProbeConfig:
    """Check every key of a resolved probe config (see the module docstring) and return it frozen and
    typed, with the fingerprint of the config and of ``system.weights_file``'s bytes.

    Example:
        >>> from attnflow.probe import load_probe_config, parse_probe_config
        >>> c = parse_probe_config(load_probe_config("probe-beyond-pd.toml"))
        >>> c.study, c.system.num_starts, c.dynamics.layers, c.check.horizons
        ('beyond-pd', 8, 60, (1.0, 2.0, 4.0))
    """
    checks = {"distance-to-failure": _failure, "beyond-pd": _beyond_pd, "sensitivity": _sensitivity}
    study = v.check_choice("config key 'study'", config.get("study"), tuple(checks), "the probe study")
    identity, weights = checks[study](config) if study == "distance-to-failure" else (checks[study](config), None)
    return _typed(config, identity, weights)


def check_probe_config(config: dict) -> dict:
    """Check every key of a resolved probe config (:func:`parse_probe_config`); returns the identity
    of what the run reads beyond the config (the sha256 of ``system.weights_file``), which is folded
    into its fingerprint.

    Example:
        >>> from attnflow.probe import check_probe_config, load_probe_config
        >>> c = load_probe_config("probe-beyond-pd.toml")
        >>> check_probe_config(c)
        {}
        >>> c["optimizer"]["learning_rate"] = -0.1
        >>> try:
        ...     check_probe_config(c)
        ... except ValueError as err:
        ...     print(err)
        config key 'optimizer.learning_rate' must be a finite number > 0 (Adam's step size), got -0.1.
    """
    return parse_probe_config(config).identity


def read_probe_config(path: str | Path, overrides: dict | None = None) -> ProbeConfig:
    """The parsed config of a probe (:func:`parse_probe_config`): the shipped default of its ``study``
    with the file's values (and then ``overrides``, a nested dict) on top (a relative
    ``system.weights_file`` in the file is read from the file's folder).

    Example:
        >>> from attnflow.probe import read_probe_config
        >>> c = read_probe_config("probe-sensitivity.toml", {"system": {"num_triples": 2}})
        >>> c.study, c.system.num_triples
        ('sensitivity', 2)
    """
    from ..runs import config_path, merge_config

    p = config_path(path)
    if not p.is_file():
        raise InputError(f"probe config {path} does not exist (shipped: {', '.join(STUDIES.values())}).")
    try:
        with open(p, "rb") as fh:
            study = tomllib.load(fh).get("study")
    except tomllib.TOMLDecodeError as err:
        raise InputError(f"probe config {p} is not valid TOML: {err}.") from err
    if study not in STUDIES:
        raise InputError(f"probe config {p} must set study to one of {sorted(STUDIES)}, got {study!r}.")
    config = load_config(p, STUDIES[study])
    weights_file = config["system"].get("weights_file", "")
    if weights_file and not Path(weights_file).is_absolute():  # read from the config file's folder
        config["system"]["weights_file"] = str((p.parent / weights_file).resolve())
    if overrides:
        config = merge_config(config, overrides, where="overrides")
    if config["study"] != study:
        raise InputError("the study of a probe config cannot be overridden.")
    return parse_probe_config(config)


def load_probe_config(path: str | Path, overrides: dict | None = None) -> dict:
    """The resolved config of a probe as a dict, checked (:func:`read_probe_config`, whose parsed
    config :func:`attnflow.probe.run_probe` also takes).

    Example:
        >>> from attnflow.probe import load_probe_config
        >>> c = load_probe_config("probe-sensitivity.toml", {"system": {"num_triples": 2}})
        >>> c["study"], c["system"]["num_triples"]
        ('sensitivity', 2)
    """
    return read_probe_config(path, overrides).as_dict()
