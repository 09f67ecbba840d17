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

from ._lazy import lazy_names as _lazy_names

#: public name -> the module that defines it; imported on first use (PEP 562), so that
#: ``import attnflow`` and ``attnflow --help`` do not load JAX until a name is asked for
_LAZY = {
    **dict.fromkeys(("attend", "attention_matrix", "scores", "select_impl", "softmax"), ".kernels"),
    **dict.fromkeys(("AbstractAttentionDynamics", "AbstractDynamics", "AttentionFlow", "DiscreteRescaledFlow",
                     "FoldedBatch", "RescaledFlow", "SumOfFields"), ".dynamics"),
    **dict.fromkeys(("AttnflowError", "InputError", "NonFiniteError", "SolverError"), ".errors"),
    **dict.fromkeys(("AbstractIntegrator", "EulerStepper", "ODESolver", "Trajectory", "raise_if_failed",
                     "solve_euler", "solve_ode"), ".integrate"),
    "vmap_systems": "._batching",
    "expm_tV": "._linalg",
    "make_dynamics": ".fields",
    "simulate": "._simulation",
    **dict.fromkeys(("Simulation", "load"), "._simulation_io"),
    "make_integrator": ".integrate._make",
    "AttentionWeights": "._weights",
}


__getattr__, __dir__ = _lazy_names(__name__, _LAZY, globals())

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
    "make_integrator",
    "Simulation",
    "load",
    "make_dynamics",
    "expm_tV",
    "vmap_systems",
    "AttnflowError",
    "InputError",
    "NonFiniteError",
    "SolverError",
]
