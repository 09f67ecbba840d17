"""The spine's rules, read from the source with ``ast``: every field comes from the registry, every
result is compared by name.

* Only ``attnflow/fields.py`` (the registry) and ``attnflow/dynamics/`` (where the fields live) call a
  dynamics constructor: the classes and constructor functions that :mod:`attnflow.dynamics` exports and
  every field class the registry imports (at the top, or inside a builder: the continuity equation's field
  lives in :mod:`attnflow.meanfield`). ``FoldedBatch`` is exempt: it wraps a field that was built
  already (a batch folded into one state), it does not choose one.
* No module compares a ``.result`` with a bare number: the codes have names
  (:class:`attnflow.integrate.RESULTS`).
Docstrings and doctests are strings, not calls, so they are not read.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import attnflow.dynamics as dynamics
import attnflow.fields as fields
from attnflow.dynamics import AbstractDynamics

PACKAGE = Path(__file__).resolve().parent.parent / "attnflow"
#: where fields may be constructed
BUILDERS = ("attnflow/fields.py", "attnflow/dynamics/")
#: wrappers of a field already built (not a choice of field)
WRAPPERS = {"FoldedBatch"}
#: what attnflow.dynamics exports that builds no field (weights, helpers, tables)
NOT_FIELDS = {"as_weights", "normalise", "perturbed_layers", "rescaling_generator", "ACTIVATIONS"}


def _is_field_class(obj) -> bool:
    return inspect.isclass(obj) and issubclass(obj, AbstractDynamics) and not inspect.isabstract(obj) \
        and not obj.__name__.startswith("Abstract")


def registry_imports() -> dict[str, object]:
    """What ``attnflow/fields.py`` imports by name anywhere in its source (a builder may import its field
    where it builds it): name -> object."""
    found = {}
    for node in ast.walk(ast.parse(inspect.getsource(fields))):
        if isinstance(node, ast.ImportFrom):
            source = importlib.import_module("." * node.level + (node.module or ""), package="attnflow")
            found |= {a.asname or a.name: getattr(source, a.name, None) for a in node.names}
    return found


def constructors() -> set[str]:
    """The names whose call builds a field: attnflow.dynamics's exports (classes and the constructor
    functions) and the field classes the registry uses."""
    names = {n for n in dynamics.__all__ if n not in NOT_FIELDS and (
        _is_field_class(getattr(dynamics, n)) or inspect.isfunction(getattr(dynamics, n)))}
    names |= {n for n, obj in vars(fields).items() if _is_field_class(obj)}
    names |= {n for n, obj in registry_imports().items() if _is_field_class(obj)}
    return names - WRAPPERS


def called_name(node: ast.Call) -> str | None:
    f = node.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None


def source_files():
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).as_posix()
        yield rel, ast.parse(path.read_text(), filename=rel)


def field_constructions_outside_registry() -> list[str]:
    names = constructors()
    found = []
    for rel, tree in source_files():
        if rel == BUILDERS[0] or rel.startswith(BUILDERS[1]):
            continue
        found += [f"{rel}:{node.lineno}: {called_name(node)}(...)" for node in ast.walk(tree)
                  if isinstance(node, ast.Call) and called_name(node) in names]
    return found


def test_the_rule_knows_the_fields():
    names = constructors()
    assert {"AttentionFlow", "DiscreteRescaledFlow", "RescaledFlow", "sphere_flow", "LayeredFlow",
            "TimeVaryingFlow", "PreNorm", "TransformerBlock", "CircleContinuity"} <= names
    assert not names & (WRAPPERS | NOT_FIELDS)


def test_only_the_registry_and_the_dynamics_construct_fields():
    found = field_constructions_outside_registry()
    assert not found, ("build these with attnflow.fields.build_field(name, ...) (register the field there if it "
                       "is missing):\n" + "\n".join(found))


def test_the_rule_catches_a_direct_construction(tmp_path):
    tree = ast.parse("from ..dynamics import sphere_flow\nf = sphere_flow(I, I, I, 2.0)\n")
    calls = [called_name(n) for n in ast.walk(tree) if isinstance(n, ast.Call)]
    assert "sphere_flow" in calls and "sphere_flow" in constructors()


def _bare_result_comparisons(tree) -> list[int]:
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        result = any(isinstance(s, ast.Attribute) and s.attr == "result" for s in sides)
        number = any(isinstance(s, ast.Constant) and isinstance(s.value, int) and not isinstance(s.value, bool)
                     for s in sides)
        if result and number:
            lines.append(node.lineno)
    return lines


def test_results_are_compared_by_name():
    found = [f"{rel}:{line}" for rel, tree in source_files() for line in _bare_result_comparisons(tree)]
    assert not found, "compare with attnflow.integrate.RESULTS.<name>, not a number:\n" + "\n".join(found)
    assert _bare_result_comparisons(ast.parse("ok = sim.result == 0")) == [1]
