"""Every public function of the observables and report packages has a runnable Example."""

import doctest
import importlib

import pytest

MODULES = [
    "attnflow.observables.clusters",
    "attnflow.observables.attention_structure",
    "attnflow.observables.polytope",
    "attnflow.observables.hyperplanes",
    "attnflow.observables.subspaces",
    "attnflow.observables.collapse",
    "attnflow.observables.geometry",
    "attnflow.observables",
    "attnflow.report.run",
]


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0


def test_every_public_observable_has_an_example():
    import attnflow.observables as obs

    missing = [n for n in obs.__all__ if callable(getattr(obs, n)) and not isinstance(getattr(obs, n), type)
               and "Example" not in (getattr(obs, n).__doc__ or "")]
    assert not missing
