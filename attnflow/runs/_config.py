"""The base of every job's parsed config: its kind, the table it came from, and the run's fingerprint."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import ClassVar

from ._fingerprint import fingerprint as _fingerprint

__all__ = ["JobConfig"]


@dataclass(frozen=True, kw_only=True)
class JobConfig:
    """A job's config, parsed once at its edge into a frozen, typed object (a subclass adds the job's fields).

    ``source`` is the resolved table the config was parsed from (``config.json`` and the fingerprint are
    computed from it, so a run folder resumes across code versions that parse the same table); ``identity``
    holds what a run reads besides its config (e.g. the checksum of a weights file), which the fingerprint
    covers too; ``kind`` names the job. The values are checked by the subclass's parser with the checkers
    of :mod:`attnflow._validate` (one sentence per problem).

    Example:
        >>> from dataclasses import dataclass
        >>> from attnflow.runs import JobConfig, fingerprint
        >>> @dataclass(frozen=True, kw_only=True)
        ... class DemoConfig(JobConfig):
        ...     seed: int
        ...     kind = "demo"
        >>> c = DemoConfig(seed=0, source={"seed": 0, "run": {"progress": True}})
        >>> c.as_dict(), c.fingerprint == fingerprint({"seed": 0, "run": {}})
        ({'seed': 0, 'run': {'progress': True}}, True)
    """

    #: the resolved table this config was parsed from (config.json, the fingerprint, provenance)
    source: dict = field(repr=False, compare=False)
    #: what a run reads besides the config (part of the fingerprint)
    identity: dict = field(default_factory=dict, repr=False, compare=False)
    kind: ClassVar[str] = ""
    #: keys added to the job after its first runs (top-level, or dotted for a key of a table:
    #: ``"convergence.sigma"``), with the value at which a run equals one of the code before them: a key at
    #: that value is left out of the fingerprint, so folders written before the key existed still resume
    later_keys: ClassVar[dict] = {}

    def as_dict(self) -> dict:
        """A copy of the table this config was parsed from."""
        return copy.deepcopy(self.source)

    def fingerprint_table(self) -> dict:
        """The table the fingerprint is computed from: :meth:`as_dict` less the :attr:`later_keys` at their
        original value.

        Example:
            >>> from dataclasses import dataclass
            >>> from attnflow.runs import JobConfig
            >>> @dataclass(frozen=True, kw_only=True)
            ... class Demo(JobConfig):
            ...     later_keys = {"sigma": 0.0}
            >>> Demo(source={"seed": 0, "sigma": 0.0}).fingerprint_table(), Demo(source={"sigma": 0.5}).fingerprint_table()
            ({'seed': 0}, {'sigma': 0.5})
            >>> @dataclass(frozen=True, kw_only=True)
            ... class Nested(JobConfig):
            ...     later_keys = {"study.sigma": 0.0}
            >>> Nested(source={"study": {"n": 4, "sigma": 0.0}}).fingerprint_table()
            {'study': {'n': 4}}
        """
        table = self.as_dict()
        for key, original in self.later_keys.items():
            *tables, last = key.split(".")
            where = table
            for name in tables:
                where = where.get(name) if isinstance(where, dict) else None
            if isinstance(where, dict) and last in where and where[last] == original:
                del where[last]
        return table

    @property
    def fingerprint(self) -> str:
        """The fingerprint of a run of this config (:func:`attnflow.runs.fingerprint` of the table and the
        identity): a run folder holds the results of one fingerprint only."""
        return _fingerprint({**self.fingerprint_table(), **self.identity})
