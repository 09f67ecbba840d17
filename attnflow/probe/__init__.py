r"""Gradient-based probing of the paper's assumptions with optax (``attnflow probe``).

* :mod:`.optimize` -- a resumable, batched optax loop (per-member ``apply_if_finite``: a
  non-finite member is frozen and flagged, the others continue; checkpoints, progress bar);
* :mod:`.failure` -- study 1: distance to failure of clustering vs of Def 4.1
  (:func:`distance_to_failure` for your own Q, K, V);
* :mod:`.beyond_pd` -- study 2: non-PD :math:`Q^TK` with V = I (Section 12.1);
* :mod:`.sensitivity` -- study 3: d(a, b)/dV and its eigenbasis projection;
* :mod:`.config` -- a probe config read and parsed once, into a frozen, typed config;
* :mod:`.run` -- the study's run and its report folder.
"""

from ._config import STUDIES, check_probe_config, load_probe_config, parse_probe_config, read_probe_config
from ._failure import distance_to_failure
from ._optimize import NonFiniteLossError, OptimizationResult, failure_reason, finite_guard, optimize
from ._run import run_probe

__all__ = ["optimize", "OptimizationResult", "NonFiniteLossError", "finite_guard", "failure_reason", "STUDIES",
           "load_probe_config", "read_probe_config", "parse_probe_config", "run_probe", "check_probe_config",
           "distance_to_failure"]
