r"""Explicit Runge-Kutta on the layer grid: a Butcher tableau, stepped like the Euler stepper.

One step of an s-stage explicit method with tableau :math:`(A, b, c)`, :math:`A` strictly
lower-triangular and :math:`c_i = \sum_j a_{ij}`:

.. math::

    k_i = f\Big(t_k + c_i\Delta t,\ y_k + \Delta t \sum_{j<i} a_{ij} k_j\Big),\qquad
    y_{k+1} = \mathrm{shift}\Big(y_k,\ \Delta t \sum_i b_i k_i\Big),

with :math:`\sum_i b_i = 1` (consistency). The stages add in flat space; ``shift`` applies to
the full step only (:func:`~attnflow.integrate.sphere_shift` projects the result back to the
sphere). :data:`RK_TABLEAUX` holds Euler (order 1), Heun (2), the midpoint rule (2) and the
classic RK4 (4).

Two ways to lay out the steps: the layer grid :math:`t_k = t_0 + k\Delta t` with saved layers
(as :class:`~attnflow.integrate.EulerStepper`), or given save times :math:`t_0 < t_1 < \dots`
(``ts=``, like diffrax's ``SaveAt(ts=...)``), each interval cut into ``steps_per_save`` equal steps
:math:`h_j = (t_{j+1} - t_j)/\mathrm{steps}`. For a tableau whose stage i reads only stage
i - 1 (:math:`a_{ij} = 0` for :math:`j < i - 1`: Euler, the midpoint rule, RK4),
``scan_stages=True`` runs the stages as one body in ``lax.scan``,

.. math::

    k_i = f\big(t + c_i h,\ y + (a_{i,i-1} h)\, k_{i-1}\big),\qquad
    y_{next} = \mathrm{shift}\Big(y,\ h\sum_i b_i k_i\Big)\ \ (\text{summed in stage order}),

so that XLA compiles the field once per step instead of once per stage.

Example:
    >>> from attnflow.integrate import RK_TABLEAUX
    >>> rk4 = RK_TABLEAUX["rk4"]
    >>> rk4.num_stages, rk4.order, rk4.c
    (4, 4, (0.0, 0.5, 0.5, 1.0))
"""

from __future__ import annotations

from typing import Callable, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, PyTree

from .. import _validate as v
from .._x64 import check_float64_kept
from ..dynamics import AbstractDynamics
from ..errors import InputError
from ._base import check_dynamics
from ._euler import _GridStepper, plain_shift
from ._save import SaveLayers
from ._solution import RESULTS, Trajectory, save_state

__all__ = ["ButcherTableau", "RK_TABLEAUX", "RKStepper"]

#: how far sum(b) may be from 1 and c_i from the row sums of A (tableaux written in decimals)
TABLEAU_TOL = 1e-12


class ButcherTableau(eqx.Module):
    r"""A frozen explicit Runge-Kutta tableau :math:`(A, b, c)` (static, hashable).

    Args:
        a: the s x s matrix A as rows; strictly lower-triangular (explicit method).
        b: the s weights, :math:`\sum_i b_i = 1`.
        c: the s nodes, :math:`c_i = \sum_j a_{ij}` (so :math:`c_1 = 0`).
        order: the classical order of the method (what a convergence test should see).
        name: a label.

    Example:
        >>> from attnflow.integrate import ButcherTableau
        >>> ButcherTableau(a=[[0, 0], [1, 0]], b=[0.5, 0.5], c=[0, 1], order=2, name="heun").b
        (0.5, 0.5)
        >>> ButcherTableau(a=[[0, 0], [1, 0]], b=[0.5, 0.6], c=[0, 1], order=2)
        Traceback (most recent call last):
        ...
        attnflow.errors.InputError: the tableau's weights b must sum to 1 (a consistent method), got sum(b) = 1.1.
    """

    a: tuple[tuple[float, ...], ...] = eqx.field(static=True)
    b: tuple[float, ...] = eqx.field(static=True)
    c: tuple[float, ...] = eqx.field(static=True)
    order: int = eqx.field(static=True)
    name: str = eqx.field(static=True)

    def __init__(self, a: Sequence[Sequence[float]], b: Sequence[float], c: Sequence[float], order: int,
                 name: str = "custom"):
        try:
            A, B, C = (np.asarray(x, dtype=float) for x in (a, b, c))
        except (TypeError, ValueError):
            raise InputError("the tableau's a, b and c must be real numbers (a: s x s rows, b and c: s), "
                             f"got a={a!r}, b={b!r}, c={c!r}.") from None
        s = B.shape[0] if B.ndim == 1 else -1
        if s < 1 or A.shape != (s, s) or C.shape != (s,):
            raise InputError(f"the tableau must have a of shape (s, s) and b, c of shape (s,), got a {A.shape}, "
                             f"b {B.shape}, c {C.shape}.")
        if not (np.all(np.isfinite(A)) and np.all(np.isfinite(B)) and np.all(np.isfinite(C))):
            raise InputError("the tableau's a, b and c must be finite numbers, got a non-finite entry.")
        if np.any(np.triu(A) != 0):
            raise InputError(f"the tableau's a must be strictly lower-triangular (an explicit method), got a = {A.tolist()}.")
        if abs(B.sum() - 1) > TABLEAU_TOL:
            raise InputError(f"the tableau's weights b must sum to 1 (a consistent method), got sum(b) = {B.sum():.6g}.")
        if np.max(np.abs(C - A.sum(axis=1))) > TABLEAU_TOL:
            raise InputError(f"the tableau's nodes c must be the row sums of a, got c = {C.tolist()} against row "
                             f"sums {A.sum(axis=1).tolist()}.")
        if isinstance(order, bool) or not isinstance(order, (int, np.integer)) or order < 1:
            raise InputError(f"the tableau's order must be a positive int (its classical order), got {order!r}.")
        self.a = tuple(tuple(float(x) for x in row) for row in A)
        self.b, self.c = tuple(float(x) for x in B), tuple(float(x) for x in C)
        self.order, self.name = int(order), str(name)

    @property
    def num_stages(self) -> int:
        """s, the number of field evaluations per step."""
        return len(self.b)

    @property
    def chained(self) -> bool:
        r"""Whether stage i reads only stage i - 1 (:math:`a_{ij} = 0` for :math:`j < i - 1`), so that one
        stage body in ``lax.scan`` runs the step (``RKStepper(scan_stages=True)``).

        Example:
            >>> from attnflow.integrate import RK_TABLEAUX, ButcherTableau
            >>> kutta3 = ButcherTableau([[0, 0, 0], [0.5, 0, 0], [-1, 2, 0]], [1 / 6, 2 / 3, 1 / 6], [0, 0.5, 1], order=3)
            >>> RK_TABLEAUX["rk4"].chained, kutta3.chained
            (True, False)
        """
        return all(w == 0.0 for i, row in enumerate(self.a) for w in row[:max(i - 1, 0)])


#: the built-in tableaux by name
RK_TABLEAUX = {
    "euler": ButcherTableau([[0.0]], [1.0], [0.0], order=1, name="euler"),
    "heun": ButcherTableau([[0.0, 0.0], [1.0, 0.0]], [0.5, 0.5], [0.0, 1.0], order=2, name="heun"),
    "midpoint": ButcherTableau([[0.0, 0.0], [0.5, 0.0]], [0.0, 1.0], [0.0, 0.5], order=2, name="midpoint"),
    "rk4": ButcherTableau(
        [[0.0, 0.0, 0.0, 0.0], [0.5, 0.0, 0.0, 0.0], [0.0, 0.5, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0]],
        [1 / 6, 1 / 3, 1 / 3, 1 / 6], [0.0, 0.5, 0.5, 1.0], order=4, name="rk4"),
}


def _combination(coefficients, stages):
    """sum_j coefficients[j] * stages[j] over the non-zero coefficients (a 1 multiplies nothing)."""
    terms = [k if w == 1.0 else w * k for w, k in zip(coefficients, stages) if w != 0.0]
    total = terms[0]
    for term in terms[1:]:
        total = total + term
    return total


class RKStepper(_GridStepper):
    r"""A fixed-step explicit Runge-Kutta method on the grid :math:`t_k = t_0 + k\Delta t`, k = 0..num_layers,
    or between given save times.

    The step is in the module docstring; every stage calls the field's
    ``vector_field(t, y, args)``, as the other integrators do. ``bind`` is the identity (as for
    :class:`~attnflow.integrate.ODESolver`): the stages evaluate the continuous-time field between
    grid points, so a field's layer-grid form (``on_grid``, e.g. the exact discrete rescaling of
    the Euler layers) is not used. With the Euler tableau and a field whose ``on_grid`` is the
    identity (:class:`~attnflow.AttentionFlow`) the result is that of
    :class:`~attnflow.integrate.EulerStepper` (bit for bit: the weight 1 multiplies nothing).

    Args:
        tableau: a :class:`ButcherTableau` or a name of :data:`RK_TABLEAUX` (``"euler"``,
            ``"heun"``, ``"midpoint"``, ``"rk4"``).
        dt, num_layers, t0, shift, save_every, save_at, save_aux, checkpoint, loop: as for
            :class:`~attnflow.integrate.EulerStepper`; with ``save_aux`` the by-product is that
            of the first stage, the field at the saved state. With ``ts`` leave ``dt`` and
            ``num_layers`` None (and ``t0``, ``save_every``, ``save_at``, ``checkpoint``, ``loop`` unset).
        ts: save times :math:`t_0 < t_1 < \dots < t_{T-1}` (T >= 2; traced values are fine), like
            diffrax's ``SaveAt(ts=...)``: the solve starts at ``ts[0]`` and saves at every one;
            interval j takes ``steps_per_save`` steps of :math:`(t_{j+1} - t_j)/\mathrm{steps}`.
        steps_per_save: steps in each interval between two save times (with ``ts``).
        scan_stages: run the stages as one body in ``lax.scan`` (:attr:`ButcherTableau.chained`
            tableaux only; no ``save_aux``): the field is compiled once per step, not once per stage.
        lawson: integrating-factor (Lawson) steps for a field :math:`f(t, y) = Ly + N(t, y)` with a stiff
            linear part: the field gives ``linear_flow(tau, y)`` (:math:`e^{\tau L}y`, exact) and
            ``nonlinear(t, y, args)`` (N); stage i is :math:`Y_i = e^{c_i hL}y + h\sum_j a_{ij}e^{(c_i - c_j)hL}N_j`
            and the step :math:`e^{hL}y + h\sum_j b_j e^{(1 - c_j)hL}N_j`: exact for :math:`N = 0` (e.g. the
            diffusion of the noisy continuity equation), the tableau's order otherwise, and stable for any h
            when L's spectrum is on the negative axis.
        track_min: with ``ts``, a function ``track_min(y) -> pytree`` whose minimum over the states
            of every step of an interval (its end included) is saved with that interval's end (at
            ``ts[0]``: its value at the start); ``Trajectory.ys`` is then ``(saved, minima)``.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from attnflow import AttentionFlow
        >>> from attnflow.integrate import RKStepper
        >>> x0 = jax.random.normal(jax.random.key(0), (8, 2))
        >>> flow = AttentionFlow(jnp.eye(2), jnp.eye(2), jnp.eye(2))
        >>> traj = RKStepper("rk4", dt=0.1, num_layers=10).solve(flow, x0)
        >>> traj.ys.shape, traj.ts.shape
        ((11, 8, 2), (11,))
        >>> at = RKStepper("rk4", ts=jnp.array([0.0, 0.5, 1.5]), steps_per_save=5, scan_stages=True, track_min=jnp.min)
        >>> states, lows = at.solve(flow, x0).ys
        >>> states.shape, lows.shape, int(at.num_layers)
        ((3, 8, 2), (3,), 10)
    """

    tableau: ButcherTableau = eqx.field(static=True)
    save_ts: Float[Array, " T"] | None
    steps_per_save: int | None = eqx.field(static=True)
    scan_stages: bool = eqx.field(static=True)
    track_min: Callable | None = eqx.field(static=True)
    lawson: bool = eqx.field(static=True)

    def __init__(self, tableau: ButcherTableau | str, dt=None, num_layers: int | None = None, *, t0=0.0,
                 shift: Callable = plain_shift, save_every: int | None = None,
                 save_at: SaveLayers | Sequence[int] | None = None, save_aux: bool = False,
                 checkpoint: int | str | None = "auto", ts: Float[Array, " T"] | None = None,
                 steps_per_save: int | None = None, scan_stages: bool = False, track_min: Callable | None = None,
                 loop: str = "scan", lawson: bool = False):
        if isinstance(tableau, str):
            if tableau not in RK_TABLEAUX:
                raise InputError(f"tableau must be a ButcherTableau or one of {sorted(RK_TABLEAUX)}, got {tableau!r}.")
            tableau = RK_TABLEAUX[tableau]
        if not isinstance(tableau, ButcherTableau):
            raise InputError(f"tableau must be a ButcherTableau or one of {sorted(RK_TABLEAUX)}, got "
                             f"{type(tableau).__name__}.")
        if not isinstance(scan_stages, bool):
            raise InputError(f"scan_stages must be True or False (one stage body in lax.scan), got {scan_stages!r}.")
        if scan_stages and not tableau.chained:
            raise InputError(f"scan_stages=True needs a tableau whose stage i reads only stage i - 1, got {tableau.name!r} "
                             f"with a = {tableau.a}; use scan_stages=False.")
        if scan_stages and save_aux:
            raise InputError("scan_stages=True hands no by-product to save_fn; use save_aux=False or scan_stages=False.")
        if track_min is not None and not callable(track_min):
            raise InputError(f"track_min must be a function y -> pytree of arrays, got {type(track_min).__name__}.")
        if not isinstance(lawson, bool):
            raise InputError(f"lawson must be True or False (integrating-factor steps of a field's stiff linear part), "
                             f"got {lawson!r}.")
        if lawson and save_aux:
            raise InputError("lawson=True hands no by-product to save_fn; use save_aux=False.")
        self.tableau, self.scan_stages, self.track_min, self.lawson = tableau, scan_stages, track_min, lawson
        if ts is None:
            if dt is None or num_layers is None or steps_per_save is not None or track_min is not None:
                raise InputError("RKStepper needs dt and num_layers (the layer grid), or ts and steps_per_save (save "
                                 "times) with dt and num_layers None; track_min goes with ts.")
            self.save_ts, self.steps_per_save = None, None
            self._grid_init(dt, num_layers, t0, shift, save_every, save_at, save_aux, checkpoint, loop)
            return
        if (dt is not None or num_layers is not None or save_every is not None or save_at is not None or save_aux
                or (isinstance(t0, (int, float)) and t0 != 0.0) or checkpoint != "auto" or loop != "scan"):
            raise InputError("with ts (the save times) give steps_per_save and leave dt, num_layers, t0, save_every, "
                             "save_at, save_aux, checkpoint and loop unset.")
        self._times_init(ts, steps_per_save, shift)

    def _times_init(self, ts, steps_per_save, shift):
        shape = v.check_array("ts", ts, "the save times (T,), increasing, the first one the start", ranks=(1,))
        ts = ts if isinstance(ts, (jax.Array, np.ndarray)) else np.asarray(ts, float)  # a list: one array leaf
        if shape[0] < 2:
            raise InputError(f"ts must hold at least two times (the start and a save time), got {shape[0]}.")
        if v.is_concrete(ts) and not bool(np.all(np.diff(np.asarray(ts, float)) > 0)):
            raise InputError(f"ts must be strictly increasing save times, got {np.asarray(ts).tolist()}.")
        steps = v.check_int("steps_per_save", steps_per_save, meaning="steps between two save times")
        if not callable(shift):
            raise InputError(f"shift must be a function (y, dy) -> y_next, got {type(shift).__name__}.")
        self.save_ts, self.steps_per_save, self.shift = ts, steps, shift
        self.num_layers = steps * (shape[0] - 1)
        self.dt, self.t0 = None, ts[0]
        self.save_every, self.save_at = steps, SaveLayers.uniform(steps, self.num_layers)
        self.checkpoint, self.save_aux, self.loop = None, False, "scan"

    def bind(self, dynamics: AbstractDynamics) -> AbstractDynamics:
        """The field unchanged (the stages evaluate the continuous-time field)."""
        field = check_dynamics(dynamics)
        if self.lawson and not (callable(getattr(field, "linear_flow", None))
                                and callable(getattr(field, "nonlinear", None))):
            raise InputError(f"lawson=True needs a field with linear_flow(tau, y) and nonlinear(t, y, args) (its stiff "
                             f"linear part and the rest), got {type(field).__name__}, which has not both.")
        return field

    def _lawson_stages(self, field, t, y, dt, args):
        """One integrating-factor (Lawson) step (the ``lawson`` argument)."""
        tab, flow = self.tableau, field.linear_flow
        stages = [field.nonlinear(t, y, args)]
        for i in range(1, tab.num_stages):
            c_i = tab.c[i]
            y_i = flow(c_i * dt, y)
            for j in range(i):
                if tab.a[i][j]:
                    y_i = y_i + (tab.a[i][j] * dt) * flow((c_i - tab.c[j]) * dt, stages[j])
            stages.append(field.nonlinear(t + c_i * dt, y_i, args))
        total = flow(dt, y)
        for b_j, c_j, k in zip(tab.b, tab.c, stages):
            if b_j:
                total = total + (b_j * dt) * flow((1 - c_j) * dt, k)
        return total if self.shift is plain_shift else self.shift(y, total - y)

    def _stages(self, field, t, y, dt, args, first):
        tab, stages = self.tableau, [first]
        for i in range(1, tab.num_stages):
            y_i = y + dt * _combination(tab.a[i][:i], stages) if any(tab.a[i][:i]) else y
            stages.append(field.vector_field(t + tab.c[i] * dt if tab.c[i] else t, y_i, args))
        return self.shift(y, dt * _combination(tab.b, stages))

    def _scanned_stages(self, field, t, y, dt, args):
        """One step with the stages as one ``lax.scan`` body (a chained tableau: stage i reads k_{i-1})."""
        tab = self.tableau
        chain = [0.0] + [tab.a[i][i - 1] for i in range(1, tab.num_stages)]
        coefficients = tuple(jnp.asarray(np.array(c), y.dtype) for c in (chain, tab.b, tab.c))

        def stage(state, abc):
            k, total = state
            a, b, c = abc
            k = field.vector_field(t + c * dt, y + (a * dt) * k, args)
            return (k, total + b * k), None

        (_, total), _ = jax.lax.scan(stage, (jnp.zeros_like(y), jnp.zeros_like(y)), coefficients)
        return self.shift(y, dt * total)

    def _step(self, field, t, y, dt, args):
        if self.lawson:
            return self._lawson_stages(field, t, y, dt, args)
        if self.scan_stages:
            return self._scanned_stages(field, t, y, dt, args)
        return self._stages(field, t, y, dt, args, field.vector_field(t, y, args))

    def _step_with_aux(self, field, t, y, dt, args):
        first, aux = field.vector_field_with_aux(t, y, args)
        return self._stages(field, t, y, dt, args, first), aux

    def solve(self, dynamics: AbstractDynamics, y0: Float[Array, "n d"], *,
              save_fn: Callable[[Array, Array, PyTree], PyTree] | None = None, args: PyTree = None) -> Trajectory:
        r"""Run the steps from ``y0`` and save (see the class docstring; on the layer grid as
        :meth:`EulerStepper.solve`). Pure JAX: jit-, vmap- and grad-compatible; a non-finite state is
        recorded (``Trajectory.result`` = ``RESULTS.nonfinite``, ``t_nonfinite`` the end of the first
        step that left it), never raised inside jit.

        Example:
            >>> import jax.numpy as jnp
            >>> from attnflow import AttentionFlow
            >>> from attnflow.integrate import RKStepper
            >>> flow = AttentionFlow(jnp.eye(2), jnp.eye(2), jnp.eye(2))
            >>> RKStepper("heun", ts=jnp.array([0.0, 1.0]), steps_per_save=4).solve(flow, jnp.eye(2)).ys.shape
            (2, 2, 2)
        """
        if self.save_ts is None:
            return super().solve(dynamics, y0, save_fn=save_fn, args=args)
        v.check_array("y0", y0, "the state (batch with jax.vmap)", min_rank=1)
        return self._solve_at_times(self.bind(dynamics), y0, save_state if save_fn is None else save_fn, args)

    def _solve_at_times(self, field, y0, save_fn, args) -> Trajectory:
        check_float64_kept("y0", y0)
        dtype = jnp.result_type(y0.dtype, float)
        y0 = jnp.asarray(y0, dtype)
        ts = jnp.asarray(self.save_ts, dtype)
        steps, track = self.steps_per_save, self.track_min

        def interval(carry, bounds):
            t_a, t_b = bounds
            h = (t_b - t_a) / steps

            def step(carry, k):
                y, t_bad, low = carry
                t = t_a + k.astype(dtype) * h
                y_next = self._step(field, t, y, h, args)
                t_bad = jnp.where(jnp.isinf(t_bad) & ~jnp.all(jnp.isfinite(y_next)), t + h, t_bad)
                if track is not None:
                    low = jax.tree_util.tree_map(jnp.minimum, low, track(y_next))
                return (y_next, t_bad, low), None

            y, t_bad = carry
            start = None if track is None else jax.tree_util.tree_map(
                lambda a: jnp.full(a.shape, jnp.inf, a.dtype), jax.eval_shape(track, y))
            (y, t_bad, low), _ = jax.lax.scan(step, (y, t_bad, start), jnp.arange(steps))
            saved = save_fn(t_b, y, args)
            return (y, t_bad), (saved if track is None else (saved, low))

        (_, t_bad), later = jax.lax.scan(interval, (y0, jnp.asarray(jnp.inf, dtype)), (ts[:-1], ts[1:]))
        first = save_fn(ts[0], y0, args)
        if track is not None:
            first = (first, track(y0))
        ys = jax.tree_util.tree_map(lambda a, b: jnp.concatenate([jnp.asarray(a)[None], b]), first, later)
        return Trajectory(ts=ts, ys=ys, num_steps=jnp.asarray(self.num_layers),
                          result=jnp.where(jnp.isfinite(t_bad), RESULTS.nonfinite, RESULTS.successful),
                          t_nonfinite=t_bad)
