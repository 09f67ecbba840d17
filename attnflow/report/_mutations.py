r"""Deliberately wrong vector fields, for testing that the report's verdicts discriminate.

:class:`MutatedFlow` is an :class:`attnflow.dynamics.AbstractDynamics` that computes the
attention flow of SPEC section 1 with ONE error, named by ``mutation``:

==================  =======================================================================
mutation            what is wrong
==================  =======================================================================
scores_from_z       rescaled picture: scores from z instead of x = e^{tV} z (R^k z)
softmax_axis        P normalised over i (columns) instead of j (rows)
V_transposed        the drift uses V^T instead of V
V_sign              the drift uses -V
no_QK               scores <x_i, x_j> (Q^T K replaced by I)
QK_transposed       scores <K x_i, Q x_j> (Q^T K replaced by K^T Q)
uniform             P = 1/n (no attention)
no_self_term        rescaled picture: sum_j P_ij V z_j (the -z_i term dropped)
no_P                drift not weighted by P: sum_j V (z_j - z_i) (raw: sum_j V x_j)
transport_sign      rescaled picture: scores from e^{-tV} z (R^{-k} z) instead of e^{tV} z
==================  =======================================================================

:func:`mutated_field_factory` returns a factory called like the field registry's
:func:`attnflow.fields.make_dynamics` (``factory(Q, K, V, picture=, method=)``), to be passed as
``Context.field_factory`` so that the report's cases run on the wrong field with everything else
unchanged (the layer stepper binds its grid, :meth:`MutatedFlow.on_grid`, as for the right field).
"""

from __future__ import annotations

import math

import equinox as eqx
import jax.numpy as jnp

from ..dynamics import AbstractAttentionDynamics
from .._linalg import euler_transfer_matrix, expm_tV, matrix_power

__all__ = ["MUTATIONS", "MutatedFlow", "mutated_field_factory"]

MUTATIONS = ("scores_from_z", "softmax_axis", "V_transposed", "V_sign", "no_QK", "QK_transposed", "uniform",
             "no_self_term", "no_P", "transport_sign")


class MutatedFlow(AbstractAttentionDynamics):
    """The attention flow in ``picture`` ("raw" or "rescaled"; with ``dt`` set, the exact
    discrete rescaling of Euler layers of that step, which :meth:`on_grid` sets) with the error
    ``mutation``.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.report._mutations import MutatedFlow
        >>> f = MutatedFlow(jnp.eye(2), jnp.eye(2), jnp.eye(2), picture="rescaled", mutation="uniform")
        >>> f(0.0, jnp.array([[1.0, 0.0], [-1.0, 0.0]])).tolist()
        [[-1.0, 0.0], [1.0, 0.0]]
    """

    Q: jnp.ndarray
    K: jnp.ndarray
    V: jnp.ndarray
    picture: str = eqx.field(static=True, default="rescaled")
    mutation: str = eqx.field(static=True, default="uniform")
    dt: float | None = eqx.field(static=True, default=None)
    max_layers: int = eqx.field(static=True, default=1)

    def on_grid(self, dt, t0, num_layers):
        """This wrong field as the layer stepper steps it: a rescaled picture becomes the discrete
        rescaling of layers of step dt (t0 = 0 only)."""
        return MutatedFlow(self.Q, self.K, self.V, picture=self.picture, mutation=self.mutation, dt=float(dt),
                           max_layers=int(num_layers))

    def _transport(self, t, sign=1.0):
        if self.picture == "raw":
            return None
        if self.dt is None:
            return expm_tV(self.V, sign * t)
        R = euler_transfer_matrix(self.V, self.dt)
        if sign < 0:
            R = jnp.linalg.inv(R)
        k = jnp.round(t / self.dt).astype(jnp.int32)
        return matrix_power(R, k, max(1, math.ceil(math.log2(self.max_layers + 1))))

    def tokens(self, t, y):
        M = self._transport(t)
        return y if M is None else y @ M.T

    def attention(self, t, y):
        n = y.shape[0]
        if self.mutation == "uniform":
            return jnp.full((n, n), 1.0 / n, y.dtype)
        if self.mutation == "scores_from_z":
            x = y
        elif self.mutation == "transport_sign" and self.picture != "raw":
            x = y @ self._transport(t, -1.0).T
        else:
            x = self.tokens(t, y)
        A = self.Q.T @ self.K
        if self.mutation == "no_QK":
            A = jnp.eye(A.shape[0], dtype=A.dtype)
        elif self.mutation == "QK_transposed":
            A = A.T
        s = x @ A @ x.T
        axis = 0 if self.mutation == "softmax_axis" else 1
        s = s - jnp.max(s, axis=axis, keepdims=True)
        e = jnp.exp(s)
        return e / jnp.sum(e, axis=axis, keepdims=True)

    def vector_field(self, t, y, args=None):
        V = self.V
        if self.mutation == "V_transposed":
            V = V.T
        elif self.mutation == "V_sign":
            V = -V
        W = V if (self.picture == "raw" or self.dt is None) else jnp.linalg.solve(
            euler_transfer_matrix(self.V, self.dt), V)
        P = self.attention(t, y)
        if self.mutation == "no_P":
            P = jnp.ones_like(P)
        mixed = P @ y
        if self.picture != "raw" and self.mutation != "no_self_term":
            mixed = mixed - jnp.sum(P, axis=1, keepdims=True) * y
        return mixed @ W.T


def mutated_field_factory(mutation: str):
    """A ``Context.field_factory`` building :class:`MutatedFlow` with ``mutation`` (the method
    only matters through the stepper's :meth:`MutatedFlow.on_grid`).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.report._mutations import mutated_field_factory
        >>> f = mutated_field_factory("V_sign")(jnp.eye(2), jnp.eye(2), jnp.eye(2), picture="raw", method="tsit5")
        >>> type(f).__name__, f.mutation, f.on_grid(0.5, 0.0, 4).dt
        ('MutatedFlow', 'V_sign', 0.5)
    """
    if mutation not in MUTATIONS:
        from ..errors import InputError

        raise InputError(f"mutation must be one of {MUTATIONS}, got {mutation!r}.")

    def factory(Q, K, V, *, picture, method):
        return MutatedFlow(Q, K, V, picture=picture, mutation=mutation)

    return factory
