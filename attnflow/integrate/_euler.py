r"""The layer stepper: forward Euler in ``lax.scan`` (Remark 1.1), owning dt and the geometry.

:math:`y[k+1] = \mathrm{shift}(y[k],\ \Delta t\, f(t_k, y[k]))`, :math:`t_k = t_0 + k\Delta t`,
with ``shift(y, dy) = y + dy`` by default (jax-md's ``shift_fn``); :func:`sphere_shift`
renormalises every token after the step (post-LayerNorm tokens on the unit sphere).
With the raw :class:`~attnflow.AttentionFlow` and :math:`\Delta t = 1` this is a residual
attention-only transformer whose layers share their weights; with
:class:`~attnflow.DiscreteRescaledFlow` it is the exact discrete rescaling (Remark 3.4).

The stepper is the only owner of :math:`\Delta t`, :math:`t_0` and the number of layers:
before stepping it hands them to the field (``dynamics.on_grid``), so a field can never be
stepped with a dt other than its own.
"""

from __future__ import annotations

import functools
import math
from typing import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PyTree

from .. import _validate as v
from .._resources import check_count, check_memory
from .._x64 import check_float64_kept
from ..dynamics._base import AbstractDynamics
from ..errors import InputError
from ._base import AbstractIntegrator, check_dynamics
from ._solution import RESULT_NONFINITE, RESULT_SUCCESS, Trajectory, save_state

__all__ = ["EulerStepper", "solve_euler", "plain_shift", "sphere_shift"]

#: a checkpointed segment's layer loop is unrolled by up to this many layers ...
UNROLL_SEGMENT = 32
#: ... when one layer's n x n attention residual takes at least this many bytes (n >= 256 in
#: float32) ...
UNROLL_MIN_RESIDUAL_BYTES = 256 * 1024
#: ... on these backends (XLA:CPU, where unrolling makes the gradient of n >= 256 faster and
#: small n slower; only checkpointed segments unroll: benchmarks/NOTES.md section 10).
UNROLL_BACKENDS = ("cpu",)


def plain_shift(y: Float[Array, "n d"], dy: Float[Array, "n d"]) -> Float[Array, "n d"]:
    """The flat-space update ``y + dy``."""
    return y + dy


def sphere_shift(y: Float[Array, "n d"], dy: Float[Array, "n d"]) -> Float[Array, "n d"]:
    r"""Projected step on the unit sphere: :math:`y_i \leftarrow (y_i + dy_i)/\|y_i + dy_i\|`.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.integrate import sphere_shift
        >>> [round(float(a), 4) for a in sphere_shift(jnp.array([[1.0, 0.0]]), jnp.array([[0.0, 1.0]]))[0]]
        [0.7071, 0.7071]
    """
    out = y + dy
    # the squared norm as a sum of columns for small d: XLA:CPU runs a norm over a trailing axis of 2 or 3
    # several times slower inside a fused step (10^6 tokens)
    d = out.shape[-1]
    squares = (sum(out[..., k:k + 1] ** 2 for k in range(1, d)) + out[..., :1] ** 2 if d <= 8
               else jnp.sum(out * out, axis=-1, keepdims=True))
    return out / jnp.sqrt(squares)


class EulerStepper(AbstractIntegrator):
    r"""Forward Euler on the layer grid :math:`t_k = t_0 + k\Delta t`, k = 0..num_layers.

    Args:
        dt: layer step (> 0; dt = 1 is one transformer layer). A JAX scalar is fine
            (forward-mode derivatives in dt).
        num_layers: number of steps (layers).
        t0: start time.
        shift: ``(y, dy) -> y_next`` (default :func:`plain_shift`; :func:`sphere_shift` for
            tokens on the sphere).
        save_every: save every this many layers (a divisor of ``num_layers``).
        checkpoint: reverse-mode memory. ``"auto"`` (default): between two saves, layers run in
            segments of about sqrt(layers) under ``jax.checkpoint`` when there are at least 64 of
            them, so a gradient keeps O(sqrt(L)) states instead of L (the backward sweep recomputes
            every segment but the last, whose residuals the forward pass keeps: 1 - 1/sqrt(L) of
            an extra forward pass; a forward-only run pays nothing for it). On CPU a segment's loop is
            unrolled when one layer's n x n residual takes >= 256 KiB (n >= 256 in float32): the
            backward sweep then slices no residuals out of stacked buffers (~20% off the gradient,
            ~10% off the forward there; :data:`UNROLL_BACKENDS`). ``None``: store every layer. An
            int: that segment length.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from attnflow import AttentionFlow
        >>> from attnflow.integrate import EulerStepper
        >>> x0 = jax.random.normal(jax.random.key(0), (8, 2))
        >>> traj = EulerStepper(dt=0.1, num_layers=10).solve(AttentionFlow(jnp.eye(2), jnp.eye(2), jnp.eye(2)), x0)
        >>> traj.ys.shape, traj.ts.shape
        ((11, 8, 2), (11,))
    """

    dt: Float[Array, ""] | float
    t0: Float[Array, ""] | float
    num_layers: int = eqx.field(static=True)
    save_every: int = eqx.field(static=True)
    shift: Callable = eqx.field(static=True)
    checkpoint: int | str | None = eqx.field(static=True)

    def __init__(self, dt, num_layers: int, *, t0=0.0, shift: Callable = plain_shift, save_every: int = 1,
                 checkpoint: int | str | None = "auto"):
        v.check_positive("dt", dt, "the layer step, a finite positive scalar")
        v.check_real("t0", t0, "the start time, a finite real scalar")
        num_layers = v.check_int("num_layers", num_layers, meaning="the number of layers")
        check_count("num_layers", num_layers, fix="use fewer layers (a larger dt)")
        save_every = v.check_int("save_every", save_every, meaning="layers per save")
        if num_layers % save_every:
            raise InputError(
                f"save_every must be a positive divisor of num_layers = {num_layers}, got {save_every!r}."
            )
        if not callable(shift):
            raise InputError(f"shift must be a function (y, dy) -> y_next, got {type(shift).__name__}.")
        if not (checkpoint is None or checkpoint == "auto" or (isinstance(checkpoint, int) and not isinstance(checkpoint, bool) and checkpoint >= 1)):
            raise InputError(f"checkpoint must be 'auto', None or a positive int (segment length), got {checkpoint!r}.")
        self.dt, self.t0, self.num_layers, self.save_every, self.shift = dt, t0, num_layers, save_every, shift
        self.checkpoint = checkpoint

    def segment_length(self) -> int | None:
        """Layers per ``jax.checkpoint`` segment between two saves (None: no checkpointing)."""
        every = self.save_every
        if self.checkpoint is None:
            return None
        if self.checkpoint == "auto":
            if every < 64:
                return None
            root = math.sqrt(every)
            # a divisor of the block near sqrt(every) needs no masked padding layers
            divisors = [s for s in range(int(root / 2) + 1, int(2 * root) + 1) if every % s == 0]
            return min(divisors, key=lambda s: abs(s - root)) if divisors else int(math.ceil(root))
        return min(int(self.checkpoint), every)

    def bind(self, dynamics: AbstractDynamics) -> AbstractDynamics:
        """The field as this stepper steps it (``dynamics.on_grid(dt, t0, num_layers)``)."""
        return check_dynamics(dynamics).on_grid(self.dt, self.t0, self.num_layers)

    def solve(
        self,
        dynamics: AbstractDynamics,
        y0: Float[Array, "n d"],
        *,
        save_fn: Callable[[Array, Array, PyTree], PyTree] | None = None,
        args: PyTree = None,
    ) -> Trajectory:
        r"""Run the layers from ``y0``; saves at layers 0, s, 2s, ..., num_layers.

        ``save_fn(t, y, args)`` replaces the saved state by any pytree of observables.
        Pure JAX: jit-, vmap- and grad-compatible. A non-finite state is recorded
        (``Trajectory.result``, ``t_nonfinite``: the first non-finite layer), never raised inside
        jit. A float64 ``y0`` while JAX's float64 mode is off is an ``InputError`` (it would run
        in float32).
        """
        shape = v.check_array("y0", y0, "tokens (n, d) (batch with jax.vmap)", min_rank=1)
        if save_fn is None:
            saves = self.num_layers // self.save_every + 1
            check_memory(f"EulerStepper saving {saves} states of shape {shape}",
                         saves * math.prod(shape) * jnp.result_type(y0, float).itemsize,
                         fix="raise save_every (fewer saved layers)", scale=1)
        field = self.bind(dynamics)
        save_fn = save_state if save_fn is None else save_fn
        check_float64_kept("y0", y0)
        dtype = jnp.result_type(y0.dtype, float)
        y0 = jnp.asarray(y0, dtype)
        dt = jnp.asarray(self.dt, dtype)
        t0 = jnp.asarray(self.t0, dtype)
        every = self.save_every
        num_saves = self.num_layers // every

        def layer(carry, k):
            y, t_bad = carry
            t = t0 + k.astype(dtype) * dt
            y_next = self.shift(y, dt * field.vector_field(t, y, args))
            newly_bad = jnp.isinf(t_bad) & ~jnp.all(jnp.isfinite(y_next))
            t_bad = jnp.where(newly_bad, t + dt, t_bad)
            return (y_next, t_bad), None

        seg = self.segment_length()
        # one layer's n x n attention residual (times any folded batch axes of the state)
        residual_bytes = math.prod(y0.shape[:-2]) * y0.shape[-2] ** 2 * dtype.itemsize if y0.ndim >= 2 else 0
        heavy = residual_bytes >= UNROLL_MIN_RESIDUAL_BYTES and jax.default_backend() in UNROLL_BACKENDS
        unroll = min(seg, UNROLL_SEGMENT) if (heavy and seg is not None) else 1

        def run_layers(carry, first, count):
            if seg is None or seg >= count:
                carry, _ = jax.lax.scan(layer, carry, first + jnp.arange(count))
                return carry
            num_seg = -(-count // seg)
            end = first + count

            def masked(carry, k):  # layers past the block's end (padding of the last segment) are skipped
                new, _ = layer(carry, k)
                return jax.tree_util.tree_map(lambda a, b: jnp.where(k < end, a, b), new, carry), None

            step = layer if count % seg == 0 else masked

            # inside lax.scan the loop already stops XLA from CSE-ing the recomputation into the
            # forward pass, so the optimisation barriers of prevent_cse are pure cost (JAX docs)
            @functools.partial(jax.checkpoint, prevent_cse=False)
            def segment(carry, s):
                carry, _ = jax.lax.scan(step, carry, first + s * seg + jnp.arange(seg), unroll=unroll)
                return carry, None

            # the last segment runs outside jax.checkpoint: its residuals are kept from the forward
            # pass (the backward sweep holds one segment's residuals anyway), so it is not recomputed
            carry, _ = jax.lax.scan(segment, carry, jnp.arange(num_seg - 1))
            carry, _ = jax.lax.scan(step, carry, first + (num_seg - 1) * seg + jnp.arange(seg), unroll=unroll)
            return carry

        def block(carry, b):
            carry = run_layers(carry, b * every, every)
            return carry, save_fn(t0 + ((b + 1) * every) * dt, carry[0], args)

        (_, t_bad), saved = jax.lax.scan(block, (y0, jnp.asarray(jnp.inf, dtype)), jnp.arange(num_saves))
        first = save_fn(t0, y0, args)
        ys = jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a[None], b], axis=0), first, saved)
        ts = t0 + dt * (every * jnp.arange(num_saves + 1)).astype(dtype)
        return Trajectory(
            ts=ts,
            ys=ys,
            num_steps=jnp.asarray(self.num_layers),
            result=jnp.where(jnp.isfinite(t_bad), RESULT_NONFINITE, RESULT_SUCCESS),
            t_nonfinite=t_bad,
        )


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
    shift: Callable = plain_shift,
    checkpoint: int | str | None = "auto",
) -> Trajectory:
    r"""Shorthand for ``EulerStepper(dt, num_steps, t0=t0, ...).solve(dynamics, y0, ...)``.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from attnflow import AttentionFlow
        >>> from attnflow.integrate import solve_euler
        >>> x0 = jax.random.normal(jax.random.key(0), (8, 2))
        >>> traj = solve_euler(AttentionFlow(jnp.eye(2), jnp.eye(2), jnp.eye(2)), x0, dt=0.1, num_steps=10)
        >>> traj.ys.shape, traj.ts.shape
        ((11, 8, 2), (11,))
    """
    stepper = EulerStepper(dt, num_steps, t0=t0, shift=shift, save_every=save_every, checkpoint=checkpoint)
    return stepper.solve(dynamics, y0, save_fn=save_fn, args=args)
