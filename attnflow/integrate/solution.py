"""The result of an integration, and the host-side check that turns failures into errors."""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int, PyTree

from ..errors import NonFiniteError, SolverError


class Trajectory(eqx.Module):
    """Saved output of one solve (or a batch of solves, with leading batch axes).

    Attributes:
        ts: (T,) save times.
        ys: what was saved at each time: the states (T, n, d) by default, or the
            pytree returned by ``save_fn(t, y, args)`` with a leading T axis.
        num_steps: number of accepted steps (Euler: layers) taken.
        failed: True when the solver stopped before t1 (e.g. ``max_steps`` reached).
        t_nonfinite: first save time at which the saved output is non-finite
            (``inf`` when everything is finite).
    """

    ts: Float[Array, " T"]
    ys: PyTree
    num_steps: Int[Array, ""]
    failed: Bool[Array, ""]
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
        >>> from attnflow.integrate import Trajectory, raise_if_failed
        >>> ok = Trajectory(jnp.zeros(2), jnp.zeros((2, 3)), jnp.array(2), jnp.array(False), jnp.array(jnp.inf))
        >>> raise_if_failed(ok)  # nothing happens
    """
    t_bad = np.asarray(traj.t_nonfinite)
    failed = np.asarray(traj.failed)
    ts = np.asarray(traj.ts)
    if np.any(failed):
        idx = tuple(np.argwhere(failed)[0]) if failed.ndim else ()
        n_bad = int(np.sum(failed))
        member = f" (batch member {idx[0] if len(idx) == 1 else idx}; {n_bad} system(s) affected)" if idx else ""
        t_stop = float(t_bad[idx])
        row = ts[idx] if ts.ndim > 1 else ts
        earlier = row[row < t_stop]
        last_ok = f"t = {float(earlier.max()):.6g}" if earlier.size else "the start"
        raise SolverError(
            f"{what} stopped before t1{member}: its output is finite up to {last_ok} and missing "
            f"from t = {t_stop:.6g} on; either the state overflowed (raw picture at large t: use the "
            "rescaled picture, float64 or a smaller t1) or the solver ran out of steps (raise "
            "max_steps, loosen rtol/atol, or use constant steps)."
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
