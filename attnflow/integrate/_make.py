r"""One integrator from flat options: :func:`make_integrator` (what ``simulate``'s keywords build).

``method="euler"`` gives the layer stepper :class:`~attnflow.integrate.EulerStepper` on the grid
:math:`t_k = t_0 + k\,\Delta t`, :math:`k = 0, \dots, L = (t_1 - t_0)/\Delta t`; any other method a
diffrax solve, :class:`~attnflow.integrate.ODESolver`, from t0 to t1 (adaptive PID control, or constant
steps of ``dt``), saved on ``ts`` or ``num_saves`` uniform times. Each option is checked here or by the
integrator's own constructor, one :class:`~attnflow.InputError` sentence per problem.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable

import numpy as np

from .. import _validate as v
from .._x64 import float64_scope
from ..errors import InputError
from ._base import AbstractIntegrator
from ._euler import EulerStepper, plain_shift, sphere_shift

__all__ = ["make_integrator", "SHIFTS"]

#: the Euler stepper's updates by name
SHIFTS: dict[str, Callable] = {"plain": plain_shift, "sphere": sphere_shift}


def make_integrator(
    method: Any = "tsit5",
    *,
    t1: float,
    t0: float = 0.0,
    dt: float | None = None,
    ts: Any = None,
    num_saves: int = 101,
    save_every: int | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    max_steps: int | None = 16384,
    adjoint: Any = None,
    shift: str | Callable = "plain",
    noise: Any = None,
    dtype: str = "float32",
) -> AbstractIntegrator:
    r"""The integrator that ``method`` and the flat options describe (``simulate``'s keywords).

    Args:
        method: ``"euler"`` (the layer stepper: :math:`(t_1 - t_0)/\Delta t` residual layers), a diffrax
            solver name (``"tsit5"``, ``"dopri5"``, ``"dopri8"``, ... :data:`~attnflow.integrate.SOLVERS`)
            or a diffrax solver instance.
        t1, t0: the time span (t0 <= t1).
        dt: the layer step (required by ``"euler"``), or a constant step of a diffrax solver (None: adaptive).
        ts, num_saves: a diffrax solve's save times, or their number on a uniform grid from t0 to t1.
        save_every: the layer stepper saves every this many layers (default 1; a divisor of the layer count).
        rtol, atol: adaptive tolerances (defaults :data:`~attnflow.integrate.DEFAULT_TOLERANCES` of ``dtype``).
        max_steps: the most diffrax steps (it sizes buffers), or None.
        adjoint: a diffrax adjoint (default ``RecursiveCheckpointAdjoint``); diffrax solvers only.
        shift: the layer stepper's update: ``"plain"`` (y + dy), ``"sphere"`` (every token renormalised:
            post-LN) or a function ``(y, dy) -> y_next``.
        noise: a :class:`~attnflow.integrate.TokenNoise` or :class:`~attnflow.integrate.CommonNoise`: with
            ``"euler"`` the stochastic layer stepper :class:`~attnflow.integrate.EulerMaruyamaStepper`, with an SDE
            solver name (:data:`~attnflow.integrate.SDE_SOLVERS`: ``"heun"``, ``"midpoint"``, ...) a diffrax SDE
            solve :class:`~attnflow.integrate.SDESolver` in constant steps ``dt``.
        dtype: ``"float32"`` or ``"float64"``: the dtype of the save times and the default tolerances.

    Returns:
        :class:`~attnflow.integrate.EulerStepper` for ``"euler"``, else :class:`~attnflow.integrate.ODESolver`.

    Example:
        >>> from attnflow.integrate import make_integrator
        >>> stepper = make_integrator("euler", t1=2.0, dt=0.5, shift="sphere")
        >>> type(stepper).__name__, stepper.num_layers, stepper.shift.__name__
        ('EulerStepper', 4, 'sphere_shift')
        >>> solver = make_integrator("dopri5", t1=1.0, num_saves=3)
        >>> type(solver).__name__, solver.ts.tolist(), solver.adaptive
        ('ODESolver', [0.0, 0.5, 1.0], True)
    """
    return integrator_plan(method, t1=t1, t0=t0, dt=dt, ts=ts, num_saves=num_saves, save_every=save_every, rtol=rtol,
                           atol=atol, max_steps=max_steps, adjoint=adjoint, shift=shift, noise=noise,
                           dtype=dtype).build()


class IntegratorPlan:
    """A checked :func:`make_integrator` call before anything save-sized exists: ``num_saves`` (how many
    states the integrator will save), ``fix`` (the advice that lowers it) and :meth:`build`."""

    def __init__(self, num_saves: int, fix: str, build: Callable[[], AbstractIntegrator], method_name: str):
        self.num_saves, self.fix, self.build, self.method_name = num_saves, fix, build, method_name


def integrator_plan(method: Any = "tsit5", *, t1=None, t0=0.0, dt=None, ts=None, num_saves=101, save_every=None,
                    rtol=None, atol=None, max_steps=16384, adjoint=None, shift="plain", noise=None,
                    dtype="float32") -> IntegratorPlan:
    """:func:`make_integrator`'s checks, and its integrator as a :class:`IntegratorPlan` (``simulate`` refuses
    outputs that cannot fit between the two, before the save times are built)."""
    from ._ode import make_solver

    if dtype not in ("float32", "float64"):
        raise InputError(f"dtype must be 'float32' or 'float64', got {dtype!r}.")
    if t1 is None:
        raise InputError("the run needs its end time t1 (or an integrator: EulerStepper, RKStepper, ODESolver).")
    stepper = isinstance(method, str) and method == "euler"
    if noise is not None:
        return _noisy_plan(method, stepper, t0, t1, dt, ts, num_saves, save_every, shift, noise, dtype)
    if not stepper:
        make_solver(method)  # validates the name
    shift_fn = _shift_fn(shift)
    if shift_fn is not plain_shift and not stepper:
        raise InputError("shift= applies to the Euler layer stepper (method='euler'); an ODE solver integrates "
                         "the field as given (use a tangent-projected field, e.g. sphere_flow, on the sphere).")
    v.check_time_span(t0, t1)
    if stepper and dt is None:
        raise InputError("method='euler' (the layer stepper) needs a step dt > 0 (dt=1 is one transformer layer).")
    if dt is not None:
        v.check_positive("dt", dt)
    if adjoint is not None and stepper:
        raise InputError("adjoint= applies to diffrax solvers; the Euler stepper is differentiated directly "
                         "by JAX (reverse or forward mode).")
    name = method if isinstance(method, str) else type(method).__name__
    if stepper:
        return _stepper_plan(t0, t1, dt, ts, save_every, shift_fn, name)
    return _solver_plan(method, t0, t1, dt, ts, num_saves, rtol, atol, max_steps, adjoint, dtype, name)


def _stepper_plan(t0, t1, dt, ts, save_every, shift, name, noise=None) -> IntegratorPlan:
    """The layer stepper on t0 + k dt, k = 0..(t1 - t0)/dt, stochastic with ``noise`` (built at once: its saved
    layers are a compact :class:`~attnflow.integrate.SaveLayers`, nothing save-sized)."""
    if ts is not None:
        raise InputError("ts is not used by method='euler', which saves every save_every layers from t0 "
                         "(the layers t0 + k dt); drop ts and set save_every, or choose an ODE method.")
    span = float(t1) - float(t0)
    num_layers = v.whole_layers(span, float(dt), "the number of layers (t1 - t0)/dt",
                                fix="use a larger dt or a shorter span")
    if num_layers is None:
        raise InputError(
            f"the Euler stepper needs (t1 - t0)/dt to be a positive whole number of layers, "
            f"got (t1 - t0) = {span!r} and dt = {dt!r}."
        )
    if noise is None:
        stepper = EulerStepper(float(dt), num_layers, t0=float(t0), save_every=save_every, shift=shift)  # checks save_every
    else:
        from ._stochastic import EulerMaruyamaStepper

        stepper = EulerMaruyamaStepper(float(dt), num_layers, noise=noise, t0=float(t0), save_every=save_every,
                                       shift=shift)
    return IntegratorPlan(stepper.save_at.num_saves, "raise save_every (fewer saved layers)", lambda: stepper, name)


def _solver_plan(method, t0, t1, dt, ts, num_saves, rtol, atol, max_steps, adjoint, dtype, name) -> IntegratorPlan:
    """The diffrax solve from t0 to t1 (adaptive, or constant steps dt)."""
    from ._ode import DEFAULT_TOLERANCES, ODESolver, make_solver

    num_out, fix = _save_count(ts, t0, t1, num_saves)
    for label, tol in (("rtol", rtol), ("atol", atol)):
        if tol is not None:
            v.check_positive(label, tol, "a tolerance of the adaptive step control, a finite positive scalar")
    if max_steps is not None:
        v.check_int("max_steps", max_steps, meaning="the most solver steps, or None")
    default_rtol, default_atol = DEFAULT_TOLERANCES[dtype]

    def build() -> AbstractIntegrator:
        return ODESolver(float(t0), float(t1), ts=_save_grid(ts, t0, t1, num_out, dtype), solver=make_solver(method),
                         rtol=default_rtol if rtol is None else float(rtol),
                         atol=default_atol if atol is None else float(atol),
                         dt0=None if dt is None else float(dt), adaptive=dt is None, max_steps=max_steps,
                         adjoint=adjoint)

    return IntegratorPlan(num_out, fix, build, name)


def _noisy_plan(method, stepper, t0, t1, dt, ts, num_saves, save_every, shift, noise, dtype) -> IntegratorPlan:
    """With noise: the stochastic layer stepper (``"euler"``) or a diffrax SDE solve in constant steps dt."""
    from ._noise import check_noise
    from ._sde import SDE_SOLVERS, SDESolver

    check_noise(noise)
    v.check_time_span(t0, t1)
    if dt is None:
        raise InputError("a run with noise steps with a constant dt: give dt > 0 (for method='euler' dt = 1 is one "
                         "layer).")
    v.check_positive("dt", dt)
    shift_fn = _shift_fn(shift)
    name = method if isinstance(method, str) else type(method).__name__
    if stepper:
        return _stepper_plan(t0, t1, dt, ts, save_every, shift_fn, name, noise=noise)
    if isinstance(method, str) and method.lower() not in SDE_SOLVERS:
        raise InputError(f"with noise, method must be 'euler' (the stochastic layer stepper) or an SDE solver among "
                         f"{list(SDE_SOLVERS)}, got {method!r}.")
    if shift_fn is not plain_shift:
        raise InputError("shift= applies to the layer stepper (method='euler'); an SDE solve integrates the field "
                         "and the noise as given.")
    num_out, fix = _save_count(ts, t0, t1, num_saves)
    solver = SDESolver(float(t0), float(t1), dt=float(dt), noise=noise, solver=method)  # checks the solver

    def build() -> AbstractIntegrator:
        return SDESolver(float(t0), float(t1), dt=float(dt), noise=noise, ts=_save_grid(ts, t0, t1, num_out, dtype),
                         solver=solver.solver)

    return IntegratorPlan(num_out, fix, build, name)


def _shift_fn(shift):
    """The layer stepper's update named by ``shift`` (:data:`SHIFTS`) or given as a function."""
    shift_fn = SHIFTS.get(shift, shift) if isinstance(shift, str) else shift
    if not callable(shift_fn):
        raise InputError(f"shift must be 'plain', 'sphere' or a function (y, dy) -> y_next, got {shift!r}.")
    return shift_fn


def _save_count(ts, t0, t1, num_saves) -> tuple[int, str]:
    """How many times a diffrax solve saves (``ts`` checked, or ``num_saves`` uniform ones), and the advice that
    lowers it."""
    if ts is None:
        return v.check_int("num_saves", num_saves, minimum=2, meaning="save times from t0 to t1"), "lower num_saves"
    v.check_save_times(ts, t0, t1)
    return np.shape(ts)[0], "pass fewer save times ts"


def _save_grid(ts, t0, t1, num_out: int, dtype: str):
    """A diffrax solve's save times in ``dtype``: ``ts``, or ``num_out`` uniform times from t0 to t1."""
    import jax.numpy as jnp

    with float64_scope() if dtype == "float64" else contextlib.nullcontext():
        jdtype = jnp.float64 if dtype == "float64" else jnp.float32
        return (jnp.asarray(ts, jdtype) if ts is not None
                else jnp.linspace(float(t0), float(t1), num_out, dtype=jdtype))
