"""A sweep's config, parsed once at the edge: TOML -> resolved table -> validated, frozen, typed object.

:func:`load_sweep_config` reads a TOML file over the shipped default of its ``kind`` (the shipped
file is the schema); :func:`parse_sweep_config` checks every key once (one :class:`InputError`
sentence naming it: :func:`attnflow.sweep.check_spectral_config`,
:func:`attnflow.sweep.check_dynamics_config`) and returns a :class:`SpectralSweepConfig`
or :class:`DynamicsSweepConfig`, which the sweep passes down instead of the table. The table
itself is kept (``source``): the run folder's fingerprint and ``config.json`` are computed from
it, so a folder written by an earlier version still resumes.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax.numpy as jnp

from ..errors import InputError
from .._sweep_dynamics import SweepDynamics
from ..runs import JobConfig, RunSettings, run_settings

__all__ = ["RunSettings", "SpectralSweepConfig", "DynamicsSweepConfig", "run_settings", "load_sweep_config",
           "DEFAULTS"]

#: the shipped config of each kind (its default and schema)
DEFAULTS = {"spectral": "ginibre-spectral.toml", "dynamics": "ginibre-dynamics.toml"}


@dataclass(frozen=True, kw_only=True)
class _SweepConfig(JobConfig):
    seed: int
    dtype: str
    density: float
    run: RunSettings

    @property
    def jax_dtype(self):
        """The precision of the sweep's computation (``dtype``) as a JAX dtype."""
        return jnp.float64 if self.dtype == "float64" else jnp.float32


@dataclass(frozen=True, kw_only=True)
class SpectralSweepConfig(_SweepConfig):
    """A checked spectral sweep config (``configs/ginibre-spectral.toml``)."""

    ensembles: tuple[str, ...]
    d: tuple[int, ...]
    samples: tuple[int, ...]
    confidence: float
    kind = "spectral"

    @property
    def groups(self) -> list[dict]:
        """The (ensemble, d, samples) groups in plan order."""
        out = []
        for e in self.ensembles:
            for i, d in enumerate(self.d):
                n = self.samples[i] if len(self.samples) > 1 else self.samples[0]
                out.append({"ensemble": e, "d": d, "samples": n, "label": f"V={e}/d={d}"})
        return out


@dataclass(frozen=True, kw_only=True)
class DynamicsSweepConfig(_SweepConfig):
    """A checked dynamics sweep config (``configs/ginibre-dynamics.toml``); ``num_layers`` = t1 / dt."""

    v_ensembles: tuple[str, ...]
    qk_ensembles: tuple[str, ...]
    d: tuple[int, ...]
    systems: int
    n: int
    clouds: int
    t1: float
    dt: float
    num_layers: int
    rel_tol: float
    max_clusters: int
    dynamics: SweepDynamics
    kind = "dynamics"
    #: a config that does not run Mix-LN keeps the fingerprint of the code before the key
    later_keys = {"ln_switch": 0.0}

    @property
    def groups(self) -> list[dict]:
        """The (V ensemble, Q^T K ensemble, d) groups in plan order."""
        return [{"v": v, "qk": q, "d": d, "systems": self.systems, "label": f"V={v}/QK={q}/d={d}"}
                for v in self.v_ensembles for q in self.qk_ensembles for d in self.d]


def load_sweep_config(path) -> dict:
    """Load a sweep config: its ``kind`` picks the shipped default (and schema) it overlays.

    Example:
        >>> from attnflow.sweep import load_sweep_config
        >>> load_sweep_config("ginibre-spectral.toml")["kind"]
        'spectral'
    """
    from ..runs import config_path, load_config, read_toml

    p = config_path(path)
    if not p.is_file():
        raise InputError(f"sweep config {path} does not exist.")
    kind = read_toml(p).get("kind")
    if kind not in DEFAULTS:
        raise InputError(f"sweep config {p} must set kind = \"spectral\" or \"dynamics\", got {kind!r}.")
    return load_config(p, DEFAULTS[kind])
