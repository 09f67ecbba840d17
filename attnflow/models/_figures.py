"""Figures of ``attnflow track``, drawn by :mod:`attnflow.plot` and written with
:func:`attnflow.plot.save` (PNG, plus the formats of a surrounding
:func:`attnflow.plot.figure_formats`). Each function returns the PNG's file name.

Colours of Definition 4.1 (by the eigenvalue of largest modulus of V_h):
:data:`attnflow.plot.STATUS_COLOURS` (good triple, condition (1) only, complex lambda_1,
real lambda_1 <= 0 or not simple).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .. import plot
from ..plot import STATUS_COLOURS

__all__ = ["STATUS_COLOURS", "eigenvalue_panels", "side_by_side", "real_head_maps", "idealised_vs_spectrum"]


def _save(fig, path: Path) -> str:
    return plot.save(fig, path, dpi=100, close=True)[0]


def eigenvalue_panels(spectra: dict, rows: list, path: Path) -> str:
    """``eigenvalues.png``: :func:`attnflow.plot.head_spectra`."""
    return _save(plot.head_spectra(spectra, rows), path)


def side_by_side(rec: dict, row, spectrum: np.ndarray, tokens: list[str], path: Path) -> str:
    """``side_by_side.png``: :func:`attnflow.plot.model_vs_flow` (real and idealised attention
    at the same layer and head)."""
    return _save(plot.model_vs_flow(rec, row, spectrum, tokens), path)


def real_head_maps(mean_rank: np.ndarray, mean_boolean: np.ndarray, n_mean: float, path: Path) -> str:
    """``real_heads.png``: :func:`attnflow.plot.head_maps`."""
    return _save(plot.head_maps(mean_rank, mean_boolean, n_mean=n_mean), path)


def idealised_vs_spectrum(rows: list, final_cos: np.ndarray, final_clusters: np.ndarray, n_mean: float,
                          path: Path) -> str:
    """``idealised_vs_spectrum.png``: :func:`attnflow.plot.flow_vs_spectrum`."""
    return _save(plot.flow_vs_spectrum(rows, final_cos, final_clusters, n_mean=n_mean), path)
