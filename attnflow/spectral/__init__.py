"""Spectral assumptions of the paper, checked for given weights (SPEC sections 2 and 4)."""

from .assumptions import (
    GoodTripleCheck,
    LeadingEigenpair,
    ParanormalSplit,
    Prediction,
    check_good_triple,
    is_positive_definite,
    leading_eigenpair,
    paranormal_split,
    predict_geometry,
)
from .batched import (
    EIG_ROUTES,
    GEOMETRIES,
    EigenStats,
    SpectralBatch,
    check_batch,
    eig_route,
    eigen_stats,
    eigvals_sorted,
    geometry_names,
)

__all__ = [
    "LeadingEigenpair",
    "GoodTripleCheck",
    "ParanormalSplit",
    "Prediction",
    "leading_eigenpair",
    "check_good_triple",
    "paranormal_split",
    "is_positive_definite",
    "predict_geometry",
    "EIG_ROUTES",
    "GEOMETRIES",
    "EigenStats",
    "SpectralBatch",
    "check_batch",
    "eig_route",
    "eigen_stats",
    "eigvals_sorted",
    "geometry_names",
]
