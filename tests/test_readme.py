"""Every Python example in README.md and in the documentation pages (docs/**/*.md) runs as written.

Blocks fenced as ```python are executed, each in a fresh namespace; keep them quick (tiny sizes).
Snippets that are not meant to run on their own (a file's excerpt, a sketch with placeholders)
are fenced as ```py instead and are only shown.
"""

import re
import textwrap
from pathlib import Path

import matplotlib
import pytest

matplotlib.use("Agg")  # the examples may draw figures; never open a window

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
# a fence may be indented (inside a list item): its lines are dedented by the fence's indent
FENCE = re.compile(r"^([ \t]*)```python\n(.*?)^\1```", re.S | re.M)
BLOCKS = [(doc.relative_to(ROOT).as_posix(), textwrap.dedent(m.group(2))) for doc in DOCS
          for m in FENCE.finditer(doc.read_text())]
IDS = [f"{name}-{i}" for i, (name, _) in enumerate(BLOCKS)]


def test_docs_have_examples():
    assert any(name == "README.md" for name, _ in BLOCKS)
    assert len({name for name, _ in BLOCKS}) >= 5


@pytest.mark.parametrize("index", range(len(BLOCKS)), ids=IDS)
def test_readme_example_runs(index, capsys):
    name, block = BLOCKS[index]
    exec(compile(block, f"{name}[python block {index}]", "exec"), {})
