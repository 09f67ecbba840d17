r"""attnflow: self-attention as an interacting particle system, in JAX.

Tokens are particles, layers are time, attention is the interaction:

.. math:: \dot x_i = \sum_j \mathrm{softmax}_j(\langle Q x_i, K x_j\rangle)\, V x_j .

Public pieces, along the data's path:

* weights & tokens -> :class:`AttentionWeights`, :mod:`attnflow._linalg` (e^{tV}, I + dt V), :mod:`attnflow.spectral`
* vector fields    -> :mod:`attnflow.dynamics` (AttentionFlow, RescaledFlow, DiscreteRescaledFlow)
* integrators      -> :mod:`attnflow.integrate` (``ODESolver`` / ``solve_ode``, ``EulerStepper`` / ``solve_euler``)
* one call         -> :func:`attnflow.simulate`

Importing attnflow changes no JAX configuration. ``simulate(dtype="float64")`` and the
report/sweep jobs run in a scoped float64 mode (``jax.enable_x64(True)``); elsewhere every
function keeps the dtype it is given.
"""

from ._attention import attend, attention_matrix, scores, select_impl, softmax  # noqa: E402
from .dynamics import (  # noqa: E402
    AbstractAttentionDynamics,
    AbstractDynamics,
    AttentionFlow,
    DiscreteRescaledFlow,
    FoldedBatch,
    RescaledFlow,
    SumOfFields,
)
from .errors import AttnflowError, InputError, NonFiniteError, SolverError  # noqa: E402
from .integrate import AbstractIntegrator, EulerStepper, ODESolver, Trajectory, raise_if_failed, solve_euler, solve_ode  # noqa: E402
from ._batching import vmap_systems  # noqa: E402
from ._linalg import expm_tV  # noqa: E402
from .fields import make_dynamics  # noqa: E402
from ._simulation import Simulation, simulate  # noqa: E402
from ._weights import AttentionWeights  # noqa: E402

__version__ = "0.1.0"

__all__ = [
    "softmax",
    "select_impl",
    "scores",
    "attention_matrix",
    "attend",
    "AttentionWeights",
    "AbstractDynamics",
    "AbstractAttentionDynamics",
    "SumOfFields",
    "AbstractIntegrator",
    "EulerStepper",
    "ODESolver",
    "AttentionFlow",
    "RescaledFlow",
    "DiscreteRescaledFlow",
    "FoldedBatch",
    "solve_ode",
    "solve_euler",
    "Trajectory",
    "raise_if_failed",
    "simulate",
    "Simulation",
    "make_dynamics",
    "expm_tV",
    "vmap_systems",
    "AttnflowError",
    "InputError",
    "NonFiniteError",
    "SolverError",
]
