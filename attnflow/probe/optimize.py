r"""A resumable optax loop over a batch of independent problems, for the probes.

:func:`optimize` minimises :math:`L(\theta_b)` for every member b of a batch (its own
parameters and optimiser state, one jitted step for the whole batch), with

* ``optax.apply_if_finite`` around the optimiser: an update computed from a non-finite
  gradient is never applied, so the parameters stay finite;
* a host check of the losses after every step: the first non-finite loss stops the run with
  :class:`NonFiniteLossError` naming the step and the members (the finite state is checkpointed);
* a check that the initial parameters are finite (a NaN parameter would make an adaptive solve
  reject steps until ``max_steps`` silently);
* checkpoints of (step, parameters, optimiser state, loss history) written atomically every
  ``checkpoint_every`` steps and at the end, resumed when the same problem (fingerprint) is run
  again: an interrupted run continues bit for bit as if it had not been interrupted;
* a tqdm progress bar.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import PyTree

from ..errors import InputError, NonFiniteError
from ..linalg import lapack_needs_loop, map_over_batch
from ..runio import atomic_write_bytes

__all__ = ["OptimizationResult", "NonFiniteLossError", "optimize", "finite_guard"]


class NonFiniteLossError(NonFiniteError):
    """The loss of a probe became non-finite; the message names the step and the members."""


@dataclass(frozen=True)
class OptimizationResult:
    params: PyTree  # final parameters, leading axis B
    losses: np.ndarray  # (steps, B) loss history (loss at the parameters *before* each step)
    aux: PyTree  # auxiliary outputs at the final parameters, leading axis B
    steps: int
    resumed_from: int  # step read from a checkpoint (0: fresh start)


def finite_guard(params: PyTree, fallback: PyTree) -> tuple[PyTree, jax.Array]:
    r"""(``params`` if all their entries are finite else ``fallback``, the flag). Inside ``jit``
    this keeps a non-finite parameter away from an adaptive solve (which would otherwise reject
    steps until ``max_steps``); multiply the loss by NaN where the flag is False.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.probe import finite_guard
        >>> p, ok = finite_guard(jnp.array([1.0, jnp.nan]), jnp.zeros(2))
        >>> p.tolist(), bool(ok)
        ([0.0, 0.0], False)
    """
    ok = jnp.all(jnp.asarray([jnp.all(jnp.isfinite(a)) for a in jax.tree_util.tree_leaves(params)]))
    safe = jax.tree_util.tree_map(lambda a, b: jnp.where(ok, a, b), params, fallback)
    return safe, ok


def _save(path: Path, step: int, state, losses: np.ndarray, fingerprint: str) -> None:
    leaves = jax.tree_util.tree_leaves(state)
    arrays = {f"leaf_{i}": np.asarray(a) for i, a in enumerate(leaves)}
    buf = io.BytesIO()
    np.savez(buf, step=np.int64(step), losses=losses, fingerprint=np.str_(fingerprint), **arrays)
    atomic_write_bytes(path, buf.getvalue())


def _load(path: Path, template, fingerprint: str):
    with np.load(path, allow_pickle=False) as data:
        if str(data["fingerprint"]) != fingerprint:
            raise InputError(
                f"checkpoint {path} belongs to a different probe configuration; use a new --out folder "
                "or delete the checkpoint to start again."
            )
        leaves, treedef = jax.tree_util.tree_flatten(template)
        loaded = [jnp.asarray(data[f"leaf_{i}"], dtype=jnp.asarray(t).dtype) for i, t in enumerate(leaves)]
        return int(data["step"]), jax.tree_util.tree_unflatten(treedef, loaded), np.asarray(data["losses"])


def optimize(
    loss_fn: Callable[..., tuple[jax.Array, PyTree]],
    params0: PyTree,
    data: PyTree,
    *,
    optimizer: optax.GradientTransformation,
    num_steps: int,
    checkpoint: str | Path | None = None,
    fingerprint: str = "",
    checkpoint_every: int = 25,
    progress: bool = True,
    desc: str = "probe",
    interrupt_after: int | None = None,
) -> OptimizationResult:
    r"""Minimise ``loss_fn(params_b, data_b) -> (loss, aux)`` for every member b (leading axis B
    of ``params0`` and ``data``) with ``optax.apply_if_finite(optimizer)``; resumable.

    ``interrupt_after`` (testing) raises ``KeyboardInterrupt`` after that many steps of this
    call, right after a checkpoint, as a kill would.

    Example:
        >>> import jax.numpy as jnp, optax
        >>> from attnflow.probe import optimize
        >>> res = optimize(lambda p, c: (jnp.sum((p - c) ** 2), p.sum()), jnp.zeros((2, 3)),
        ...                jnp.array([[1.0], [2.0]]), optimizer=optax.sgd(0.25), num_steps=40, progress=False)
        >>> res.params.round(6).tolist()
        [[1.0, 1.0, 1.0], [2.0, 2.0, 2.0]]
    """
    leaves = jax.tree_util.tree_leaves(params0)
    if not all(bool(np.all(np.isfinite(np.asarray(a)))) for a in leaves):
        raise InputError("the initial probe parameters contain NaN or inf; every entry must be finite.")
    if num_steps < 0 or checkpoint_every < 1:
        raise InputError(f"num_steps must be >= 0 and checkpoint_every >= 1, got {num_steps} and {checkpoint_every}.")
    opt = optax.apply_if_finite(optimizer, max_consecutive_errors=1_000_000)
    batch = int(np.shape(leaves[0])[0])

    def one_step(p, s, x):
        (loss, aux), g = jax.value_and_grad(loss_fn, has_aux=True)(p, x)
        updates, s = opt.update(g, s, p)
        return optax.apply_updates(p, updates), s, loss, aux

    def one_eval(p, x):
        return loss_fn(p, x)

    # A lax.map on CPU: each member's eig / eigh / solve runs inline (attnflow.linalg.loop_over_systems)
    batched = (lambda f, ax: map_over_batch(f, ax)) if lapack_needs_loop() else (lambda f, ax: jax.vmap(f, in_axes=ax))
    step_fn = jax.jit(batched(one_step, (0, 0, 0)))
    eval_fn = jax.jit(batched(one_eval, (0, 0)))
    init_fn = jax.vmap(opt.init)

    state = (params0, init_fn(params0))
    step, losses = 0, np.zeros((0, batch))
    path = None if checkpoint is None else Path(checkpoint)
    if path is not None and path.is_file():
        step, state, losses = _load(path, state, fingerprint)
    resumed_from = step

    from tqdm.auto import tqdm

    bar = tqdm(total=num_steps, initial=step, desc=desc, disable=not progress, leave=False)
    done_here = 0
    try:
        while step < num_steps:
            p, s = state
            p_new, s_new, loss, _ = step_fn(p, s, data)
            loss = np.asarray(loss)
            if not np.all(np.isfinite(loss)):
                bad = np.flatnonzero(~np.isfinite(loss)).tolist()
                if path is not None:
                    _save(path, step, state, losses, fingerprint)
                raise NonFiniteLossError(
                    f"{desc}: the loss became non-finite at step {step} for member(s) {bad}; stopped "
                    f"(the last finite state is{' saved in ' + str(path) if path else ' kept'}): lower "
                    "optimizer.learning_rate or shorten the time horizon."
                )
            state = (p_new, s_new)
            losses = np.concatenate([losses, loss[None]], axis=0)
            step += 1
            done_here += 1
            bar.update(1)
            if path is not None and (step % checkpoint_every == 0 or step == num_steps):
                _save(path, step, state, losses, fingerprint)
            if interrupt_after is not None and done_here >= interrupt_after:
                if path is not None:
                    _save(path, step, state, losses, fingerprint)
                raise KeyboardInterrupt(f"{desc}: interrupted after step {step} (testing)")
    finally:
        bar.close()
    params = state[0]
    _, aux = eval_fn(params, data)
    return OptimizationResult(params=params, losses=losses, aux=aux, steps=step, resumed_from=resumed_from)
