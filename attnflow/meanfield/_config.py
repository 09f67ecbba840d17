"""The mean-field study's config, parsed once: TOML -> checked table -> frozen :class:`MeanfieldConfig`.

The shipped ``configs/meanfield.toml`` is the schema (unknown keys and wrong types are refused by
:func:`attnflow.runs.load_config`); the values are checked here, each refusal one
:class:`~attnflow.InputError` sentence naming the key, before anything compiles.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .. import _validate as v
from ..runs import JobConfig, load_config, merge_config, read_toml
from ._pde import NORMALISATIONS

__all__ = ["MeanfieldConfig", "load_meanfield_config", "check_meanfield_config"]

DEFAULT_CONFIG = "meanfield.toml"


@dataclass(frozen=True)
class ConvergenceStudy:
    """Particles against the PDE from the smooth density :attr:`MeanfieldConfig.start_density`."""

    beta: float
    start_modes: tuple[int, ...]
    start_amplitudes: tuple[float, ...]
    start_phases: tuple[float, ...]
    n: tuple[int, ...]
    seeds: int
    times: tuple[float, ...]
    dt: float
    grid: int
    pde_dt: float
    frames: int
    bins: int
    sigma: float = 0.0
    degree: int = 16


@dataclass(frozen=True)
class GrowthStudy:
    """Near-uniform starts: mode growth, clusters and their lifetimes, for each beta."""

    beta: tuple[float, ...]
    n: int
    seeds: int
    modes: int
    epsilon: float
    max_amplitude: float
    horizon: float
    saves: int
    grid: int
    cluster_gap: float
    degree: int = 16
    min_mass: float = 0.01


@dataclass(frozen=True)
class TransitionStudy:
    """The noisy continuity equation's order parameter against sigma (:func:`attnflow.meanfield.noisy_transition`)."""

    beta: tuple[float, ...]
    sigma_ratios: tuple[float, ...]
    t1: float
    dt: float
    grid: int
    kappa: float
    epsilon: float
    degree: int = 10


@dataclass(frozen=True)
class LargestRun:
    """One run of the largest n on the Fourier fast path."""

    n: int
    beta: float
    layers: int
    dt: float


@dataclass(frozen=True, kw_only=True)
class MeanfieldConfig(JobConfig):
    """A checked mean-field config (``configs/meanfield.toml``)."""

    seed: int
    normalisations: tuple[str, ...]
    dtype: str
    d: int
    convergence: ConvergenceStudy
    growth: GrowthStudy
    largest: LargestRun
    transition: TransitionStudy
    kind = "meanfield"
    #: runs without noise are those of the code before the noise keys (their folders resume)
    #: and circle runs those of the code before S^2 (d = 3) and its keys
    later_keys = {"convergence.sigma": 0.0, "d": 2, "convergence.degree": 16, "growth.degree": 16,
                  "growth.min_mass": 0.01, "transition.degree": 10}

    def fingerprint_table(self) -> dict:
        """:meth:`JobConfig.fingerprint_table`, less the transition table when its study is off (no beta)."""
        table = super().fingerprint_table()
        if not table.get("transition", {}).get("beta"):
            table.pop("transition", None)
        return table


def load_meanfield_config(path=None) -> dict:
    """The shipped default overlaid with the TOML file ``path`` (None: the default), unchecked values.

    Example:
        >>> from attnflow.meanfield import load_meanfield_config
        >>> cfg = load_meanfield_config(None)
        >>> cfg["kind"], cfg["convergence"]["n"][:2]
        ('meanfield', [256, 1024])
    """
    return load_config(path, DEFAULT_CONFIG)


def _need(ok: bool, key: str, what: str, value) -> None:
    v.check_that(ok, f"config key '{key}'", what, value)


def _positive(table: dict, key: str, where: str) -> float:
    return v.check_number(f"config key '{where}.{key}'", table[key], "of the mean-field config", low=0)


def _count(table: dict, key: str, where: str, low: int = 1) -> int:
    return v.check_int(f"config key '{where}.{key}'", table[key], low, "of the mean-field config")


def _degree(table: dict, where: str) -> int:
    from ._sphere_continuity import MAX_SPHERE_DEGREE

    degree = v.check_int(f"config key '{where}.degree'", table["degree"], 2,
                         "of the mean-field config (the PDE's harmonic degree on S^2)")
    _need(degree <= MAX_SPHERE_DEGREE, f"{where}.degree", f"at most {MAX_SPHERE_DEGREE}", degree)
    return degree


def check_meanfield_config(config: MeanfieldConfig | dict) -> MeanfieldConfig:
    """Check every value of a resolved table (:func:`load_meanfield_config`) and freeze it.

    Example:
        >>> from attnflow.meanfield import check_meanfield_config, load_meanfield_config
        >>> cfg = load_meanfield_config(None)
        >>> cfg["growth"]["beta"] = [2.0, -1.0]
        >>> check_meanfield_config(cfg)
        Traceback (most recent call last):
        ...
        attnflow.errors.InputError: config key 'growth.beta' must be a non-empty list of finite numbers > 0, got [2.0, -1.0].
    """
    if isinstance(config, MeanfieldConfig):
        return config
    from ..runs import default_config_path

    source = merge_config(read_toml(default_config_path(DEFAULT_CONFIG)), config, where="the mean-field config")
    _need(source["kind"] == "meanfield", "kind", '"meanfield"', source["kind"])
    _need(isinstance(source["seed"], int) and source["seed"] >= 0, "seed", "an integer >= 0", source["seed"])
    norms = tuple(source["normalisations"])
    _need(bool(norms) and all(x in NORMALISATIONS for x in norms) and len(set(norms)) == len(norms),
          "normalisations", f"a non-empty list of distinct names among {NORMALISATIONS}", list(norms))
    _need(source["dtype"] in ("float32", "float64"), "dtype", '"float32" or "float64"', source["dtype"])
    d = source["d"]
    _need(d in (2, 3) and not isinstance(d, bool), "d", "2 (tokens on the circle) or 3 (tokens on S^2)", d)

    c = source["convergence"]
    modes, amps, phases = c["start_modes"], c["start_amplitudes"], c["start_phases"]
    _need(len(modes) == len(amps) == len(phases), "convergence.start_modes",
          "as long as start_amplitudes and start_phases", modes)
    _need(all(k >= 1 for k in modes), "convergence.start_modes", "a list of modes >= 1", modes)
    _need(sum(abs(a) for a in amps) < 1, "convergence.start_amplitudes",
          "amplitudes with sum |a_k| < 1 (a positive start density)", amps)
    ns = c["n"]
    _need(bool(ns) and all(isinstance(x, int) and x >= 2 for x in ns) and len(ns) >= 2
          and sorted(set(ns)) == list(ns), "convergence.n", "an increasing list of at least two particle counts >= 2",
          ns)
    times = c["times"]
    _need(bool(times) and times[0] == 0 and all(b > a for a, b in zip(times, times[1:])), "convergence.times",
          "an increasing list of times starting at 0", times)
    grid = _count(c, "grid", "convergence", 16)
    _need(grid & (grid - 1) == 0, "convergence.grid", "a power of two >= 16", grid)
    sigma = v.check_number("config key 'convergence.sigma'", c["sigma"], "the particles' noise strength", low=0,
                           closed="low")
    convergence = ConvergenceStudy(
        _positive(c, "beta", "convergence"), tuple(modes), tuple(map(float, amps)), tuple(map(float, phases)),
        tuple(ns), _count(c, "seeds", "convergence", 2), tuple(map(float, times)), _positive(c, "dt", "convergence"),
        grid, _positive(c, "pde_dt", "convergence"), _count(c, "frames", "convergence", 2),
        _count(c, "bins", "convergence", 2), float(sigma), _degree(c, "convergence"))

    g = source["growth"]
    betas = g["beta"]
    _need(bool(betas) and all(math.isfinite(b) and b > 0 for b in betas), "growth.beta",
          "a non-empty list of finite numbers > 0", betas)
    eps, amax = _positive(g, "epsilon", "growth"), _positive(g, "max_amplitude", "growth")
    _need(eps / 2 < amax < 0.5, "growth.max_amplitude", f"between epsilon / 2 = {eps / 2:g} and 0.5", amax)
    gap = _positive(g, "cluster_gap", "growth")
    _need(gap < math.pi, "growth.cluster_gap", "an angle in (0, pi) radians", gap)
    gg = _count(g, "grid", "growth", 16)
    _need(gg & (gg - 1) == 0, "growth.grid", "a power of two >= 16", gg)
    growth = GrowthStudy(tuple(map(float, betas)), _count(g, "n", "growth", 2), _count(g, "seeds", "growth"),
                         _count(g, "modes", "growth"), eps, amax, _positive(g, "horizon", "growth"),
                         _count(g, "saves", "growth", 3), gg, gap, _degree(g, "growth"),
                         v.check_number("config key 'growth.min_mass'", g["min_mass"],
                                        "of the mean-field config (a cell's least mass, in (0, 1])", low=0, high=1,
                                        closed="high"))
    _need(growth.modes < growth.n // 2, "growth.modes", f"below n / 2 = {growth.n // 2}", growth.modes)
    if d == 3:
        _need(max(convergence.start_modes, default=0) <= convergence.degree, "convergence.start_modes",
              f"degrees at most convergence.degree = {convergence.degree} (the PDE's harmonic degree on S^2)",
              list(convergence.start_modes))
        _need(growth.modes <= growth.degree, "growth.modes", f"at most growth.degree = {growth.degree} (the PDE's "
              "harmonic degree on S^2)", growth.modes)

    la = source["largest"]
    largest = LargestRun(_count(la, "n", "largest", 2), _positive(la, "beta", "largest"),
                         _count(la, "layers", "largest"), _positive(la, "dt", "largest"))
    tr = source["transition"]
    tb, ratios = tr["beta"], tr["sigma_ratios"]
    _need(all(math.isfinite(b) and b > 0 for b in tb), "transition.beta",
          "a list of finite numbers > 0 (empty: no transition study)", tb)
    _need(bool(ratios) and all(math.isfinite(x) and x > 0 for x in ratios)
          and all(b > a for a, b in zip(ratios, ratios[1:])), "transition.sigma_ratios",
          "an increasing non-empty list of numbers > 0 (noise strengths over sigma_c)", ratios)
    tgrid = _count(tr, "grid", "transition", 16)
    _need(tgrid & (tgrid - 1) == 0, "transition.grid", "a power of two >= 16", tgrid)
    teps = _positive(tr, "epsilon", "transition")
    _need(teps < 1, "transition.epsilon", "below 1 (a positive start density)", teps)
    t1, tdt = _positive(tr, "t1", "transition"), _positive(tr, "dt", "transition")
    _need(tdt < t1, "transition.dt", f"below transition.t1 = {t1:g}", tdt)
    transition = TransitionStudy(tuple(map(float, tb)), tuple(map(float, ratios)), t1, tdt, tgrid,
                                 _positive(tr, "kappa", "transition"), teps, _degree(tr, "transition"))
    return MeanfieldConfig(seed=source["seed"], normalisations=norms, dtype=source["dtype"], d=d,
                           convergence=convergence,
                           growth=growth, largest=largest, transition=transition, source=source)
