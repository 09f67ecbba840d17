"""Integrators: diffrax ODE solves and the fixed-step layer steppers (Euler, Runge-Kutta), one shape, one result type.

Both are :class:`AbstractIntegrator`: ``bind(field)`` then ``solve(field, y0, *, save_fn, args)``
returning a :class:`Trajectory`. :func:`solve_ode` and :func:`solve_euler` are their one-call forms.
:class:`RKStepper` runs an explicit Runge-Kutta :class:`ButcherTableau` on the same layer grid, and
:class:`SaveLayers` says which layers a stepper saves, and :class:`RESULTS` names every solve's outcome.
Noise (:class:`TokenNoise`, :class:`CommonNoise`) is integrated by :class:`EulerMaruyamaStepper` (the
stochastic layer stepper) and :class:`SDESolver` (diffrax SDE solves).
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_names as _lazy_names
from ._base import AbstractIntegrator
from ._euler import EulerStepper, plain_shift, solve_euler, sphere_shift
from ._make import make_integrator
from ._noise import AbstractNoise, CommonNoise, TokenNoise
from ._rk import RK_TABLEAUX, ButcherTableau, RKStepper
from ._save import SaveLayers
from ._stochastic import EulerMaruyamaStepper
from ._solution import (
    RESULTS,
    Trajectory,
    error_if_failed,
    first_nonfinite_time,
    raise_if_failed,
)

#: the diffrax integrator's names, imported on first use (PEP 562): the Euler stepper's users (the phase
#: job, the layer sweeps) do not load diffrax (about 0.3 s of every such command's start)
_ODE_NAMES = ("DEFAULT_TOLERANCES", "SOLVERS", "ODESolver", "make_solver", "solve_ode")
_SDE_NAMES = ("SDESolver", "SDE_SOLVERS")
if TYPE_CHECKING:  # for type checkers and the API reference, which read the names statically
    from ._ode import DEFAULT_TOLERANCES, SOLVERS, ODESolver, make_solver, solve_ode
    from ._sde import SDE_SOLVERS, SDESolver

__getattr__, __dir__ = _lazy_names(__name__, {**dict.fromkeys(_ODE_NAMES, "._ode"), **dict.fromkeys(_SDE_NAMES, "._sde")},
                                   globals())

__all__ = [
    "AbstractIntegrator",
    "EulerStepper",
    "RKStepper",
    "ButcherTableau",
    "RK_TABLEAUX",
    "SaveLayers",
    "ODESolver",
    "EulerMaruyamaStepper",
    "SDESolver",
    "SDE_SOLVERS",
    "AbstractNoise",
    "TokenNoise",
    "CommonNoise",
    "plain_shift",
    "sphere_shift",
    "solve_euler",
    "solve_ode",
    "SOLVERS",
    "DEFAULT_TOLERANCES",
    "make_solver",
    "make_integrator",
    "Trajectory",
    "RESULTS",
    "error_if_failed",
    "first_nonfinite_time",
    "raise_if_failed",
]
