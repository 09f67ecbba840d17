"""Integrators: diffrax ODE solves and the forward-Euler layer stepper, one result type."""

from .euler import EulerStepper, plain_shift, solve_euler, sphere_shift
from .ode import DEFAULT_TOLERANCES, SOLVERS, make_solver, solve_ode
from .solution import (
    RESULT_NONFINITE,
    RESULT_SOLVER_STOPPED,
    RESULT_SUCCESS,
    Trajectory,
    error_if_failed,
    first_nonfinite_time,
    raise_if_failed,
)

__all__ = [
    "EulerStepper",
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
