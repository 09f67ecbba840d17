r"""diffrax SDE solves of the noisy flows: :class:`SDESolver`.

:math:`dy = f(t, y)\,dt + g(t, y) \circ dW` in constant steps on the noise's :class:`diffrax.VirtualBrownianTree`:
a Stratonovich solver (Heun by default, midpoint, reversible Heun, Euler-Heun) integrates the diffusion as
given; an Ito solver (diffrax's Euler) integrates the Ito form, the noise's
:meth:`~attnflow.integrate.TokenNoise.ito_correction` added to the drift. The two agree in law. The same
key gives the same path, bit for bit, and gradients flow through the path (pathwise derivatives).
"""

from __future__ import annotations

from typing import Callable

import diffrax
import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float, PyTree

from .. import _validate as v
from .._x64 import check_float64_kept
from ..dynamics import AbstractDynamics
from ..errors import InputError
from ._base import AbstractIntegrator, check_dynamics
from ._noise import AbstractNoise, CommonNoise, brownian_tree, check_noise, tree_tolerance
from ._solution import RESULTS, Trajectory, first_nonfinite_time

__all__ = ["SDESolver", "SDE_SOLVERS"]

def _sde_solvers() -> dict:
    return {"heun": diffrax.Heun, "midpoint": diffrax.Midpoint, "reversible_heun": diffrax.ReversibleHeun,
            "euler_heun": diffrax.EulerHeun, "euler": diffrax.Euler, "ito_milstein": diffrax.ItoMilstein}


#: the SDE solvers by name: Stratonovich (heun, midpoint, reversible_heun, euler_heun) and Ito (euler; the
#: noise's Ito correction is added to the drift)
SDE_SOLVERS = ("heun", "midpoint", "reversible_heun", "euler_heun", "euler")


class _NoiseTerm(diffrax.AbstractTerm):
    """The diffusion as a diffrax term: the operand read from the state, applied to the path's increment."""

    noise: AbstractNoise
    field: AbstractDynamics
    path: object

    def vf(self, t, y, args):
        return self.noise.operand(self.field, t, y)

    def contr(self, t0, t1, **kwargs):
        return self.path.evaluate(t0, t1, **kwargs)

    def prod(self, vf, control):
        return self.noise.act(vf, control)

    def vf_prod(self, t, y, args, control):
        return self.prod(self.vf(t, y, args), control)

    def is_vf_expensive(self, t0, t1, y, args):
        return False


class SDESolver(AbstractIntegrator):
    r"""Integrate :math:`dy = f(t, y)\,dt + g(t, y) \circ dW` from t0 to t1 with a diffrax SDE solver, in
    constant steps ``dt`` on the noise's virtual Brownian tree.

    Args:
        t0, t1: the time span.
        dt: the constant step.
        noise: a :class:`~attnflow.integrate.TokenNoise` or :class:`~attnflow.integrate.CommonNoise`.
        ts: save times (default t0 and t1).
        solver: a name of :data:`SDE_SOLVERS` (default ``"heun"``, Stratonovich) or a diffrax solver; an Ito
            solver integrates the Ito form (the noise's Ito correction added to the drift).
        tree_tol: the tree's resolution (default the span / 2^16).
        max_steps: bound on the number of steps (default: the steps of the span, plus one).
        adjoint: a diffrax adjoint (default ``RecursiveCheckpointAdjoint``: pathwise gradients).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from attnflow.dynamics import sphere_flow
        >>> from attnflow.integrate import SDESolver, TokenNoise
        >>> x0 = jnp.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
        >>> solver = SDESolver(0.0, 1.0, dt=0.05, noise=TokenNoise(0.2, jax.random.key(0), sphere=True))
        >>> traj = solver.solve(sphere_flow(jnp.eye(2), jnp.eye(2), jnp.eye(2), 1.0), x0)
        >>> traj.ys.shape, int(traj.result)
        ((2, 3, 2), 0)
    """

    t0: float | Array
    t1: float | Array
    dt: float | Array
    noise: AbstractNoise
    ts: Float[Array, " T"] | None
    solver: object
    tree_tol: float | None = eqx.field(static=True)
    max_steps: int | None = eqx.field(static=True)
    adjoint: object

    def __init__(self, t0, t1, *, dt, noise: AbstractNoise, ts=None, solver="heun", tree_tol: float | None = None,
                 max_steps: int | None = None, adjoint=None):
        v.check_time_span(t0, t1)
        v.check_positive("dt", dt, "the constant step of the SDE solve")
        if ts is not None:
            v.check_save_times(ts, t0, t1)
        if tree_tol is not None:
            v.check_positive("tree_tol", tree_tol, "the Brownian tree's resolution, a time > 0")
        if isinstance(solver, str):
            solvers = _sde_solvers()
            if solver.lower() not in solvers:
                raise InputError(f"solver must be one of {list(SDE_SOLVERS)} or a diffrax solver, got {solver!r}.")
            solver = solvers[solver.lower()]()
        elif not isinstance(solver, diffrax.AbstractSolver):
            raise InputError(f"solver must be one of {list(SDE_SOLVERS)} or a diffrax solver, got "
                             f"{type(solver).__name__}.")
        if max_steps is None and v.is_concrete(t0) and v.is_concrete(t1) and v.is_concrete(dt):
            max_steps = int((float(t1) - float(t0)) / float(dt) + 1.5) + 1
        self.t0, self.t1, self.dt, self.noise, self.ts = t0, t1, dt, check_noise(noise), ts
        self.solver, self.tree_tol, self.max_steps = solver, tree_tol, max_steps
        self.adjoint = diffrax.RecursiveCheckpointAdjoint() if adjoint is None else adjoint
        if self.ito and isinstance(self.noise, CommonNoise):
            self.noise.ito_correction(None, None, None)  # refuses, in one sentence

    @property
    def ito(self) -> bool:
        """Whether the solver converges to the Ito solution (then the Ito form is integrated)."""
        return isinstance(self.solver, diffrax.AbstractItoSolver)

    def bind(self, dynamics: AbstractDynamics) -> AbstractDynamics:
        field = check_dynamics(dynamics)
        if isinstance(self.noise, CommonNoise):
            self.noise.check_field(field)
        return field

    def solve(self, dynamics: AbstractDynamics, y0: Float[Array, "n d"], *,
              save_fn: Callable[[Array, Array, PyTree], PyTree] | None = None, args: PyTree = None) -> Trajectory:
        """Integrate from ``y0`` on the noise's path; failures are recorded in the trajectory, never raised in jit."""
        field = self.bind(dynamics)
        shape = v.check_array("y0", y0, "the tokens (n, d) (batch with jax.vmap, with one key each)", ranks=(2,))
        self.noise.check_state(shape)
        for name, a in (("y0", y0), ("ts", self.ts)):
            check_float64_kept(name, a)
        dtype = jnp.result_type(y0.dtype, float)
        y0 = jnp.asarray(y0, dtype)
        t0, t1 = jnp.asarray(self.t0, dtype), jnp.asarray(self.t1, dtype)
        ts = jnp.asarray([self.t0, self.t1] if self.ts is None else self.ts, dtype)
        tol = self.tree_tol if self.tree_tol is not None else tree_tolerance(self.t0, self.t1)
        path = brownian_tree(self.noise, self.t0, self.t1, tol, self.noise.control_shape(shape), dtype)
        noise, ito = self.noise, self.ito

        def drift(t, y, args):
            f = field.vector_field(t, y, args)
            return f + noise.ito_correction(field, t, y) if ito else f

        terms = diffrax.MultiTerm(diffrax.ODETerm(drift), _NoiseTerm(noise, field, path))
        sol = diffrax.diffeqsolve(
            terms, self.solver, t0=t0, t1=t1, dt0=jnp.asarray(self.dt, dtype), y0=y0, args=args,
            saveat=diffrax.SaveAt(ts=ts) if save_fn is None else diffrax.SaveAt(ts=ts, fn=save_fn),
            stepsize_controller=diffrax.ConstantStepSize(), max_steps=self.max_steps, adjoint=self.adjoint,
            throw=False)
        stopped = sol.result != diffrax.RESULTS.successful
        t_bad = first_nonfinite_time(ts, sol.ys)
        result = jnp.where(jnp.isfinite(t_bad), RESULTS.nonfinite,
                           jnp.where(stopped, RESULTS.solver_stopped, RESULTS.successful))
        return Trajectory(ts=ts, ys=sol.ys, num_steps=jnp.asarray(sol.stats["num_accepted_steps"]), result=result,
                          t_nonfinite=t_bad)
