"""Large sweeps over random weight ensembles: chunked, resumable, sharded over devices.

* :func:`run_spectral_sweep` -- how often random V satisfy Definition 4.1(1);
* :func:`run_dynamics_sweep` -- predicted vs observed limit geometry over random triples;
* :func:`run_sweep` -- dispatch on the config's ``kind``.
"""

from .runner import make_mesh, sharded
from .spectral import run_spectral_sweep, wilson_interval

__all__ = ["run_sweep", "run_spectral_sweep", "run_dynamics_sweep", "wilson_interval", "make_mesh", "sharded",
           "load_sweep_config"]


def run_dynamics_sweep(*args, **kwargs):
    from .dynamics import run_dynamics_sweep as run

    return run(*args, **kwargs)


def load_sweep_config(path):
    """Load a sweep config: its ``kind`` picks the shipped default (and schema) it overlays.

    Example:
        >>> from attnflow.sweep import load_sweep_config
        >>> load_sweep_config("ginibre-spectral.toml")["kind"]
        'spectral'
    """
    from pathlib import Path

    from ..errors import InputError
    from ..runio import CONFIG_DIR, load_config, read_toml

    p = Path(path)
    if not p.is_file() and (CONFIG_DIR / p.name).is_file() and p.parent == Path("."):
        p = CONFIG_DIR / p.name
    if not p.is_file():
        raise InputError(f"sweep config {path} does not exist.")
    kind = read_toml(p).get("kind")
    defaults = {"spectral": "ginibre-spectral.toml", "dynamics": "ginibre-dynamics.toml"}
    if kind not in defaults:
        raise InputError(f"sweep config {p} must set kind = \"spectral\" or \"dynamics\", got {kind!r}.")
    return load_config(p, defaults[kind])


def run_sweep(config: dict, out, **kwargs):
    """Run the sweep ``config["kind"]`` describes into ``out``; returns its summary."""
    if config["kind"] == "spectral":
        return run_spectral_sweep(config, out, **kwargs)
    return run_dynamics_sweep(config, out, **kwargs)
