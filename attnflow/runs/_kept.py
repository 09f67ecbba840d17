"""What a running job has kept: the one line an interrupted command prints."""

from __future__ import annotations

__all__ = ["KeptWork", "count_kept", "interrupted_sentence"]


class KeptWork:
    """The units of work a running job has kept: ``kept`` of ``total`` ``unit`` (e.g. chunks), stored where the
    same command finds them again when ``resumes``; else done but kept nowhere (the job writes its results
    only at the end). Made by :func:`count_kept`; the job calls :meth:`add` as each unit is stored."""

    def __init__(self, total: int, unit: str, kept: int = 0, resumes: bool = True):
        self.total, self.unit, self.kept, self.resumes = int(total), unit, int(kept), bool(resumes)

    def add(self, count: int = 1) -> None:
        """Count ``count`` more units stored (or done, for a job that does not resume)."""
        self.kept += int(count)

    def sentence(self) -> str:
        """What an interruption now leaves, in words.

        Example:
            >>> from attnflow.runs import KeptWork
            >>> KeptWork(20, "chunks", kept=7).sentence()
            'interrupted: 7 of 20 chunks kept; the same command resumes'
            >>> KeptWork(14, "cases", kept=3, resumes=False).sentence()
            'interrupted after 3 of 14 cases; nothing is kept (the results are written when every one has run)'
        """
        if not self.resumes:
            return (f"interrupted after {self.kept} of {self.total} {self.unit}; nothing is kept (the results are "
                    "written when every one has run)")
        return f"interrupted: {self.kept} of {self.total} {self.unit} kept; the same command resumes"


_KEPT: list[KeptWork] = []  # the count of the job running in this process (the latest one started)


def count_kept(total: int, unit: str, *, kept: int = 0, resumes: bool = True) -> KeptWork:
    """Start counting the units of work the running job keeps (replacing an earlier count of this process):
    ``total`` units named ``unit``, ``kept`` of them already stored (resumed). Returns the count, which the
    job advances (:meth:`KeptWork.add`) as it stores each unit; :func:`interrupted_sentence` reads it.

    Example:
        >>> from attnflow.runs import count_kept, interrupted_sentence
        >>> kept = count_kept(20, "chunks", kept=5)
        >>> kept.add(2)
        >>> interrupted_sentence()
        'interrupted: 7 of 20 chunks kept; the same command resumes'
    """
    _KEPT[:] = [KeptWork(total, unit, kept, resumes)]
    return _KEPT[0]


def interrupted_sentence() -> str:
    """The one line an interrupted command prints: the running job's :class:`KeptWork`, or only that it was
    interrupted when no job has counted its work yet.

    Example:
        >>> from attnflow.runs import count_kept, interrupted_sentence
        >>> _ = count_kept(3, "units", kept=3)
        >>> interrupted_sentence()
        'interrupted: 3 of 3 units kept; the same command resumes'
    """
    return _KEPT[0].sentence() if _KEPT else "interrupted before any work was kept"
