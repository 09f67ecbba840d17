"""The device mesh of a chunked run and the sharded (shard_map) execution of a chunk."""

from __future__ import annotations

from typing import Callable

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from ..errors import InputError

__all__ = ["make_mesh", "needs_per_system_loop", "check_eig_route", "callback_mesh", "sharded"]


def make_mesh(num_devices: int = 0) -> Mesh:
    """A 1-d mesh ``("batch",)`` over the first ``num_devices`` local devices (0: all).

    Example:
        >>> from attnflow.runs import make_mesh
        >>> make_mesh(1).shape["batch"]
        1
    """
    devs = jax.local_devices()
    if num_devices < 0 or num_devices > len(devs):
        raise InputError(f"run.devices must be between 0 (all) and {len(devs)} (local devices), got {num_devices}.")
    devs = devs[: num_devices or len(devs)]
    return Mesh(np.array(devs), ("batch",))


def needs_per_system_loop(mesh: Mesh) -> bool:
    """Whether each device should loop over its systems (``lax.map``) instead of vmapping.

    True on a CPU mesh of several devices. There, XLA:CPU may run a batched LAPACK custom call
    (eig, svd, eigh, getrf ... of a vmapped batch) as the continuation of a matmul on an
    intra-op pool thread; the LAPACK kernel then splits its batch over that same pool and waits
    for it, and when the pool's threads are all taken (2 cores, 2 devices) the wait never ends
    (seen with gdb: ``jax::ParallelBatchMap`` blocked in ``lapack_dsyevd_ffi``). A batch of one
    runs inline, so looping over systems avoids the deadlock; on a CPU it costs nothing, since
    the devices already occupy the cores. Accelerators keep the vmap.

    Example:
        >>> from attnflow.runs import make_mesh, needs_per_system_loop
        >>> needs_per_system_loop(make_mesh(1))
        False
    """
    devices = mesh.devices.ravel()
    return len(devices) > 1 and all(d.platform == "cpu" for d in devices)


def check_eig_route(route: str, mesh: Mesh) -> None:
    """Refuse the ``"host"`` eig route (a NumPy callback inside the sharded function) on a mesh of
    several CPU devices: the callback waits for its argument on the same XLA:CPU thread pool
    that is busy running the devices, and the sweep hangs (seen with gdb on 2 cores).

    Example:
        >>> from attnflow.runs import check_eig_route, make_mesh
        >>> check_eig_route("host", make_mesh(1))  # one device: fine
    """
    if route == "host" and needs_per_system_loop(mesh):
        raise InputError(
            f"run.eig_route = 'host' cannot run on {mesh.shape['batch']} CPU devices (the NumPy callback "
            "deadlocks XLA:CPU's thread pool); use 'auto' / 'device' (LAPACK), 'cpu', or run.devices = 1.")


def callback_mesh(mesh: Mesh) -> Mesh:
    """The mesh a program that calls back to the host runs on: ``mesh`` itself, except on several CPU devices,
    where its first device alone. There a callback waits for its argument (JAX puts it on CPU device 0) on the
    thread pool that runs the devices, and the program never ends (the phase job hung at n = 10^4 on two devices:
    every thread asleep; the same pool as :func:`check_eig_route`'s deadlock).

    Example:
        >>> from attnflow.runs import callback_mesh, make_mesh
        >>> callback_mesh(make_mesh(1)).shape["batch"]
        1
    """
    return Mesh(mesh.devices.ravel()[:1], ("batch",)) if needs_per_system_loop(mesh) else mesh


def sharded(fn: Callable, mesh: Mesh, *, per_system_loop: bool | None = None, keep: str | None = None) -> Callable:
    """Wrap a batched ``fn(*arrays) -> pytree`` (leading axis = systems) so that the batch is
    split over ``mesh`` with ``shard_map``; pads to a multiple of the device count.

    ``per_system_loop`` (default: :func:`needs_per_system_loop`) makes each device call ``fn``
    on one system at a time (``lax.map`` over batches of one) instead of on its whole shard.
    ``fn`` must treat systems independently (every sweep function does), so the results are
    the same either way.

    ``call(*arrays, into=tree)`` writes the results into NumPy arrays of the caller's (a pytree
    like the output, leading axis = systems) straight from each device's buffer, and returns
    them: one copy of the results, instead of a gathered array and a second copy to the caller's.

    ``keep``: the program's name in the ``attnflow`` command's program store
    (:func:`attnflow.runs._programs.kept_jit`: everything ``fn``'s Python code reads to build it), so that a
    later run of the command reads the traced program back instead of tracing ``fn`` again; None (default):
    traced in every process.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.runs import make_mesh, sharded
        >>> f = sharded(lambda a: {"sq": a ** 2}, make_mesh())
        >>> f(jnp.arange(5.0))["sq"].tolist()
        [0.0, 1.0, 4.0, 9.0, 16.0]
        >>> import numpy as np
        >>> mine = {"sq": np.zeros(5, np.float32)}
        >>> f(jnp.arange(5.0), into=mine)["sq"] is mine["sq"], mine["sq"].tolist()
        (True, [0.0, 1.0, 4.0, 9.0, 16.0])
    """
    ndev = mesh.shape["batch"]
    if per_system_loop is None:
        per_system_loop = needs_per_system_loop(mesh)
    if per_system_loop:
        from .._batching import loop_over_systems  # (equinox: imported only where a program needs it)

        body = loop_over_systems(fn)
    else:
        body = fn
    inner = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("batch"), out_specs=P("batch"), check_vma=False))
    from ._programs import kept_jit

    split = NamedSharding(mesh, P("batch"))
    program = kept_jit(inner, None if keep is None else f"sharded|{keep}|{per_system_loop}|{mesh.devices.tolist()}",
                       in_shardings=split, out_shardings=split)

    def padding(arrays) -> int:  # systems added so that every device gets as many
        return -np.shape(arrays[0])[0] % ndev

    def call(*arrays, into=None):
        b = np.shape(arrays[0])[0]
        pad = padding(arrays)
        if pad:
            arrays = tuple(np.concatenate([np.asarray(a), np.repeat(np.asarray(a)[-1:], pad, axis=0)]) for a in arrays)
        out = program(*arrays)
        if into is None:
            return jax.tree_util.tree_map(lambda a: np.asarray(a)[:b], out)
        return jax.tree_util.tree_map(lambda a, dest: _gather_into(a, dest, b), out, into)

    def precompile(*arrays, on_lowered: Callable[[], None] | None = None) -> None:
        """Compile the program ``call`` would run on arrays of these shapes and dtypes (arrays or
        ``jax.ShapeDtypeStruct``), ahead of the call, which then finds it compiled. ``on_lowered()`` is called
        once the program is traced and lowered, as XLA's compile (which releases Python's lock) begins."""
        pad = padding(arrays)
        program.precompile(*(jax.ShapeDtypeStruct((a.shape[0] + pad, *a.shape[1:]), a.dtype) for a in arrays),
                           on_lowered=on_lowered)

    call.precompile = precompile
    return call


def _gather_into(a: jax.Array, dest: np.ndarray, b: int) -> np.ndarray:
    """Copy the first ``b`` rows of the sharded array ``a`` into ``dest`` (shape (b, ...)), shard by shard
    (a shard on a CPU device is read without a copy)."""
    if dest.shape != (b, *a.shape[1:]):
        raise InputError(f"the output array to fill has shape {dest.shape}; it must have the chunk's shape "
                         f"{(b, *a.shape[1:])}.")
    for shard in a.addressable_shards:
        rows = shard.index[0] if shard.index else slice(None)
        start, stop, _ = rows.indices(a.shape[0])
        stop = min(stop, b)
        if stop > start:
            dest[start:stop] = np.asarray(shard.data)[:stop - start]
    return dest
