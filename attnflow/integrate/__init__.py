"""Integrators: diffrax ODE solves and the forward-Euler layer stepper, one shape, one result type.

Both are :class:`AbstractIntegrator`: ``bind(field)`` then ``solve(field, y0, *, save_fn, args)``
returning a :class:`Trajectory`. :func:`solve_ode` and :func:`solve_euler` are their one-call forms.
"""

from ._base import AbstractIntegrator
from ._euler import EulerStepper, plain_shift, solve_euler, sphere_shift
from ._ode import DEFAULT_TOLERANCES, SOLVERS, ODESolver, make_solver, solve_ode
from ._solution import (
    RESULT_NONFINITE,
    RESULT_SOLVER_STOPPED,
    RESULT_SUCCESS,
    Trajectory,
    error_if_failed,
    first_nonfinite_time,
    raise_if_failed,
)

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
