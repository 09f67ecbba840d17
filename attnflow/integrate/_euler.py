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
from typing import Callable, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, PyTree

from .. import _validate as v
from .._resources import check_count, check_memory
from .._shifts import plain_shift, sphere_shift
from .._x64 import check_float64_kept
from ..dynamics import AbstractDynamics
from ..errors import InputError
from ._base import AbstractIntegrator, check_dynamics
from ._save import SaveLayers
from ._solution import RESULTS, Trajectory, save_state

__all__ = ["EulerStepper", "solve_euler", "plain_shift", "sphere_shift"]

#: a checkpointed segment's layer loop is unrolled by up to this many layers ...
UNROLL_SEGMENT = 32
#: ... when one layer's attention residual (``dynamics.score_count(y)`` scores) takes at least this many bytes
#: (n >= 256 in float32) ...
UNROLL_MIN_RESIDUAL_BYTES = 256 * 1024
#: ... on these backends (XLA:CPU, where unrolling makes the gradient of n >= 256 faster and
#: small n slower; only checkpointed segments unroll: benchmarks/NOTES.md section 10; and the GPU,
#: where the gradient of (16, 1024, 64) float32 over 100 layers took 89 ms unrolled against 102 ms
#: rolled on an NVIDIA H100: benchmarks/NOTES.md section 66).
UNROLL_BACKENDS = ("cpu", "gpu")
#: how a layer stepper runs the layers between two saves: ``"scan"`` (a ``lax.scan`` block per run of
#: equal gaps, or past :data:`MAX_SCAN_RUNS` runs one block per binary digit of the largest gap;
#: reverse-differentiable) or ``"fori"`` (one ``lax.scan`` over the save intervals, each a
#: ``fori_loop`` with traced bounds: the layer and ``save_fn`` are compiled once, however irregular the
#: gaps; forward-mode only)
LOOPS = ("scan", "fori")


#: with more runs of equal save gaps than this, ``loop="scan"`` runs every save interval through one body that
#: splits its gap into powers of two, one ``lax.cond`` per bit around a block of 2^b layers: log2(largest gap)
#: compiled blocks instead of one per run (a log-spaced set has about as many runs as saves), and still
#: reverse-differentiable (benchmarks/NOTES.md)
MAX_SCAN_RUNS = 4


def check_save_layers(save_every, save_at, num_layers: int) -> tuple[int | None, SaveLayers]:
    """The saved layers of a stepper from ``save_every`` (shorthand, default 1) or ``save_at``."""
    if save_at is not None and save_every is not None:
        raise InputError(f"save_every and save_at name the saved layers twice: give one of them, got "
                         f"save_every={save_every!r} and save_at={save_at!r}.")
    if save_at is None:
        save_every = 1 if save_every is None else v.check_int("save_every", save_every, meaning="layers per save")
        if num_layers % save_every:
            raise InputError(
                f"save_every must be a positive divisor of num_layers = {num_layers}, got {save_every!r}."
            )
        return save_every, SaveLayers.uniform(save_every, num_layers)
    save_at = save_at if isinstance(save_at, SaveLayers) else SaveLayers(save_at)
    save_at.check_within(num_layers)
    uniform = save_at.first == 0 and save_at.last == num_layers and len(save_at.gaps) == 1
    return (save_at.gaps[0][0] if uniform else None), save_at


class _GridStepper(AbstractIntegrator):
    """A fixed step on the layer grid :math:`t_k = t_0 + k\\Delta t` (shared by the layer steppers)."""

    dt: Float[Array, ""] | float
    t0: Float[Array, ""] | float
    num_layers: int = eqx.field(static=True)
    #: layers between two saves when the saved layers are 0, s, 2s, ..., num_layers (else None)
    save_every: int | None = eqx.field(static=True)
    shift: Callable = eqx.field(static=True)
    checkpoint: int | str | None = eqx.field(static=True)
    save_at: SaveLayers = eqx.field(static=True)
    save_aux: bool = eqx.field(static=True)
    loop: str = eqx.field(static=True)

    def _grid_init(self, dt, num_layers, t0, shift, save_every, save_at, save_aux, checkpoint, loop="scan"):
        v.check_positive("dt", dt, "the layer step, a finite positive scalar")
        v.check_real("t0", t0, "the start time, a finite real scalar")
        num_layers = v.check_int("num_layers", num_layers, meaning="the number of layers")
        check_count("num_layers", num_layers, fix="use fewer layers (a larger dt)")
        save_every, save_at = check_save_layers(save_every, save_at, num_layers)
        if not callable(shift):
            raise InputError(f"shift must be a function (y, dy) -> y_next, got {type(shift).__name__}.")
        if not (checkpoint is None or checkpoint == "auto" or (isinstance(checkpoint, int) and not isinstance(checkpoint, bool) and checkpoint >= 1)):
            raise InputError(f"checkpoint must be 'auto', None or a positive int (segment length), got {checkpoint!r}.")
        if not isinstance(save_aux, bool):
            raise InputError(f"save_aux must be True or False (hand the field's by-product to save_fn), got {save_aux!r}.")
        if not isinstance(loop, str) or loop not in LOOPS:
            raise InputError(f"loop must be one of {LOOPS} (how the layers between saves run), got {loop!r}.")
        self.dt, self.t0, self.num_layers, self.save_every, self.shift = dt, t0, num_layers, save_every, shift
        self.checkpoint, self.save_at, self.save_aux, self.loop = checkpoint, save_at, save_aux, loop

    def segment_length(self, every: int | None = None) -> int | None:
        """Layers per ``jax.checkpoint`` segment in a stretch of ``every`` layers between two saves
        (default: :attr:`save_every`, or ``num_layers`` when the saves are not uniform; None: no
        checkpointing)."""
        every = (self.save_every or self.num_layers) if every is None else every
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

    def _step(self, field, t, y, dt, args):
        """One layer: ``y_next`` from ``y`` at time ``t``."""
        raise NotImplementedError

    def _step_with_aux(self, field, t, y, dt, args):
        """One layer and the by-product of the field's evaluation at ``(t, y)``: ``(y_next, aux)``."""
        raise NotImplementedError

    def solve(
        self,
        dynamics: AbstractDynamics,
        y0: Float[Array, "n d"],
        *,
        save_fn: Callable[[Array, Array, PyTree], PyTree] | None = None,
        args: PyTree = None,
    ) -> Trajectory:
        r"""Run the layers from ``y0``; saves at the layers of ``save_at`` (default 0, s, 2s, ..., num_layers).

        ``save_fn(t, y, args)`` replaces the saved state by any pytree of observables; with
        ``save_aux=True`` it is called as ``save_fn(t, y, aux)``, ``aux`` the by-product of the
        field's evaluation at that state (``vector_field_with_aux``). Every layer up to
        ``num_layers`` runs, whichever layers are saved. Pure JAX: jit-, vmap- and grad-compatible.
        A non-finite state is recorded (``Trajectory.result``, ``t_nonfinite``: the first non-finite
        layer), never raised inside jit. A float64 ``y0`` while JAX's float64 mode is off is an
        ``InputError`` (it would run in float32).
        """
        shape = v.check_array("y0", y0, "tokens (n, d) (batch with jax.vmap)", min_rank=1)
        save_at = self.save_at
        num_saves, first_layer, last_layer = save_at.num_saves, save_at.first, save_at.last
        if save_fn is None:
            check_memory(f"{type(self).__name__} saving {num_saves} states of shape {shape}",
                         num_saves * math.prod(shape) * jnp.result_type(y0, float).itemsize,
                         fix="raise save_every (fewer saved layers)" if self.save_every else "save fewer layers (save_at)",
                         scale=1)
        field = self.bind(dynamics)
        if self.save_aux and not callable(getattr(field, "vector_field_with_aux", None)):
            raise InputError(f"save_aux=True needs a field with vector_field_with_aux(t, y, args) -> (dy, aux), "
                             f"got {type(field).__name__}, which has none.")
        save_fn = save_state if save_fn is None else save_fn
        check_float64_kept("y0", y0)
        dtype = jnp.result_type(y0.dtype, float)
        y0 = jnp.asarray(y0, dtype)
        dt = jnp.asarray(self.dt, dtype)
        t0 = jnp.asarray(self.t0, dtype)

        def mark(t, y_next, t_bad):
            newly_bad = jnp.isinf(t_bad) & ~jnp.all(jnp.isfinite(y_next))
            return jnp.where(newly_bad, t + dt, t_bad)

        def layer(carry, k):
            y, t_bad = carry
            t = t0 + k.astype(dtype) * dt
            y_next = self._step(field, t, y, dt, args)
            return (y_next, mark(t, y_next, t_bad)), None

        def aux_layer(carry, k):  # layer k and the by-product of the field at the state it leaves
            y, t_bad = carry
            t = t0 + jnp.asarray(k).astype(dtype) * dt
            y_next, aux = self._step_with_aux(field, t, y, dt, args)
            return (y_next, mark(t, y_next, t_bad)), aux

        # one layer's attention residual: the scores the field holds (n^2 per system for a dense evaluation, none on
        # the harmonic paths, whose forward runs ~2x slower unrolled at 10^6 tokens: benchmarks/NOTES.md)
        residual_bytes = field.score_count(y0) * dtype.itemsize if y0.ndim >= 2 else 0
        heavy = residual_bytes >= UNROLL_MIN_RESIDUAL_BYTES and jax.default_backend() in UNROLL_BACKENDS

        def run_layers(carry, first, count):
            seg = self.segment_length(count)
            unroll = min(seg, UNROLL_SEGMENT) if (heavy and seg is not None) else 1
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

        def time_of(k):  # t0 itself at layer 0
            return t0 if isinstance(k, int) and k == 0 else t0 + k * dt

        carry = (y0, jnp.asarray(jnp.inf, dtype))
        if first_layer > 0 and self.loop == "scan":
            carry = run_layers(carry, 0, first_layer)
        pieces = []
        binary = self.loop == "scan" and len(self.save_at.runs()) > MAX_SCAN_RUNS
        if self.loop == "fori":
            carry, saved = self._fori_saves(carry, layer, aux_layer, save_fn, args, t0, dt)
            pieces.append(saved)
        elif binary:
            carry, saved = self._binary_saves(carry, field, run_layers, aux_layer, save_fn, args, t0, dt)
            pieces.extend(saved)
        elif not self.save_aux:
            first = save_fn(time_of(first_layer), carry[0], args)
            pieces.append(jax.tree_util.tree_map(lambda a: a[None], first))
            for start, gap, count in self.save_at.runs():
                def block(carry, b, start=start, gap=gap):
                    at = (lambda x: x) if start == 0 else (lambda x: start + x)
                    carry = run_layers(carry, at(b * gap), gap)
                    return carry, save_fn(t0 + at((b + 1) * gap) * dt, carry[0], args)

                carry, saved = jax.lax.scan(block, carry, jnp.arange(count))
                pieces.append(saved)
            if last_layer < self.num_layers:
                carry = run_layers(carry, last_layer, self.num_layers - last_layer)
        else:
            # saved layer k takes the by-product of layer k (the one that leaves it), so a block
            # starts at a saved layer: one layer with aux, then the rest of the gap
            for start, gap, count in self.save_at.runs():
                def block(carry, b, start=start, gap=gap):
                    k = start + b * gap
                    y = carry[0]
                    carry, aux = aux_layer(carry, k)
                    if gap > 1:
                        carry = run_layers(carry, k + 1, gap - 1)
                    return carry, save_fn(t0 + k * dt, y, aux)

                carry, saved = jax.lax.scan(block, carry, jnp.arange(count))
                pieces.append(saved)
            last, y = last_layer, carry[0]
            if last < self.num_layers:
                carry, aux = aux_layer(carry, last)
                if self.num_layers - last > 1:
                    carry = run_layers(carry, last + 1, self.num_layers - last - 1)
            else:  # past the last layer: one more evaluation of the field, for its by-product only
                aux = field.vector_field_with_aux(time_of(last), y, args)[1]
            final = save_fn(time_of(last), y, aux)
            pieces.append(jax.tree_util.tree_map(lambda a: a[None], final))
        t_bad = carry[1]
        ys = jax.tree_util.tree_map(lambda *a: jnp.concatenate(a, axis=0), *pieces)
        ts = t0 + dt * jnp.asarray(save_at.indices()).astype(dtype)
        return Trajectory(
            ts=ts,
            ys=ys,
            num_steps=jnp.asarray(self.num_layers),
            result=jnp.where(jnp.isfinite(t_bad), RESULTS.nonfinite, RESULTS.successful),
            t_nonfinite=t_bad,
        )

    def _binary_saves(self, carry, field, run_layers, aux_layer, save_fn, args, t0, dt) -> tuple:
        r"""``loop="scan"`` with more than :data:`MAX_SCAN_RUNS` runs of gaps: one ``lax.scan`` over the save
        intervals; interval i advances its :math:`g_i` layers as the binary digits of :math:`g_i`, low bits
        first, digit b running a block of :math:`2^b` layers under ``lax.cond`` (the same layers in the same
        order as the blocks per run; one compiled block per digit). Returns the carry and the saved pieces;
        layers past the last save run as in :meth:`solve`."""
        layers = self.save_at.indices()
        gaps = np.diff(layers)
        digits = max(int(gaps.max(initial=1)).bit_length(), 1)
        dtype = carry[0].dtype

        def advance(carry, first, count):  # layers first .. first + count - 1, count < 2^digits (traced)
            for b in range(digits):
                done = count & ((1 << b) - 1)  # layers the lower digits ran
                carry = jax.lax.cond((count >> b) & 1 == 1,
                                     lambda c, o=first + done, size=1 << b: run_layers(c, o, size),
                                     lambda c: c, carry)
            return carry

        starts = jnp.asarray(layers[:-1], jnp.int32)
        if not self.save_aux:
            first = save_fn(t0 + jnp.asarray(layers[0], dtype) * dt, carry[0], args)

            def interval(carry, x):
                start, gap = x
                carry = advance(carry, start, gap)
                return carry, save_fn(t0 + (start + gap).astype(dtype) * dt, carry[0], args)

            carry, saved = jax.lax.scan(interval, carry, (starts, jnp.asarray(gaps, jnp.int32)))
            pieces = [jax.tree_util.tree_map(lambda a: a[None], first), saved]
            if self.save_at.last < self.num_layers:
                carry = run_layers(carry, self.save_at.last, self.num_layers - self.save_at.last)
            return carry, pieces

        def aux_interval(carry, x):  # saved layer k: its layer with the by-product, then the rest of the gap
            k, rest = x
            y = carry[0]
            carry, aux = aux_layer(carry, k)
            carry = advance(carry, k + 1, rest)
            return carry, save_fn(t0 + k.astype(dtype) * dt, y, aux)

        carry, saved = jax.lax.scan(aux_interval, carry, (starts, jnp.asarray(gaps - 1, jnp.int32)))
        last, y = self.save_at.last, carry[0]
        if last < self.num_layers:
            carry, aux = aux_layer(carry, last)
            if self.num_layers - last > 1:
                carry = run_layers(carry, last + 1, self.num_layers - last - 1)
        else:
            aux = field.vector_field_with_aux(t0 + last * dt, y, args)[1]  # past the last layer
        final = save_fn(t0 + last * dt, y, aux)
        return carry, [saved, jax.tree_util.tree_map(lambda a: a[None], final)]

    def _fori_saves(self, carry, layer, aux_layer, save_fn, args, t0, dt):
        """``loop="fori"``: the saves in one ``lax.scan`` over the save intervals, whose layers run in a
        ``fori_loop`` with traced bounds, so the layer and ``save_fn`` are compiled once for any set of
        saved layers. Returns the final carry and the saves stacked.

        Without ``save_aux`` interval i runs layers :math:`k_{i-1} .. k_i - 1` (:math:`k_{-1} = 0`: the
        first interval is empty when layer 0 is saved) and then saves layer :math:`k_i`. With it,
        interval i runs layer :math:`k_i` with its by-product, saves :math:`k_i` with it, then runs the
        plain layers up to :math:`k_{i+1}`; the last interval steps layer :math:`k_{last}` too (past
        ``num_layers`` that layer is computed for its by-product only: dropped, never marked
        non-finite), then runs the plain layers up to ``num_layers``.
        """
        layers = self.save_at.indices()
        last, num_layers = int(layers[-1]), self.num_layers

        def plain(k, carry):  # a fori_loop body: layer k
            return layer(carry, k)[0]

        if not self.save_aux:
            def interval(carry, bounds):
                carry = jax.lax.fori_loop(bounds[0], bounds[1], plain, carry)
                return carry, save_fn(t0 + bounds[1].astype(dt.dtype) * dt, carry[0], args)

            bounds = np.stack([np.concatenate([[0], layers[:-1]]), layers], axis=1)
        else:
            def interval(carry, bounds):
                k, (y, t_bad) = bounds[0], carry
                (y_next, t_next), aux = aux_layer(carry, k)
                t_bad = jnp.where(k < num_layers, t_next, t_bad)  # a layer past num_layers is not run
                carry = jax.lax.fori_loop(k + 1, bounds[1], plain, (y_next, t_bad))
                return carry, save_fn(t0 + k.astype(dt.dtype) * dt, y, aux)

            if layers[0] > 0:
                carry = jax.lax.fori_loop(0, int(layers[0]), plain, carry)
            bounds = np.stack([layers, np.concatenate([layers[1:], [max(num_layers, last + 1)]])], axis=1)
        carry, ys = jax.lax.scan(interval, carry, jnp.asarray(bounds, jnp.int32))
        if not self.save_aux and last < num_layers:
            carry = jax.lax.fori_loop(last, num_layers, plain, carry)
        return carry, ys


class EulerStepper(_GridStepper):
    r"""Forward Euler on the layer grid :math:`t_k = t_0 + k\Delta t`, k = 0..num_layers.

    Args:
        dt: layer step (> 0; dt = 1 is one transformer layer). A JAX scalar is fine
            (forward-mode derivatives in dt).
        num_layers: number of steps (layers).
        t0: start time.
        shift: ``(y, dy) -> y_next`` (default :func:`plain_shift`; :func:`sphere_shift` for
            tokens on the sphere).
        save_every: save every this many layers (a divisor of ``num_layers``; default 1), the
            shorthand for ``save_at=SaveLayers.uniform(save_every, num_layers)``.
        save_at: the saved layers instead (a :class:`~attnflow.integrate.SaveLayers` or a
            sequence of ints in ``[0, num_layers]``, strictly increasing), like diffrax's
            ``SaveAt(ts=...)``: the saves are at :math:`t_0 + k\Delta t`, k in the set.
        save_aux: call ``save_fn(t, y, aux)`` with the by-product ``aux`` of the field's
            evaluation at the saved state ``y``: the field's ``vector_field_with_aux(t, y, args)
            -> (dy, aux)`` steps every layer that leaves a saved state (e.g. the softmax row sums
            from which the sphere energy of ``y`` follows, without a second softmax); a save at
            ``num_layers`` evaluates the field once more.
        checkpoint: reverse-mode memory. ``"auto"`` (default): between two saves, layers run in
            segments of about sqrt(layers) under ``jax.checkpoint`` when there are at least 64 of
            them, so a gradient keeps O(sqrt(L)) states instead of L (the backward sweep recomputes
            every segment but the last, whose residuals the forward pass keeps: 1 - 1/sqrt(L) of
            an extra forward pass; a forward-only run pays nothing for it). On CPU and GPU a
            segment's loop is unrolled when one layer's n x n residual takes >= 256 KiB (n >= 256 in
            float32): the backward sweep then slices no residuals out of stacked buffers (~20% off
            the gradient, ~10% off the forward on CPU; 12% off the gradient on an H100:
            :data:`UNROLL_BACKENDS`). ``None``: store every layer. An
            int: that segment length. Not used with ``loop="fori"``.
        loop: how the layers between two saves run (:data:`LOOPS`). ``"scan"`` (default): one
            ``lax.scan`` block per run of equal gaps of ``save_at``; with more than :data:`MAX_SCAN_RUNS`
            runs (log-spaced saves), one scan over the save intervals whose gaps run as their binary
            digits, a block of 2^b layers per digit b under ``lax.cond`` (log2 of the largest gap
            compiled blocks); the same layers either way, reverse-differentiable.
            ``"fori"``: one ``lax.scan`` over the save intervals, each a ``fori_loop`` with traced
            bounds, so the layer and ``save_fn`` are compiled once however irregular the saved layers
            are (a log-spaced or rounded-uniform set has as many runs as saves); the same layers
            (equal to rounding), forward mode only (``jax.jvp``; JAX refuses reverse mode through it).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from attnflow import AttentionFlow
        >>> from attnflow.integrate import EulerStepper, SaveLayers
        >>> x0 = jax.random.normal(jax.random.key(0), (8, 2))
        >>> flow = AttentionFlow(jnp.eye(2), jnp.eye(2), jnp.eye(2))
        >>> traj = EulerStepper(dt=0.1, num_layers=10).solve(flow, x0)
        >>> traj.ys.shape, traj.ts.shape
        ((11, 8, 2), (11,))
        >>> EulerStepper(0.1, 100, save_at=SaveLayers.log_spaced(4, 100)).solve(flow, x0).ts
        Array([ 0. ,  0.1,  1. , 10. ], dtype=float32)
        >>> saves = [0, 1, 3, 4, 9, 10, 100]  # six runs of gaps: six scan blocks, or one fori body
        >>> fori = EulerStepper(0.1, 100, save_at=saves, loop="fori").solve(flow, x0)
        >>> bool(jnp.allclose(fori.ys, EulerStepper(0.1, 100, save_at=saves).solve(flow, x0).ys, atol=1e-5))
        True
    """

    def __init__(self, dt, num_layers: int, *, t0=0.0, shift: Callable = plain_shift, save_every: int | None = None,
                 save_at: SaveLayers | Sequence[int] | None = None, save_aux: bool = False,
                 checkpoint: int | str | None = "auto", loop: str = "scan"):
        self._grid_init(dt, num_layers, t0, shift, save_every, save_at, save_aux, checkpoint, loop)

    def bind(self, dynamics: AbstractDynamics) -> AbstractDynamics:
        """The field as this stepper steps it (``dynamics.on_grid(dt, t0, num_layers)``)."""
        return check_dynamics(dynamics).on_grid(self.dt, self.t0, self.num_layers)

    def _step(self, field, t, y, dt, args):
        return self.shift(y, dt * field.vector_field(t, y, args))

    def _step_with_aux(self, field, t, y, dt, args):
        dy, aux = field.vector_field_with_aux(t, y, args)
        return self.shift(y, dt * dy), aux


def solve_euler(
    dynamics: AbstractDynamics,
    y0: Float[Array, "n d"],
    *,
    dt: float,
    num_steps: int,
    t0: float = 0.0,
    save_every: int | None = None,
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
