"""Figures of attention flows: every figure attnflow's jobs write is drawn by a function here.

Each function takes data first (a :class:`attnflow.Simulation`, arrays, or a run folder's
table), keyword-only options and an optional matplotlib ``ax`` (or ``fig``), and returns the
Axes or Figure it drew; none saves or shows. Each checks its inputs before it draws: shapes that
disagree, an empty input or a missing key raise :class:`attnflow.errors.InputError` in one sentence. :func:`save` writes a figure as PNG, with PDF /
SVG beside it when asked (argument, or :func:`figure_formats` around a whole job).
"""

from ._style import colorbar, colours, current_formats, figure_formats, legend, new_axes, new_figure, save
from ._trajectories import trajectories
from ._attention import attention_maps, leader_order
from ._series import LOG_FLOOR, cluster_series, levels, readable_scale, series_by_parameter
from ._animation import animate, frame_indices
from ._spectrum import EIGEN_CLASSES, STATUS_COLOURS, STATUS_LABELS, eigenvalue_classes, eigenvalues, head_spectra
from ._sweep import (bars_with_spread, crosstab, fraction_vs_d, predicted_vs_observed, read_table, sweep_fractions,
                     sweep_means)
from ._phase import COARSE_BETAS, cell_edges, curves_at_fixed_t, phase_diagram
from ._metastability import lifetime_vs_beta, staircase
from ._models import flow_vs_spectrum, head_maps, model_vs_flow
from ._probe import beyond_pd_tokens, failure_distances, sensitivity_maps
from ._meanfield import circle_density, distance_vs_n, growth_vs_prediction, order_vs_noise, sphere_density_map

__all__ = [
    "save",
    "figure_formats",
    "current_formats",
    "new_axes",
    "new_figure",
    "colours",
    "legend",
    "colorbar",
    "trajectories",
    "attention_maps",
    "leader_order",
    "cluster_series",
    "levels",
    "series_by_parameter",
    "readable_scale",
    "LOG_FLOOR",
    "frame_indices",
    "animate",
    "eigenvalues",
    "eigenvalue_classes",
    "EIGEN_CLASSES",
    "STATUS_COLOURS",
    "STATUS_LABELS",
    "head_spectra",
    "sweep_fractions",
    "sweep_means",
    "fraction_vs_d",
    "crosstab",
    "bars_with_spread",
    "predicted_vs_observed",
    "read_table",
    "phase_diagram",
    "curves_at_fixed_t",
    "cell_edges",
    "COARSE_BETAS",
    "staircase",
    "lifetime_vs_beta",
    "model_vs_flow",
    "head_maps",
    "flow_vs_spectrum",
    "beyond_pd_tokens",
    "failure_distances",
    "sensitivity_maps",
    "circle_density", "sphere_density_map",
    "distance_vs_n",
    "growth_vs_prediction",
    "order_vs_noise",
]
