r"""The layer stepper: forward Euler in ``lax.scan`` (Remark 1.1).

:math:`y[k+1] = y[k] + \Delta t\, f(t_k, y[k])`, :math:`t_k = t_0 + k\Delta t`.
With the raw :class:`~attnflow.AttentionFlow` and :math:`\Delta t = 1` this is a
residual attention-only transformer whose layers share their weights; with
:class:`~attnflow.DiscreteRescaledFlow` it is the exact discrete rescaling
(Remark 3.4). The same vector field serves diffrax solvers.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PyTree

from ..dynamics.base import AbstractDynamics
from .solution import Trajectory, save_state

__all__ = ["solve_euler"]


def solve_euler(
    dynamics: AbstractDynamics,
    y0: Float[Array, "n d"],
    *,
    dt: float,
    num_steps: int,
    t0: float = 0.0,
    save_every: int = 1,
    save_fn: Callable[[Array, Array, PyTree], PyTree] | None = None,
    args: PyTree = None,
) -> Trajectory:
    r"""Run ``num_steps`` forward-Euler layers, saving every ``save_every`` layers.

    Saves at layers 0, s, 2s, ..., num_steps (``num_steps`` must be a multiple of
    ``save_every``), i.e. at times :math:`t_0 + k\Delta t`. ``save_fn(t, y, args)``
    replaces the saved state by any pytree of observables. Pure JAX: jit-, vmap- and
    grad-compatible.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from attnflow import AttentionFlow
        >>> from attnflow.integrate import solve_euler
        >>> x0 = jax.random.normal(jax.random.key(0), (8, 2))
        >>> traj = solve_euler(AttentionFlow(jnp.eye(2), jnp.eye(2), jnp.eye(2)), x0, dt=0.1, num_steps=10)
        >>> traj.ys.shape, traj.ts.shape
        ((11, 8, 2), (11,))
    """
    if num_steps % save_every:
        from ..errors import InputError

        raise InputError(
            f"num_steps={num_steps} must be a multiple of save_every={save_every}."
        )
    save_fn = save_state if save_fn is None else save_fn
    dtype = y0.dtype
    dt_arr = jnp.asarray(dt, dtype)
    t0_arr = jnp.asarray(t0, dtype)
    num_saves = num_steps // save_every

    def layer(carry, k):
        y, t_bad = carry
        t = t0_arr + k.astype(dtype) * dt_arr
        y_next = y + dt_arr * dynamics.vector_field(t, y, args)
        newly_bad = jnp.isinf(t_bad) & ~jnp.all(jnp.isfinite(y_next))
        t_bad = jnp.where(newly_bad, t + dt_arr, t_bad)
        return (y_next, t_bad), None

    def block(carry, b):
        ks = b * save_every + jnp.arange(save_every)
        carry, _ = jax.lax.scan(layer, carry, ks)
        y, _ = carry
        t = t0_arr + ((b + 1) * save_every) * dt_arr
        return carry, save_fn(t, y, args)

    carry0 = (y0, jnp.asarray(jnp.inf, dtype))
    (_, t_bad), saved = jax.lax.scan(block, carry0, jnp.arange(num_saves))
    first = save_fn(t0_arr, y0, args)
    ys = jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a[None], b], axis=0), first, saved)
    ts = t0_arr + dt_arr * (save_every * jnp.arange(num_saves + 1)).astype(dtype)
    return Trajectory(
        ts=ts,
        ys=ys,
        num_steps=jnp.asarray(num_steps),
        failed=jnp.asarray(False),
        t_nonfinite=t_bad,
    )
