"""Large sweeps over random weight ensembles: chunked, resumable, sharded over devices.

* :func:`run_spectral_sweep` -- how often random V satisfy Definition 4.1(1);
* :func:`run_dynamics_sweep` -- predicted vs observed limit geometry over random triples;
* :func:`run_sweep` -- dispatch on the config's ``kind``.

A config is read (:func:`load_sweep_config`) and parsed once (:func:`parse_sweep_config`: a frozen
:class:`SpectralSweepConfig` or :class:`DynamicsSweepConfig`); the runners accept either the table
or the parsed config.
"""

from ._config import DynamicsSweepConfig, SpectralSweepConfig, load_sweep_config
from ._dynamics import check_dynamics_config, run_dynamics_sweep
from ..runs import check_eig_route
from ._spectral import check_spectral_config, run_spectral_sweep, wilson_interval

__all__ = ["run_sweep", "run_spectral_sweep", "run_dynamics_sweep", "load_sweep_config", "parse_sweep_config",
           "SpectralSweepConfig", "DynamicsSweepConfig", "wilson_interval", "check_eig_route"]


def parse_sweep_config(config) -> SpectralSweepConfig | DynamicsSweepConfig:
    """The config checked once and typed (a parsed config is returned as it is).

    Example:
        >>> from attnflow.sweep import load_sweep_config, parse_sweep_config
        >>> cfg = parse_sweep_config(load_sweep_config("ginibre-dynamics.toml"))
        >>> cfg.num_layers, cfg.dynamics.name, cfg.run.chunk_size
        (120, 'attention', 500)
    """
    if isinstance(config, (SpectralSweepConfig, DynamicsSweepConfig)):
        return config
    if isinstance(config, dict) and config.get("kind") == "spectral":
        return check_spectral_config(config)
    return check_dynamics_config(config)


def run_sweep(config, out, **kwargs):
    """Run the sweep the config's ``kind`` describes (a table or a parsed config) into ``out``; returns
    its summary."""
    config = parse_sweep_config(config)
    if config.kind == "spectral":
        return run_spectral_sweep(config, out, **kwargs)
    return run_dynamics_sweep(config, out, **kwargs)
