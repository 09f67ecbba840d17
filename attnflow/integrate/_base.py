r"""What every integrator is: a frozen module that binds a field and solves from a state.

An integrator holds everything about *how* a field is integrated (the time grid or span, the
solver, tolerances, the update rule) and nothing about the field itself:

* ``bind(field)``: the field as this integrator evaluates it. The layer stepper hands its grid
  to the field (``field.on_grid(dt, t0, num_layers)``, e.g. the exact discrete rescaling); an
  ODE solve uses the field unchanged. Callers that post-process a solution (tokens, attention
  matrices) use the bound field, so they treat every integrator alike.
* ``solve(field, y0, *, save_fn=None, args=None)``: integrate :math:`\dot y = f(t, y)` from
  ``y0`` and return a :class:`~attnflow.integrate.Trajectory` whose ``result`` is computed
  inside jit. Pure JAX: ``jit``, ``vmap`` and ``grad`` pass through it, and an integrator is a
  pytree, so it can be an argument of a jitted function.

Example:
    >>> from attnflow.integrate import AbstractIntegrator, EulerStepper, ODESolver
    >>> all(isinstance(i, AbstractIntegrator) for i in (EulerStepper(0.1, 10), ODESolver(0.0, 1.0)))
    True
"""

from __future__ import annotations

import abc
from typing import Callable

import equinox as eqx
from jaxtyping import Array, Float, PyTree

from ..dynamics import AbstractDynamics
from ..errors import InputError
from ._solution import Trajectory

__all__ = ["AbstractIntegrator", "check_dynamics"]


def check_dynamics(dynamics) -> AbstractDynamics:
    """``dynamics`` if it is an attnflow field, else an :class:`~attnflow.InputError`."""
    if not isinstance(dynamics, AbstractDynamics):
        raise InputError(f"dynamics must be an attnflow dynamics (AbstractDynamics), got {type(dynamics).__name__}.")
    return dynamics


class AbstractIntegrator(eqx.Module):
    """Base of the integrators: :meth:`bind` a field, :meth:`solve` from a state (module docstring)."""

    @abc.abstractmethod
    def bind(self, dynamics: AbstractDynamics) -> AbstractDynamics:
        """The field as this integrator evaluates it."""

    @abc.abstractmethod
    def solve(
        self,
        dynamics: AbstractDynamics,
        y0: Float[Array, "n d"],
        *,
        save_fn: Callable[[Array, Array, PyTree], PyTree] | None = None,
        args: PyTree = None,
    ) -> Trajectory:
        """Integrate from ``y0``; ``save_fn(t, y, args)`` replaces the saved states by observables."""
