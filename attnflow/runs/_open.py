"""Opening a run: claim and lock its folder, check its fingerprint, write its marker, config and provenance."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError
from ._atomic import atomic_write_json
from ._fingerprint import fingerprint as _fingerprint
from ._folder import MARKER, claim_output_dir, read_marker, write_marker
from ._provenance import provenance

__all__ = ["Run", "open_run", "table_of"]

#: how long process i > 0 of a multi-process run waits for process 0 to create the run folder
WAIT_FOR_PROCESS_0_S = 600


def table_of(config: Any) -> dict:
    """The config table a run is fingerprinted by: ``config`` itself (a dict), or the table a parsed config
    came from (its ``as_dict()``).

    Example:
        >>> from attnflow.runs import table_of
        >>> table_of({"seed": 0})
        {'seed': 0}
    """
    if isinstance(config, dict):
        return config
    return config.as_dict()


@dataclass(frozen=True)
class Run:
    """An opened run folder: ``out``, the run's ``kind`` and ``fingerprint``, whether it ``resumed`` a
    previous run of the same config, and the ``process`` that opened it (0: the one that writes results).

    Example:
        >>> import tempfile, pathlib
        >>> from attnflow.runs import open_run, read_marker
        >>> run = open_run(pathlib.Path(tempfile.mkdtemp()) / "run", "demo", {"seed": 0}, marker={"complete": False})
        >>> run.mark(complete=True)
        >>> read_marker(run.out)["complete"], run.write_provenance()["config_fingerprint"] == run.fingerprint
        (True, True)
    """

    out: Path
    kind: str
    fingerprint: str
    resumed: bool
    process: int = 0
    seed: int | None = None

    def mark(self, **extra) -> None:
        """Rewrite the marker with the fingerprint and ``extra`` fields (e.g. ``complete=True``)."""
        write_marker(self.out, self.kind, {"fingerprint": self.fingerprint, **extra})

    def write_provenance(self) -> dict:
        """Write ``provenance.json`` (now) and return it."""
        prov = provenance(self.seed, fingerprint=self.fingerprint)
        atomic_write_json(self.out / "provenance.json", prov)
        return prov


def open_run(out: str | Path, kind: str, config: Any, *, process: int = 0, seed: int | None = None,
             identity: dict | None = None, record: dict | None = None, marker: dict | None = None,
             replaces: bool = False) -> Run:
    """Claim ``out`` for a run of ``kind`` (:func:`attnflow.runs.claim_output_dir`: refused when foreign,
    unwritable, full or in use; locked) and return the opened :class:`Run`.

    The run's fingerprint is :func:`attnflow.runs.fingerprint` of the config table (``config``, or the
    table a parsed config came from) with ``identity`` (what the run reads besides the config, such as the
    checksum of a weights file; by default a parsed config's own ``identity``) added. A folder that holds a run of another fingerprint is refused; one of
    the same fingerprint is resumed. Process 0 writes the marker (the fingerprint and ``marker``'s fields),
    ``config.json`` (``record``, by default the table) when the folder is new, and ``provenance.json``
    (``seed``); process i > 0 of a multi-process run waits for process 0's marker and then takes the lock of
    its own share.

    ``replaces=True`` opens the folder of a job that does not resume but writes its report whole each time
    (``attnflow reproduce``, ``attnflow extensions``): a previous run of the same kind is replaced whatever its
    config, and nothing is written when the folder is opened; the job writes the marker (:meth:`Run.mark`),
    its config and its provenance with its results (``Run.resumed`` says whether a previous run was there).

    Example:
        >>> import tempfile, pathlib
        >>> from attnflow.runs import open_run
        >>> out = pathlib.Path(tempfile.mkdtemp()) / "run"
        >>> run = open_run(out, "demo", {"seed": 0, "run": {"progress": True}})
        >>> run.resumed, sorted(p.name for p in out.iterdir() if not p.name.startswith("."))
        (False, ['attnflow-run.json', 'config.json', 'provenance.json'])
        >>> open_run(out, "demo", {"seed": 0, "run": {"progress": False}}).resumed  # execution keys: same run
        True
        >>> open_run(out, "demo", {"seed": 1, "run": {}})  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        attnflow.errors.InputError: --out ... holds a demo run of another config (fingerprint ..., this config ...); repeat the command with that run's config (.../config.json) or choose a new folder.
        >>> report = pathlib.Path(tempfile.mkdtemp()) / "report"   # a job that writes its report whole each time
        >>> open_run(report, "demo-report", {"seed": 0}, replaces=True).mark(complete=True)
        >>> open_run(report, "demo-report", {"seed": 1}, replaces=True).resumed  # another config: replaced, not refused
        True
    """
    table = table_of(config)
    if identity is None:
        identity = getattr(config, "identity", None)
    keyed = config.fingerprint_table() if callable(getattr(config, "fingerprint_table", None)) else table
    fp = _fingerprint({**keyed, **identity} if identity else keyed)
    if process != 0:  # process 0 claims the folder; the others wait for its marker
        deadline = time.time() + WAIT_FOR_PROCESS_0_S
        while not (Path(out) / MARKER).exists():
            if time.time() > deadline:
                raise InputError(f"--out {out}: process 0 did not create the run folder within "
                                 f"{WAIT_FOR_PROCESS_0_S} s; start process 0 first, or check that every process "
                                 "was given the same folder.")
            time.sleep(0.5)
    out, existed = claim_output_dir(out, kind, process=process)
    if replaces:
        return Run(out=out, kind=kind, fingerprint=fp, resumed=existed, process=process, seed=seed)
    if existed:
        previous = (read_marker(out) or {}).get("fingerprint")
        if previous != fp:
            raise InputError(f"--out {out} holds a {kind} run of another config (fingerprint {previous}, this "
                             f"config {fp}); repeat the command with that run's config ({out / 'config.json'}) "
                             "or choose a new folder.")
    run = Run(out=out, kind=kind, fingerprint=fp, resumed=existed, process=process, seed=seed)
    if process == 0:
        run.mark(**(marker or {}))
        if not existed:
            atomic_write_json(out / "config.json", table if record is None else record)
        run.write_provenance()
    return run
