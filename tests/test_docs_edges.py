"""A new user's first contact, at its edges: the docs hooks render every docstring's maths, the
first pages' links work in the repository as well as in the built site, a script beside a clone
named ``attnflow`` imports the package (not the folder), and the reproduction report's overview
does not call a case that runs outside the theorems by design a failure."""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HOOKS = ROOT / "docs" / "hooks"


def _hook(name: str):
    spec = importlib.util.spec_from_file_location(f"attnflow_docs_hook_{name}", HOOKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _text_nodes(mathml: str) -> list[str]:
    return re.findall(r">([^<]+)<", mathml)


# ----------------------------------------------------------------------------- maths


@pytest.fixture(scope="module")
def maths():
    pytest.importorskip("latex2mathml", reason="latex2mathml is not installed (the docs extra)")
    return _hook("maths")


@pytest.mark.parametrize("tex, display, shown", [
    (r"k^*(\beta) = \arg\max_k k^2 I_k(\beta)", "inline", "arg"),        # \arg: unknown to latex2mathml
    (r"\max(\text{min\_duration}, r\,t_a)", "inline", "min_duration"),   # \_ inside \text
    (r"\big\| V - V_0 \big\|_F", "inline", "\u2016"),                    # a delimiter after \big
    (r"\Big\langle u, x \Big\rangle", "inline", "\u27e8"),
    (r"x^{(0)} &= a \\ P &= b", "block", "mtable"),                      # a multi-line display (split)
])
def test_maths_renders_without_tex(maths, tex, display, shown):
    out = maths.to_mathml(tex, display)
    assert out is not None and out.startswith("<math"), (tex, out)
    assert not any("\\" in t for t in _text_nodes(out)), f"TeX left in the MathML of {tex!r}: {out}"
    assert not any(t.strip() == "&" for t in _text_nodes(out)), f"a raw column mark in {tex!r}: {out}"
    assert shown in out, (tex, out)


def test_maths_that_cannot_render_is_a_warning(maths, caplog):
    # a warning, so that mkdocs build --strict (make docs, the site test) names the expression and fails
    with caplog.at_level(logging.WARNING, logger="mkdocs.hooks.maths"):
        assert maths.to_mathml(r"\notacommand x", "inline") is None
    assert any("notacommand" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)


def test_docstring_maths_become_arithmatex_markup():
    pytest.importorskip("griffe", reason="griffe is not installed (the docs extra)")
    g = _hook("griffe_docstrings")
    doc = ("Summary with :math:`\\dot x_i = \\sum_j P_{ij}\n    V x_j` inline.\n\n"
           ".. math::  e^{\\beta\\cos\\psi} = \\sum_m I_m(\\beta)\\,\n"
           "           e^{i m\\psi},\n\n"
           "Args:\n    x: a value, :class:`~attnflow.Simulation`.\n")
    out = g._maths(doc)
    assert "\\(\\dot x_i = \\sum_j P_{ij} V x_j\\)" in out
    assert "\\[\ne^{\\beta\\cos\\psi} = \\sum_m I_m(\\beta)\\,\ne^{i m\\psi},\n\\]" in out
    assert ":math:" not in out and ".. math::" not in out
    assert ":class:`~attnflow.Simulation`" in out  # the other roles are left to the code rule
    # a docstring that is not a raw string read \beta as a backspace and "eta": put back
    assert g._maths(":math:`e^\beta / (2\beta)`") == "\\(e^\\beta / (2\\beta)\\)"


# ----------------------------------------------------------------------------- first pages' links

FIRST_PAGES = ("README.md", "docs/index.md", "docs/getting-started.md")
_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


@pytest.mark.parametrize("page", FIRST_PAGES)
def test_first_pages_links_exist_in_the_repository(page):
    """Read on a code host or in a clone, every relative link of the first pages reaches a file or
    folder of the repository (pages the site generates, like the gallery, do not exist there)."""
    path = ROOT / page
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    dead = []
    for target in _LINK.findall(text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        target = target.split("#", 1)[0]
        if not (path.parent / target).exists():
            dead.append(target)
    assert not dead, f"{page}: links to nothing in the repository: {dead}"


def test_every_record_the_documents_cite_is_in_the_repository():
    """A number in the guides or in benchmarks/*.md that names its record (``benchmarks/runs/<file>``) can be
    checked: the record is committed."""
    pages = sorted((ROOT / "docs").rglob("*.md")) + sorted((ROOT / "benchmarks").glob("*.md")) + [ROOT / "README.md"]
    cited = {m.rstrip(".,;:)") for page in pages
             for m in re.findall(r"benchmarks/runs/[A-Za-z0-9_./-]+", page.read_text(encoding="utf-8"))}
    assert len(cited) >= 2
    missing = sorted(c for c in cited if not (ROOT / c).exists())
    assert not missing, f"records cited but not committed: {missing}"


def test_gallery_hook_maps_examples_links_to_the_gallery():
    pytest.importorskip("mkdocs", reason="mkdocs is not installed (the docs extra)")
    gallery = _hook("gallery")
    md = ("See [the gallery](../examples/) and [one script](../examples/01_watch_tokens_cluster.py); "
          "[the guide](guide/concepts.md) stays.")
    out = gallery.examples_links(md, "getting-started.md")
    assert "[the gallery](gallery/index.md)" in out
    assert "[one script](gallery/01_watch_tokens_cluster.md)" in out
    assert "[the guide](guide/concepts.md)" in out
    nested = gallery.examples_links("[g](../../examples/)", "guide/concepts.md")
    assert nested == "[g](../gallery/index.md)"


# ----------------------------------------------------------------------------- the namespace trap


def test_script_beside_a_clone_named_attnflow_imports_the_package(tmp_path):
    """A clone named ``attnflow`` in the folder of a script: Python puts the script's folder first on
    sys.path, where ``attnflow/`` (the clone, no ``__init__.py``) is a namespace portion. That must not
    shadow the installed package: the import finds the regular package, which has ``simulate``."""
    clone = tmp_path / "attnflow"
    clone.symlink_to(ROOT, target_is_directory=True)
    script = tmp_path / "first.py"
    script.write_text("import attnflow\nprint(attnflow.__file__)\nprint(callable(attnflow.simulate))\n",
                      encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    assert proc.returncode == 0, (
        "a script beside a clone named attnflow could not use the package (the clone's folder was "
        f"imported as a namespace package; reinstall with `make install`):\n{proc.stderr[-2000:]}")
    file, ok = proc.stdout.split()
    assert ok == "True" and Path(file).name == "__init__.py", proc.stdout


# ----------------------------------------------------------------------------- the report's overview


def test_outside_cases_are_not_hypothesis_failures():
    from attnflow.report import CASES
    from attnflow.report._base import CaseResult, Check
    from attnflow.report._catalogue import OUTSIDE
    from attnflow.report._config import parse_reproduce_config
    from attnflow.report._render import render_markdown
    from attnflow.runio import load_config

    assert set(OUTSIDE) <= set(CASES) and {"sec12_1_polytope", "sec12_1_paranormal"} <= set(OUTSIDE)
    config = parse_reproduce_config(load_config(None, "reproduce.toml"))

    def result(name: str, holds: bool) -> CaseResult:
        title, theorem, _ = CASES[name]
        r = CaseResult(name, title, theorem)
        r.hyp("V paranormal: V = 1 I on F (dim 2), spectral radius 0.5 on G (dim 1)", True)
        r.hyp("F and G not orthogonal (largest cosine between them; the general direct sum)", holds, 0.0)
        r.checks.append(Check(name, "conv{F-part of z(t)} non-increasing", r.hyp_text(), "p", "o", True, 1.0))
        return r

    # sec12_1_paranormal's V is diagonal, so F and G are orthogonal by design; thm5_2 needs them not to be
    md = render_markdown([result("sec12_1_paranormal", False), result("thm5_2", False)], {}, config.defaults,
                         quick=True, seconds=1.0)
    overview = md[md.index("| case | theorem | hypotheses |"):md.index("All checks:")]
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| \[(\w+)\]\(#\w+\) \|.*$", overview, re.M)}
    outside, inside = rows["sec12_1_paranormal"], rows["thm5_2"]
    assert "FAIL" not in outside and "outside (by design)" in outside, outside
    assert "F and G not orthogonal" in outside  # still shown: what the setup does not satisfy
    assert "F and G not orthogonal" in inside and "FAIL" in inside, inside
    section = md[md.index('<a id="sec12_1_paranormal">'):md.index('<a id="thm5_2">')]
    assert "Outside the theorems' hypotheses by design" in section
