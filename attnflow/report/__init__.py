"""The theorem-by-theorem reproduction report (``attnflow reproduce``): cases, figures, rendering."""

from ._base import CaseResult, CaseSettings, Check, Context
from ._catalogue import CASES
from ._catalogue import EULER_STEPS
from ._config import ReproduceConfig, parse_reproduce_config
from ._draws import good_qk
from ._extensions import run_layers
from ._mutations import MUTATIONS, mutated_field_factory
from ._run import DEFAULT_OUT, case_names, reproduce, resolve_settings

__all__ = ["reproduce", "case_names", "resolve_settings", "parse_reproduce_config", "ReproduceConfig", "CaseSettings",
           "DEFAULT_OUT", "CASES", "EULER_STEPS", "CaseResult", "Check", "Context", "MUTATIONS", "mutated_field_factory",
           "good_qk", "run_layers"]
