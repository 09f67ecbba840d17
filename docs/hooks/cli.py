"""mkdocs hook: fill the command-line reference (api/cli.md) with ``attnflow COMMAND --help``.

The page holds the marker ``<!-- attnflow-cli-help -->``; at build time it is replaced by the
help text of ``attnflow`` and of each of its commands, run with this Python, so the page always
matches the code.
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

MARKER = "<!-- attnflow-cli-help -->"
COMMANDS = ("reproduce", "sweep", "track", "heads", "probe", "extensions")
ROOT = Path(__file__).resolve().parents[2]
_cache: dict[str, str] = {}


def _help(args: list[str]) -> str:
    key = " ".join(args)
    if key not in _cache:
        env = {**os.environ, "COLUMNS": "96", "PYTHONPATH": str(ROOT)}
        out = subprocess.run([sys.executable, "-m", "attnflow", *args, "--help"], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            raise RuntimeError(f"attnflow {key} --help failed: {out.stderr.strip()}")
        _cache[key] = out.stdout.rstrip()
    return _cache[key]


def _section(name: str | None) -> str:
    title = f"attnflow {name}" if name else "attnflow"
    anchor = f"attnflow-{name}" if name else "attnflow"
    text = _help([name] if name else [])
    return f"## `{title}` {{ #{anchor} }}\n\n```text\n{text}\n```\n"


def on_page_markdown(markdown, page, config, files):
    if MARKER not in markdown:
        return markdown
    with ThreadPoolExecutor(4) as pool:  # each --help is its own short process
        body = "\n".join(pool.map(_section, (None, *COMMANDS)))
    return markdown.replace(MARKER, body)
