r"""mkdocs hook: the TeX of every page (``\(...\)`` and ``\[...\]`` from pymdownx.arithmatex in generic
mode, in the guide's Markdown and in the API pages' docstrings, whose ``:math:`` roles and
``.. math::`` blocks docs/hooks/griffe_docstrings.py turns into the same markup) becomes MathML at
build time, with latex2mathml. Browsers render MathML natively, so the site needs no script and no
network.

latex2mathml passes a command it does not know through as text (``\arg`` came out as the letters
``\arg``), so each expression is adapted before conversion (TeX's operator names it lacks, multi-line
displays) and its output mended where latex2mathml leaves an escape in the text (``\_`` in ``\text``,
a delimiter after ``\big``). An expression whose MathML still shows TeX is kept as TeX and logged as
a warning, which ``mkdocs build --strict`` (``make docs``, the test suite) turns into an error naming
it.
"""

from __future__ import annotations

import html
import logging
import re

from latex2mathml.converter import convert

log = logging.getLogger("mkdocs.hooks.maths")

_INLINE = re.compile(r'<span class="arithmatex">\\\((.*?)\\\)</span>', re.S)
_DISPLAY = re.compile(r'<div class="arithmatex">\\\[(.*?)\\\]</div>', re.S)

#: TeX's built-in operator names (\arg, \deg, ...); those latex2mathml does not know are rewritten
#: to \operatorname{...}, found once at import
_TEX_OPERATORS = ("arccos arcsin arctan arg cos cosh cot coth csc deg det dim exp gcd hom inf ker lg lim "
                  "liminf limsup ln log max min Pr sec sin sinh sup tan tanh").split()


def _raw_text(mathml: str) -> str | None:
    """The first piece of TeX left in ``mathml``'s text (a command latex2mathml passed through, or an
    unescaped ``&`` column mark outside an environment), else None."""
    for text in re.findall(r">([^<]+)<", mathml):
        if "\\" in text or text.strip() == "&":
            return text
    return None


_MISSING = tuple(name for name in _TEX_OPERATORS if _raw_text(convert("\\" + name)) is not None)
_OPERATOR = re.compile(r"\\(" + "|".join(_MISSING) + r")(?![A-Za-z])") if _MISSING else None

#: what latex2mathml leaves as text, and the character it stands for
_LEFT_AS_TEXT = {r"\_": "_", r"\{": "{", r"\}": "}", r"\%": "%", r"\&": "&amp;", r"\#": "#", r"\$": "$",
                 r"\|": "\u2016", r"\Vert": "\u2016", r"\lVert": "\u2016", r"\rVert": "\u2016",
                 r"\vert": "|", r"\lvert": "|", r"\rvert": "|", r"\langle": "\u27e8", r"\rangle": "\u27e9",
                 r"\lfloor": "\u230a", r"\rfloor": "\u230b", r"\lceil": "\u2308", r"\rceil": "\u2309"}
_TEXT_ESCAPE = re.compile("|".join(re.escape(k) + (r"(?![A-Za-z])" if k[-1].isalpha() else "")
                                   for k in sorted(_LEFT_AS_TEXT, key=len, reverse=True)))


def prepare(tex: str, display: str) -> str:
    r"""``tex`` adapted to latex2mathml: TeX operator names it lacks become ``\operatorname``, and a
    display with line breaks (``\\``) or ``&`` outside an environment becomes a ``split`` (as Sphinx's
    ``math`` directive does)."""
    tex = tex.strip()
    if _OPERATOR is not None:
        tex = _OPERATOR.sub(r"\\operatorname{\1}", tex)
    if display == "block" and "\\begin" not in tex and ("\\\\" in tex or re.search(r"(?<!\\)&", tex)):
        tex = "\\begin{split}" + tex + "\\end{split}"
    return tex


def _mend(mathml: str) -> str:
    """Replace the escapes latex2mathml left in text nodes by their characters."""
    return re.sub(r">([^<]+)<", lambda m: ">" + _TEXT_ESCAPE.sub(lambda e: _LEFT_AS_TEXT[e.group(0)],
                                                                 m.group(1)) + "<", mathml)


def to_mathml(tex: str, display: str = "inline") -> str | None:
    """MathML of ``tex`` (``display`` "inline" or "block"), or None, with a warning, when some of it
    would stay TeX."""
    try:
        out = _mend(convert(prepare(tex, display), display=display))
    except Exception as err:  # noqa: BLE001 - any parse failure keeps the TeX (and warns)
        log.warning("maths left as TeX (latex2mathml: %s: %s): %s", type(err).__name__, err, tex[:120])
        return None
    left = _raw_text(out)
    if left is not None:
        log.warning("maths left as TeX (latex2mathml does not render %r): %s", left.strip(), tex[:120])
        return None
    return out


def _replace(pattern: re.Pattern, display: str, wrap: str, text: str) -> str:
    def one(m: re.Match) -> str:
        out = to_mathml(html.unescape(m.group(1)), display)
        return m.group(0) if out is None else wrap.format(out)

    return pattern.sub(one, text)


def on_page_content(html_text: str, **kwargs) -> str:
    html_text = _replace(_DISPLAY, "block", '<div class="arithmatex">{}</div>', html_text)
    return _replace(_INLINE, "inline", '<span class="arithmatex">{}</span>', html_text)
