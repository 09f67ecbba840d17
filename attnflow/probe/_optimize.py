r"""A resumable optax loop over a batch of independent problems, for the probes.

:func:`optimize` minimises :math:`L(\theta_b)` for every member b of a batch (its own
parameters and optimiser state, one jitted step for the whole batch), with

* a per-member ``optax.apply_if_finite``: a member whose loss or gradient is non-finite at
  some step is frozen there (its parameters and optimiser state are no longer updated) and
  flagged with that step (:attr:`OptimizationResult.failed_at`, reason from
  :func:`failure_reason`: at step 0 it is the start itself, e.g. data that overflow); the other
  members continue. Only when every member is frozen does the run stop, with
  :class:`NonFiniteLossError` naming each member's step (the state is checkpointed);
* a check that the initial parameters are finite (a NaN parameter would make an adaptive solve
  reject steps until ``max_steps`` silently);
* checkpoints of (step, parameters, optimiser state, loss history) written atomically every
  ``checkpoint_every`` steps and at the end, with their identity (file name, fingerprint) and a
  checksum, resumed when the same problem (fingerprint) is run again: an interrupted run
  continues bit for bit as if it had not been interrupted (a checkpoint that is unreadable,
  misplaced, changed or of another problem is set aside with a line on stderr, and the search
  starts again from step 0);
* a tqdm progress bar.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import PyTree

from ..errors import InputError, NonFiniteError
from .._batching import lapack_needs_loop, map_over_batch
from ..runs import count_kept, load_verified_npz, save_verified_npz, set_aside

__all__ = ["OptimizationResult", "NonFiniteLossError", "optimize", "finite_guard", "failure_reason"]


class NonFiniteLossError(NonFiniteError):
    """The loss of a probe became non-finite; the message names the step and the members."""


@dataclass(frozen=True)
class OptimizationResult:
    params: PyTree  # final parameters, leading axis B (a frozen member: where it was frozen)
    losses: np.ndarray  # (steps, B) loss history (loss at the parameters *before* each step; NaN once frozen)
    aux: PyTree  # auxiliary outputs at the final parameters, leading axis B
    steps: int
    resumed_from: int  # step read from a checkpoint (0: fresh start)
    failed_at: np.ndarray  # (B,) step at which each member's loss or gradient was non-finite; -1: finite throughout

    @property
    def finite(self) -> np.ndarray:
        """(B,) True for the members that stayed finite (the only ones to conclude from)."""
        return self.failed_at < 0


def failure_reason(step: int, num_steps: int) -> str:
    """Why a member frozen at ``step`` (of ``num_steps``) was frozen, in words.

    Example:
        >>> from attnflow.probe import failure_reason
        >>> failure_reason(0, 10)
        'non-finite at its start (step 0, before any update): its data or initial parameters give a non-finite loss or gradient (e.g. weights that overflow the flow)'
        >>> failure_reason(3, 10)
        'non-finite at step 3, after 3 update(s): the updates reached parameters where the loss or its gradient is not finite (a smaller learning rate or horizon may avoid it)'
    """
    if step == 0:
        return ("non-finite at its start (step 0, before any update): its data or initial parameters give a "
                "non-finite loss or gradient (e.g. weights that overflow the flow)")
    where = f"at the final parameters, after all {num_steps}" if step >= num_steps else f"at step {step}, after {step}"
    return (f"non-finite {where} update(s): the updates reached parameters where the loss or its gradient is not "
            "finite (a smaller learning rate or horizon may avoid it)")


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
    ok = _all_finite(params)
    safe = jax.tree_util.tree_map(lambda a, b: jnp.where(ok, a, b), params, fallback)
    return safe, ok


def _all_finite(tree: PyTree) -> jax.Array:
    """One boolean: every entry of every leaf is finite."""
    return jnp.all(jnp.asarray([jnp.all(jnp.isfinite(a)) for a in jax.tree_util.tree_leaves(tree)]))


def _all_frozen_message(desc: str, failed_at: np.ndarray, num_steps: int, path: Path | None) -> str:
    """One sentence for a run in which every member was frozen, right for the step of each."""
    groups: dict[int, list[int]] = {}
    for b, step in enumerate(failed_at.tolist()):
        groups.setdefault(int(step), []).append(b)
    parts = "; ".join(f"member(s) {m} {failure_reason(k, num_steps)}" for k, m in sorted(groups.items()))
    saved = f" (the state is saved in {path})" if path is not None else ""
    return f"{desc}: every member's loss or gradient is non-finite, so nothing is left to optimise{saved}: {parts}."


def _identity(path: Path, fingerprint: str) -> dict:
    """A checkpoint's identity: its search (the file's name) and the problem's fingerprint."""
    return {"kind": "probe checkpoint", "name": path.stem, "fingerprint": fingerprint}


def _save(path: Path, step: int, state, losses: np.ndarray, fingerprint: str) -> None:
    leaves = jax.tree_util.tree_leaves(state)
    arrays = {f"leaf_{i}": np.asarray(a) for i, a in enumerate(leaves)}
    save_verified_npz(path, {"step": np.int64(step), "losses": losses, **arrays}, _identity(path, fingerprint))


def _load(path: Path, template, fingerprint: str):
    """(step, state, losses) of the verified checkpoint in ``path``; None when there is none
    (one that cannot be used is set aside)."""
    then = "starting this search from step 0"
    data = load_verified_npz(path, _identity(path, fingerprint), then=then)
    if data is None:
        return None
    leaves, treedef = jax.tree_util.tree_flatten(template)
    names = [f"leaf_{i}" for i in range(len(leaves))]
    if set(data) != {"step", "losses", *names} or any(data[k].shape != np.shape(t) for k, t in zip(names, leaves)):
        set_aside(path, "a state of other shapes than this search's", then)
        return None
    loaded = [jnp.asarray(data[k], dtype=jnp.asarray(t).dtype) for k, t in zip(names, leaves)]
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
    of ``params0`` and ``data``) with ``optimizer``, masked per member (a member whose loss or
    gradient is non-finite is frozen and flagged in ``failed_at``); resumable.

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
    batch = int(np.shape(leaves[0])[0])

    def one_step(p, s, alive, x):
        # apply_if_finite, per member: a member whose loss or gradient is non-finite keeps its state
        (loss, _), g = jax.value_and_grad(loss_fn, has_aux=True)(p, x)
        finite = jnp.isfinite(loss) & _all_finite(g)
        updates, s_new = optimizer.update(g, s, p)
        keep = finite & alive
        p_new = jax.tree_util.tree_map(lambda a, b: jnp.where(keep, a, b), optax.apply_updates(p, updates), p)
        s_new = jax.tree_util.tree_map(lambda a, b: jnp.where(keep, a, b), s_new, s)
        return p_new, s_new, loss, finite

    def one_eval(p, x):
        return loss_fn(p, x)

    # A lax.map on CPU: each member's eig / eigh / solve runs inline (attnflow._batching.loop_over_systems)
    batched = (lambda f, ax: map_over_batch(f, ax)) if lapack_needs_loop() else (lambda f, ax: jax.vmap(f, in_axes=ax))
    step_fn = jax.jit(batched(one_step, (0, 0, 0, 0)))
    eval_fn = jax.jit(batched(one_eval, (0, 0)))
    init_fn = jax.vmap(optimizer.init)

    # (parameters, optimiser state, step at which each member was frozen; -1: not frozen)
    state = (params0, init_fn(params0), np.full(batch, -1, np.int64))
    step, losses = 0, np.zeros((0, batch))
    path = None if checkpoint is None else Path(checkpoint)
    loaded = None if path is None else _load(path, state, fingerprint)
    if loaded is not None:
        step, state, losses = loaded
    resumed_from = step

    from tqdm.auto import tqdm

    bar = tqdm(total=num_steps, initial=step, desc=desc, disable=not progress, leave=False)
    kept = count_kept(num_steps, f"optimiser steps of {desc}", kept=step if path is not None else 0,
                      resumes=path is not None)
    done_here = 0
    try:
        while step < num_steps:
            p, s, failed_at = state
            failed_at = np.asarray(failed_at, np.int64)
            alive = failed_at < 0
            p_new, s_new, loss, finite = step_fn(p, s, jnp.asarray(alive), data)
            loss = np.where(alive, np.asarray(loss), np.nan)
            failed_at = np.where(alive & ~np.asarray(finite), step, failed_at)
            if np.all(failed_at >= 0):
                state = (p, s, failed_at)
                if path is not None:
                    _save(path, step, state, losses, fingerprint)
                raise NonFiniteLossError(_all_frozen_message(desc, failed_at, num_steps, path))
            state = (p_new, s_new, failed_at)
            losses = np.concatenate([losses, loss[None]], axis=0)
            step += 1
            done_here += 1
            bar.update(1)
            if path is not None and (step % checkpoint_every == 0 or step == num_steps):
                _save(path, step, state, losses, fingerprint)
                kept.kept = step
            elif path is None:
                kept.kept = step
            if interrupt_after is not None and done_here >= interrupt_after:
                if path is not None:
                    _save(path, step, state, losses, fingerprint)
                raise KeyboardInterrupt(f"{desc}: interrupted after step {step} (testing)")
    finally:
        bar.close()
    params, failed_at = state[0], np.asarray(state[2], np.int64)
    final_loss, aux = eval_fn(params, data)
    # the last update is judged too: a member whose final loss is non-finite is frozen at num_steps
    failed_at = np.where((failed_at < 0) & ~np.isfinite(np.asarray(final_loss)), step, failed_at)
    if np.all(failed_at >= 0):
        raise NonFiniteLossError(_all_frozen_message(desc, failed_at, num_steps, None))
    if np.any(failed_at >= 0):
        warnings.warn(f"{desc}: member(s) {np.flatnonzero(failed_at >= 0).tolist()} of {batch} were frozen at a "
                      "non-finite loss or gradient (OptimizationResult.failed_at holds the steps); the others ran "
                      "to the end.", RuntimeWarning, stacklevel=2)
    return OptimizationResult(params=params, losses=losses, aux=aux, steps=step, resumed_from=resumed_from,
                              failed_at=failed_at)
