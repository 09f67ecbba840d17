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

Example:
    >>> from attnflow.integrate import RK_TABLEAUX
    >>> rk4 = RK_TABLEAUX["rk4"]
    >>> rk4.num_stages, rk4.order, rk4.c
    (4, 4, (0.0, 0.5, 0.5, 1.0))
"""

from __future__ import annotations

from typing import Callable, Sequence

import equinox as eqx
import numpy as np

from ..dynamics._base import AbstractDynamics
from ..errors import InputError
from ._base import check_dynamics
from ._euler import _GridStepper, plain_shift
from ._save import SaveLayers

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
    r"""A fixed-step explicit Runge-Kutta method on the grid :math:`t_k = t_0 + k\Delta t`, k = 0..num_layers.

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
        dt, num_layers, t0, shift, save_every, save_at, save_aux, checkpoint: as for
            :class:`~attnflow.integrate.EulerStepper`; with ``save_aux`` the by-product is that
            of the first stage, the field at the saved state.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from attnflow import AttentionFlow
        >>> from attnflow.integrate import RKStepper
        >>> x0 = jax.random.normal(jax.random.key(0), (8, 2))
        >>> traj = RKStepper("rk4", dt=0.1, num_layers=10).solve(AttentionFlow(jnp.eye(2), jnp.eye(2), jnp.eye(2)), x0)
        >>> traj.ys.shape, traj.ts.shape
        ((11, 8, 2), (11,))
    """

    tableau: ButcherTableau = eqx.field(static=True)

    def __init__(self, tableau: ButcherTableau | str, dt, num_layers: int, *, t0=0.0, shift: Callable = plain_shift,
                 save_every: int | None = None, save_at: SaveLayers | Sequence[int] | None = None,
                 save_aux: bool = False, checkpoint: int | str | None = "auto"):
        if isinstance(tableau, str):
            if tableau not in RK_TABLEAUX:
                raise InputError(f"tableau must be a ButcherTableau or one of {sorted(RK_TABLEAUX)}, got {tableau!r}.")
            tableau = RK_TABLEAUX[tableau]
        if not isinstance(tableau, ButcherTableau):
            raise InputError(f"tableau must be a ButcherTableau or one of {sorted(RK_TABLEAUX)}, got "
                             f"{type(tableau).__name__}.")
        self.tableau = tableau
        self._grid_init(dt, num_layers, t0, shift, save_every, save_at, save_aux, checkpoint)

    def bind(self, dynamics: AbstractDynamics) -> AbstractDynamics:
        """The field unchanged (the stages evaluate the continuous-time field)."""
        return check_dynamics(dynamics)

    def _stages(self, field, t, y, dt, args, first):
        tab, stages = self.tableau, [first]
        for i in range(1, tab.num_stages):
            y_i = y + dt * _combination(tab.a[i][:i], stages) if any(tab.a[i][:i]) else y
            stages.append(field.vector_field(t + tab.c[i] * dt if tab.c[i] else t, y_i, args))
        return self.shift(y, dt * _combination(tab.b, stages))

    def _step(self, field, t, y, dt, args):
        return self._stages(field, t, y, dt, args, field.vector_field(t, y, args))

    def _step_with_aux(self, field, t, y, dt, args):
        first, aux = field.vector_field_with_aux(t, y, args)
        return self._stages(field, t, y, dt, args, first), aux
