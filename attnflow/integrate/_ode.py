r"""Continuous-time integration of any dynamics with diffrax.

One integrator, :class:`ODESolver`, wraps ``diffrax.diffeqsolve``: any diffrax solver
(Tsit5 by default), adaptive PID step-size control or constant steps, output at the
requested times, and optionally observables ``save_fn(t, y, args)`` saved instead of
whole states (memory O(T x observables) for big sweeps). It has the shape of every
integrator (:class:`~attnflow.integrate.AbstractIntegrator`): ``bind(field)`` (here the
identity) and ``solve(field, y0, *, save_fn, args)``; :func:`solve_ode` is its one-call form.
"""

from __future__ import annotations

import functools
from typing import Callable

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PyTree

from .. import _validate as v
from .._x64 import check_float64_kept
from ..dynamics import AbstractDynamics
from ..errors import InputError
from ._base import AbstractIntegrator, check_dynamics
from ._solution import RESULTS, Trajectory, first_nonfinite_time

__all__ = ["ODESolver", "solve_ode", "SOLVERS", "make_solver", "DEFAULT_TOLERANCES"]

#: (rtol, atol) of the adaptive solves by dtype, unless given
DEFAULT_TOLERANCES: dict[str, tuple[float, float]] = {"float32": (1e-5, 1e-6), "float64": (1e-9, 1e-11)}

SOLVERS: dict[str, Callable[[], diffrax.AbstractSolver]] = {
    "tsit5": diffrax.Tsit5,
    "dopri5": diffrax.Dopri5,
    "dopri8": diffrax.Dopri8,
    "bosh3": diffrax.Bosh3,
    "heun": diffrax.Heun,
    "midpoint": diffrax.Midpoint,
    "ralston": diffrax.Ralston,
    "euler_diffrax": diffrax.Euler,
}


def make_solver(solver: str | diffrax.AbstractSolver | None) -> diffrax.AbstractSolver:
    """A diffrax solver from a name in :data:`SOLVERS` or an instance (default Tsit5)."""
    if solver is None:
        return diffrax.Tsit5()
    if isinstance(solver, diffrax.AbstractSolver):
        return solver
    if isinstance(solver, str) and solver.lower() in SOLVERS:
        return SOLVERS[solver.lower()]()
    raise InputError(
        f"solver must be a diffrax solver instance or one of {sorted(SOLVERS)}, got {solver!r}."
    )


class _GuardedField(eqx.Module):
    """The dynamics' field, or zero when it was non-finite at the start (a pytree, so that
    every diffrax adjoint, BacksolveAdjoint included, sees the parameters inside it)."""

    dynamics: AbstractDynamics
    bad_start: Array

    def __call__(self, t, y, args):
        f = self.dynamics.vector_field(t, y, args)
        return jnp.where(self.bad_start, jnp.zeros_like(f), f)


#: an adaptive solve gives up on a non-finite step once the step is no longer than this many
#: units in the last place of max(|t0|, |t1|): the time resolution, below which no step progresses
#: (Tsit5, float32, V = 50 I, t1 = 20: about ten rejected steps after the first non-finite one
#: bracket the blow-up time to ~1e-5; 92 steps in all for 512 tokens in d = 64)
BLOW_UP_ULPS = 2**4


def _all_finite(tree: PyTree) -> Array:
    """True when every leaf of ``tree`` (None leaves ignored) is finite."""
    return functools.reduce(jnp.logical_and, [jnp.all(jnp.isfinite(a)) for a in jax.tree_util.tree_leaves(tree)],
                            jnp.asarray(True))


class _StopAtBlowUp(diffrax.AbstractStepSizeController):
    r"""``inner``'s step-size control, ending the solve at the first step that cannot be made finite.

    An adaptive controller rejects a step whose candidate state or error estimate is non-finite
    and retries it smaller; at a genuine blow-up at time :math:`t_*` (e.g. attention scores
    overflowing as :math:`e^{2ct}` for :math:`V = cI`) the accepted times then creep towards
    :math:`t_*` without reaching it until ``max_steps``. This controller instead stops the solve
    (without accepting that step) once a non-finite step from the last finite state at ``t`` is
    no longer than ``min_dt``, or at once if ``inner`` would keep it (constant steps), and records
    ``t + dt``: the blow-up lies in :math:`(t, t + dt]`. Finite steps are controlled by ``inner``
    unchanged.

    Its state is ``(inner state, t_reached, t_blow_up)``: the end of the last accepted step, and
    the end of the step at which it gave up (``inf`` while it has not).
    """

    inner: diffrax.AbstractStepSizeController
    min_dt: Array

    def wrap(self, direction):
        return eqx.tree_at(lambda c: c.inner, self, self.inner.wrap(direction))

    def init(self, terms, t0, t1, y0, dt0, args, func, error_order):
        tnext, state = self.inner.init(terms, t0, t1, y0, dt0, args, func, error_order)
        t0 = jnp.asarray(t0, jnp.result_type(tnext))
        return tnext, (state, t0, jnp.full_like(t0, jnp.inf))

    def adapt_step_size(self, t0, t1, y0, y1_candidate, args, y_error, error_order, controller_state):
        state, t_reached, t_blow_up = controller_state
        keep, tprev, tnext, made_jump, state, result = self.inner.adapt_step_size(
            t0, t1, y0, y1_candidate, args, y_error, error_order, state)
        bad = ~_all_finite((y1_candidate, y_error))
        stop = bad & (keep | ~(jnp.abs(t1 - t0) > self.min_dt))  # a NaN dt stops too
        keep = keep & ~bad
        return (
            keep,
            jnp.where(stop, t0, tprev),
            jnp.where(stop, t1, tnext),
            made_jump,
            (state, jnp.where(keep, t1, t_reached), jnp.where(stop, t1, t_blow_up)),
            diffrax.RESULTS.where(stop, diffrax.RESULTS.dt_min_reached, result),
        )


class _AdaptiveStopAtBlowUp(_StopAtBlowUp, diffrax.AbstractAdaptiveStepSizeController):
    """:class:`_StopAtBlowUp` around an adaptive controller (its tolerances also serve implicit solvers)."""

    @property
    def rtol(self):
        return self.inner.rtol

    @property
    def atol(self):
        return self.inner.atol

    @property
    def norm(self):
        return self.inner.norm


class ODESolver(AbstractIntegrator):
    r"""Integrate :math:`\dot y = f(t, y)` from t0 to t1 with a diffrax solver.

    Args:
        t0, t1: the time span (t0 <= t1).
        ts: save times (default: t0 and t1).
        solver: name in :data:`SOLVERS` or a diffrax solver instance (default Tsit5).
        rtol, atol: tolerances of the PID controller when ``adaptive``.
        dt0: initial step (adaptive; None lets diffrax choose) or the constant step.
        adaptive: PID step-size control if True, else constant steps of ``dt0``.
        max_steps: bound on the number of steps (it sizes buffers; keep it modest;
            ``None`` only with an adjoint that allows it, e.g. ``BacksolveAdjoint``).
        adjoint: diffrax adjoint (default ``RecursiveCheckpointAdjoint``; ``BacksolveAdjoint``
            for O(1) memory, ``ForwardMode`` for forward-mode derivatives).

    :meth:`bind` returns the field unchanged (an ODE solve has no layer grid). :meth:`solve`
    saves ``save_fn(t, y, args)`` instead of y when given (``SaveAt(fn=...)``); without it plain
    ``SaveAt(ts=...)`` is used, which every diffrax adjoint accepts.

    Failures do not raise inside jit: see ``Trajectory.result`` and ``t_nonfinite``, or call
    :func:`~attnflow.integrate.raise_if_failed` / :func:`~attnflow.integrate.error_if_failed`.
    The solve ends at the first step it cannot make finite, as the Euler stepper does: a
    blow-up at :math:`t_*` (a state or field overflowing, e.g. scores growing like
    :math:`e^{2ct}` for :math:`V = cI`) ends it within a few rejected steps, with
    ``t_nonfinite`` the end of the step that failed (:math:`t_*` lies within that step),
    instead of the adaptive controller creeping towards :math:`t_*` until ``max_steps``. A
    non-finite field at the start (e.g. a NaN parameter) is reported at once, at t0. A float64
    ``y0`` or ``ts`` while JAX's float64 mode is off is an ``InputError`` (it would run in float32).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from attnflow import RescaledFlow
        >>> from attnflow.integrate import ODESolver
        >>> z0 = jax.random.normal(jax.random.key(0), (8, 2))
        >>> solver = ODESolver(0.0, 2.0, ts=jnp.linspace(0.0, 2.0, 5), solver="dopri5")
        >>> solver.solve(RescaledFlow(jnp.eye(2), jnp.eye(2), jnp.eye(2)), z0).ys.shape
        (5, 8, 2)
    """

    t0: Float[Array, ""] | float
    t1: Float[Array, ""] | float
    ts: Float[Array, " T"] | None
    solver: diffrax.AbstractSolver
    rtol: Float[Array, ""] | float
    atol: Float[Array, ""] | float
    dt0: Float[Array, ""] | float | None
    adaptive: bool = eqx.field(static=True)
    max_steps: int | None = eqx.field(static=True)
    adjoint: diffrax.AbstractAdjoint

    def __init__(self, t0, t1, *, ts=None, solver: str | diffrax.AbstractSolver | None = None, rtol=1e-6,
                 atol=1e-8, dt0=None, adaptive: bool = True, max_steps: int | None = 16384,
                 adjoint: diffrax.AbstractAdjoint | None = None):
        v.check_time_span(t0, t1)
        if dt0 is not None:
            v.check_positive("dt0", dt0)
        v.check_positive("rtol", rtol)
        v.check_positive("atol", atol)
        if max_steps is not None and (not isinstance(max_steps, int) or max_steps < 1):
            raise InputError(f"max_steps must be a positive int (or None), got {max_steps!r}.")
        if ts is not None:
            v.check_save_times(ts, t0, t1)
        if not adaptive and dt0 is None:
            raise InputError("constant-step integration (adaptive=False) needs dt0 > 0, got None.")
        self.t0, self.t1, self.ts, self.solver = t0, t1, ts, make_solver(solver)
        self.rtol, self.atol, self.dt0, self.adaptive, self.max_steps = rtol, atol, dt0, bool(adaptive), max_steps
        self.adjoint = diffrax.RecursiveCheckpointAdjoint() if adjoint is None else adjoint

    def bind(self, dynamics: AbstractDynamics) -> AbstractDynamics:
        """The field unchanged (checked to be an attnflow field)."""
        return check_dynamics(dynamics)

    def solve(
        self,
        dynamics: AbstractDynamics,
        y0: Float[Array, "n d"],
        *,
        save_fn: Callable[[Array, Array, PyTree], PyTree] | None = None,
        args: PyTree = None,
    ) -> Trajectory:
        """Integrate from ``y0`` (the class docstring says what is saved and how failures are reported)."""
        check_dynamics(dynamics)
        v.check_array("y0", y0, "the state (n, d) (batch with jax.vmap)", min_rank=1)
        for name, a in (("y0", y0), ("ts", self.ts)):
            check_float64_kept(name, a)
        dtype = jnp.result_type(y0.dtype, float)
        y0 = jnp.asarray(y0, dtype)
        ts = jnp.asarray([self.t0, self.t1] if self.ts is None else self.ts, dtype)
        t0_arr, t1_arr = jnp.asarray(self.t0, dtype), jnp.asarray(self.t1, dtype)
        if self.adaptive:
            controller = _AdaptiveStopAtBlowUp(diffrax.PIDController(rtol=self.rtol, atol=self.atol),
                                               _blow_up_min_dt(t0_arr, t1_arr))
        else:
            controller = _StopAtBlowUp(diffrax.ConstantStepSize(), _blow_up_min_dt(t0_arr, t1_arr))
        # A field that is non-finite at the start (NaN parameters) would make the adaptive
        # controller reject every step until max_steps: integrate a zero field instead, and report.
        bad_start = ~jnp.all(jnp.isfinite(dynamics.vector_field(t0_arr, y0, args)))

        sol = diffrax.diffeqsolve(
            diffrax.ODETerm(_GuardedField(dynamics, bad_start)),
            self.solver,
            t0=t0_arr,
            t1=t1_arr,
            dt0=None if self.dt0 is None else jnp.asarray(self.dt0, dtype),
            y0=y0,
            args=args,
            saveat=(diffrax.SaveAt(ts=ts, controller_state=True) if save_fn is None
                    else diffrax.SaveAt(ts=ts, fn=save_fn, controller_state=True)),
            stepsize_controller=controller,
            max_steps=self.max_steps,
            adjoint=self.adjoint,
            throw=False,
        )
        ys = jax.tree_util.tree_map(
            lambda a: jnp.where(bad_start, jnp.nan, a) if jnp.issubdtype(a.dtype, jnp.inexact) else a, sol.ys)
        _, t_reached, t_blow_up = sol.controller_state
        t_blow_up = jnp.where(bad_start, t0_arr, t_blow_up)
        stopped = (sol.result != diffrax.RESULTS.successful) & ~jnp.isfinite(t_blow_up)  # e.g. max_steps
        t_bad = jnp.where(jnp.isfinite(t_blow_up), t_blow_up,
                          jnp.where(stopped, t_reached, first_nonfinite_time(ts, ys)))
        result = jnp.where(stopped, RESULTS.solver_stopped,
                           jnp.where(jnp.isfinite(t_bad), RESULTS.nonfinite, RESULTS.successful))
        return Trajectory(
            ts=ts,
            ys=ys,
            num_steps=jnp.asarray(sol.stats["num_accepted_steps"]),
            result=result,
            t_nonfinite=t_bad,
        )


def solve_ode(
    dynamics: AbstractDynamics,
    y0: Float[Array, "n d"],
    *,
    t0: float,
    t1: float,
    ts: Float[Array, " T"] | None = None,
    solver: str | diffrax.AbstractSolver | None = None,
    rtol: float = 1e-6,
    atol: float = 1e-8,
    dt0: float | None = None,
    adaptive: bool = True,
    max_steps: int | None = 16384,
    save_fn: Callable[[Array, Array, PyTree], PyTree] | None = None,
    adjoint: diffrax.AbstractAdjoint | None = None,
    args: PyTree = None,
) -> Trajectory:
    r"""Shorthand for ``ODESolver(t0, t1, ts=ts, solver=solver, ...).solve(dynamics, y0, save_fn=save_fn, args=args)``.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from attnflow import RescaledFlow
        >>> from attnflow.integrate import solve_ode
        >>> z0 = jax.random.normal(jax.random.key(0), (8, 2))
        >>> traj = solve_ode(RescaledFlow(jnp.eye(2), jnp.eye(2), jnp.eye(2)), z0, t0=0.0, t1=2.0,
        ...                  ts=jnp.linspace(0.0, 2.0, 5))
        >>> traj.ys.shape
        (5, 8, 2)
    """
    check_dynamics(dynamics)
    v.check_array("y0", y0, "the state (n, d) (batch with jax.vmap)", min_rank=1)
    return ODESolver(t0, t1, ts=ts, solver=solver, rtol=rtol, atol=atol, dt0=dt0, adaptive=adaptive,
                     max_steps=max_steps, adjoint=adjoint).solve(dynamics, y0, save_fn=save_fn, args=args)


def _blow_up_min_dt(t0: Array, t1: Array) -> Array:
    """The step below which a non-finite step ends an adaptive solve (:data:`BLOW_UP_ULPS`)."""
    return BLOW_UP_ULPS * jnp.finfo(t0.dtype).eps * jnp.maximum(jnp.abs(t0), jnp.abs(t1))
