r"""mkdocs hook: the TeX of every page (``\(...\)`` and ``\[...\]`` from pymdownx.arithmatex in generic
mode) becomes MathML at build time, with latex2mathml. Browsers render MathML natively, so the site
needs no script and no network; an expression latex2mathml cannot read stays as readable TeX."""

from __future__ import annotations

import html
import logging
import re

from latex2mathml.converter import convert

log = logging.getLogger("mkdocs.hooks.maths")

_INLINE = re.compile(r'<span class="arithmatex">\\\((.*?)\\\)</span>', re.S)
_DISPLAY = re.compile(r'<div class="arithmatex">\\\[(.*?)\\\]</div>', re.S)


def _mathml(tex: str, display: str) -> str | None:
    try:
        return convert(html.unescape(tex).strip(), display=display)
    except Exception as err:  # noqa: BLE001 - any parse failure keeps the TeX
        log.info("maths left as TeX (%s): %s", type(err).__name__, tex[:80])
        return None


def _replace(pattern: re.Pattern, display: str, wrap: str, text: str) -> str:
    def one(m: re.Match) -> str:
        out = _mathml(m.group(1), display)
        return m.group(0) if out is None else wrap.format(out)

    return pattern.sub(one, text)


def on_page_content(html_text: str, **kwargs) -> str:
    html_text = _replace(_DISPLAY, "block", '<div class="arithmatex">{}</div>', html_text)
    return _replace(_INLINE, "inline", '<span class="arithmatex">{}</span>', html_text)
