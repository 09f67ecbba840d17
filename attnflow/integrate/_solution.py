"""The result of an integration, and the checks that turn failures into errors.

``Trajectory.result`` is a code of :class:`RESULTS`, computed inside jit: ``RESULTS.successful``,
``RESULTS.solver_stopped`` (the solver stopped before t1, e.g. ``max_steps`` reached or a NaN
step size) or ``RESULTS.nonfinite`` (the state overflowed). :func:`raise_if_failed` turns it into
an exception on the host; :func:`error_if_failed` does the same *inside* jit
(``equinox.error_if``), so that jit/vmap/grad over a solve still report failures.
"""

from __future__ import annotations

import enum

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int, PyTree

from ..errors import NonFiniteError, SolverError


class RESULTS(enum.IntEnum):
    """The outcome of a solve: named codes with messages, the one result type of every integrator.

    In the spirit of diffrax's ``RESULTS``, but each member is a Python ``int`` (an
    :class:`enum.IntEnum`): a constant inside jit (``jnp.where(bad, RESULTS.nonfinite,
    RESULTS.successful)``), comparable with a batch of codes (``traj.result == RESULTS.successful``),
    and stored as the same integer (0, 1, 2) in every table and ``.npz`` file. ``int(traj.result)``
    and ``RESULTS(int(traj.result)).message`` read a code on the host. Compare against the names,
    never against bare numbers.

    Example:
        >>> from attnflow.integrate import RESULTS
        >>> int(RESULTS.nonfinite), RESULTS(1).name, RESULTS.successful.message
        (2, 'solver_stopped', 'success')
    """

    successful = 0, "success"
    solver_stopped = 1, "the solver stopped before t1 (max_steps reached, or a non-finite step size)"
    nonfinite = 2, "the state became non-finite (overflow or NaN)"

    def __new__(cls, code: int, message: str):
        member = int.__new__(cls, code)
        member._value_ = code
        member.message = message
        return member

    @classmethod
    def failed(cls, result: Int[Array, "*B"]) -> Bool[Array, "*B"]:
        """Whether each code of ``result`` is a failure (anything but :attr:`successful`); traceable.

        Example:
            >>> import jax.numpy as jnp
            >>> from attnflow.integrate import RESULTS
            >>> RESULTS.failed(jnp.array([RESULTS.successful, RESULTS.nonfinite])).tolist()
            [False, True]
        """
        return jnp.asarray(result) != cls.successful


class Trajectory(eqx.Module):
    r"""Saved output of one solve (or a batch of solves, with leading batch axes).

    Attributes:
        ts: (T,) save times.
        ys: what was saved at each time: the states (T, n, d) by default, or the
            pytree returned by ``save_fn(t, y, args)`` with a leading T axis.
        num_steps: number of accepted steps (Euler: layers) taken.
        result: a :class:`RESULTS` code (an integer array: ``RESULTS.successful`` = 0 on success).
        t_nonfinite: where the solution stops being finite, ``inf`` when it never does. For
            :attr:`RESULTS.nonfinite`: the end of the first step whose state (or field) is
            non-finite, so that the blow-up lies within the step that ends there: the Euler
            stepper's first non-finite layer :math:`t_k + \Delta t`; a diffrax solve's
            :math:`t + dt`, where t is its last finite state and dt the step at which it stopped
            (after shrinking it to the time resolution, when adaptive); t0 for a field that is
            non-finite at the start; or, when only ``save_fn`` gave non-finite values, the first
            such save time. For :attr:`RESULTS.solver_stopped`: the time the solver reached (the
            output is missing after it).
    """

    ts: Float[Array, " T"]
    ys: PyTree
    num_steps: Int[Array, ""]
    result: Int[Array, ""]
    t_nonfinite: Float[Array, ""]


def save_state(t, y, args):
    """The default ``save_fn``: save the whole state."""
    return y


def first_nonfinite_time(ts: Float[Array, " T"], ys: PyTree) -> Float[Array, ""]:
    """Earliest ``ts[i]`` at which any leaf of ``ys[i]`` is NaN or infinite (``inf`` if none)."""
    import jax

    def bad_rows(leaf):
        leaf = jnp.asarray(leaf)
        if not jnp.issubdtype(leaf.dtype, jnp.inexact):
            return jnp.zeros(ts.shape, bool)
        return ~jnp.all(jnp.isfinite(leaf.reshape(leaf.shape[0], -1)), axis=1)

    bad = jnp.zeros(ts.shape, bool)
    for leaf in jax.tree_util.tree_leaves(ys):
        bad = bad | bad_rows(leaf)
    return jnp.min(jnp.where(bad, ts, jnp.inf))


def raise_if_failed(traj: Trajectory, what: str = "the simulation") -> None:
    """Raise :class:`NonFiniteError` or :class:`SolverError` for a failed (possibly batched) solve.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.integrate import RESULTS, Trajectory, raise_if_failed
        >>> ok = Trajectory(jnp.zeros(2), jnp.zeros((2, 3)), jnp.array(2), jnp.array(RESULTS.successful),
        ...                 jnp.array(jnp.inf))
        >>> raise_if_failed(ok)  # nothing happens
    """
    t_bad = np.asarray(traj.t_nonfinite)
    stopped = np.asarray(traj.result) == RESULTS.solver_stopped
    ts = np.asarray(traj.ts)
    if np.any(stopped):
        idx = tuple(np.argwhere(stopped)[0]) if stopped.ndim else ()
        n_bad = int(np.sum(stopped))
        member = f" (batch member {idx[0] if len(idx) == 1 else idx}; {n_bad} system(s) affected)" if idx else ""
        t_stop = float(t_bad[idx])
        row = ts[idx] if ts.ndim > 1 else ts
        before, after = row[row <= t_stop], row[row > t_stop]
        last_ok = f"t = {float(before.max()):.6g}" if before.size else "the start"
        missing = f"from t = {float(after.min()):.6g} on" if after.size else "after it"
        raise SolverError(
            f"{what} stopped before t1 at t = {t_stop:.6g}{member}: its output is finite up to {last_ok} and "
            f"missing {missing}; the solver ran out of steps or its step size became non-finite (raise "
            "max_steps, loosen rtol/atol, use constant steps, or check the inputs)."
        )
    if np.any(np.isfinite(t_bad)):
        idx = np.unravel_index(np.argmin(np.where(np.isfinite(t_bad), t_bad, np.inf)), t_bad.shape)
        member = f" in batch member {idx[0] if len(idx) == 1 else idx}" if t_bad.ndim else ""
        n_bad = int(np.sum(np.isfinite(t_bad)))
        others = f" ({n_bad} systems affected)" if t_bad.ndim and n_bad > 1 else ""
        raise NonFiniteError(
            f"{what} became non-finite (overflow or NaN) at t = {float(t_bad[idx]):.6g}{member}{others}; "
            "shorten t1, use the rescaled picture, use float64, or reduce the weights' scale."
        )


def error_if_failed(traj: Trajectory, what: str = "the simulation") -> Trajectory:
    """``traj`` unchanged, raising (inside jit too, via ``equinox.error_if``) if the solve failed.

    The message is fixed at trace time; on the host, :func:`raise_if_failed` says more
    (which member, at what time).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from attnflow.integrate import RESULTS, Trajectory, error_if_failed
        >>> bad = Trajectory(jnp.zeros(2), jnp.zeros((2, 3)), jnp.array(2), jnp.array(RESULTS.nonfinite),
        ...                  jnp.array(1.0))
        >>> try:
        ...     jax.jit(lambda tr: error_if_failed(tr).ys)(bad)
        ... except Exception as err:
        ...     print("non-finite" in str(err))
        True
    """
    return eqx.tree_at(lambda tr: tr.ys, traj, checked(traj.ys, traj.result, what))


def checked(tree: PyTree, result: Array, what: str = "the simulation") -> PyTree:
    """``tree`` unchanged, with the failure checks of ``result`` attached (``equinox.error_if``):
    evaluating it inside jit raises if any member of ``result`` is a failure code of :class:`RESULTS`.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from attnflow.integrate import RESULTS
        >>> from attnflow.integrate._solution import checked
        >>> jax.jit(lambda y: checked(y, jnp.array(RESULTS.successful)))(jnp.ones(2)).tolist()
        [1.0, 1.0]
    """
    tree = eqx.error_if(
        tree, jnp.any(jnp.asarray(result) == RESULTS.solver_stopped),
        f"{what} stopped before t1: {RESULTS.solver_stopped.message}; raise max_steps, loosen rtol/atol, "
        "use constant steps, or check the inputs for NaN.",
    )
    return eqx.error_if(
        tree, jnp.any(jnp.asarray(result) == RESULTS.nonfinite),
        f"{what} became non-finite (overflow or NaN); shorten t1, use the rescaled picture, use float64, or "
        "reduce the weights' scale (Trajectory.t_nonfinite says when).",
    )
