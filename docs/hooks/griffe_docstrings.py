"""Griffe extension used by the documentation build (mkdocs.yml, mkdocstrings' ``extensions``).

attnflow's docstrings follow Google style with two habits that griffe's Google parser reads
differently from a human, so this extension adapts the text before it is parsed (the code is
untouched):

* an ``Example:`` section (Google's own spelling) is read as ``Examples:``, so that its doctest
  lines render as code instead of Markdown;
* Sphinx roles (``:class:`~attnflow.X```, ``:math:`...```) are shown as inline code;
* an argument line naming several parameters at once (``Q, K, V: ...`` or ``ts / num_saves: ...``)
  becomes one entry per parameter, each with the shared description.
"""

from __future__ import annotations

import re

import griffe

_ROLE = re.compile(r":(?:class|func|meth|mod|attr|obj|data|exc|math|const):`~?([^`]+)`")
_EXAMPLE = re.compile(r"^(\s*)Example:\s*$", re.M)
_SECTION = re.compile(r"^(\s*)(Args|Arguments|Parameters|Attributes|Keyword Args|Keyword Arguments):\s*$")
_MULTI = re.compile(r"^(\s+)([A-Za-z_*][\w*]*(?:\s*(?:,|/)\s*[A-Za-z_*][\w*]*)+)\s*:(.*)$")


def _split_names(text: str) -> str:
    lines = text.split("\n")
    out: list[str] = []
    in_args, indent = False, None
    i = 0
    while i < len(lines):
        line = lines[i]
        head = _SECTION.match(line)
        if head:
            in_args, indent = True, None
            out.append(line)
            i += 1
            continue
        m = _MULTI.match(line) if in_args else None
        if in_args and line.strip() and indent is None:
            indent = len(line) - len(line.lstrip())
        if in_args and line.strip() and indent is not None and len(line) - len(line.lstrip()) < indent:
            in_args = False
            m = None
        if m and len(m.group(1)) == indent:
            # the entry's continuation lines (indented deeper than the entry)
            body = [m.group(3)]
            j = i + 1
            while j < len(lines) and (not lines[j].strip() or len(lines[j]) - len(lines[j].lstrip()) > indent):
                if not lines[j].strip() and (j + 1 >= len(lines) or len(lines[j + 1]) - len(lines[j + 1].lstrip()) <= indent):
                    break
                body.append(lines[j])
                j += 1
            for name in re.split(r"\s*(?:,|/)\s*", m.group(2)):
                out.append(f"{m.group(1)}{name}:{body[0]}")
                out.extend(body[1:])
            i = j
            continue
        out.append(line)
        i += 1
    return "\n".join(out)


class AttnflowDocstrings(griffe.Extension):
    """Rewrite ``Example:`` to ``Examples:`` and split multi-name argument entries."""

    def _fix(self, obj) -> None:
        doc = obj.docstring
        if doc is None:
            return
        value = _EXAMPLE.sub(r"\1Examples:", doc.value)
        value = _ROLE.sub(r"`\1`", value)  # Sphinx roles (:class:`~a.B`, :math:`x`) read as code
        doc.value = _split_names(value)

    def on_instance(self, *, obj, **kwargs) -> None:  # noqa: D102
        self._fix(obj)
