"""The project's text speaks to its users: no development-log wording anywhere.

Every text file of the repository (``git ls-files``, tracked and new files that git does not
ignore, when this is a git checkout; else a walk of the tree that skips ``.venv``, ``results``,
``site``, caches and binary files) is read line by line, and every match of :data:`PATTERNS` is
reported as ``file:line: matched text (what the pattern is for)``. Measurement history belongs in
``benchmarks/NOTES.md`` / ``RESULTS.md`` named by machine and date (``AMD EPYC 2-core,
2026-11-30``).

What the patterns catch, by family (the synthetic lines of :data:`CAUGHT` show each one):
numbered meetings of the development and the folders named after them; numbered tracker entries
and entries referred to as if the reader knew them; the people and agents who did the work; how
the work was run (which machine was handed over, numbered stops). What they leave alone
(:data:`PASSED`): pytest's fixture scope, words that contain a caught word, "helper function",
"the leading axes", code such as ``reshape(lead)``, and general prose about a user filing a
GitHub report.

The words themselves are assembled from fragments (:func:`_w`) so that this file, which is read
by the test like every other, speaks of none of them.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

def _w(*fragments: str) -> str:
    """A word from its fragments (see the module docstring)."""
    return "".join(fragments)


SES, ISS, ITM, TIC, TSK = _w("ses", "sion"), _w("is", "sue"), _w("it", "em"), _w("tic", "ket"), _w("ta", "sk")
LEAD, HELP, AGT, ENG, STOP, LENT = _w("le", "ad"), _w("hel", "per"), _w("ag", "ent"), _w("engi", "neer"), \
    _w("St", "op"), _w("le", "nt")

#: (name, regular expression) of development-log wording; matched case-insensitively unless the
#: expression says otherwise with (?-i:...)
PATTERNS: list[tuple[str, str]] = [
    (f"a work {SES}", rf"\b{SES}s?\b"),
    (f"an internal {ITM} number", rf"\b(?:{ISS}s?|{ITM}s?|{TIC}s?|{TSK}s?)[ -]?#?\d+\b"),
    (f"an internal {ITM}", rf"\b(?:the|this|that) {ISS}'?s\b"),
    (f"the {LEAD}", rf"\bthe {LEAD}\b(?!-)|\b{LEAD}'s\b|(?<![\w.])\({LEAD}\)"),
    (f"a {HELP} {AGT}", rf"\b{HELP}(?:'s|s'?)? (?:{AGT}s?|{SES}s?|{ENG}s?|tests|runs?|jobs?)\b"
                        rf"|\bsub-?{AGT}s?\b|\b{AGT}(?:'s)? (?:{SES}|run)s?\b"),
    (f"an {ENG} of the project", rf"\b{ENG}s?(?:'s|s')?\b"),
    ("how the work was run", rf"\b(?:this|that|the) {TSK} (?:had|has|was)\b|\bwas {LENT}\b"
                             rf"|\b{LENT} to (?:this|that|the)\b|(?-i:\b{STOP} \d+\b)"),
    (f"a run folder named after a {SES}", r"\b\d{4}-\d{2}-\d{2}-s\d+\b"),
]

#: text removed from a line before the patterns are matched (legitimate uses)
ALLOWED: list[str] = [
    rf"""scope\s*=\s*["']{SES}["']""",  # pytest fixture scope
]

#: folders never read (environments, outputs, caches, version control)
SKIP_DIRS = {".git", ".venv", "venv", "results", "site", "node_modules", "__pycache__", ".pytest_cache",
             ".mypy_cache", ".ruff_cache", "build", "dist", ".ipynb_checkpoints"}
#: suffixes of files that are not text
BINARY_SUFFIXES = {".png", ".gif", ".jpg", ".jpeg", ".pdf", ".svg", ".npz", ".npy", ".safetensors", ".parquet",
                   ".pkl", ".pyc", ".so", ".zip", ".gz", ".whl", ".ico", ".woff", ".woff2", ".ttf"}

_COMPILED = [(name, re.compile(expr, re.IGNORECASE)) for name, expr in PATTERNS]
_ALLOWED = [re.compile(expr, re.IGNORECASE) for expr in ALLOWED]


def offending(line: str) -> list[tuple[str, str]]:
    """``(pattern name, matched text)`` for each development-log phrase in ``line``."""
    for allowed in _ALLOWED:
        line = allowed.sub(" ", line)
    return [(name, m.group(0)) for name, rx in _COMPILED for m in rx.finditer(line)]


def text_files(root: Path = ROOT) -> list[Path]:
    """The repository's text files: from git when this is a checkout, else a walk of the tree."""
    names = None
    if (root / ".git").exists():
        try:
            out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                                 cwd=root, capture_output=True, check=True, timeout=60).stdout
            names = [n for n in out.decode("utf-8", "replace").split("\0") if n]
        except (OSError, subprocess.SubprocessError):
            names = None
    if names is None:
        names = []
        for folder, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info")]
            names += [os.path.relpath(os.path.join(folder, f), root) for f in files]
    paths = []
    for name in sorted(set(names)):
        path = root / name
        parts = Path(name).parts
        if any(p in SKIP_DIRS or p.endswith(".egg-info") for p in parts[:-1]):
            continue
        if path.suffix.lower() in BINARY_SUFFIXES or not path.is_file():
            continue
        paths.append(path)
    return paths


def _read_text(path: Path) -> str | None:
    data = path.read_bytes()
    if b"\0" in data[:8192]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def test_no_development_log_wording():
    found = []
    for path in text_files():
        text = _read_text(path)
        if text is None:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            for name, match in offending(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {match!r} ({name})")
    assert not found, ("development-log wording in user-facing text (name the machine and the date, or the "
                       "change, instead):\n" + "\n".join(found))


#: synthetic lines each pattern must catch
CAUGHT = [
    f"# Performance notes ({ISS} 5): what was profiled",
    f"Run the {ISS}-13 studies",
    f"since {ISS} 10 the table is sorted",
    f"fixed in ({ISS} 22)",
    f"see {ISS} #7",
    f"Not adopted ({ITM} 1: the fusion already hides it)",
    f"## {SES.title()} 5 (AMD EPYC 2-core)",
    f"the {SES}-4 2-core AMD EPYC",
    f"No GPU was {LENT} to this {SES}.",
    f"this {TSK} had no device",
    f"Every {ISS}-14 target is met",
    f"Against the {ISS}'s targets",
    f"(before this {ISS}'s change)",
    f"`project_qk` is the {LEAD}'s",
    f"After the merge ({LEAD}): cheaper scores",
    f"needs the {LEAD} to agree",
    f"load 1.4-3.5 from a {HELP}'s tests",
    f"a {HELP} {AGT} ran the sweep",
    f"the sub-{AGT} wrote it",
    f"other {ENG}s' jobs shared the machine",
    f"{STOP} 3: the report",
    "raw: benchmarks/runs/cpu-epyc-2026-11-30-" + _w("s", "5") + "/suite/",
]

#: synthetic lines no pattern may catch
PASSED = [
    f'@pytest.fixture(scope="{SES}")',
    f"@pytest.fixture(scope='{SES}')",
    "def _free_port():  # a helper function for the distributed test",
    "# the row helpers need it at module level",
    "Q, K: (*lead, m, d) query and key matrices",
    "leading axes {lead} of Q",
    "return c.reshape(lead), jnp.abs(lead)",
    "the leader tokens of each real head",
    f"If the numbers look wrong, please open a GitHub {ISS} with the config.",
    "possession of the tokens",
    "the solver may stop early; steps 1 to 3 are kept",
    "benchmarks/runs/cpu-epyc-2026-11-30-groups/suite/",
    f"rank 2 {ISS}: the tokens sit on hyperplanes",
]


@pytest.mark.parametrize("line", CAUGHT)
def test_patterns_catch_development_log_wording(line):
    assert offending(line), line


@pytest.mark.parametrize("line", PASSED)
def test_patterns_pass_legitimate_uses(line):
    assert offending(line) == [], line


def test_every_pattern_is_exercised():
    """Each pattern catches at least one of the synthetic lines (none is dead)."""
    names = {name for line in CAUGHT for name, _ in offending(line)}
    assert names == {name for name, _ in PATTERNS}


def test_the_walk_without_git_skips_environments_and_binaries(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text(f"x = 1  # {SES} 5\n")
    (tmp_path / ".venv" / "lib").mkdir(parents=True)
    (tmp_path / ".venv" / "lib" / "x.py").write_text(f"# {SES} 1\n")
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "report.md").write_text(f"{SES}\n")
    (tmp_path / "fig.png").write_bytes(b"\x89PNG\0" + SES.encode())
    files = [p.relative_to(tmp_path).as_posix() for p in text_files(tmp_path)]
    assert files == ["pkg/mod.py"]
