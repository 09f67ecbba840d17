"""attnflow/ has no import circle: no chain of imports, at module level or inside functions,
relative or absolute, leads from a module of the package back to itself."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def package_modules(package_dir: Path) -> dict[str, Path]:
    """Dotted module name -> source file, for every ``.py`` file under ``package_dir``
    (a package's ``__init__.py`` is named after the package itself)."""
    modules = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def imported_names(module: str, path: Path, node: ast.Import | ast.ImportFrom, modules: dict[str, Path]) -> list[str]:
    """The dotted names one import statement of ``module`` asks for, relative imports resolved.

    ``from pkg import name`` names ``pkg.name`` when that is a module, else ``pkg`` itself.
    """
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        base = package.split(".")
        base = base[: len(base) - (node.level - 1)]
        source = ".".join(base + ([node.module] if node.module else []))
    else:
        source = node.module or ""
    return [f"{source}.{a.name}" if f"{source}.{a.name}" in modules else source for a in node.names]


def import_graph(package_dir: Path) -> dict[str, set[str]]:
    """Module -> the package's modules it imports anywhere in its source (functions included)."""
    package = package_dir.name
    modules = package_modules(package_dir)
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            for name in imported_names(module, path, node, modules):
                while name and name not in modules:  # `pkg.mod.attr` -> `pkg.mod`
                    name = name.rpartition(".")[0]
                if name and name != module and (name == package or name.startswith(package + ".")):
                    deps.add(name)
        graph[module] = deps
    return graph


def strongly_connected_components(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm (iterative): the graph's strongly connected components."""
    index: dict[str, int] = {}
    lowlink: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = lowlink[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for succ in successors:
                if succ not in index:
                    index[succ] = lowlink[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph.get(succ, ())))))
                    break
                if succ in on_stack:
                    lowlink[node] = min(lowlink[node], index[succ])
            else:  # every successor done: node is finished
                work.pop()
                if work:
                    parent = work[-1][0]
                    lowlink[parent] = min(lowlink[parent], lowlink[node])
                if lowlink[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    components.append(sorted(component))
    return components


def circle_through(component: list[str], graph: dict[str, set[str]]) -> list[str]:
    """One import chain ``a -> b -> ... -> a`` inside a strongly connected component
    (breadth-first, so the shortest circle through its first module)."""
    members = set(component)
    start = component[0]
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for succ in sorted(graph[node] & members):
                if succ == start:
                    chain = [node]
                    while chain[-1] != start:
                        chain.append(previous[chain[-1]])
                    return [start, *reversed(chain[:-1]), start]
                if succ not in previous:
                    previous[succ] = node
                    following.append(succ)
        frontier = following
    raise AssertionError(f"{component} is not a circle")


def import_circles(package_dir: Path) -> list[list[str]]:
    """Every import circle of the package, each as a chain of modules ending where it starts."""
    graph = import_graph(package_dir)
    return [circle_through(c, graph) for c in strongly_connected_components(graph) if len(c) > 1]


def test_attnflow_has_no_import_circle():
    graph = import_graph(ROOT / "attnflow")
    tangles = [c for c in strongly_connected_components(graph) if len(c) > 1]
    assert not tangles, "import circles in attnflow/:\n" + "\n".join(
        f"{' -> '.join(circle_through(c, graph))}   (modules importing each other: {', '.join(c)})" for c in tangles)


def _write_package(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root / "pkg"


def test_detector_reports_a_circle_through_a_function_level_import(tmp_path):
    pkg = _write_package(tmp_path, {
        "__init__.py": "",
        "a.py": "from .sub import b\n",
        "sub/__init__.py": "",
        "sub/b.py": "import pkg.c as c\n",
        "c.py": "def late():\n    from pkg.a import something\n    return something\n",
        "free.py": "from . import a\nimport numpy\n",
    })
    graph = import_graph(pkg)
    assert graph["pkg.a"] == {"pkg.sub.b"} and graph["pkg.sub.b"] == {"pkg.c"} and graph["pkg.c"] == {"pkg.a"}
    assert graph["pkg.free"] == {"pkg.a"}  # third-party imports are not edges
    assert import_circles(pkg) == [["pkg.a", "pkg.sub.b", "pkg.c", "pkg.a"]]


def test_detector_resolves_relative_imports_of_a_package_init(tmp_path):
    # `from .x import y` in pkg/sub/__init__.py means pkg.sub.x; `from .. import z` means pkg.z
    pkg = _write_package(tmp_path, {
        "__init__.py": "from .sub import thing\n",
        "sub/__init__.py": "from .x import thing\n",
        "sub/x.py": "def f():\n    from .. import z\n",
        "z.py": "from pkg.sub import x\n",
    })
    graph = import_graph(pkg)
    assert graph["pkg"] == {"pkg.sub"} and graph["pkg.sub"] == {"pkg.sub.x"} and graph["pkg.sub.x"] == {"pkg.z"}
    assert import_circles(pkg) == [["pkg.sub.x", "pkg.z", "pkg.sub.x"]]


def test_detector_finds_nothing_in_a_package_without_a_circle(tmp_path):
    pkg = _write_package(tmp_path, {
        "__init__.py": "from .a import f\nfrom .b import g\n",
        "a.py": "from .b import g\ndef f():\n    from pkg.c import h\n    return g, h\n",
        "b.py": "import math\ndef g():\n    from . import c\n    return c\n",
        "c.py": "def h():\n    return 1\n",
    })
    assert import_graph(pkg)["pkg.a"] == {"pkg.b", "pkg.c"}
    assert import_circles(pkg) == []


# ---------------------------------------------------------------------------------------------
# Private boundaries: a subpackage's private modules and underscore names are its own business.

def owner(module: str, modules: dict[str, Path]) -> str:
    """The package a module belongs to: ``attnflow.phase._run`` -> ``attnflow.phase``; a module at the
    root (``attnflow._validate``, ``attnflow.fields``) belongs to the root package ``attnflow``."""
    parts = module.split(".")
    if len(parts) > 1 and f"{parts[0]}.{parts[1]}" in modules and modules[f"{parts[0]}.{parts[1]}"].name == "__init__.py":
        return f"{parts[0]}.{parts[1]}"
    return parts[0]


def private_crossings(package_dir: Path) -> list[str]:
    """Every import that crosses a private boundary, one line each:

    * a module importing a private module (a dotted component starting with ``_``) that lives in
      another subpackage (``attnflow.phase._run`` importing ``attnflow.sweep._chunks``); the root's own
      private modules (``attnflow._validate``, ``attnflow._x64``) are the package's shared internals and
      may be imported from anywhere;
    * ``from M import _name`` where ``_name`` is not a module and ``M`` belongs to another package than
      the importer (``from attnflow.kernels._tiled import _attend`` in ``attnflow.meanfield``).
    """
    modules = package_modules(package_dir)
    found = []
    for module, path in modules.items():
        mine = owner(module, modules)
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            for name in imported_names(module, path, node, modules):
                while name and name not in modules:
                    name = name.rpartition(".")[0]
                if not name or name == module:
                    continue
                theirs = owner(name, modules)
                inner = name.split(".")[len(theirs.split(".")):]
                if theirs != mine and theirs != package_dir.name and any(p.startswith("_") for p in inner):
                    found.append(f"{module} imports the private module {name}")
            if isinstance(node, ast.ImportFrom):
                source = imported_names(module, path, ast.ImportFrom(module=node.module, names=[ast.alias("_")],
                                                                     level=node.level), modules)[0]
                while source and source not in modules:
                    source = source.rpartition(".")[0]
                for alias in node.names:
                    underscore = alias.name.startswith("_") and not alias.name.startswith("__")
                    if underscore and f"{source}.{alias.name}" not in modules and owner(source, modules) != mine:
                        found.append(f"{module} imports the private name {alias.name} from {source}")
    return sorted(set(found))


#: the deliberate crossings, each with its reason; a new one must be added here, with a reason, or removed
ALLOWED_CROSSINGS = {
    # simulate is the integrators' one-call form: it sizes (and refuses) the output from the plan of the flat
    # keywords before it builds the integrator, and attaches the in-jit failure checks to what it returns
    "attnflow._simulation imports the private module attnflow.integrate._make",
    "attnflow._simulation imports the private module attnflow.integrate._solution",
    # the registry builds the continuity equation's field (field "continuity"), which lives with the mean-field
    # maths it is made of; attnflow.meanfield's face imports the registry (its solver builds that field), so the
    # builder imports the field's own module, which imports no registry
    "attnflow.fields imports the private module attnflow.meanfield._continuity",
    "attnflow.fields imports the private module attnflow.meanfield._sphere_continuity",
    # the command line is the extensions job's thin edge; the report's face is the reproduction report
    "attnflow.cli.extensions imports the private module attnflow.report._extensions",
    # figure workers are separate processes that import without JAX; attnflow.plot's face imports pyplot
    "attnflow.cli.phase imports the private module attnflow.plot._workers",
    "attnflow.phase._run imports the private module attnflow.plot._workers",
    # the phase report prints the lifetime fit's working quantities (data kept, parameters, intervals on
    # the fit's own scale) that attnflow.stats.censored_lognormal_fit summarises for other users
    "attnflow.phase._metastability imports the private module attnflow.stats._survival",
    "attnflow.phase._metastability imports the private name _lognormal_data from attnflow.stats._survival",
    "attnflow.phase._metastability imports the private name _lognormal_intervals from attnflow.stats._survival",
    "attnflow.phase._metastability imports the private name _lognormal_theta from attnflow.stats._survival",
    "attnflow.phase._metastability imports the private name _retained from attnflow.stats._survival",
}


def test_no_import_crosses_a_private_boundary_outside_the_allow_list():
    crossings = set(private_crossings(ROOT / "attnflow"))
    assert not crossings - ALLOWED_CROSSINGS, "imports across a private boundary (import from the package's " \
        "face, or add the line to ALLOWED_CROSSINGS with its reason):\n" + "\n".join(sorted(crossings - ALLOWED_CROSSINGS))
    assert not ALLOWED_CROSSINGS - crossings, "allowed crossings that no longer exist (remove them):\n" + \
        "\n".join(sorted(ALLOWED_CROSSINGS - crossings))


def test_private_boundary_detector_on_a_small_package(tmp_path):
    pkg = _write_package(tmp_path, {
        "__init__.py": "",
        "_shared.py": "def helper():\n    return 1\n",
        "a/__init__.py": "from ._impl import f\n",
        "a/_impl.py": "from .._shared import helper\ndef f():\n    return helper()\ndef _g():\n    return 2\n",
        "b/__init__.py": "",
        "b/_use.py": "from ..a._impl import f\nfrom ..a import f as face_f\n",
        "b/_late.py": "def late():\n    from pkg.a._impl import _g\n    return _g\n",
        "c.py": "from .a._impl import _g\nfrom . import _shared\n",
    })
    assert private_crossings(pkg) == [
        "pkg.b._late imports the private module pkg.a._impl",
        "pkg.b._late imports the private name _g from pkg.a._impl",
        "pkg.b._use imports the private module pkg.a._impl",
        "pkg.c imports the private module pkg.a._impl",
        "pkg.c imports the private name _g from pkg.a._impl",
    ]


def test_every_source_file_compiles_without_warnings():
    """No invalid escape sequence (a TeX ``\\lambda`` in a docstring that is not raw) or other compile-time warning
    in attnflow/, benchmarks/, tests/ and examples/: Python 3.12 warns at import, a later one refuses."""
    import warnings

    files = [p for folder in ("attnflow", "benchmarks", "tests", "examples") if (ROOT / folder).is_dir()
             for p in sorted((ROOT / folder).rglob("*.py"))]
    assert len(files) > 100
    bad = []
    for path in files:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            try:
                compile(path.read_text(encoding="utf-8"), str(path), "exec")
            except (SyntaxError, SyntaxWarning, DeprecationWarning) as e:
                bad.append(f"{path.relative_to(ROOT)}: {e}")
    assert not bad, bad
