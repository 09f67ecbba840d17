r"""The stochastic layer stepper (the diffrax SDE solves are :class:`~attnflow.integrate.SDESolver`).

* :class:`EulerMaruyamaStepper`: the layer stepper with noise, :math:`y[k+1] = \mathrm{shift}(y[k],\
  \Delta t\,f(t_k, y[k]) + g(t_k, y[k])[\Delta W_k])`: Euler-Maruyama, and on the sphere
  (``shift=sphere_shift``) Euler-Maruyama followed by the renormalisation of every token, whose second-order
  effect is the Ito drift :math:`-(d-1)\frac{\sigma^2}{2} y`: it converges (weakly, order 1) to the
  Stratonovich SDE on the sphere. It owns dt, the layers and the saves like :class:`EulerStepper`.
* :class:`SDESolver`: ``diffrax.diffeqsolve`` of :math:`dy = f\,dt + g \circ dW` with constant steps on the
  noise's :class:`diffrax.VirtualBrownianTree`: a Stratonovich solver (Heun by default, midpoint, reversible
  Heun, ...) integrates the diffusion as given; an Ito solver (diffrax's Euler, Ito-Milstein) integrates the
  Ito form, the noise's :meth:`~attnflow.integrate.TokenNoise.ito_correction` added to the drift. The two
  agree in law.

Both return a :class:`~attnflow.integrate.Trajectory`; the same key gives the same path, bit for bit, and
gradients flow through the path (pathwise derivatives with the path held fixed).
"""

from __future__ import annotations

from typing import Callable, Sequence

import equinox as eqx
import jax.numpy as jnp

from .. import _validate as v
from ..dynamics import AbstractDynamics
from ..errors import InputError
from ._euler import EulerStepper, plain_shift, sphere_shift
from ._noise import (BROWNIAN, AbstractNoise, CommonNoise, brownian_tree, check_noise, computed_once,
                     layer_increment_sampler, tree_tolerance)
from ._save import SaveLayers

__all__ = ["EulerMaruyamaStepper"]


def _check_geometry(noise: AbstractNoise, shift: Callable) -> None:
    if noise.sphere and shift is not sphere_shift:
        raise InputError("noise on the sphere (sphere=True) is stepped with shift=sphere_shift (Euler-Maruyama, "
                         "then every token renormalised); got a flat shift: pass shift=sphere_shift.")
    if shift is sphere_shift and not noise.sphere:
        raise InputError("shift=sphere_shift renormalises the tokens, and the noise must then move them along the "
                         "sphere: build it with sphere=True (a radial kick would change the law of the step).")


class EulerMaruyamaStepper(EulerStepper):
    r"""The stochastic layer stepper: forward Euler plus the noise's increment on every layer.

    Args:
        dt, num_layers, t0, shift, save_every, save_at, save_aux, checkpoint, loop: as
            :class:`~attnflow.integrate.EulerStepper`.
        noise: a :class:`~attnflow.integrate.TokenNoise` or :class:`~attnflow.integrate.CommonNoise`
            (``sphere=True`` with ``shift=sphere_shift``).
        brownian: ``"layers"`` (default: layer k's increment from ``fold_in(key, k)``, one draw a layer) or
            ``"tree"`` (the noise's :class:`diffrax.VirtualBrownianTree` on the run's span: the same path for
            any dt, at about 2 x ``TREE_LEVELS`` draws a layer; for convergence studies).
        tree_tol: the tree's resolution (default: the span / 2^16; keep it fixed across runs that must share
            a path).

    With ``sigma = 0`` (a number, not traced) every layer is the deterministic stepper's, bit for bit.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from attnflow.dynamics import sphere_flow
        >>> from attnflow.integrate import EulerMaruyamaStepper, TokenNoise, sphere_shift
        >>> x0 = jax.random.normal(jax.random.key(0), (8, 3))
        >>> x0 = x0 / jnp.linalg.norm(x0, axis=-1, keepdims=True)
        >>> stepper = EulerMaruyamaStepper(0.05, 20, noise=TokenNoise(0.3, jax.random.key(1), sphere=True),
        ...                                shift=sphere_shift)
        >>> traj = stepper.solve(sphere_flow(jnp.eye(3), jnp.eye(3), jnp.eye(3), 1.0), x0)
        >>> traj.ys.shape, bool(jnp.allclose(jnp.linalg.norm(traj.ys, axis=-1), 1.0, atol=1e-6))
        ((21, 8, 3), True)
    """

    noise: AbstractNoise
    brownian: str = eqx.field(static=True)
    tree_tol: float | None = eqx.field(static=True)

    def __init__(self, dt, num_layers: int, *, noise: AbstractNoise, t0=0.0, shift: Callable = plain_shift,
                 save_every: int | None = None, save_at: SaveLayers | Sequence[int] | None = None,
                 save_aux: bool = False, checkpoint: int | str | None = "auto", loop: str = "scan",
                 brownian: str = "layers", tree_tol: float | None = None):
        super().__init__(dt, num_layers, t0=t0, shift=shift, save_every=save_every, save_at=save_at,
                         save_aux=save_aux, checkpoint=checkpoint, loop=loop)
        self.noise = check_noise(noise)
        _check_geometry(self.noise, shift)
        v.check_choice("brownian", brownian, BROWNIAN, "how the Brownian increments are drawn")
        if tree_tol is not None:
            v.check_positive("tree_tol", tree_tol, "the Brownian tree's resolution, a time > 0")
        self.brownian, self.tree_tol = brownian, tree_tol

    def bind(self, dynamics: AbstractDynamics) -> AbstractDynamics:
        field = super().bind(dynamics)
        if isinstance(self.noise, CommonNoise):
            self.noise.check_field(field)
        return field

    def solve(self, dynamics, y0, *, save_fn=None, args=None):
        """:meth:`EulerStepper.solve` with the noise (a state the noise cannot act on is refused first)."""
        self.noise.check_state(v.shape_of("y0", y0))
        return super().solve(dynamics, y0, save_fn=save_fn, args=args)

    def _layer_index(self, t, dt, dtype):
        """The layer k with t = t0 + k dt."""
        return jnp.round((t - jnp.asarray(self.t0, dtype)) / dt).astype(jnp.int32)

    def _increment_sampler(self, t, y, dt, k):
        """Layer k's Brownian increment (t = t0 + k dt) as a function of no arguments, its key schedule computed now
        (outside :func:`computed_once`'s fence)."""
        shape, dtype = self.noise.control_shape(y.shape), y.dtype
        if self.brownian == "layers":
            return layer_increment_sampler(self.noise, k, dt, shape, dtype)
        t0 = float(self.t0) if v.is_concrete(self.t0) else self.t0
        t1 = t0 + self.num_layers * self.dt
        tol = self.tree_tol if self.tree_tol is not None else tree_tolerance(t0, t1)
        return lambda: brownian_tree(self.noise, t0, t1, tol, shape, dtype).evaluate(t, t + dt)

    def _noisy_dy(self, field, t, y, dt, dy):
        if self.noise.is_zero():  # sigma = 0 given as a number: the deterministic layer, bit for bit
            return dt * dy
        operand = self.noise.operand(field, t, y)
        # the draw and its per-token factor in one pass, written once (computed_once: on XLA:CPU the update's
        # passes would each recompute the draw)
        k = self._layer_index(t, dt, y.dtype)
        increment = self._increment_sampler(t, y, dt, k)
        coefficient = computed_once(lambda: self.noise.coefficient(operand, increment()), k)
        return dt * dy + self.noise.finish(operand, coefficient)

    def _step(self, field, t, y, dt, args):
        return self.shift(y, self._noisy_dy(field, t, y, dt, field.vector_field(t, y, args)))

    def _step_with_aux(self, field, t, y, dt, args):
        dy, aux = field.vector_field_with_aux(t, y, args)
        return self.shift(y, self._noisy_dy(field, t, y, dt, dy)), aux
