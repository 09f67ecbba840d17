r"""How a batch of independent systems is run: ``jax.vmap``, or a ``lax.map`` on XLA:CPU.

Batching is never inferred from an array's rank: callers name the batched inputs and this
module turns the names into ``in_axes``. On CPU, code with several independent batched
LAPACK calls runs one system at a time (see :func:`loop_over_systems`), and attention runs in
cache-sized groups of systems (see :func:`vmap_systems`).
"""

from __future__ import annotations

from typing import Any, Callable

import equinox as eqx
import jax
import jax.numpy as jnp

from . import _cache
from .kernels import held_scores
from ._weights import AttentionWeights
from .errors import InputError

__all__ = ["loop_over_systems", "map_over_batch", "lapack_needs_loop", "vmap_systems", "group_size", "vmap_build",
           "split_field", "field_batch_sizes"]


def loop_over_systems(fn: Callable) -> Callable:
    """``fn`` applied to batches of one system in a ``lax.map`` (same outputs as ``fn``, whose
    positional arguments are arrays with the systems on the leading axis).

    On XLA:CPU, use it around code with several *independent* batched LAPACK calls (e.g. eig of
    V and eigvalsh of Q^T K): the executor may start them at once on its intra-op pool, each
    then splits its batch over the same pool and waits, and with two cores both threads wait
    forever (seen with gdb: two ``jax::ParallelBatchMap`` in ``lapack_dgeev_ffi``). A batch of
    one runs inline, so a loop cannot deadlock.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow._batching import loop_over_systems
        >>> loop_over_systems(lambda a: a.sum(axis=-1))(jnp.ones((3, 2))).tolist()
        [2.0, 2.0, 2.0]
    """

    def member(*args):  # fn on a batch of one, batch axis dropped
        return jax.tree_util.tree_map(lambda a: a[0], fn(*(a[None] for a in args)))

    return lambda *arrays: map_over_batch(member, (0,) * len(arrays))(*arrays)


def map_over_batch(fn: Callable, in_axes: tuple, group: int = 1) -> Callable:
    """``jax.vmap(fn, in_axes=in_axes)`` computed as a ``lax.map``: ``fn`` (written for one
    member) runs once per member, in sequence, or vmapped over ``group`` members at a time
    (``lax.map(..., batch_size=group)``). ``in_axes`` holds 0 (batched on the leading axis) or
    None (shared) per positional argument. See :func:`loop_over_systems` for why.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow._batching import map_over_batch
        >>> map_over_batch(lambda a, b: a * b, (0, None))(jnp.arange(3.0), 2.0).tolist()
        [0.0, 2.0, 4.0]
    """

    def mapped(*args):
        batched = tuple(a for a, ax in zip(args, in_axes) if ax is not None)

        def one(members):
            it = iter(members)
            return fn(*(next(it) if ax is not None else a for a, ax in zip(args, in_axes)))

        return jax.lax.map(one, batched, batch_size=group if group > 1 else None)

    return mapped


def group_size(batch: int, n_tokens: int, itemsize: int = 4, matrices: int = 1, impl: str = "auto") -> int:
    """Systems per group for :func:`vmap_systems`: ``batch`` on accelerators; on CPU as many as
    keep their attention scores within :data:`attnflow._cache.GROUP_BYTES` (at least 1, at most ``batch``).

    One system's scores: ``matrices`` (heads, clouds, ...) x the block of an n x n score matrix that
    :func:`attnflow.kernels.held_scores` says ``attend`` holds at once for ``impl``.

    Example:
        >>> import jax
        >>> from attnflow._batching import group_size
        >>> jax.default_backend() != "cpu" or group_size(64, 256) == 16
        True
    """
    if jax.default_backend() != "cpu":
        return int(batch)
    rows, cols = held_scores(n_tokens, n_tokens, int(itemsize), impl)
    per_system = max(1, matrices * rows * cols * int(itemsize))
    return int(max(1, min(batch, _cache.GROUP_BYTES // per_system)))


def vmap_systems(fn: Callable, in_axes: int | tuple = 0, *, group: int | None = None, tokens: int | None = None,
                 itemsize: int | None = None, matrices: int = 1, impl: str = "auto") -> Callable:
    """``jax.vmap(fn, in_axes)`` over independent token systems, run in cache-sized groups on CPU.

    Same results as ``jax.vmap`` (to rounding); on XLA:CPU the batch runs as a ``lax.map``
    over groups of :func:`group_size` systems (from the first batched argument, taken as
    tokens (B, n, d), its dtype and the automatic attention path), each group vmapped; on
    GPU/TPU, or when one group holds the whole batch, it is ``jax.vmap``. A batch of one and groups of one
    run unbatched (a ``lax.map``: XLA:CPU ran some paths 4-6x slower vmapped over one member). ``group`` fixes the
    group size; ``tokens``, ``itemsize``, ``matrices`` and ``impl`` describe one system's
    attention for :func:`group_size` where the first batched argument is not its tokens.
    Traceable under jit, grad and vmap like ``jax.vmap``.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from attnflow import AttentionFlow, vmap_systems
        >>> from attnflow.integrate import solve_euler
        >>> flow = AttentionFlow(jnp.eye(2), jnp.eye(2), jnp.eye(2))
        >>> run = lambda x: solve_euler(flow, x, dt=0.1, num_steps=10, save_every=10).ys[-1]
        >>> x0 = jax.random.normal(jax.random.key(0), (6, 8, 2))
        >>> out = vmap_systems(run, group=4)(x0)
        >>> out.shape, bool(jnp.allclose(out, jax.vmap(run)(x0), atol=1e-6))
        ((6, 8, 2), True)
    """

    def batched(*args):
        axes = in_axes if isinstance(in_axes, tuple) else (in_axes,) * len(args)
        if len(axes) != len(args):
            raise InputError(f"in_axes has {len(axes)} entries for {len(args)} arguments.")
        if any(ax not in (0, None) for ax in axes):
            raise InputError(f"vmap_systems batches on the leading axis: in_axes entries must be 0 or None, got {axes}.")
        first = next((a for a, ax in zip(args, axes) if ax == 0), None)
        if first is None:
            return fn(*args)
        leaf = jax.tree_util.tree_leaves(first)[0]  # batched arguments may be pytrees (weights)
        shape = jnp.shape(leaf)
        size = group
        if size is None:
            n = tokens if tokens is not None else (shape[1] if len(shape) >= 3 else 1)
            size = group_size(shape[0], n, itemsize or jnp.dtype(leaf.dtype).itemsize, matrices, impl)
        if size >= shape[0] > 1:
            return jax.vmap(fn, in_axes=axes)(*args)
        # groups of one system (and a batch of one) run unbatched: a vmap over one member cost the sphere path 4-6x
        # the plain program on XLA:CPU (0.33 against 0.05-0.08 s a field at n = 20000, benchmarks/NOTES.md)
        return map_over_batch(fn, axes, int(size))(*args)

    return batched


def lapack_needs_loop() -> bool:
    """Whether batched LAPACK code should run through :func:`loop_over_systems` on the default
    backend: True on CPU (XLA:CPU's LAPACK kernels share its thread pool), False on GPU/TPU.

    Example:
        >>> import jax
        >>> from attnflow._batching import lapack_needs_loop
        >>> lapack_needs_loop() == (jax.default_backend() == "cpu")
        True
    """
    return jax.default_backend() == "cpu"


def vmap_build(build: Callable, in_axes: tuple, *args) -> tuple[Any, Any]:
    """``build(*args)`` for every member of a batch, built once under ``jax.vmap``: construction and
    validation see one member's shapes. Returns ``(batched, shared)``: the leaves of the built pytree
    that depend on a batched argument, stacked on a leading axis (None elsewhere), and those that do
    not, left unbatched (None elsewhere); ``eqx.combine(batched[i], shared)`` is member i's pytree.
    ``in_axes`` holds 0 (batched on the leading axis) or None (shared) per positional argument.

    A later ``jax.vmap`` over ``(batched, shared)`` with in_axes ``(0, None)`` then batches exactly
    the leaves that vary over the batch, as a vmap over the raw arguments did.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow._batching import vmap_build
        >>> batched, shared = vmap_build(lambda a, b: {"a": 2 * a, "b": b + 1}, (0, None), jnp.arange(3.0), 1.0)
        >>> batched["a"].tolist(), batched["b"], float(shared["b"]), shared["a"]
        ([0.0, 2.0, 4.0], None, 2.0, None)
    """
    if all(ax is None for ax in in_axes):
        return None, build(*args)
    spec = {}

    def member(*member_args):
        out = build(*member_args)
        inputs = jax.tree_util.tree_leaves([a for a, ax in zip(member_args, in_axes) if ax is not None])
        leaves, treedef = jax.tree_util.tree_flatten(out)
        # A leaf varies over the batch when it is a tracer of this vmap's trace (outer jit/vmap tracers
        # belong to others). JAX exposes no public test for this; where the tracer's trace cannot be
        # read, every array leaf is batched (the same values, at the cost of broadcast copies).
        this = getattr(inputs[0], "_trace", None)
        varies = [(getattr(leaf, "_trace", None) is this) if this is not None else eqx.is_array(leaf)
                  for leaf in leaves]
        spec.update(treedef=treedef, varies=varies, shared=[None if m else leaf for leaf, m in zip(leaves, varies)])
        return [leaf for leaf, m in zip(leaves, varies) if m]

    stacked = iter(jax.vmap(member, in_axes=in_axes)(*args))
    treedef, varies = spec["treedef"], spec["varies"]
    batched = jax.tree_util.tree_unflatten(treedef, [next(stacked) if m else None for m in varies])
    shared = jax.tree_util.tree_unflatten(treedef, spec["shared"])
    return batched, shared


def _leaf_name(path) -> str | None:
    """The attribute (or dict key) that holds a leaf: the last named key of its path."""
    for key in reversed(path):
        if isinstance(key, jax.tree_util.GetAttrKey):
            return key.name
        if isinstance(key, jax.tree_util.DictKey):
            return str(key.key)
    return None


def _selected(field, names: tuple[str, ...]) -> Any:
    """A pytree of bools like ``field``: True at the array leaves that ``names`` select ("field": all)."""
    every = "field" in names
    return jax.tree_util.tree_map_with_path(
        lambda path, leaf: eqx.is_array(leaf) and (every or _leaf_name(path) in names), field)


def _check_names(field, names: tuple[str, ...]) -> None:
    found = {_leaf_name(path) for path, leaf in jax.tree_util.tree_flatten_with_path(field)[0] if eqx.is_array(leaf)}
    missing = [n for n in names if n != "field" and n not in found]
    if missing:
        raise InputError(f"batch names {missing[0]!r}, but {type(field).__name__} has no array leaf of that name; "
                         f"name 'x0', 'field' (every array leaf) or one of its leaves {tuple(sorted(found - {None}))}.")


def _check_weight_ranks(field, names: tuple[str, ...]) -> None:
    """The batched leaves of every :class:`~attnflow.AttentionWeights` inside ``field`` have one axis more than one
    system's (Q, K, V: the named axes + 2; beta: the named axes; biases: + 1): a batch is never guessed."""
    every = "field" in names
    extra = {"Q": 2, "K": 2, "V": 2, "beta": 0, "q_bias": 1, "k_bias": 1, "v_bias": 1}
    is_weights = lambda m: isinstance(m, AttentionWeights)
    for w in (m for m in jax.tree_util.tree_leaves(field, is_leaf=is_weights) if is_weights(m)):
        for name, more in extra.items():
            leaf = getattr(w, name)
            if leaf is None or not (every or name in names):
                continue
            one = len(w.axes) + more
            if jnp.ndim(leaf) != one + 1:
                raise InputError(f"batch names {'field' if every else name!r}, so the field's {name} needs a leading "
                                 f"batch axis B before one system's {one} axes, got shape {jnp.shape(leaf)}; build the "
                                 "field under jax.vmap (or pass beta=(B,) for 'beta').")


def field_batch_sizes(field, names: tuple[str, ...]) -> dict[str, int]:
    """The batch size B of the leaves of ``field`` that ``names`` select (:func:`split_field`), by leaf name;
    an :class:`~attnflow.InputError` for a name that selects nothing or a selected leaf without a leading axis.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from attnflow import AttentionFlow
        >>> from attnflow._batching import field_batch_sizes
        >>> flows = jax.vmap(lambda b: AttentionFlow(jnp.eye(2), jnp.eye(2), jnp.eye(2), b))(jnp.ones(5))
        >>> field_batch_sizes(flows, ("beta",))
        {'beta': 5}
    """
    _check_names(field, names)
    _check_weight_ranks(field, names)
    sizes = {}
    chosen = _selected(field, names)
    for (path, leaf), take in zip(jax.tree_util.tree_flatten_with_path(field)[0], jax.tree_util.tree_leaves(chosen)):
        if not take:
            continue
        name = _leaf_name(path) or "field"
        if leaf.ndim == 0:
            raise InputError(f"batch names {name if name in names else 'field'!r}, so the field's leaf "
                             f"{jax.tree_util.keystr(path)} needs a leading batch axis B, but it is a scalar; build "
                             "the field under jax.vmap (or pass beta=(B,) for 'beta').")
        sizes.setdefault(name, leaf.shape[0])
        if sizes[name] != leaf.shape[0]:
            raise InputError(f"the field's batched leaves must share one batch size B, got {sizes[name]} and "
                             f"{leaf.shape[0]} ({jax.tree_util.keystr(path)}).")
    return sizes


def split_field(field, names: tuple[str, ...], values: dict | None = None) -> tuple[Any, Any]:
    r"""``(batched, shared)`` of a ready field for a batch over any of its array leaves, as :func:`vmap_build`
    returns them: ``eqx.combine(batched[i], shared)`` is member i's field.

    ``names`` selects the batched leaves: ``"field"`` every array leaf (a field built under ``jax.vmap``),
    else the leaves held by an attribute of that name (``"beta"``, ``"V"``, ``"W"``, ...), which carry a
    leading batch axis B. ``values`` replaces every leaf of a name by a batch (B,) broadcast to
    (B, \*leaf.shape) (``{"beta": betas}``: one temperature per member, whatever the field). With no names,
    ``(None, field)``: nothing is batched.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.dynamics import sphere_flow
        >>> from attnflow._batching import split_field
        >>> field = sphere_flow(jnp.eye(2), jnp.eye(2), jnp.eye(2), 1.0)
        >>> batched, shared = split_field(field, ("beta",), {"beta": jnp.array([0.5, 1.0, 2.0])})
        >>> batched.inner.weights.beta.tolist(), batched.inner.weights.Q, shared.inner.weights.beta
        ([0.5, 1.0, 2.0], None, None)
    """
    values = values or {}
    names = tuple(names) + tuple(n for n in values if n not in names)
    if not names:
        return None, field
    _check_names(field, names)

    def put(path, leaf):
        name = _leaf_name(path)
        if not (eqx.is_array(leaf) and name in values):
            return leaf
        batch = jnp.asarray(values[name], leaf.dtype)
        return jnp.broadcast_to(batch.reshape(batch.shape + (1,) * leaf.ndim), batch.shape + leaf.shape)

    field = jax.tree_util.tree_map_with_path(put, field)
    field_batch_sizes(field, names)
    return eqx.partition(field, _selected(field, names))
