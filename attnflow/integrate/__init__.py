"""Integrators: diffrax ODE solves and the forward-Euler layer stepper, one result type."""

from .euler import solve_euler
from .ode import SOLVERS, make_solver, solve_ode
from .solution import Trajectory, first_nonfinite_time, raise_if_failed

__all__ = [
    "solve_euler",
    "solve_ode",
    "SOLVERS",
    "make_solver",
    "Trajectory",
    "first_nonfinite_time",
    "raise_if_failed",
]
