r"""The report's cases, in report order: the theorems and remarks (:mod:`.cases`), then the
negative controls (:mod:`.controls`). The list is written out here; importing a module registers
nothing.
"""

from __future__ import annotations

from typing import Callable

from . import _cases as c
from ._controls import negative_controls

__all__ = ["ORDER", "CASES", "EULER_STEPS", "OUTSIDE"]

#: the case functions, in report order (each carries its :class:`~attnflow.report._base.CaseInfo`)
ORDER: tuple[Callable, ...] = (
    c.thm2_1, c.thm3_1, c.thm4_2_2d, c.thm4_2_3d, c.codim_k, c.thm5_2, c.thm8_5, c.remark7_9,
    c.sec12_1_polytope, c.sec12_1_paranormal, c.thm3_1_euler_dt01, c.thm3_1_euler_dt1, c.thm4_2_euler_dt01,
    c.thm4_2_euler_dt1, negative_controls,
)

#: name -> (title, theorem, case function ``fn(ctx, res)``), in report order
CASES: dict[str, tuple[str, str, Callable]] = {fn.info.name: (fn.info.title, fn.info.theorem, fn) for fn in ORDER}

#: the layer step of each case that runs the Euler stepper (its t1 must be a whole number of them)
EULER_STEPS: dict[str, float] = {fn.info.name: fn.info.euler_dt for fn in ORDER if fn.info.euler_dt is not None}

#: the cases meant to run outside every theorem's hypotheses, each with the reason: their
#: conditions describe the setup, so one that does not hold is shown, not graded as a failure
OUTSIDE: dict[str, str] = {
    "sec12_1_polytope": "Section 12.1 observes Thm 3.1's pattern with Q^T K of U[-1, 1] entries, which no "
                        "theorem covers",
    "sec12_1_paranormal": "Section 12.1 observes Thm 5.2's pattern with Q^T K of U[-1, 1] entries and a diagonal "
                          "V = diag(1, 1, -1/2), which no theorem covers",
    "negative_controls": "the controls are configurations no theorem covers, which the classifier and the "
                         "checks must reject",
}
