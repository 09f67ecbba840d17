"""The unit store: load the verified unit, or compute it and save it.

A job that keeps its work as it goes (sweep chunks, mean-field units, tracked sentences) stores each
unit as ``<folder>/<name>.npz`` with its identity (``kind``, ``name``, the run's ``fingerprint`` and any
other field the caller gives) and a checksum (:func:`attnflow.runs.save_verified_npz`). A stored unit
that is unreadable, misplaced or changed is set aside and computed again. The processes of a multi-process
run share the folder: :func:`wait_for_units` waits for the units the other processes store there.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np

from ._verified import load_verified_npz, save_verified_npz

__all__ = ["UnitStore", "wait_for_units"]


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


def wait_for_units(store: UnitStore, names, *, process_index: int = 0, process_count: int = 1, what: str = "unit",
                   poll_s: float = 2.0, timeout_s: float | None = None) -> int:
    """Wait until every unit of ``names`` has its file in ``store``'s folder, where the other processes of a
    multi-process run store them; return how many were missing when the wait began.

    The files are only looked for, not read: the caller loads them verified (:meth:`UnitStore.load`), so a unit
    that turns out damaged is set aside and computed again there. When some are missing, one line on stderr says
    so ("process 0: waiting for 3 unit(s) of the other 1 process(es) in ..."); the wait has no end unless
    ``timeout_s`` is given (the other processes may compute for hours), after which it raises
    :class:`attnflow.errors.InputError` naming the units still missing.

    Example:
        >>> import tempfile, pathlib
        >>> import numpy as np
        >>> from attnflow.runs import UnitStore, wait_for_units
        >>> store = UnitStore(pathlib.Path(tempfile.mkdtemp()) / "units", "demo-unit", "f1")
        >>> _ = store.save("a", {"x": np.arange(3)})
        >>> wait_for_units(store, ["a"])  # stored already: no wait
        0
        >>> wait_for_units(store, ["a", "b"], process_count=2, poll_s=0.01, timeout_s=0.05)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        attnflow.errors.InputError: process 0 waited 0.05 s for 1 unit(s) of the other 1 process(es) in ... (b); ...
    """
    import os
    import sys
    import time

    from ..errors import InputError

    names = list(names)
    start = time.monotonic()
    first = None
    while True:
        missing = [name for name in names if not os.path.lexists(store.path(name))]
        if first is None:
            first = len(missing)
            if missing:
                print(f"process {process_index}: waiting for {len(missing)} {what}(s) of the other "
                      f"{process_count - 1} process(es) in {store.folder}", file=sys.stderr, flush=True)
        if not missing:
            return first
        if timeout_s is not None and time.monotonic() - start >= timeout_s:
            shown = ", ".join(missing[:5]) + (", ..." if len(missing) > 5 else "")
            raise InputError(f"process {process_index} waited {timeout_s:g} s for {len(missing)} {what}(s) of the "
                             f"other {process_count - 1} process(es) in {store.folder} ({shown}); check that every "
                             "process was started with the same config, --out and --num-processes.")
        time.sleep(poll_s)
