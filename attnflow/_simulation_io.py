r"""The result of :func:`attnflow.simulate` and its storage: :class:`Simulation`, :meth:`Simulation.save`, :func:`load`.

A saved simulation is one ``.npz`` file: every array of the :class:`Simulation` under its own key
and a JSON description (picture, method, dtypes, shapes, the structure of a ``save_fn`` pytree) under
:data:`_META_KEY`, written atomically and read back without pickle.
"""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int, PyTree

from .errors import InputError

__all__ = ["Simulation", "load"]

#: the .npz key of a saved simulation's metadata (JSON text)
_META_KEY = "__attnflow_simulation__"
#: the array fields of a Simulation, in order
_ARRAY_FIELDS = ("ts", "states", "tokens", "attention", "num_steps", "result", "t_nonfinite")


class Simulation(eqx.Module):
    """Result of :func:`simulate`: a leading batch axis B on every per-system array when batched.

    All systems of a batch share their save times, so ``ts`` is (T,) with or without a batch
    (``pcolormesh(sim.ts, ...)`` or ``plot(sim.ts, sim.states[b, :, i, 0])`` fit either way).

    Attributes:
        ts: (T,) save times (layers ``t0 + k dt`` for the Euler stepper), shared by the batch.
        states: (T, n, d) or (B, T, n, d) states in the requested picture (x for ``"raw"``, z for
            ``"rescaled"``), or the pytree returned by ``save_fn``.
        tokens: (T, n, d) or (B, T, n, d) raw tokens x (equal to ``states`` in the raw picture;
            ``None`` when ``save_fn`` was used).
        attention: (T, n, n) or (B, T, n, n) attention matrices P when ``return_attention=True``
            ((T, H, n, n) with H heads).
        num_steps: steps (layers) taken, () or (B,).
        result: a code of :class:`attnflow.integrate.RESULTS` (``successful`` = 0, ``solver_stopped`` = 1:
            stopped before t1, ``nonfinite`` = 2: non-finite state), () or (B,).
        t_nonfinite: where the solution stops being finite (inf if never; the end of the step
            at which it blew up, or where the solver stopped: ``Trajectory.t_nonfinite``), () or (B,).
        picture, method: what was run.

    :meth:`save` writes a simulation to one ``.npz`` file and :func:`attnflow.load` reads it back.
    """

    ts: Float[Array, "T"]
    states: PyTree
    tokens: Float[Array, "*B T n d"] | None
    attention: Float[Array, "*B T n n"] | None
    num_steps: Array
    result: Int[Array, "*B"]
    t_nonfinite: Float[Array, "*B"]
    picture: str = eqx.field(static=True)
    method: str = eqx.field(static=True)

    def save(self, path) -> None:
        """Write this simulation to one ``.npz`` file (arrays and JSON metadata; no pickle).

        Every array keeps its dtype and shape; ``states`` may be the dict / tuple / list pytree of
        a ``save_fn``. The file is written atomically (a temporary file, then a rename), so an
        interrupted save never leaves a half-written file. Read it back with :func:`attnflow.load`.

        Args:
            path: the file to write (``.npz`` is the usual suffix; NumPy reads it with
                ``np.load(path, allow_pickle=False)``).

        Example:
            >>> import tempfile, pathlib, numpy as np, attnflow
            >>> sim = attnflow.simulate(np.eye(3, 2), np.eye(2), np.eye(2), np.eye(2), t1=1.0, num_saves=3)
            >>> path = pathlib.Path(tempfile.mkdtemp()) / "run.npz"
            >>> sim.save(path)
            >>> back = attnflow.load(path)
            >>> back.states.shape, back.ts.dtype, back.picture, bool((back.states == sim.states).all())
            ((3, 3, 2), dtype('float32'), 'raw', True)
        """
        import io
        import json

        from .runio import atomic_write_bytes

        arrays, fields = {}, {}
        for name in _ARRAY_FIELDS:
            fields[name] = _encode_tree(getattr(self, name), name, arrays)
        meta = {"format": "attnflow.Simulation", "format_version": 1, "attnflow_version": _version(),
                "picture": self.picture, "method": self.method, "fields": fields}
        arrays[_META_KEY] = np.array(json.dumps(meta))
        buf = io.BytesIO()
        np.savez(buf, **arrays)
        atomic_write_bytes(path, buf.getvalue())


def load(path) -> Simulation:
    """Read a :class:`Simulation` written by :meth:`Simulation.save` (no pickle is involved).

    The result equals the saved simulation: the same arrays (dtypes, shapes, values), the same
    ``states`` pytree, picture and method. Arrays come back as JAX arrays; float64 arrays
    outside JAX's float64 mode (``jax.enable_x64``) come back as NumPy float64 arrays, since
    JAX would make them float32.

    Args:
        path: a file written by :meth:`Simulation.save`.

    Raises:
        InputError: the file is missing, or is not a simulation saved by attnflow.

    Example:
        >>> import tempfile, pathlib, numpy as np, attnflow
        >>> sim = attnflow.simulate(np.eye(4, 2)[None].repeat(2, 0), np.eye(2), np.eye(2), np.eye(2), t1=1.0,
        ...                         num_saves=5, batch="x0", return_attention=True)
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "batch.npz"
        >>> sim.save(path)
        >>> back = attnflow.load(path)
        >>> back.ts.shape, back.states.shape, back.attention.shape
        ((5,), (2, 5, 4, 2), (2, 5, 4, 4))
    """
    import json
    import os
    import zipfile

    if not os.path.isfile(path):
        raise InputError(f"{path} does not exist (or is not a file); give a file written by Simulation.save.")
    not_ours = f"{path} is not an attnflow simulation (write one with Simulation.save)"
    from .runio import npz_problem

    problem = npz_problem(path)  # numpy would read a text file as a pickle, an empty one not at all
    if problem is not None:
        raise InputError(f"{not_ours}: {problem}.")
    try:
        data = np.load(path, allow_pickle=False)
        if not isinstance(data, np.lib.npyio.NpzFile):
            raise InputError(f"{not_ours}: it is a single NumPy array, not an .npz archive.")
        with data:
            if _META_KEY not in data.files:
                raise InputError(f"{not_ours}: it holds no attnflow metadata.")
            meta = json.loads(str(data[_META_KEY][()]))
            if meta.get("format") != "attnflow.Simulation":
                raise InputError(f"{not_ours}: its metadata names the format {meta.get('format')!r}.")
            if meta.get("format_version", 0) > 1:
                raise InputError(f"{path} was saved by a newer attnflow ({meta.get('attnflow_version')}, file "
                                 f"format {meta['format_version']}); update attnflow to read it.")
            arrays = {k: data[k] for k in data.files if k != _META_KEY}
    except InputError:
        raise
    except (OSError, EOFError, ValueError, zipfile.BadZipFile, json.JSONDecodeError, KeyError) as err:
        raise InputError(f"{not_ours}: {err}") from None
    try:
        fields = {name: _decode_tree(meta["fields"][name], arrays) for name in _ARRAY_FIELDS}
        return Simulation(**fields, picture=str(meta["picture"]), method=str(meta["method"]))
    except (KeyError, TypeError, ValueError) as err:
        raise InputError(f"{not_ours}: its metadata does not match its arrays ({err}).") from None


def _version() -> str:
    from . import __version__

    return __version__


def _encode_tree(tree, where: str, arrays: dict) -> Any:
    """JSON description of ``tree`` (None, an array, or dict / tuple / list of them); arrays go to ``arrays``."""
    if tree is None:
        return None
    if isinstance(tree, dict):
        if not all(isinstance(k, str) for k in tree):
            raise InputError(f"Simulation.save stores dicts with string keys only; {where} has keys {list(tree)}.")
        return {"dict": {k: _encode_tree(val, f"{where}[{k!r}]", arrays) for k, val in tree.items()}}
    if type(tree) in (tuple, list):
        kind = type(tree).__name__
        return {kind: [_encode_tree(val, f"{where}[{i}]", arrays) for i, val in enumerate(tree)]}
    if isinstance(tree, (jax.Array, np.ndarray, np.generic, int, float, bool, complex)):
        a = np.asarray(tree)
        if a.dtype.kind not in "biufc":
            raise InputError(f"Simulation.save stores numeric arrays only; {where} has dtype {a.dtype}.")
        key = f"array_{len(arrays)}"
        arrays[key] = a
        return {"array": key, "dtype": a.dtype.str, "shape": list(a.shape)}
    raise InputError(f"Simulation.save cannot store {where} of type {type(tree).__name__}: save_fn outputs must be "
                     "arrays or dicts (string keys), tuples and lists of them.")


def _decode_tree(spec, arrays: dict):
    """Inverse of :func:`_encode_tree`."""
    if spec is None:
        return None
    if "dict" in spec:
        return {k: _decode_tree(val, arrays) for k, val in spec["dict"].items()}
    if "tuple" in spec:
        return tuple(_decode_tree(val, arrays) for val in spec["tuple"])
    if "list" in spec:
        return [_decode_tree(val, arrays) for val in spec["list"]]
    a = arrays[spec["array"]]
    if a.dtype.str != spec["dtype"] or list(a.shape) != spec["shape"]:
        raise ValueError(f"array {spec['array']} is {a.dtype.str} {list(a.shape)}, the metadata says "
                         f"{spec['dtype']} {spec['shape']}")
    j = jnp.asarray(a)
    return j if j.dtype == a.dtype else a
