r"""Gradient-based probing of the paper's assumptions with optax (``attnflow probe``).

* :mod:`.optimize` -- a resumable, batched optax loop (``apply_if_finite``, checkpoints,
  a clear stop on a non-finite loss, progress bar);
* :mod:`.failure` -- study 1: distance to failure of clustering vs of Def 4.1;
* :mod:`.beyond_pd` -- study 2: non-PD :math:`Q^TK` with V = I (Section 12.1);
* :mod:`.sensitivity` -- study 3: d(a, b)/dV and its eigenbasis projection;
* :mod:`.run` -- config, report folder.
"""

from .optimize import NonFiniteLossError, OptimizationResult, finite_guard, optimize
from .run import STUDIES, load_probe_config, run_probe

__all__ = ["optimize", "OptimizationResult", "NonFiniteLossError", "finite_guard", "STUDIES",
           "load_probe_config", "run_probe"]
