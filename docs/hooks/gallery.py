"""mkdocs hook: the gallery, generated at build time from the scripts in ``examples/``.

Every ``examples/NN_name.py`` becomes a page ``gallery/NN_name.md`` (its title, its question,
its figures, how to run it and its full source), and ``gallery/index.md`` lists them all with a
thumbnail. Nothing is written into ``docs/``: the pages and figures are mkdocs generated files.

Where the figures come from (environment variables):

* ``ATTNFLOW_GALLERY_FROM=DIR``: take figures already produced and run nothing. ``DIR`` holds
  one subfolder per example, named after the script without ``.py``
  (``DIR/01_watch_tokens_cluster/01_watch_tokens_cluster.png``, any further ``*.png`` / ``*.gif``
  beside it, and optionally ``output.txt`` with what the script printed), or the same files
  flat in ``DIR`` (``DIR/01_watch_tokens_cluster*.png``). ``python examples/NN_name.py --out
  DIR/NN_name > DIR/NN_name/output.txt`` makes the first layout.
* otherwise each example is run once, in its own process with this Python, at the size
  ``ATTNFLOW_GALLERY_SIZE`` (``default`` unless set; ``smoke`` for a quick build), into a
  temporary folder. The figures are kept in memory, so ``mkdocs serve`` reruns an example only
  when its source changes.

An example that fails, or that leaves no figure named after itself, fails the build with the
example's name and its error.

The script's module docstring supplies the page: its first line is the title, the next
paragraph the question (shown in the index too), any further paragraphs follow on the page.
"""

from __future__ import annotations

import ast
import hashlib
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, InclusionLevel

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
SECTION = "gallery"
FIGURE_SUFFIXES = (".png", ".gif", ".svg")
CSS = f"{SECTION}/gallery.css"
_STYLE = """\
.md-typeset .gallery-thumb img, img.gallery-thumb { width: 100%; max-width: 100%; height: 12rem; object-fit: contain; }
.md-typeset .grid.cards > ul > li { overflow: hidden; }
"""
#: (name, size, source hash) -> (figures {file name: bytes}, printed output)
_cache: dict[tuple[str, str, str], tuple[dict[str, bytes], str]] = {}


@dataclass
class Example:
    """One script of ``examples/`` and what its docstring says."""

    path: Path
    source: str
    title: str
    question: str
    more: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.path.stem

    @property
    def number(self) -> str:
        return self.name.split("_", 1)[0]


def discover(folder: Path = EXAMPLES) -> list[Example]:
    """The numbered example scripts of ``folder`` (``NN_name.py``), in order, with their docstrings."""
    found = []
    for path in sorted(folder.glob("[0-9][0-9]_*.py")):
        source = path.read_text(encoding="utf-8")
        try:
            doc = ast.get_docstring(ast.parse(source)) or ""
        except SyntaxError as err:
            raise PluginError(f"gallery: example {path.name} does not parse: {err}") from err
        paragraphs = [" ".join(p.split()) for p in doc.strip().split("\n\n") if p.strip()]
        if len(paragraphs) < 2:
            raise PluginError(f"gallery: example {path.name} needs a docstring with a title line and a "
                              "paragraph stating its question")
        found.append(Example(path, source, paragraphs[0].rstrip("."), paragraphs[1], paragraphs[2:]))
    return found


def _collect(folder: Path, name: str) -> tuple[dict[str, bytes], str]:
    """The figures of example ``name`` in ``folder`` (its subfolder, else flat files) and its output text."""
    sub = folder / name
    if sub.is_dir():
        paths = [p for p in sorted(sub.iterdir()) if p.suffix.lower() in FIGURE_SUFFIXES]
        output = sub / "output.txt"
    else:
        paths = [p for p in sorted(folder.glob(f"{name}*")) if p.suffix.lower() in FIGURE_SUFFIXES]
        output = folder / f"{name}.txt"
    figures = {p.name: p.read_bytes() for p in paths if p.is_file()}
    if f"{name}.png" not in figures:
        where = sub if sub.is_dir() else folder
        raise PluginError(f"gallery: example {name}: no figure {name}.png in {where}")
    return figures, _output(output)


def _output(path: Path) -> str:
    """What the example printed, without the lines that only name the files it wrote."""
    if not path.is_file():
        return ""
    lines = path.read_text(encoding="utf-8").splitlines()
    return "\n".join(ln for ln in lines if ln.strip() and not (" " not in ln.strip()
                                                               and ln.strip().lower().endswith(FIGURE_SUFFIXES)))


def _run(example: Example, size: str) -> tuple[dict[str, bytes], str]:
    """Run one example at ``size`` in its own process; its figures and printed output."""
    key = (example.name, size, hashlib.sha256(example.source.encode()).hexdigest())
    if key not in _cache:
        with tempfile.TemporaryDirectory(prefix=f"attnflow-gallery-{example.name}-") as tmp:
            env = {**os.environ, "MPLBACKEND": "Agg"}
            proc = subprocess.run([sys.executable, str(example.path), "--size", size, "--out", tmp],
                                  cwd=ROOT, env=env, capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-25:])
                raise PluginError(f"gallery: example {example.name} failed (exit {proc.returncode}, size "
                                  f"{size!r}):\n{tail}")
            Path(tmp, "output.txt").write_text(proc.stdout, encoding="utf-8")
            _cache[key] = _collect_flat(Path(tmp), example.name)
    return _cache[key]


def _collect_flat(folder: Path, name: str) -> tuple[dict[str, bytes], str]:
    """``_collect`` for a folder that holds one example's files directly."""
    figures = {p.name: p.read_bytes() for p in sorted(folder.iterdir())
               if p.is_file() and p.suffix.lower() in FIGURE_SUFFIXES}
    if f"{name}.png" not in figures:
        raise PluginError(f"gallery: example {name} wrote no figure {name}.png (it wrote: "
                          f"{', '.join(sorted(figures)) or 'nothing'})")
    return figures, _output(folder / "output.txt")


def _figures(examples: list[Example]) -> dict[str, tuple[dict[str, bytes], str]]:
    source = os.environ.get("ATTNFLOW_GALLERY_FROM")
    if source:
        folder = Path(source).expanduser().resolve()
        if not folder.is_dir():
            raise PluginError(f"gallery: ATTNFLOW_GALLERY_FROM={source} is not a folder")
        return {ex.name: _collect(folder, ex.name) for ex in examples}
    size = os.environ.get("ATTNFLOW_GALLERY_SIZE", "default")
    if size not in ("default", "smoke"):
        raise PluginError(f"gallery: ATTNFLOW_GALLERY_SIZE must be 'default' or 'smoke', got {size!r}")
    return {ex.name: _run(ex, size) for ex in examples}


def _ordered(figures: dict[str, bytes], name: str) -> list[str]:
    """The example's main figure first, then its other PNGs, then animations."""
    rest = sorted(f for f in figures if f != f"{name}.png")
    return [f"{name}.png"] + [f for f in rest if not f.endswith(".gif")] + [f for f in rest if f.endswith(".gif")]


def _md(text: str) -> str:
    """Docstring prose as Markdown text: maths-like characters (``*``, ``_``, braces, ``<``) kept literal."""
    text = text.replace("\\", "\\\\")
    for c in "*_{}`":
        text = text.replace(c, "\\" + c)
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _question(text: str) -> str:
    """The question of a question paragraph: up to its first question mark (else its first sentence)."""
    end = text.find("?")
    if end < 0:
        end = text.find(". ")
    return text if end < 0 else text[:end + 1]


def _fence(text: str, lang: str) -> str:
    ticks = "`" * max(3, max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    return f"{ticks}{lang}\n{text.rstrip()}\n{ticks}"


def page_markdown(ex: Example, figures: dict[str, bytes], output: str) -> str:
    """The example's page."""
    rel = ex.path.relative_to(ROOT).as_posix()
    parts = [f"# {_md(ex.title)}", "", _md(ex.question), ""]
    parts += [_md(p) + "\n" for p in ex.more]
    for fig in _ordered(figures, ex.name):
        kind = "Animation" if fig.endswith(".gif") else "Figure"
        parts += [f"![{kind}: {_md(ex.title)} ({fig})]({ex.name}/{fig})", ""]
    if output:
        parts += ["What it prints:", "", _fence(output, "text"), ""]
    parts += ["## Run it", "",
              "From the repository root, with attnflow installed:", "",
              _fence(f"# default size (under a minute on a laptop CPU); the figures go to the current folder\n"
                     f"python {rel}\n"
                     f"# tiny sizes, a few seconds\n"
                     f"python {rel} --size smoke --out figures/\n"
                     f"python {rel} --help", "bash"), "",
              "From Python, `runpy.run_path(\"" + rel + "\")[\"main\"](size=\"smoke\", out=\"figures\")` runs it "
              "and returns the files it wrote.", "",
              "## Source", "", f"`{rel}`", "", _fence(ex.source, "python"), ""]
    return "\n".join(parts)


def index_markdown(examples: list[Example], figures: dict, cards: bool) -> str:
    """The gallery's front page: every example with its thumbnail, title and question."""
    parts = ["# Gallery", "",
             "Each example is one short script in `examples/` that answers one question with attnflow's "
             "public API and draws its answer. Every script runs in under a minute on a laptop CPU "
             "(`--size smoke` in seconds) and writes its figures to `--out`.", ""]
    if cards:
        parts += ['<div class="grid cards" markdown>', ""]
        for ex in examples:
            title, question = _md(ex.title), _md(_question(ex.question))
            parts += [f"-   [![Thumbnail: {title}]({ex.name}/{ex.name}.png){{ .gallery-thumb }}]({ex.name}.md)",
                      "", f"    **[{ex.number}. {title}]({ex.name}.md)**", "", f"    {question}", ""]
        parts += ["</div>", ""]
    else:
        for ex in examples:
            title, question = _md(ex.title), _md(_question(ex.question))
            parts += [f"## [{ex.number}. {title}]({ex.name}.md)", "",
                      f"[![Thumbnail: {title}]({ex.name}/{ex.name}.png)]({ex.name}.md)", "", question, ""]
    return "\n".join(parts)


def on_config(config):
    if CSS not in [str(c) for c in config.extra_css]:
        config.extra_css.append(CSS)
    return config


def on_files(files, config):
    # the hooks are code, not pages (also when the config does not exclude them)
    for f in list(files):
        if f.abs_src_path and Path(f.abs_src_path).resolve() == Path(__file__).resolve():
            files.remove(f)
    examples = discover()
    if not examples:
        raise PluginError(f"gallery: no examples (NN_name.py) in {EXAMPLES}")
    made = _figures(examples)
    cards = "md_in_html" in config.markdown_extensions and "attr_list" in config.markdown_extensions
    generated = {f"{SECTION}/index.md": index_markdown(examples, made, cards).encode(), CSS: _STYLE.encode()}
    for ex in examples:
        figures, output = made[ex.name]
        generated[f"{SECTION}/{ex.name}.md"] = page_markdown(ex, figures, output).encode()
        for fig, data in figures.items():
            generated[f"{SECTION}/{ex.name}/{fig}"] = data
    for uri, content in generated.items():
        old = files.get_file_from_path(uri)
        if old is not None:
            files.remove(old)
        inclusion = InclusionLevel.INCLUDED if uri == f"{SECTION}/index.md" or not uri.endswith(".md") \
            else InclusionLevel.NOT_IN_NAV
        files.append(File.generated(config, uri, content=content, inclusion=inclusion))
    return files
