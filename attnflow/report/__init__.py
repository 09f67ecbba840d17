"""The theorem-by-theorem reproduction report (``attnflow reproduce``): cases, figures, rendering."""

from ._base import CaseResult, CaseSettings, Check, Context
from ._catalogue import CASES
from ._config import ReproduceConfig, parse_reproduce_config
from ._run import DEFAULT_OUT, case_names, reproduce, resolve_settings

__all__ = ["reproduce", "case_names", "resolve_settings", "parse_reproduce_config", "ReproduceConfig", "CaseSettings",
           "DEFAULT_OUT", "CASES", "CaseResult", "Check", "Context"]
