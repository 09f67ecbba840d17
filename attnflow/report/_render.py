"""report.md: the table of checks first, then one section per case with its figures."""

from __future__ import annotations

from ._base import CaseResult, CaseSettings, fmt
from ._catalogue import OUTSIDE


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def verdict(passed) -> str:
    return "info" if passed is None else ("PASS" if passed else "**FAIL**")


def hypotheses_cell(result: CaseResult) -> str:
    """The overview's hypotheses column of one case: "all hold", the conditions that fail (in bold,
    "FAIL"), or, for a case meant to run outside the theorems (``OUTSIDE``), "outside (by design)"
    with the conditions of its setup that do not hold, which are not failures.

    Example:
        >>> from attnflow.report._base import CaseResult
        >>> r = CaseResult("sec12_1_paranormal", "Sec 12.1", "Section 12.1")
        >>> r.hyp("F and G not orthogonal", False, 0.0)
        >>> hypotheses_cell(r)
        'outside (by design); does not hold: F and G not orthogonal'
        >>> r.name = "thm5_2"
        >>> hypotheses_cell(r)
        '**F and G not orthogonal FAIL**'
    """
    failing = [h["text"] for h in result.hypotheses if not h["holds"]]
    if result.name in OUTSIDE:
        return "outside (by design)" + (f"; does not hold: {'; '.join(failing)}" if failing else "")
    if not result.hypotheses:
        return "none stated"
    return "all hold" if not failing else "**" + "; ".join(failing) + " FAIL**"


def render_markdown(results: list[CaseResult], provenance: dict, defaults: CaseSettings, quick: bool,
                    seconds: float) -> str:
    """report.md of ``results``; ``defaults``: the config's global settings (stated in the header)."""
    checks = [c for r in results for c in r.checks]
    graded = [c for c in checks if c.passed is not None]
    npass = sum(bool(c.passed) for c in graded)
    lines = [
        "# attnflow reproduction report",
        "",
        "Geshkovski, Letrouit, Polyanskiy, Rigollet, *The emergence of clusters in self-attention dynamics* "
        "(arXiv 2305.05465): each theorem's hypotheses checked numerically, its predicted quantity measured "
        "on several random initial configurations (batched), predicted vs observed with a pass/fail and a "
        "margin (positive = passing by that much).",
        "",
        f"**{npass} of {len(graded)} checks pass** ({len(checks) - len(graded)} measurements without a threshold)."
        + (f" **{sum(bool(r.error) for r in results)} case(s) did not finish.**" if any(r.error for r in results)
           else "")
        + (" QUICK smoke run (tiny n, short horizon): not a reproduction." if quick else ""),
        "",
        f"Run: {provenance.get('time_utc')}, git {provenance.get('git_commit')}, seed {provenance.get('seed')}, "
        f"{defaults.batch} initial configurations per case, dtype {defaults.dtype}, "
        f"cluster tolerance {defaults.rel_tol} x the run's initial size, rank tolerance "
        f"{defaults.rank_tol}, "
        f"{seconds:.0f} s. How to read it: docs/report.md.",
        "",
        "| case | theorem | hypotheses | checks passed | failed |",
        "|---|---|---|---|---|",
    ]
    for r in results:
        g = [c for c in r.checks if c.passed is not None]
        ok = sum(bool(c.passed) for c in g)
        hyp = hypotheses_cell(r)
        failed = ", ".join(c.name for c in g if not c.passed) or "-"
        lines.append(f"| [{r.name}](#{r.name}) | {_cell(r.theorem)} | {_cell(hyp)} | {ok} / {len(g)} | {_cell(failed)} |")
    lines += [
        "",
        "All checks:",
        "",
        "| case | check | predicted | observed | result | margin |",
        "|---|---|---|---|---|---|",
    ]
    for c in checks:
        lines.append(f"| [{c.case}](#{c.case}) | {_cell(c.name)} | {_cell(c.predicted)} | {_cell(c.observed)} | "
                     f"{verdict(c.passed)} | {fmt(c.margin)} |")
    lines.append("")
    for r in results:
        lines += [f"<a id=\"{r.name}\"></a>", f"## {r.title}  (`{r.name}`, {r.theorem})", ""]
        if r.error:
            lines += [f"**This case did not finish:** {_cell(r.error)}", ""]
        if r.name in OUTSIDE:
            lines += [f"Outside the theorems' hypotheses by design: {OUTSIDE[r.name]}. The conditions below "
                      "describe the setup; one that does not hold is not a failure.", ""]
        lines.append("Hypotheses:")
        for h in r.hypotheses:
            val = "" if h["value"] is None else f" (value: {fmt(h['value'])})"
            lines.append(f"* {'✔' if h['holds'] else '✘'} {h['text']}{val}")
        pg = r.settings.get("predicted_geometry")
        if pg:
            lines.append(f"* `predict_geometry`: **{pg['geometry']}** ({pg['theorem']}, {pg.get('status', '')}: "
                         f"{pg['reason']}; reading of Q^T K > 0 needed: {pg.get('qk_reading', '-')})")
        lines.append("")
        for c in r.checks:
            note = f" — {c.note}" if c.note else ""
            lines.append(f"* {verdict(c.passed)} **{c.name}**: predicted {c.predicted}; observed {c.observed}; "
                         f"margin {fmt(c.margin)}{note}")
        for note in r.notes:
            lines += ["", f"> {note}"]
        lines.append("")
        for file, caption in r.figures:
            lines += [f"![{caption}]({file})", "", f"*{caption}*", ""]
        lines.append(f"({r.seconds:.1f} s)")
        lines.append("")
    return "\n".join(lines) + "\n"
