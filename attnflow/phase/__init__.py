r"""Phase diagrams and metastability: clustering over a grid of beta, n, d (and the dynamics' scalars) in time.

:func:`run_phase` (``attnflow phase CONFIG --out DIR``) steps ``systems`` random clouds per grid cell
with any of the sweep's dynamics and records, inside the solve, the pair statistics of :func:`statistics`
at checkpoint times; it writes a tidy per-(cell, checkpoint) table with confidence intervals, per-system
arrays, heat maps, the metastable plateaus of the cluster count and their lifetimes against beta.
:func:`ensemble` gives one group's arrays from Python, without a run folder; :func:`read_cells` reads the
table back (its ``order`` column: :func:`order_parameter`, the norm of the mean direction). The science it
uses lives in the library: the observables and the plateau rule
(:mod:`attnflow.observables`: ``pairs_clustered``, ``clusters_above``, ``plateaus``, ``first_plateaus``,
``energy_plateaus``, ...), the intervals and survival fits (:mod:`attnflow.stats`); the job's own
readings are the lifetimes' fits (:func:`lifetime_summary`, :func:`lifetime_slope`), the equiangular
model's theory line (:func:`equiangular_time`), the paired comparison of two runs (:func:`compare_runs`,
e.g. two dt) and the layer map's convergence to the flow (:func:`sphere_convergence`).
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_names as _lazy_names

#: every public name and its module, imported on first use (PEP 562): ``import attnflow.phase`` is light,
#: and the job's figure workers import :mod:`attnflow.phase._figures` without JAX
_NAMES = {
    "._accuracy": ("convergence_order", "sphere_convergence"),
    "._compare": ("COMPARED", "compare_runs", "crossing_times"),
    "._config": ("DEFAULT_CONFIG", "GRID_KEYS", "PhaseConfig", "PhaseGroup", "check_phase_config", "checkpoint_layers",
                 "load_phase_config", "step_scale"),
    "._engine": ("OBSERVABLES", "ensemble", "order_parameter", "start_clouds", "statistics"),
    "._metastability": ("lifetime_slope", "lifetime_summary"),
    "._run": ("check_phase_sizes", "run_phase"),
    "._tables": ("CELL_COLUMNS", "read_cells"),
    "._theory": ("equiangular_rate", "equiangular_time"),
}
if TYPE_CHECKING:  # for type checkers and the API reference, which read the names statically
    from ._accuracy import convergence_order, sphere_convergence
    from ._compare import COMPARED, compare_runs, crossing_times
    from ._config import (
        DEFAULT_CONFIG,
        GRID_KEYS,
        PhaseConfig,
        PhaseGroup,
        check_phase_config,
        checkpoint_layers,
        load_phase_config,
        step_scale,
    )
    from ._engine import OBSERVABLES, ensemble, order_parameter, start_clouds, statistics
    from ._metastability import lifetime_slope, lifetime_summary
    from ._run import check_phase_sizes, run_phase
    from ._tables import CELL_COLUMNS, read_cells
    from ._theory import equiangular_rate, equiangular_time

__getattr__, __dir__ = _lazy_names(__name__, {name: module for module, names in _NAMES.items() for name in names},
                                   globals())

__all__ = [
    "run_phase", "check_phase_config", "load_phase_config", "PhaseConfig", "PhaseGroup", "GRID_KEYS",
    "DEFAULT_CONFIG", "checkpoint_layers", "check_phase_sizes", "ensemble", "statistics", "OBSERVABLES", "start_clouds",
    "CELL_COLUMNS", "order_parameter", "read_cells", "lifetime_summary", "lifetime_slope", "equiangular_rate", "equiangular_time",
    "compare_runs", "crossing_times", "COMPARED", "convergence_order", "sphere_convergence", "step_scale",
]
