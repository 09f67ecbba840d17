r"""Diagnostics of the cluster geometry: pure functions of a state (n, d), or of a state and
its attention matrix P (n, n).

The jnp ones (clusters, attention structure, projections, collapse, the geometry classifier
:func:`classify_configuration`) are jit/vmap-able and can serve as a diffrax ``save_fn``; the
convex-hull ones (:mod:`.polytope`) run on the host in float64; :func:`classify_geometry` is
the classifier for one configuration, called from the host; the metastability of a series of cluster counts
(:func:`metastable_states`, :func:`plateaus`, :func:`first_plateaus`) is host-side numpy too.

Tolerances are ``rel_tol`` times a scale; pass a length of the *initial* configuration as
``scale`` (the examined cloud's own diameter is the default of the low-level cluster functions
only, and means nothing for a cloud that collapsed or spread). As a ``save_fn`` output, cast counts to float
(diffrax pre-fills its save buffers with inf).

Example:
    >>> import numpy as np
    >>> from attnflow.observables import classify_geometry
    >>> from attnflow.spectral import predict_geometry
    >>> z = np.array([[1.0, 0.0], [1.0, 0.0], [-1.0, 0.5], [-1.0, 0.5], [0.0, 0.0]])
    >>> V = np.eye(2)
    >>> obs = classify_geometry(z, V, scale=1.0)
    >>> obs.label, obs.num_clusters, obs.supports(predict_geometry(V, V, V).geometry)
    ('polytope', 3, True)
"""

from .._lazy import lazy_names as _lazy_names

#: public name -> the module that defines it, imported on first use (PEP 562): importing one light part of the
#: package (a constant, a host-side function) does not import the others and what they need
_LAZY = {
    **dict.fromkeys(("boolean_distance", "double_log_slope", "leaders", "numerical_rank", "off_leader_mass"),
                    "._attention_structure"),
    "circle_gram_statistics": "._circle_pairs",
    "sphere_gram_statistics": "._sphere_pairs",
    **dict.fromkeys(("cluster_labels", "cluster_tolerance", "connected_components", "diameter", "directions",
                     "num_clusters", "pairwise_distances"), "._clusters"),
    **dict.fromkeys(("DEFAULT_THRESHOLD", "close_pairs", "clusters_above", "count_components",
                     "gram_statistics", "inner_product_range", "interaction_energy", "pair_fraction",
                     "pairs_clustered", "similar_pairs", "span_dimension", "sphere_energy_from_row_sums"), "._pairs"),
    **dict.fromkeys(("collapse_bound", "max_norm", "uniform_distance"), "._collapse"),
    **dict.fromkeys(("GEOMETRY_LABELS", "BatchObservation", "GeometryObservation", "classify_configuration",
                     "classify_geometry", "clustered", "levels_clustered"), "._classification"),
    **dict.fromkeys(("abz_levels", "extreme_monotonicity", "leading_vectors", "level_labels", "num_levels",
                     "projections"), "._hyperplanes"),
    **dict.fromkeys(("TOKEN_CLASSES", "AffineHull", "affine_hull", "classify_tokens", "hull_nesting",
                     "hull_vertices", "hull_violation", "polytope_set_residual"), "._polytope"),
    "sphere_clusters": "._sphere_clusters",
    **dict.fromkeys(("codim_projections", "split_coordinates", "unstable_left_basis"), "._subspaces"),
    **dict.fromkeys(("ENERGY_REL_TOL", "HOLD_RATIO", "EnergyPlateau", "Plateau", "cluster_geometry",
                     "energy_plateaus", "first_plateaus", "gathered", "merges", "metastable_states",
                     "plateau_geometry", "plateau_table", "plateaus"), "._metastability"),
}

__getattr__, __dir__ = _lazy_names(__name__, _LAZY, globals())

__all__ = [
    "pairwise_distances", "diameter", "directions", "cluster_tolerance", "cluster_labels", "num_clusters",
    "connected_components", "count_components", "similar_pairs", "close_pairs", "pair_fraction",
    "pairs_clustered", "clusters_above", "gram_statistics", "circle_gram_statistics", "sphere_gram_statistics",
    "interaction_energy", "sphere_energy_from_row_sums", "span_dimension", "inner_product_range",
    "DEFAULT_THRESHOLD",
    "numerical_rank", "boolean_distance", "leaders", "off_leader_mass", "double_log_slope",
    "AffineHull", "affine_hull", "hull_vertices", "hull_violation", "hull_nesting", "classify_tokens",
    "TOKEN_CLASSES", "polytope_set_residual",
    "leading_vectors", "projections", "level_labels", "num_levels", "abz_levels", "extreme_monotonicity",
    "split_coordinates", "unstable_left_basis", "codim_projections",
    "max_norm", "uniform_distance", "collapse_bound",
    "GEOMETRY_LABELS", "GeometryObservation", "BatchObservation", "classify_geometry", "classify_configuration",
    "clustered", "levels_clustered",
    "metastable_states", "gathered", "plateaus", "first_plateaus", "plateau_table", "plateau_geometry",
    "cluster_geometry", "sphere_clusters", "merges", "energy_plateaus", "Plateau",
    "EnergyPlateau", "HOLD_RATIO", "ENERGY_REL_TOL",
]
