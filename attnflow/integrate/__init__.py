"""Integrators: diffrax ODE solves and the forward-Euler layer stepper, one shape, one result type.

Both are :class:`AbstractIntegrator`: ``bind(field)`` then ``solve(field, y0, *, save_fn, args)``
returning a :class:`Trajectory`. :func:`solve_ode` and :func:`solve_euler` are their one-call forms.
"""

import importlib as _importlib
from typing import TYPE_CHECKING

from ._base import AbstractIntegrator
from ._euler import EulerStepper, plain_shift, solve_euler, sphere_shift
from ._solution import (
    RESULT_NONFINITE,
    RESULT_SOLVER_STOPPED,
    RESULT_SUCCESS,
    Trajectory,
    error_if_failed,
    first_nonfinite_time,
    raise_if_failed,
)

#: the diffrax integrator's names, imported on first use (PEP 562): the Euler stepper's users (the phase
#: job, the layer sweeps) do not load diffrax (about 0.3 s of every such command's start)
_ODE_NAMES = ("DEFAULT_TOLERANCES", "SOLVERS", "ODESolver", "make_solver", "solve_ode")
if TYPE_CHECKING:  # for type checkers and the API reference, which read the names statically
    from ._ode import DEFAULT_TOLERANCES, SOLVERS, ODESolver, make_solver, solve_ode


def __getattr__(name: str):
    if name not in _ODE_NAMES:
        raise AttributeError(f"module 'attnflow.integrate' has no attribute {name!r}")
    value = getattr(_importlib.import_module("._ode", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_ODE_NAMES))


__all__ = [
    "AbstractIntegrator",
    "EulerStepper",
    "ODESolver",
    "plain_shift",
    "sphere_shift",
    "solve_euler",
    "solve_ode",
    "SOLVERS",
    "DEFAULT_TOLERANCES",
    "make_solver",
    "Trajectory",
    "RESULT_SUCCESS",
    "RESULT_SOLVER_STOPPED",
    "RESULT_NONFINITE",
    "error_if_failed",
    "first_nonfinite_time",
    "raise_if_failed",
]
