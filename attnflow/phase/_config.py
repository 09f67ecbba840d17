"""A phase-diagram config, parsed once: TOML -> checked table -> frozen :class:`PhaseConfig`.

The shipped ``configs/phase.toml`` is the schema (no unknown or missing key, the default's
types). The grid keys (:data:`GRID_KEYS`) take a number, a list, or a range table
``{start, stop, num, spacing}``; every other key is checked as the sweeps' keys are. Each refusal
is one :class:`~attnflow.InputError` sentence naming the key, before anything compiles.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from dataclasses import dataclass

import jax.numpy as jnp
import numpy as np

from .. import _validate as v
from ..ensembles import QK_ENSEMBLES, V_ENSEMBLES
from ..errors import InputError
from ..runs import JobConfig, RunSettings, check_job_table, config_path, load_config, read_toml, run_settings
from .._sweep_dynamics import SWEEP_DYNAMICS, SweepDynamics, sweep_dynamics

#: the shipped default and schema
DEFAULT_CONFIG = "phase.toml"
#: keys that take a number, a list or a range; the grid is their product
GRID_KEYS = ("beta", "n", "d", "heads", "epsilon", "sigma")
#: the grid keys whose values are sizes (integers)
_INTEGER_KEYS = ("n", "d", "heads")
SPACINGS = ("uniform", "log")
WEIGHTS = ("shared", "per_system")
NORMALISATIONS = ("softmax", "mean")


@dataclass(frozen=True)
class PhaseGroup:
    """The cells of one (n, d, heads, epsilon, sigma): their betas run in one compiled program (the groups that
    differ only in their sigma > 0 share it: the strength is one of its inputs)."""

    index: int
    n: int
    d: int
    heads: int
    epsilon: float
    dynamics: SweepDynamics
    #: the strength of the tokens' independent noise (0: none)
    sigma: float = 0.0

    @property
    def seed_label(self) -> str:
        """The name the group's clouds, weights and Brownian paths are drawn from: the same for every sigma, so
        that a (beta, sigma) diagram compares the same clouds on the same paths (scaled by sigma)."""
        return f"phase/n={self.n}/d={self.d}/heads={self.heads}/epsilon={self.epsilon!r}"

    @property
    def label(self) -> str:
        """The group's name in chunk files and tables (depends on the values, not on the grid's order)."""
        return self.seed_label + (f"/sigma={self.sigma!r}" if self.sigma else "")


@dataclass(frozen=True, kw_only=True)
class PhaseConfig(JobConfig):
    """A checked phase config (``configs/phase.toml``)."""

    seed: int
    dtype: str
    density: float
    run: RunSettings
    beta: tuple[float, ...]
    n: tuple[int, ...]
    d: tuple[int, ...]
    heads: tuple[int, ...]
    epsilon: tuple[float, ...]
    sigma: tuple[float, ...]
    systems: int
    t1: float
    dt: float
    num_layers: int
    checkpoints: int
    spacing: str
    threshold: float
    confidence: float
    normalisation: str
    dynamics: SweepDynamics
    v_ensemble: str
    qk_ensemble: str
    weights: str
    #: the start clouds: "uniform" or "clusters" (a prepared start, :func:`attnflow.ensembles.draw_clustered_clouds`)
    start: str = "uniform"
    start_clusters: int = 4
    start_centres: tuple = ()
    start_masses: tuple = ()
    start_spread: float = 0.001
    #: beta as a function of n (:data:`attnflow.temperature.LAWS`): with a law other than "constant" the grid's
    #: ``beta`` values are the scales gamma and a group of n tokens runs at ``BetaOfN(gamma, law, power)(n)``
    beta_law: str = "constant"
    beta_power: float = 1.0
    kind = "phase"
    #: runs without noise and from uniform starts are those of the code before these keys (their folders resume)
    later_keys = {"sigma": 0.0, "start": "uniform", "start_clusters": 4, "start_centres": [], "start_masses": [],
                  "start_spread": 0.001, "beta_law": "constant", "beta_power": 1.0, "ln_switch": 0.0}

    def betas_at(self, n: int) -> tuple[float, ...]:
        r"""The inverse temperatures of the cells of n tokens: the grid's ``beta``, or with a ``beta_law`` the
        grid's scales gamma mapped to :math:`\beta_n = \gamma\,g(n)` (:class:`attnflow.temperature.BetaOfN`).

        Example:
            >>> from attnflow.phase import check_phase_config, load_phase_config
            >>> cfg = load_phase_config(None)
            >>> cfg.update(beta=[0.5, 1.0], n=[100], d=[2], beta_law="log")
            >>> [round(b, 4) for b in check_phase_config(cfg).betas_at(100)]   # gamma log 100
            [2.3026, 4.6052]
        """
        if self.beta_law == "constant":
            return self.beta
        from .._laws import law_factor

        factor = law_factor(int(n), self.beta_law, self.beta_power)  # pure Python: no JAX array
        return tuple(float(g) * factor for g in self.beta)

    @property
    def prepared(self) -> bool:
        """Whether the systems start as clusters (the metastability rule then times every state from t = 0)."""
        return self.start == "clusters"

    @property
    def jax_dtype(self):
        """The precision of the computation as a JAX dtype."""
        return jnp.float64 if self.dtype == "float64" else jnp.float32

    @property
    def groups(self) -> list[PhaseGroup]:
        """The (n, d, heads, epsilon, sigma) groups in plan order; heads and epsilon vary only where they matter."""
        heads = self.heads if self.dynamics.name == "multihead" else (self.heads[0],)
        eps = self.epsilon if self.dynamics.name == "layered" else (self.epsilon[0],)
        out = []
        for n in self.n:
            for d in self.d:
                for h in heads:
                    for e in eps:
                        for sigma in self.sigma:
                            spec = dataclasses.replace(self.dynamics, heads=h, epsilon=e)
                            out.append(PhaseGroup(len(out), n, d, h, e, spec, sigma=sigma))
        return out

    @property
    def step_scales(self) -> tuple[float, ...]:
        """The factor :func:`step_scale` of every beta: the field is divided by it, the layer's step on the
        unscaled flow is ``dt / step_scale`` (1 for the softmax)."""
        return tuple(step_scale(b, self.normalisation) for b in self.beta)  # (beta_law: softmax only, all 1)

    @property
    def checkpoint_layers(self) -> tuple[int, ...]:
        """The layers at which statistics are recorded (increasing, with 0 and the last layer)."""
        return checkpoint_layers(self.num_layers, self.checkpoints, self.spacing)


def step_scale(beta: float, normalisation: str = "mean") -> float:
    r"""The factor s by which the phase job divides the sphere field: 1 for the softmax, and for the 1/n
    normalisation :math:`s(\beta) = \max(\sqrt\beta\, e^{\beta - 1/2}, 1)`.

    With the 1/n normalisation the field of unit tokens is
    :math:`f_i = \mathrm{Proj}_{x_i^\perp}\frac1n\sum_j e^{\beta\langle x_i, x_j\rangle} x_j`: a token at angle
    :math:`\theta` pulls with :math:`e^{\beta\cos\theta}\sin\theta`, up to about :math:`e^{\beta-1/2}/\sqrt\beta`
    (at :math:`\theta \approx 1/\sqrt\beta`), and that pull changes on the scale :math:`1/\sqrt\beta` in angle.
    A fixed dt would then step the layer map, not the flow (32 random tokens on the circle at dt = 0.1: largest
    step :math:`dt|f|` = 0.022 rad at beta = 1, 1.3 at beta = 6, 22 at beta = 9; divided by s: 0.013, 0.0021,
    0.0015). The job steps :math:`f/s(\beta)` instead, whose
    largest pull is at most 1.22 (at beta = 0.69) and about :math:`1/\beta` at large beta, as the softmax
    field's is at most 1: it integrates the time-rescaled flow
    :math:`dx/d\tau = f(x)/s(\beta)`, the 1/n flow at time :math:`t = \tau/s(\beta)`, and every time of its
    tables is :math:`\tau`. ``inf`` beyond the float range (beta > 709).

    Example:
        >>> from attnflow.phase import step_scale
        >>> step_scale(9.0, "softmax"), round(step_scale(9.0), 1), step_scale(0.1)
        (1.0, 14744.3, 1.0)
    """
    if normalisation == "softmax":
        return 1.0
    with np.errstate(over="ignore"):
        return float(np.exp(log_step_scale(float(beta))))


def log_step_scale(beta):
    r""":math:`\log s(\beta) = \max(\tfrac12\log\beta + \beta - \tfrac12, 0)` of the 1/n normalisation
    (:func:`step_scale`): finite for every beta > 0; a float for a number, jnp (traceable) for an array."""
    if isinstance(beta, (int, float, np.integer, np.floating)):
        return max(0.5 * math.log(beta) + beta - 0.5, 0.0)
    return jnp.maximum(0.5 * jnp.log(beta) + beta - 0.5, 0.0)


def checkpoint_layers(num_layers: int, checkpoints: int, spacing: str) -> tuple[int, ...]:
    """``checkpoints`` distinct layers in [0, num_layers], evenly or log-spaced, with both ends.

    Example:
        >>> from attnflow.phase import checkpoint_layers
        >>> checkpoint_layers(300, 4, "uniform"), checkpoint_layers(1000, 5, "log")
        ((0, 100, 200, 300), (0, 1, 10, 100, 1000))
    """
    if checkpoints >= num_layers + 1:
        return tuple(range(num_layers + 1))
    if spacing == "uniform":
        layers = np.round(np.linspace(0, num_layers, checkpoints)).astype(int)
    else:  # 0, then log-spaced from layer 1; rounding collisions are replaced by the next free layers
        layers = np.round(np.geomspace(1, num_layers, checkpoints - 1)).astype(int)
        for i in range(1, len(layers)):
            layers[i] = max(layers[i], layers[i - 1] + 1)
        layers = np.concatenate([[0], np.minimum(layers, num_layers)])
    return tuple(int(k) for k in np.unique(layers))


def _grid_values(key: str, value, where: str) -> list:
    """The values of grid key ``key``: a number, a list of numbers, or a range table."""
    integer = key in _INTEGER_KEYS
    if isinstance(value, dict):
        unknown = [k for k in value if k not in ("start", "stop", "num", "spacing")]
        if unknown or not all(k in value for k in ("start", "stop", "num")):
            raise InputError(f"config key '{key}' in {where}: a range is a table {{start, stop, num, spacing}} "
                             f"(spacing \"linear\" or \"log\"), got {value!r}.")
        num = v.check_int(f"{key}.num", value["num"], 1, "the number of grid values")
        for part in ("start", "stop"):
            v.check_real(f"{key}.{part}", value[part], "an end of the range, a finite number")
        spacing = value.get("spacing", "linear")
        v.check_choice(f"{key}.spacing", spacing, ("linear", "log"), "how the range is spaced")
        if spacing == "log" and (value["start"] <= 0 or value["stop"] <= 0):
            raise InputError(f"config key '{key}' in {where}: a log-spaced range needs start and stop > 0, "
                             f"got {value['start']!r} and {value['stop']!r}.")
        space = np.geomspace if spacing == "log" else np.linspace
        # rounded to 12 significant digits: 0.30000000000000004 is written 0.3 in every table
        values = [float(f"{x:.12g}") for x in space(float(value["start"]), float(value["stop"]), num)]
        if integer:
            values = sorted({int(round(x)) for x in values})
    elif isinstance(value, list):
        values = value
    else:
        values = [value]
    if not values:
        raise InputError(f"config key '{key}' in {where} is an empty list; give at least one value.")
    out = []
    for i, x in enumerate(values):
        name = f"{key}[{i}]" if isinstance(value, list) else key
        if isinstance(x, bool) or not isinstance(x, (int, float)):
            raise InputError(f"config key '{name}' in {where} must be a number, got {type(x).__name__} {x!r}.")
        if not math.isfinite(x):
            raise InputError(f"config key '{name}' in {where} must be a finite number, got {x!r}.")
        if integer and (not isinstance(x, int) and not float(x).is_integer()):
            raise InputError(f"config key '{name}' in {where} must be a whole number, got {x!r}.")
        out.append(int(x) if integer else float(x))
    if len(set(out)) != len(out):
        raise InputError(f"config key '{key}' in {where} repeats a value ({out}); give each value once.")
    return out


def check_phase_config(config: dict | PhaseConfig, where: str = "the phase config") -> PhaseConfig:
    """Every key of a phase config checked before any work; returns the parsed :class:`PhaseConfig`.

    Example:
        >>> from attnflow.phase import check_phase_config, load_phase_config
        >>> cfg = check_phase_config(load_phase_config(None))
        >>> len(cfg.beta), cfg.d, cfg.num_layers, len(cfg.checkpoint_layers)
        (90, (2, 3), 300, 200)
    """
    if isinstance(config, PhaseConfig):
        return config
    if not isinstance(config, dict):
        raise InputError(f"a phase config must be a table (dict), got {type(config).__name__}.")
    grid = {}
    rest = dict(config)
    defaults = load_config(None, DEFAULT_CONFIG)
    for key, default in defaults.items():  # a table key given a number (run = 3) is refused here, by name
        if key not in GRID_KEYS and isinstance(default, dict) and key in rest and not isinstance(rest[key], dict):
            raise InputError(f"config key '{key}' in {where} must be a table ([{key}] with its keys, as in "
                             f"configs/{DEFAULT_CONFIG}), got {type(rest[key]).__name__} {rest[key]!r:.60}.")
    for key in GRID_KEYS:
        if key not in rest:
            raise InputError(f"config key '{key}' is missing from {where}; start from configs/{DEFAULT_CONFIG} "
                             "(its defaults fill every key).")
        grid[key] = _grid_values(key, rest.pop(key), where)
    cfg = check_job_table({**rest, **{k: defaults[k] for k in GRID_KEYS}}, "phase", DEFAULT_CONFIG)
    for key in GRID_KEYS:
        cfg[key] = grid[key]
    for i, b in enumerate(grid["beta"]):
        v.check_beta(f"beta[{i}]" if len(grid["beta"]) > 1 else "beta", b, "an inverse temperature of the grid")
    for x in grid["n"]:
        v.check_num_tokens("n", x)
    for key, low, meaning in (("d", 2, "the token dimension"), ("heads", 1, "independent heads per system")):
        for x in grid[key]:
            v.check_int(key, x, low, meaning)
    for e in grid["epsilon"]:
        if e < 0:
            raise InputError(f"epsilon (the relative size of a layer's perturbation) must be >= 0, got {e!r}.")
    for x in grid["sigma"]:
        if not (math.isfinite(x) and x >= 0):
            raise InputError(f"sigma (the strength of the tokens' independent noise) must be a finite number >= 0, "
                             f"got {x!r}.")
    if any(x > 0 for x in grid["sigma"]) and cfg["dynamics"] != "sphere":
        raise InputError(f"sigma > 0 (noisy tokens) applies to dynamics = \"sphere\" (noise tangent to the sphere, "
                         f"renormalised layers), got dynamics = {cfg['dynamics']!r}.")
    v.check_int("systems", cfg["systems"], 1, "random clouds per grid cell")
    layers = v.check_layers("t1", cfg["t1"], "dt", cfg["dt"])
    v.check_int("checkpoints", cfg["checkpoints"], 2, "the number of layers with statistics")
    if cfg["checkpoints"] > layers + 1:
        raise InputError(f"checkpoints = {cfg['checkpoints']} exceeds the {layers + 1} layers of the run (t1 / dt = "
                         f"{layers} layers and layer 0); give checkpoints <= {layers + 1}, or a longer t1.")
    v.check_choice("spacing", cfg["spacing"], SPACINGS, "how the checkpoint layers are spaced")
    v.check_number("threshold", cfg["threshold"], "the inner product above which two tokens are clustered",
                   low=-1, high=1)
    v.check_number("confidence", cfg["confidence"], "the level of the confidence intervals", low=0, high=1)
    v.check_choice("normalisation", cfg["normalisation"], NORMALISATIONS, "the attention's normalisation (sphere)")
    if cfg["normalisation"] != "softmax" and cfg["dynamics"] != "sphere":
        raise InputError(f"normalisation = {cfg['normalisation']!r} applies to dynamics = \"sphere\"; for the "
                         f"Euclidean flow use dynamics = \"mean\" (got dynamics = {cfg['dynamics']!r}).")
    v.check_choice("v_ensemble", cfg["v_ensemble"], V_ENSEMBLES, "the ensemble of V")
    v.check_choice("qk_ensemble", cfg["qk_ensemble"], QK_ENSEMBLES, "the ensemble of Q^T K")
    v.check_choice("weights", cfg["weights"], WEIGHTS, "whether the weights are shared by the grid or drawn per system")
    v.check_choice("dynamics", cfg["dynamics"], SWEEP_DYNAMICS, "the dynamics every system runs")
    start = _check_start(cfg, grid)
    law = _check_beta_law(cfg, grid)
    # the sweep refuses float32 for the raw-picture dynamics because it rescales their last layer; the phase
    # job reads the directions of the raw state and rescales nothing, so either precision is fine here
    spec = sweep_dynamics({**cfg, "heads": grid["heads"][0], "epsilon": grid["epsilon"][0], "dtype": "float64"})
    return PhaseConfig(
        seed=int(cfg["seed"]), dtype=cfg["dtype"], density=float(cfg["density"]), run=run_settings(cfg["run"]),
        beta=tuple(grid["beta"]), n=tuple(grid["n"]), d=tuple(grid["d"]), heads=tuple(grid["heads"]),
        epsilon=tuple(grid["epsilon"]), sigma=tuple(float(x) for x in grid["sigma"]), systems=int(cfg["systems"]), t1=float(cfg["t1"]), dt=float(cfg["dt"]),
        num_layers=layers, checkpoints=int(cfg["checkpoints"]), spacing=cfg["spacing"],
        threshold=float(cfg["threshold"]), confidence=float(cfg["confidence"]),
        normalisation=cfg["normalisation"], dynamics=spec, v_ensemble=cfg["v_ensemble"],
        qk_ensemble=cfg["qk_ensemble"], weights=cfg["weights"], **start, **law, source=copy.deepcopy(config))


START_KINDS = ("uniform", "clusters")


def _check_beta_law(cfg: dict, grid: dict) -> dict:
    """``beta_law`` and ``beta_power`` checked (one sentence per refusal); returns them as :class:`PhaseConfig`
    fields."""
    from .._laws import LAWS, check_law

    law, power = cfg["beta_law"], cfg["beta_power"]
    v.check_choice("beta_law", law, LAWS, "beta as a function of the number of tokens")
    if isinstance(power, bool) or not isinstance(power, (int, float)) or not math.isfinite(power):
        raise InputError(f"beta_power must be a finite number (the exponent p of beta_law), got {power!r}.")
    if law != "constant" and cfg["normalisation"] != "softmax":
        raise InputError(f"beta_law = {law!r} applies with normalisation = \"softmax\" (the 1/n normalisation's step "
                         f"scale is one per beta of the grid), got normalisation = {cfg['normalisation']!r}.")
    check_law(law, float(power))  # (log_power needs p > 0); pure Python, so JAX has not started after the check
    return {"beta_law": law, "beta_power": float(power)}


def _check_start(cfg: dict, grid: dict) -> dict:
    """The start keys checked (one sentence per refusal); returns them as :class:`PhaseConfig` fields."""
    v.check_choice("start", cfg["start"], START_KINDS, "the start clouds")
    centres, masses = cfg["start_centres"], cfg["start_masses"]
    out = {"start": cfg["start"], "start_spread": float(cfg["start_spread"]), "start_centres": (), "start_masses": ()}
    if not (math.isfinite(out["start_spread"]) and out["start_spread"] >= 0):
        raise InputError(f"start_spread (the angular spread of each prepared cluster) must be a finite number >= 0, "
                         f"got {cfg['start_spread']!r}.")
    k = len(centres) if centres else cfg["start_clusters"]
    v.check_int("start_clusters", k, 1, "the number of clusters of a prepared start")
    out["start_clusters"] = int(k)
    if cfg["start"] == "uniform":
        return out
    if cfg["dynamics"] != "sphere":
        raise InputError(f"start = \"clusters\" prepares clusters on the sphere: it applies to dynamics = \"sphere\", "
                         f"got dynamics = {cfg['dynamics']!r}.")
    if k > min(grid["n"]):
        raise InputError(f"start_clusters = {k} exceeds the {min(grid['n'])} tokens of the smallest n; give at most "
                         "n clusters.")
    if centres:
        if len(grid["d"]) != 1:
            raise InputError(f"start_centres are directions of one dimension: give one d in the grid, got d = "
                             f"{list(grid['d'])}.")
        d = grid["d"][0]
        ok = all(isinstance(c, list) and len(c) == d and all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                                              for x in c) for c in centres)
        arr = np.asarray(centres, dtype=float) if ok else None
        if arr is None or arr.shape != (k, d) or not np.all(np.isfinite(arr)) or np.any(
                np.linalg.norm(arr, axis=1) == 0):
            raise InputError(f"start_centres must be {k} nonzero finite directions of dimension d = {grid['d'][0]} "
                             f"(a list of lists), got {centres!r:.80}.")
        out["start_centres"] = tuple(tuple(float(x) for x in c) for c in centres)
    if masses:
        m = np.asarray(masses, dtype=float)
        if m.shape != (k,) or not np.all(m > 0) or abs(m.sum() - 1) > 1e-9:
            raise InputError(f"start_masses must be {k} fractions > 0 summing to 1 (one per cluster), got {masses!r:.80}.")
        out["start_masses"] = tuple(float(x) for x in m)
    return out


def load_phase_config(path) -> dict:
    """The table of a phase config file over the shipped default (``None``: the default itself).

    Example:
        >>> from attnflow.phase import load_phase_config
        >>> load_phase_config(None)["dynamics"]
        'sphere'
    """
    if path is None:
        return load_config(None, DEFAULT_CONFIG)
    p = config_path(path)
    if not p.is_file():
        raise InputError(f"phase config {path} does not exist.")
    user = read_toml(p)
    defaults = load_config(None, DEFAULT_CONFIG)
    # overlaid here, every key checked by check_phase_config (grid keys may change type: number,
    # list or range table); the [run] table is overlaid key by key
    merged = {**copy.deepcopy(defaults), **user}
    if isinstance(user.get("run"), dict):
        merged["run"] = {**defaults["run"], **user["run"]}
    return merged
