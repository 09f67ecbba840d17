"""Griffe extension used by the documentation build (mkdocs.yml, mkdocstrings' ``extensions``).

attnflow's docstrings follow Google style with two habits that griffe's Google parser reads
differently from a human, so this extension adapts the text before it is parsed (the code is
untouched):

* an ``Example:`` section (Google's own spelling) is read as ``Examples:``, so that its doctest
  lines render as code instead of Markdown;
* maths: a ``:math:`...``` role becomes ``\\(...\\)`` and a ``.. math::`` block becomes ``\\[...\\]``,
  the markup pymdownx.arithmatex reads in the guide's pages, so docs/hooks/maths.py turns both
  into MathML the same way;
* the other Sphinx roles (``:class:`~attnflow.X```, ``:func:``, ...) are shown as inline code;
* an argument line naming several parameters at once (``Q, K, V: ...`` or ``ts / num_saves: ...``)
  becomes one entry per parameter, each with the shared description.
"""

from __future__ import annotations

import re

import griffe

_ROLE = re.compile(r":(?:class|func|meth|mod|attr|obj|data|exc|const):`~?([^`]+)`")
_MATH_ROLE = re.compile(r":math:`([^`]+)`")
_MATH_BLOCK = re.compile(r"^(?P<indent>[ \t]*)\.\. math::[ \t]*(?P<first>.*)$")
_EXAMPLE = re.compile(r"^(\s*)Example:\s*$", re.M)
_SECTION = re.compile(r"^(\s*)(Args|Arguments|Parameters|Attributes|Keyword Args|Keyword Arguments):\s*$")
_MULTI = re.compile(r"^(\s+)([A-Za-z_*][\w*]*(?:\s*(?:,|/)\s*[A-Za-z_*][\w*]*)+)\s*:(.*)$")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


#: a docstring that is not a raw string reads ``\beta`` as a backspace and "eta" (``\frac``, ``\tau``,
#: ``\rho``, ``\vec``, ``\alpha`` likewise); inside maths these characters can only be such escapes
_CONTROL = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\t": "\\t", "\r": "\\r", "\v": "\\v"}
_CONTROL_RE = re.compile("[" + "".join(_CONTROL) + "]")


def _tex(text: str) -> str:
    """Maths text with the escapes a non-raw docstring swallowed put back."""
    return _CONTROL_RE.sub(lambda m: _CONTROL[m.group(0)], text)


def _maths(text: str) -> str:
    r"""``:math:`tex``` -> ``\(tex\)``; a ``.. math::`` block (its first line and the lines indented
    deeper than the directive, up to a blank line or a dedent) -> a paragraph ``\[ ... \]`` at the
    directive's indentation, with a blank line on either side."""
    text = _MATH_ROLE.sub(lambda m: "\\(" + " ".join(_tex(m.group(1)).split()) + "\\)", text)
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        m = _MATH_BLOCK.match(lines[i])
        if not m:
            out.append(lines[i])
            i += 1
            continue
        indent = m.group("indent")
        body = [_tex(m.group("first").strip(" ")).strip()] if m.group("first").strip() else []
        j = i + 1
        while j < len(lines):
            line = lines[j]
            if not line.strip():
                if body:  # a blank line ends the block (the bare directive's first blank line does not)
                    break
            elif _indent(line) <= len(indent):
                break
            else:
                body.append(_tex(line.strip(" ")).strip())
            j += 1
        if out and out[-1].strip():
            out.append("")
        out += [f"{indent}\\[", *(f"{indent}{b}" for b in body), f"{indent}\\]"]
        if j < len(lines) and lines[j].strip():
            out.append("")
        i = j
    return "\n".join(out)


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
    """Rewrite ``Example:`` to ``Examples:``, maths to arithmatex markup, other roles to code, and
    split multi-name argument entries."""

    def _fix(self, obj) -> None:
        doc = obj.docstring
        if doc is None:
            return
        value = _EXAMPLE.sub(r"\1Examples:", doc.value)
        value = _maths(value)
        value = _ROLE.sub(r"`\1`", value)  # the other Sphinx roles (:class:`~a.B`) read as code
        doc.value = _split_names(value)

    def on_instance(self, *, obj, **kwargs) -> None:  # noqa: D102
        self._fix(obj)
