"""Every Python example in README.md and docs/architecture.md runs as written."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", ROOT / "docs" / "architecture.md"]
BLOCKS = [(doc.name, block) for doc in DOCS for block in re.findall(r"```python\n(.*?)```", doc.read_text(), re.S)]


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_runs(index, capsys):
    name, block = BLOCKS[index]
    exec(compile(block, f"{name}[python block {index}]", "exec"), {})
