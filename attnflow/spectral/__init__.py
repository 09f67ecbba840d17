"""Spectral assumptions of the paper and the prediction table (SPEC sections 2, 3 and 4).

One JAX implementation (:func:`check_batch`, for stacks of weights); the single-triple
functions (:func:`check_good_triple`, :func:`predict_geometry`, ...) are a batch of one.
"""

from .._lazy import lazy_names as _lazy_names

#: public name -> the module that defines it, imported on first use (PEP 562): importing one light part of the
#: package (a constant, a host-side function) does not import the others and what they need
_LAZY = {
    **dict.fromkeys(("GoodTripleCheck", "LeadingEigenpair", "ParanormalSplit", "Prediction",
                     "check_good_triple", "is_positive_definite", "leading_eigenpair", "paranormal_split",
                     "predict_geometry", "spectral_one"), "._assumptions"),
    **dict.fromkeys(("EIG_ROUTES", "eig_route", "eigvals_sorted", "modulus_order", "sort_by_modulus"), "._eig"),
    **dict.fromkeys(("eigenpair_at", "leading_eigenpair_jax"), "._eigenpair"),
    **dict.fromkeys(("GEOMETRIES", "RULES", "EigenStats", "SpectralBatch", "check_batch", "eigen_stats",
                     "geometry_names", "left_eig", "projector_from_left_eig", "stats_from_eigvals",
                     "unstable_projector"), "._batched"),
}

__getattr__, __dir__ = _lazy_names(__name__, _LAZY, globals())

__all__ = [
    "LeadingEigenpair",
    "GoodTripleCheck",
    "ParanormalSplit",
    "Prediction",
    "spectral_one",
    "leading_eigenpair",
    "check_good_triple",
    "paranormal_split",
    "is_positive_definite",
    "predict_geometry",
    "EIG_ROUTES",
    "GEOMETRIES",
    "RULES",
    "EigenStats",
    "SpectralBatch",
    "check_batch",
    "eig_route",
    "eigen_stats",
    "eigvals_sorted",
    "geometry_names",
    "left_eig",
    "projector_from_left_eig",
    "unstable_projector",
    "eigenpair_at",
    "leading_eigenpair_jax",
    "modulus_order",
    "sort_by_modulus",
    "stats_from_eigvals",
]
