"""The theorem-by-theorem reproduction report (``attnflow reproduce``): cases, figures, rendering."""

from . import cases as _cases  # noqa: F401  (registers the cases)
from .base import CASES, CaseResult, Check, Context
from .run import DEFAULT_OUT, case_names, reproduce, resolve_settings

__all__ = ["reproduce", "case_names", "resolve_settings", "DEFAULT_OUT", "CASES", "CaseResult", "Check", "Context"]
