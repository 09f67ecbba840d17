"""The CPU cache budget shared by the batching of systems and the tiled attention kernel.

A leaf: it imports nothing from attnflow, so both :mod:`attnflow._batching` and
:func:`attnflow.kernels.tiled_logsumexp` read it without importing each other. Read it at call time
(``_cache.GROUP_BYTES``), so that a changed value reaches every user.
"""

__all__ = ["GROUP_BYTES"]

#: on XLA:CPU a batch of systems runs as a ``lax.map`` over groups whose attention scores take
#: about this many bytes together (a vmap over the whole batch streams B score matrices through
#: memory between fusions), and the tiled kernel processes as many tiles at once as fit in it.
#: 4 MiB keeps a group's scores in cache on a 2-core CPU (measurements: benchmarks/NOTES.md section 9).
GROUP_BYTES = 4 * 2**20
