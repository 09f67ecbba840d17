"""The unit store: load the verified unit, or compute it and save it.

A job that keeps its work as it goes (sweep chunks, mean-field units, tracked sentences) stores each
unit as ``<folder>/<name>.npz`` with its identity (``kind``, ``name``, the run's ``fingerprint`` and any
other field the caller gives) and a checksum (:func:`attnflow.runs.save_verified_npz`). A stored unit
that is unreadable, misplaced or changed is set aside and computed again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np

from ._verified import load_verified_npz, save_verified_npz

__all__ = ["UnitStore"]


class UnitStore:
    """The verified units of ``kind`` in ``folder`` (created when missing), of the run ``fingerprint``.

    ``then`` says what happens to a unit that cannot be used (the line on stderr: "recomputing it");
    ``compress`` deflates the arrays that shrink (:func:`attnflow.runs.save_verified_npz`); ``on_store(name)``
    is called after each unit is saved (a progress bar, the count of kept work). ``computed`` and
    ``resumed`` count the units :meth:`get` computed and found.

    Example:
        >>> import tempfile, pathlib
        >>> import numpy as np
        >>> from attnflow.runs import UnitStore
        >>> store = UnitStore(pathlib.Path(tempfile.mkdtemp()) / "units", "demo-unit", "f1")
        >>> store.get("a", lambda: {"x": np.arange(3)})["x"].tolist()
        [0, 1, 2]
        >>> store.get("a", lambda: {"x": np.zeros(3)})["x"].tolist()  # found: not computed again
        [0, 1, 2]
        >>> store.computed, store.resumed
        (1, 1)
    """

    def __init__(self, folder: Path, kind: str, fingerprint: str | None, *, then: str = "recomputing it",
                 compress: bool = False, on_store: Callable[[str], None] | None = None):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.kind, self.fingerprint, self.then, self.compress = kind, fingerprint, then, compress
        self.on_store = on_store
        self.computed = 0
        self.resumed = 0

    def path(self, name: str) -> Path:
        """The file of the unit ``name``."""
        return self.folder / f"{name}.npz"

    def identity(self, name: str, **extra) -> dict:
        """What the file of the unit ``name`` must say it holds."""
        return {"kind": self.kind, "name": name, **extra, "fingerprint": self.fingerprint}

    def load(self, name: str, **extra) -> dict | None:
        """The stored unit ``name`` when it verifies; None when absent (or set aside: unusable)."""
        return load_verified_npz(self.path(name), self.identity(name, **extra), then=self.then)

    def save(self, name: str, arrays: dict, **extra) -> dict:
        """Store ``arrays`` as the unit ``name`` (atomically, verified); returns them as NumPy arrays."""
        arrays = {k: np.asarray(v) for k, v in arrays.items()}
        save_verified_npz(self.path(name), arrays, self.identity(name, **extra), compress=self.compress)
        if self.on_store is not None:
            self.on_store(name)
        return arrays

    def get(self, name: str, compute: Callable[[], dict], **extra) -> dict:
        """The unit ``name``: loaded when stored and verified, else ``compute()``-d and saved."""
        found = self.load(name, **extra)
        if found is not None:
            self.resumed += 1
            return found
        arrays = self.save(name, compute(), **extra)
        self.computed += 1
        return arrays
