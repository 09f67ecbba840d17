"""mkdocs hook: the gallery, generated at build time from the scripts in ``examples/``.

Every ``examples/NN_name.py`` becomes a page ``gallery/NN_name.md`` (its title, its question,
its figures, how to run it and its full source), and ``gallery/index.md`` lists them all with a
thumbnail. Nothing is written into ``docs/``: the pages and figures are mkdocs generated files.

Where the figures come from (environment variables):

* ``ATTNFLOW_GALLERY_SIZE``: the size each example runs at, in its own process with this Python:
  ``smoke`` (the default: tiny sizes, 10-13 s each on 2 cores, a few minutes for the whole gallery
  the first time) or ``default`` (the scripts' own size, about 15 min on 2 cores: ``make docs-full``).
  The pages say which size drew their figures.
* ``ATTNFLOW_GALLERY_CACHE=DIR`` (default ``build/gallery`` in the repository, ignored by git):
  every run's figures and printed output are kept there, under a key made of the size, the
  script's source and attnflow's code (docstrings and comments left out), so a rebuild reruns
  the examples only when a script or the library's code changed (``mkdocs serve`` too).
  ``ATTNFLOW_GALLERY_CACHE=off`` keeps nothing on disk.
* ``ATTNFLOW_GALLERY_JOBS``: how many examples run at once (default: the number of CPUs, at
  most 4).
* ``ATTNFLOW_GALLERY_FROM=DIR``: take figures already produced and run nothing. ``DIR`` holds
  one subfolder per example, named after the script without ``.py``
  (``DIR/01_watch_tokens_cluster/01_watch_tokens_cluster.png``, any further ``*.png`` / ``*.gif``
  beside it, and optionally ``output.txt`` with what the script printed), or the same files
  flat in ``DIR`` (``DIR/01_watch_tokens_cluster*.png``). ``python examples/NN_name.py --out
  DIR/NN_name > DIR/NN_name/output.txt`` makes the first layout.

An example that fails, or that leaves no figure named after itself, fails the build with the
example's name and its error.

The script's module docstring supplies the page: its first line is the title, the next
paragraph the question (shown in the index too), any further paragraphs follow on the page.
"""

from __future__ import annotations

import ast
import hashlib
import os
import posixpath
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
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
SIZES = ("smoke", "default")
DEFAULT_CACHE = ROOT / "build" / "gallery"
#: (name, size, source key) -> (figures {file name: bytes}, printed output)
_cache: dict[tuple[str, str, str], tuple[dict[str, bytes], str]] = {}
#: the size that drew the figures of this build (None: taken from ATTNFLOW_GALLERY_FROM)
_drawn_at: list[str | None] = [None]


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


def _code(source: bytes) -> bytes:
    """A module's code without its docstrings and comments (its syntax tree), so that editing the
    documentation does not rerun the gallery; the source itself where it does not parse."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return source
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree).encode()


def _library_key() -> str:
    """A hash of attnflow's code (every ``*.py`` of the package, docstrings and comments left out):
    the figures depend on it as well as on the script."""
    h = hashlib.sha256()
    for path in sorted((ROOT / "attnflow").rglob("*.py")):
        h.update(path.relative_to(ROOT).as_posix().encode() + b"\0" + _code(path.read_bytes()) + b"\0")
    return h.hexdigest()


def _cache_folder() -> Path | None:
    """Where finished runs are kept on disk (``ATTNFLOW_GALLERY_CACHE``), None when switched off."""
    value = os.environ.get("ATTNFLOW_GALLERY_CACHE", "")
    if value.strip().lower() in ("off", "0", "no", "none"):
        return None
    return Path(value).expanduser().resolve() if value.strip() else DEFAULT_CACHE


def _run(example: Example, size: str, library: str, cache: Path | None) -> tuple[dict[str, bytes], str]:
    """Run one example at ``size`` in its own process (or take its run from memory or from the disk
    cache ``cache``); its figures and printed output."""
    source = hashlib.sha256((example.source + "\0" + library).encode()).hexdigest()
    key = (example.name, size, source)
    if key in _cache:
        return _cache[key]
    kept = None if cache is None else cache / size / f"{example.name}-{source[:16]}"
    if kept is not None and (kept / f"{example.name}.png").is_file():
        _cache[key] = _collect_flat(kept, example.name)
        return _cache[key]
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
        if kept is not None:
            _keep(Path(tmp), kept)
    return _cache[key]


def _keep(run: Path, kept: Path) -> None:
    """Copy a finished run into the disk cache, atomically (a temporary folder renamed), replacing
    the example's older runs at that size."""
    kept.parent.mkdir(parents=True, exist_ok=True)
    for old in kept.parent.glob(f"{kept.name.rsplit('-', 1)[0]}-*"):
        if old.is_dir() and old.name != kept.name and not old.name.startswith("."):
            shutil.rmtree(old, ignore_errors=True)
    part = Path(tempfile.mkdtemp(prefix=f".{kept.name}.", dir=kept.parent))
    for f in run.iterdir():
        if f.is_file():
            shutil.copy2(f, part / f.name)
    try:
        part.rename(kept)
    except OSError:  # another build kept the same run first
        shutil.rmtree(part, ignore_errors=True)


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
        _drawn_at[0] = None
        return {ex.name: _collect(folder, ex.name) for ex in examples}
    size = os.environ.get("ATTNFLOW_GALLERY_SIZE", "smoke")
    if size not in SIZES:
        raise PluginError(f"gallery: ATTNFLOW_GALLERY_SIZE must be 'smoke' or 'default', got {size!r}")
    jobs = os.environ.get("ATTNFLOW_GALLERY_JOBS", "")
    if jobs and not (jobs.isdigit() and int(jobs) >= 1):
        raise PluginError(f"gallery: ATTNFLOW_GALLERY_JOBS must be a whole number >= 1, got {jobs!r}")
    workers = int(jobs) if jobs else min(4, os.cpu_count() or 1)
    library, cache = _library_key(), _cache_folder()
    _drawn_at[0] = size
    with ThreadPoolExecutor(max(1, min(workers, len(examples)))) as pool:  # each run is its own process
        runs = list(pool.map(lambda ex: _run(ex, size, library, cache), examples))
    return {ex.name: run for ex, run in zip(examples, runs)}


def _size_note(size: str | None) -> list[str]:
    """The sentence saying which size drew the figures (none when they came from a folder)."""
    if size == "smoke":
        return ["!!! note \"Figures at smoke size\"", "",
                "    This build drew the figures with `--size smoke` (tiny sizes, so that the site builds in "
                "minutes). `make docs-full` draws them at each script's default size.", ""]
    return []


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
    parts += _size_note(_drawn_at[0])
    for fig in _ordered(figures, ex.name):
        kind = "Animation" if fig.endswith(".gif") else "Figure"
        parts += [f"![{kind}: {_md(ex.title)} ({fig})]({ex.name}/{fig})", ""]
    if output:
        parts += ["What it prints:", "", _fence(output, "text"), ""]
    parts += ["## Run it", "",
              "From the repository root, with attnflow installed:", "",
              _fence(f"# default size (minutes on 2 CPU cores); the figures go to the current folder\n"
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
             "public API and draws its answer. Every script runs at its default size in minutes on 2 CPU cores "
             "(`--size smoke` in seconds) and writes its figures to `--out`.", ""]
    parts += _size_note(_drawn_at[0])
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


_MD_LINK = re.compile(r"(\]\()([^)\s]+)")


def examples_links(markdown: str, src_uri: str, docs_dir: Path = ROOT / "docs") -> str:
    """A page's links to ``examples/`` (the folder, or one ``NN_name.py``) pointed at the gallery's
    pages: written as links to the scripts, they work in the repository (on a code host, in a clone)
    and, rewritten here, in the built site."""
    page_dir = (docs_dir / src_uri).parent
    here = posixpath.dirname(src_uri) or "."

    def one(m: re.Match) -> str:
        target, _, anchor = m.group(2).partition("#")
        if not target or re.match(r"[a-z][a-z0-9+.-]*:", target):
            return m.group(0)
        path = (page_dir / target).resolve()
        examples = EXAMPLES.resolve()
        if path == examples:
            page = f"{SECTION}/index.md"
        elif path.parent == examples and re.fullmatch(r"[0-9][0-9]_\w+\.py", path.name):
            page = f"{SECTION}/{path.stem}.md"
        else:
            return m.group(0)
        return m.group(1) + posixpath.relpath(page, here) + (f"#{anchor}" if anchor else "")

    return _MD_LINK.sub(one, markdown)


def on_page_markdown(markdown, page, config, files):
    return examples_links(markdown, page.file.src_uri, Path(config.docs_dir))


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
