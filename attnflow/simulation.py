r"""One call for the common case: :func:`simulate` a (batch of) token cloud(s).

It validates every input on the host (one clear sentence per problem, before any
compilation), builds the dynamics of the requested picture, and runs one jitted,
vmapped solve:

* ``method="euler"``: the layer stepper (``dt`` required); in the rescaled picture
  this is the exact discrete rescaling of Remark 3.4, so ``x[k] = (I + dt V)^k z[k]``.
* any other method: a diffrax solver (``"tsit5"`` default), adaptive PID control, or
  constant steps when ``dt`` is given.
"""

from __future__ import annotations

from typing import Any, Callable

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, PyTree

from . import _validate as v
from .attention import IMPLS
from .dynamics import AttentionFlow, DiscreteRescaledFlow, FoldedBatch, RescaledFlow
from .errors import InputError
from .integrate import make_solver, raise_if_failed, solve_euler, solve_ode
from .linalg import check_invertible_transfer, lapack_needs_loop, map_over_batch

__all__ = ["simulate", "Simulation", "make_dynamics"]

PICTURES = ("raw", "rescaled")
_DEFAULT_TOL = {"float32": (1e-5, 1e-6), "float64": (1e-9, 1e-11)}


class Simulation(eqx.Module):
    """Result of :func:`simulate` (leading batch axis B on every array when batched).

    Attributes:
        ts: (T,) save times (layers ``t0 + k dt`` for the Euler stepper).
        states: (T, n, d) states in the requested picture (x for ``"raw"``, z for
            ``"rescaled"``), or the pytree returned by ``save_fn``.
        tokens: (T, n, d) raw tokens x (equal to ``states`` in the raw picture;
            ``None`` when ``save_fn`` was used).
        attention: (T, n, n) attention matrices P when ``return_attention=True``.
        num_steps: steps (layers) taken.
        picture, method: what was run.
    """

    ts: Float[Array, "*B T"]
    states: PyTree
    tokens: Float[Array, "*B T n d"] | None
    attention: Float[Array, "*B T n n"] | None
    num_steps: Array
    picture: str = eqx.field(static=True)
    method: str = eqx.field(static=True)


def make_dynamics(Q, K, V, *, beta=1.0, picture="raw", method="tsit5", dt=None, t0=0.0, num_layers=1,
                  attention_impl="auto"):
    """The dynamics object :func:`simulate` integrates for a picture and method.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow import make_dynamics
        >>> type(make_dynamics(jnp.eye(2), jnp.eye(2), jnp.eye(2), picture="rescaled")).__name__
        'RescaledFlow'
    """
    if picture == "raw":
        return AttentionFlow(Q, K, V, beta, attention_impl=attention_impl)
    if method == "euler":
        return DiscreteRescaledFlow(Q, K, V, beta, dt=float(dt), max_layers=int(num_layers), t0=float(t0),
                                    attention_impl=attention_impl)
    return RescaledFlow(Q, K, V, beta, attention_impl=attention_impl)


def _batch_axis(a: Any, base_rank: int) -> int | None:
    """0 when ``a`` carries a leading batch axis on top of its base rank, else None."""
    return 0 if np.ndim(a) == base_rank + 1 else None


def _validate(x0, Q, K, V, beta, t0, t1, dt, picture, method, dtype, batch_mode) -> tuple[int | None, ...]:
    if picture not in PICTURES:
        raise InputError(f"picture must be one of {PICTURES}, got {picture!r}.")
    if dtype not in ("float32", "float64"):
        raise InputError(f"dtype must be 'float32' or 'float64', got {dtype!r}.")
    if batch_mode not in ("vmap", "fold"):
        raise InputError(f"batch_mode must be 'vmap' or 'fold', got {batch_mode!r}.")
    xs = v.check_rank("x0", x0, (2, 3), "tokens (n, d), or a batch (B, n, d)")
    if xs[-2] < 1 or xs[-1] < 1:
        raise InputError(f"x0 must hold at least one token of dimension >= 1, got shape {xs}.")
    v.check_weights(Q, K, V, d=xs[-1])
    b_rank = np.ndim(beta)
    if b_rank > 1:
        raise InputError(f"beta must be a scalar or a (B,) vector, got shape {np.shape(beta)}.")
    axes = (
        _batch_axis(x0, 2),
        _batch_axis(Q, 2),
        _batch_axis(K, 2),
        _batch_axis(V, 2),
        0 if b_rank == 1 else None,
    )
    sizes = {
        name: np.shape(a)[0]
        for name, a, ax in zip(("x0", "Q", "K", "V", "beta"), (x0, Q, K, V, beta), axes)
        if ax is not None
    }
    if len(set(sizes.values())) > 1:
        raise InputError(
            f"batched inputs must share one batch size B, got {', '.join(f'{k}: {s}' for k, s in sizes.items())}."
        )
    for name, a in (("x0", x0), ("beta", beta)):
        v.check_finite(name, a)
    v.check_time_span(t0, t1)
    if method == "euler" and dt is None:
        raise InputError("method='euler' (the layer stepper) needs a step dt > 0 (dt=1 is one transformer layer).")
    if dt is not None:
        v.check_positive("dt", dt)
    if batch_mode == "fold" and any(ax is not None for ax in axes[1:]):
        raise InputError("batch_mode='fold' needs weights shared by the whole batch; use batch_mode='vmap'.")
    return axes


def simulate(
    x0: Float[Array, "*B n d"],
    Q: Float[Array, "*B m d"],
    K: Float[Array, "*B m d"],
    V: Float[Array, "*B d d"],
    *,
    t1: float,
    t0: float = 0.0,
    picture: str = "raw",
    method: str | diffrax.AbstractSolver = "tsit5",
    dt: float | None = None,
    ts: Any = None,
    num_saves: int = 101,
    save_every: int | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    beta: float | Any = 1.0,
    dtype: str = "float32",
    return_attention: bool = False,
    save_fn: Callable[[Array, Array, PyTree], PyTree] | None = None,
    max_steps: int = 16384,
    batch_mode: str = "vmap",
    attention_impl: str = "auto",
    check: bool = True,
) -> Simulation:
    r"""Simulate :math:`\dot x_i = \sum_j \mathrm{softmax}_j(\beta\langle Qx_i, Kx_j\rangle) V x_j`.

    Args:
        x0: initial tokens (n, d) or a batch (B, n, d).
        Q, K: (m, d) query/key matrices, or batches (B, m, d).
        V: (d, d) value matrix, or a batch (B, d, d).
        t1, t0: time span (layers, for the Euler stepper: ``(t1 - t0)/dt`` layers).
        picture: ``"raw"`` (x) or ``"rescaled"`` (z = e^{-tV} x; for Euler,
            z[k] = (I + dt V)^{-k} x[k]).
        method: ``"euler"`` (layer stepper), a diffrax solver name
            (``"tsit5"``, ``"dopri5"``, ``"dopri8"``, ...) or a diffrax solver instance.
        dt: Euler layer step, or a constant step for diffrax (None: adaptive).
        ts / num_saves: save times, or their number on a uniform grid (diffrax).
        save_every: Euler saves every this many layers (default: every layer).
        rtol, atol: adaptive tolerances (defaults depend on dtype).
        beta: inverse temperature (scalar or (B,)); the paper's model is 1.
        dtype: ``"float32"`` (default) or ``"float64"``: dtype of the computation and result.
        return_attention: also return P at every save time.
        save_fn: ``(t, y, args) -> pytree`` of observables saved instead of states.
        batch_mode: ``"vmap"`` (default; each member its own adaptive steps) or
            ``"fold"`` (shared weights: one solve of the stacked state). On CPU, batched
            weights in the rescaled picture, or with a ``save_fn``, run one member at a time
            (``lax.map``, same results): batched LAPACK calls can deadlock XLA:CPU's pool.
        attention_impl: ``"auto"`` (dense for small n, tiled online softmax with O(n d)
            memory for large n), ``"dense"``, ``"chunked"`` or ``"fused"``
            (see :func:`attnflow.attend`). Forward-mode autodiff needs ``"dense"``.
        check: raise :class:`~attnflow.NonFiniteError` / :class:`~attnflow.SolverError`
            when a solve fails, instead of returning non-finite numbers.

    Example:
        >>> import jax, attnflow
        >>> x0 = jax.random.normal(jax.random.key(0), (16, 2))
        >>> I = jax.numpy.eye(2)
        >>> sim = attnflow.simulate(x0, I, I, I, t1=5.0, picture="rescaled", num_saves=11)
        >>> sim.states.shape, sim.tokens.shape
        ((11, 16, 2), (11, 16, 2))
    """
    method_name = method if isinstance(method, str) else type(method).__name__
    if isinstance(method, str) and method != "euler":
        make_solver(method)  # validates the name
    axes = _validate(x0, Q, K, V, beta, t0, t1, dt, picture, method_name, dtype, batch_mode)
    if attention_impl not in IMPLS:
        raise InputError(f"attention_impl must be one of {IMPLS}, got {attention_impl!r}.")
    jdtype = jnp.float64 if dtype == "float64" else jnp.float32
    x0, Q, K, V, beta_arr = (jnp.asarray(a, jdtype) for a in (x0, Q, K, V, beta))

    if method_name == "euler":
        span = float(t1) - float(t0)
        num_layers = int(round(span / float(dt)))
        if num_layers < 1 or abs(num_layers * float(dt) - span) > 1e-9 * max(1.0, abs(span)):
            raise InputError(
                f"the Euler stepper needs (t1 - t0)/dt to be a positive whole number of layers, "
                f"got (t1 - t0) = {span!r} and dt = {dt!r}."
            )
        save_every = 1 if save_every is None else int(save_every)
        if save_every < 1 or num_layers % save_every:
            raise InputError(
                f"save_every must be a positive divisor of the number of layers {num_layers}, got {save_every}."
            )
        if picture == "rescaled":
            check_invertible_transfer(V, dt)
        config = ("euler", picture, float(t0), float(dt), num_layers, save_every)
        ts_arr = None
    else:
        if ts is None:
            if num_saves < 2:
                raise InputError(f"num_saves must be >= 2 (t0 and t1), got {num_saves}.")
            ts_arr = jnp.linspace(float(t0), float(t1), int(num_saves), dtype=jdtype)
        else:
            ts_np = np.asarray(ts, dtype=np.float64)
            if ts_np.ndim != 1 or np.any(np.diff(ts_np) < 0) or ts_np[0] < float(t0) or ts_np[-1] > float(t1):
                raise InputError(
                    f"ts must be a non-decreasing 1-d array of save times inside [t0, t1] = [{t0}, {t1}], "
                    f"got shape {ts_np.shape} from {ts_np.min() if ts_np.size else None} to "
                    f"{ts_np.max() if ts_np.size else None}."
                )
            ts_arr = jnp.asarray(ts_np, jdtype)
        default_rtol, default_atol = _DEFAULT_TOL[dtype]
        config = (
            "ode",
            picture,
            float(t0),
            float(t1),
            None if dt is None else float(dt),
            make_solver(None if method_name == "euler" else method),
            default_rtol if rtol is None else float(rtol),
            default_atol if atol is None else float(atol),
            int(max_steps),
        )

    out = _run(x0, Q, K, V, beta_arr, ts_arr, config + (attention_impl,), axes, save_fn, return_attention, batch_mode)
    if check:
        raise_if_failed(out[-1], what=f"simulate(picture={picture!r}, method={method_name!r})")
    ts_out, states, tokens, attention, num_steps, _ = out
    return Simulation(
        ts=ts_out,
        states=states,
        tokens=tokens,
        attention=attention,
        num_steps=num_steps,
        picture=picture,
        method=method_name,
    )


@eqx.filter_jit
def _run(x0, Q, K, V, beta, ts, config, axes, save_fn, return_attention, batch_mode):
    """Build the dynamics, solve, and post-process; vmapped (or folded) over the batch."""
    kind, picture, impl = config[0], config[1], config[-1]
    config = config[:-1]

    def build(Q, K, V, beta):
        if kind == "euler":
            _, _, t0, dt, num_layers, _ = config
            return make_dynamics(Q, K, V, beta=beta, picture=picture, method="euler",
                                 dt=dt, t0=t0, num_layers=num_layers, attention_impl=impl)
        return make_dynamics(Q, K, V, beta=beta, picture=picture, method="ode", attention_impl=impl)

    def solve(dyn, y0, fn):
        if kind == "euler":
            _, _, t0, dt, num_layers, save_every = config
            return solve_euler(dyn, y0, dt=dt, num_steps=num_layers, t0=t0, save_every=save_every, save_fn=fn)
        _, _, t0, t1, dt, solver, rtol, atol, max_steps = config
        return solve_ode(dyn, y0, t0=t0, t1=t1, ts=ts, solver=solver, rtol=rtol, atol=atol,
                         dt0=dt, adaptive=dt is None, max_steps=max_steps, save_fn=fn)

    def post(dyn, traj):
        tokens = attention = None
        if save_fn is None:
            tokens = traj.ys if picture == "raw" else jax.vmap(dyn.tokens)(traj.ts, traj.ys)
            if return_attention:
                attention = jax.vmap(dyn.attention)(traj.ts, traj.ys)
        return traj.ts, traj.ys, tokens, attention, traj.num_steps, traj

    if batch_mode == "fold" and axes[0] == 0:
        # One solve of the stacked state (B, n, d): shared weights, shared steps.
        dyn = FoldedBatch(build(Q, K, V, beta))
        fn = None if save_fn is None else (lambda t, y, args: jax.vmap(lambda yb: save_fn(t, yb, args))(y))
        ts_, ys, tokens, attention, num_steps, traj = post(dyn, solve(dyn, x0, fn))
        front = lambda a: None if a is None else jnp.moveaxis(a, 1, 0)  # (T, B, ...) -> (B, T, ...)
        B = x0.shape[0]
        return (
            jnp.broadcast_to(ts_, (B,) + ts_.shape),
            jax.tree_util.tree_map(front, ys),
            front(tokens),
            front(attention),
            jnp.broadcast_to(num_steps, (B,)),
            traj,
        )

    def single(x0, Q, K, V, beta):
        dyn = build(Q, K, V, beta)
        return post(dyn, solve(dyn, x0, save_fn))

    if all(ax is None for ax in axes):
        return single(x0, Q, K, V, beta)
    weights_batched = any(ax is not None for ax in axes[1:4])
    if weights_batched and (picture != "raw" or save_fn is not None) and lapack_needs_loop():
        # XLA:CPU: with a batch of weights, e^{tV} at the stage times of a step, R^{-1} V and a
        # save_fn's own LAPACK calls become independent batched LAPACK calls, which can
        # deadlock the CPU thread pool (linalg.loop_over_systems; seen with Tsit5, and with
        # Euler plus an SVD in save_fn); one member at a time cannot. Same results; GPUs vmap.
        return map_over_batch(single, axes)(x0, Q, K, V, beta)
    return jax.vmap(single, in_axes=axes)(x0, Q, K, V, beta)

