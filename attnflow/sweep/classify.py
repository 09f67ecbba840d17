r"""The sweeps' names for the one geometry classifier and the unstable projector.

Both live elsewhere (:func:`attnflow.observables.classify_configuration`,
:func:`attnflow.spectral.unstable_projector`); this module only keeps the sweep's call sites
and the public import path ``attnflow.sweep.classify`` working.
"""

from ..observables.geometry import GEOMETRY_LABELS, BatchObservation
from ..observables.geometry import classify_configuration as classify_batch
from ..spectral.batched import left_eig, projector_from_left_eig, unstable_projector

__all__ = ["GEOMETRY_LABELS", "BatchObservation", "left_eig", "projector_from_left_eig", "unstable_projector",
           "classify_batch"]
