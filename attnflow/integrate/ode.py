r"""Continuous-time integration of any dynamics with diffrax.

One function, :func:`solve_ode`, wraps ``diffrax.diffeqsolve``: any diffrax solver
(Tsit5 by default), adaptive PID step-size control or constant steps, output at the
requested times, and optionally observables ``save_fn(t, y, args)`` saved instead of
whole states (memory O(T x observables) for big sweeps).
"""

from __future__ import annotations

from typing import Callable

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PyTree

from ..dynamics.base import AbstractDynamics
from .solution import RESULT_NONFINITE, RESULT_SOLVER_STOPPED, RESULT_SUCCESS, Trajectory, first_nonfinite_time

__all__ = ["solve_ode", "SOLVERS", "make_solver"]

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
    from ..errors import InputError

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
    r"""Integrate :math:`\dot y = f(t, y)` from t0 to t1 with a diffrax solver.

    Args:
        dynamics: any :class:`~attnflow.dynamics.AbstractDynamics`.
        y0: initial state (n, d).
        ts: save times (default: t0 and t1).
        solver: name or diffrax solver instance (default Tsit5).
        rtol, atol: tolerances of the PID controller when ``adaptive``.
        dt0: initial step (adaptive; None lets diffrax choose) or the constant step.
        adaptive: PID step-size control if True, else constant steps of ``dt0``.
        max_steps: bound on the number of steps (it sizes buffers; keep it modest;
            ``None`` only with an adjoint that allows it, e.g. ``BacksolveAdjoint``).
        save_fn: ``(t, y, args) -> pytree`` saved instead of y (``SaveAt(fn=...)``); without
            it plain ``SaveAt(ts=...)`` is used, which every diffrax adjoint accepts.
        adjoint: diffrax adjoint (default ``RecursiveCheckpointAdjoint``; ``BacksolveAdjoint``
            for O(1) memory, ``ForwardMode`` for forward-mode derivatives).

    Failures do not raise inside jit: see ``Trajectory.result`` and ``t_nonfinite``, or call
    :func:`~attnflow.integrate.raise_if_failed` / :func:`~attnflow.integrate.error_if_failed`.
    A non-finite field at the start (e.g. a NaN parameter) is reported at once instead of
    letting the adaptive controller reject steps until ``max_steps``.

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
    from .. import _validate as v
    from ..errors import InputError

    if not isinstance(dynamics, AbstractDynamics):
        raise InputError(f"dynamics must be an attnflow dynamics (AbstractDynamics), got {type(dynamics).__name__}.")
    v.check_array("y0", y0, "the state (n, d) (batch with jax.vmap)", min_rank=1)
    v.check_time_span(t0, t1)
    if dt0 is not None:
        v.check_positive("dt0", dt0)
    v.check_positive("rtol", rtol)
    v.check_positive("atol", atol)
    if max_steps is not None and (not isinstance(max_steps, int) or max_steps < 1):
        raise InputError(f"max_steps must be a positive int (or None), got {max_steps!r}.")
    dtype = jnp.result_type(y0.dtype, float)
    y0 = jnp.asarray(y0, dtype)
    if ts is None:
        ts = jnp.asarray([t0, t1], dtype)
    ts = jnp.asarray(ts, dtype)
    if adaptive:
        controller = diffrax.PIDController(rtol=rtol, atol=atol)
    else:
        if dt0 is None:
            raise InputError("constant-step integration (adaptive=False) needs dt0 > 0, got None.")
        controller = diffrax.ConstantStepSize()
    t0_arr = jnp.asarray(t0, dtype)
    # A field that is non-finite at the start (NaN parameters) would make the adaptive
    # controller reject every step until max_steps: integrate a zero field instead, and report.
    bad_start = ~jnp.all(jnp.isfinite(dynamics.vector_field(t0_arr, y0, args)))

    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(_GuardedField(dynamics, bad_start)),
        make_solver(solver),
        t0=t0_arr,
        t1=jnp.asarray(t1, dtype),
        dt0=None if dt0 is None else jnp.asarray(dt0, dtype),
        y0=y0,
        args=args,
        saveat=diffrax.SaveAt(ts=ts) if save_fn is None else diffrax.SaveAt(ts=ts, fn=save_fn),
        stepsize_controller=controller,
        max_steps=max_steps,
        adjoint=diffrax.RecursiveCheckpointAdjoint() if adjoint is None else adjoint,
        throw=False,
    )
    ys = jax.tree_util.tree_map(lambda a: jnp.where(bad_start, jnp.nan, a) if jnp.issubdtype(a.dtype, jnp.inexact) else a,
                                sol.ys)
    stopped = sol.result != diffrax.RESULTS.successful
    t_bad = jnp.where(bad_start, t0_arr, first_nonfinite_time(ts, ys))
    result = jnp.where(stopped & ~bad_start, RESULT_SOLVER_STOPPED,
                       jnp.where(jnp.isfinite(t_bad), RESULT_NONFINITE, RESULT_SUCCESS))
    return Trajectory(
        ts=ts,
        ys=ys,
        num_steps=jnp.asarray(sol.stats["num_accepted_steps"]),
        result=result,
        t_nonfinite=t_bad,
    )
