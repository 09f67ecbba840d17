"""The project's text speaks to its users: no development-log wording anywhere.

Every text file of the repository (``git ls-files``, tracked and new files that git does not
ignore, when this is a git checkout; else a walk of the tree that skips ``.venv``, ``results``,
``site``, caches and binary files) is read line by line, and every match of :data:`PATTERNS` is
reported as ``file:line: matched text (what the pattern is for)``. Measurement history belongs in
``benchmarks/NOTES.md`` / ``RESULTS.md`` named by machine and date (``AMD EPYC 2-core,
2026-11-30``), never by a work session or an internal item number.

The patterns, and what they leave alone:

* **work sessions**: "session" / "sessions" as a word ("Session 5", "this session's machine",
  "session-4 code"), but not pytest's ``scope="session"`` (quoted: :data:`ALLOWED`) nor words
  that contain it ("possession");
* **internal item numbers**: "issue 10", "issue-13", "issue #5", "(item 3)", "ticket 4", "task 2",
  and "the issue's" / "this issue's" (an item referred to as if the reader knew it); general
  prose about a user filing "a GitHub issue" passes;
* **people and agents of the development**: "the lead" / "lead's" / "(lead)" in prose, "helper agent",
  "a helper's tests", "sub-agent", "engineer(s)"; "helper function", "the leading axes" and code
  such as ``reshape(lead)`` pass;
* **how the work was run**: "this task had no device", "was lent", "lent to this session",
  "Stop 3" (a numbered stop), and a run folder named after a session (``...-2026-11-30-s5``).
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
THIS = Path(__file__).resolve()

#: (name, regular expression) of development-log wording; matched case-insensitively unless the
#: expression says otherwise with (?-i:...)
PATTERNS: list[tuple[str, str]] = [
    ("a work session", r"\bsessions?\b"),
    ("an internal item number", r"\b(?:issues?|items?|tickets?|tasks?)[ -]?#?\d+\b"),
    ("an internal item", r"\b(?:the|this|that) issue'?s\b"),
    ("the lead", r"\bthe lead\b(?!-)|\blead's\b|(?<![\w.])\(lead\)"),
    ("a helper agent", r"\bhelper(?:'s|s'?)? (?:agents?|sessions?|engineers?|tests|runs?|jobs?)\b"
                       r"|\bsub-?agents?\b|\bagent(?:'s)? (?:session|run)s?\b"),
    ("an engineer of the project", r"\bengineers?(?:'s|s')?\b"),
    ("how the work was run", r"\b(?:this|that|the) task (?:had|has|was)\b|\bwas lent\b|\blent to (?:this|that|the)\b"
                             r"|(?-i:\bStop \d+\b)"),
    ("a run folder named after a session", r"\b\d{4}-\d{2}-\d{2}-s\d+\b"),
]

#: text removed from a line before the patterns are matched (legitimate uses)
ALLOWED: list[str] = [
    r"""scope\s*=\s*["']session["']""",  # pytest fixture scope
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
        if path.suffix.lower() in BINARY_SUFFIXES or not path.is_file() or path.resolve() == THIS:
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


CAUGHT = [
    "# Performance notes (issue 5): what was profiled",
    "Run the issue-13 studies",
    "since issue 10 the table is sorted",
    "fixed in (issue 22)",
    "see issue #7",
    "Not adopted (item 1: the fusion already hides it)",
    "## Session 5 (AMD EPYC 2-core)",
    "the session-4 2-core AMD EPYC",
    "No GPU was lent to this session.",
    "this task had no device",
    "Every issue-14 target is met",
    "Against the issue's targets",
    "(before this issue's change)",
    "`project_qk` is the lead's",
    "After the merge (lead): cheaper scores",
    "needs the lead to agree",
    "load 1.4-3.5 from a helper's tests",
    "a helper agent ran the sweep",
    "the sub-agent wrote it",
    "other engineers' jobs shared the machine",
    "Stop 3: the report",
    "raw: benchmarks/runs/cpu-epyc-2026-11-30-s5/suite/",
]

PASSED = [
    '@pytest.fixture(scope="session")',
    "@pytest.fixture(scope='session')",
    "def _free_port():  # a helper function for the distributed test",
    "# the row helpers need it at module level",
    "Q, K: (*lead, m, d) query and key matrices",
    "leading axes {lead} of Q",
    "return c.reshape(lead), jnp.abs(lead)",
    "the leader tokens of each real head",
    "If the numbers look wrong, please open a GitHub issue with the config.",
    "possession of the tokens",
    "the solver may stop early; steps 1 to 3 are kept",
    "benchmarks/runs/cpu-epyc-2026-11-30-groups/suite/",
    "rank 2 issue: the tokens sit on hyperplanes",
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
    (tmp_path / "pkg" / "mod.py").write_text("x = 1  # Session 5\n")
    (tmp_path / ".venv" / "lib").mkdir(parents=True)
    (tmp_path / ".venv" / "lib" / "x.py").write_text("# session 1\n")
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "report.md").write_text("session\n")
    (tmp_path / "fig.png").write_bytes(b"\x89PNG\0session")
    files = [p.relative_to(tmp_path).as_posix() for p in text_files(tmp_path)]
    assert files == ["pkg/mod.py"]
