"""``attnflow reproduce``: run the cases, write the report folder atomically.

The report is written into a temporary sibling folder and swapped in at the end, so a
failed or interrupted run never leaves a half-overwritten report.
"""

from __future__ import annotations

from .._x64 import in_float64

import dataclasses
import os
import shutil
import time
from pathlib import Path

from ..errors import InputError
from ..runs import (
    Run,
    atomic_write_json,
    atomic_write_text,
    count_kept,
    discard_output_dir,
    releases_output_dirs,
    load_config,
    open_run,
    provenance,
    write_rows,
)
from ._base import CaseResult, CaseSettings, Context
from ._catalogue import CASES
from .._resources import announce_work
from ._config import ReproduceConfig, case_work, parse_reproduce_config, resolve_settings
from ._render import render_markdown

__all__ = ["reproduce", "case_names", "resolve_settings"]

KIND = "reproduce"
DEFAULT_OUT = "results/reproduce"


def case_names() -> list[str]:
    """All case names, in report order.

    Example:
        >>> from attnflow.report import case_names
        >>> case_names()[:2]
        ['thm2_1', 'thm3_1']
    """
    return list(CASES)


@in_float64
@releases_output_dirs
def reproduce(out: str | os.PathLike = DEFAULT_OUT, *, config: str | os.PathLike | None = None,
              quick: bool = False, cases: list[str] | None = None, progress: bool = True,
              field_factory=None, figures: bool = True, overrides: dict | None = None) -> dict:
    """Run the selected cases (default: the config's ``cases``, or all) and write the report
    folder ``out`` (report.md, summary.json, checks.csv, systems.csv, figures, config, provenance).

    A case that raises (e.g. a solve that overflows) is recorded as failed with the reason and
    its time; the other cases still run and the report is written (``summary["all_passed"]`` is
    then False). ``field_factory`` replaces the integrated vector field (see
    :class:`~attnflow.report.Context`; the mutation tests pass wrong ones); ``figures=False``
    skips drawing; ``overrides`` ({key: value} or {case: {key: value}}) is overlaid on the
    config (same validation as a --config file). Runs in float64 scope (``attnflow._x64``).

    Returns the summary dict (also written to ``summary.json``).

    Example:
        >>> from attnflow.report import reproduce
        >>> import tempfile, os
        >>> d = tempfile.mkdtemp()
        >>> s = reproduce(os.path.join(d, "r"), quick=True, cases=["remark7_9"], progress=False, figures=False)
        >>> [c["name"] for c in s["checks"]]
        ["solves the paper's equation", 'clusters of z', 'rank of lim P', 'raw |x_1 - x_2| non-decreasing']
    """
    cfg = load_config(config, "reproduce.toml")
    if overrides:
        from ..runs import merge_config

        cfg = merge_config(cfg, overrides)
    parsed = parse_reproduce_config(cfg)  # every key checked, before any work
    known = case_names()
    selected = list(cases) if cases else (list(parsed.cases) or known)
    unknown = [c for c in selected if c not in known]
    if unknown:
        raise InputError(f"unknown case name(s) {', '.join(map(repr, unknown))}; known cases: {', '.join(known)}.")
    selected = [c for c in known if c in selected]  # report order, no duplicates
    settings = {name: resolve_settings(parsed, name, quick) for name in selected}  # sizes and work checked
    work = [case_work(name, settings[name]) for name in selected]  # said on stderr when it is long
    announce_work(f"reproduce ({len(selected)} case(s))", sum(w[0] for w in work), sum(w[1] for w in work))

    out = Path(out)
    existed = out.exists()
    # refuses files and foreign folders before any work; a previous report is replaced as a whole at the end
    run = open_run(out, KIND, parsed, seed=int(parsed.seed), replaces=True)
    out = run.out
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    try:
        context = {"figures": figures} | ({"field_factory": field_factory} if field_factory else {})
        summary = _run(dataclasses.replace(run, out=tmp), parsed, settings, selected, quick, progress, context)
        _swap(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if not existed:
            discard_output_dir(out)
        raise
    return summary


def _swap(tmp: Path, out: Path) -> None:
    old = out.parent / f".{out.name}.old-{os.getpid()}"
    if out.exists():
        os.replace(out, old)
    os.replace(tmp, out)
    if old.exists():
        shutil.rmtree(old, ignore_errors=True)


def _run(run: Run, config: ReproduceConfig, settings: dict[str, CaseSettings], selected: list[str], quick: bool,
         progress: bool, context: dict | None = None) -> dict:
    """Run the cases into ``run.out`` (the report's temporary folder: the opened run, staged) and write the report."""
    from tqdm.auto import tqdm

    start = time.time()
    folder = run.out
    seed = int(config.seed)
    cfg = config.as_dict()
    prov = provenance(seed=seed, fingerprint=run.fingerprint)
    atomic_write_json(folder / "config.json", {"config": cfg, "quick": quick, "cases": selected,
                                               "resolved": {name: s.as_dict() for name, s in settings.items()}})
    atomic_write_json(folder / "provenance.json", prov)
    results: list[CaseResult] = []
    done = count_kept(len(selected), "cases", resumes=False)  # the report is swapped in only at the end
    bar = tqdm(selected, desc="reproduce", unit="case", disable=not progress)
    for name in bar:
        bar.set_postfix_str(name)
        t = time.time()
        title, theorem, fn = CASES[name]
        res = CaseResult(name, title, theorem)
        try:
            fn(Context(name, settings[name], folder, quick, seed, **(context or {})), res)
        except Exception as exc:  # a failing case never loses the report: record it, run the others
            res.error = f"{type(exc).__name__}: {exc}".strip()
            res.check("case ran to the end", "the case's simulation and checks finish",
                      f"stopped after {time.time() - t:.1f} s: {res.error}", False, -1.0,
                      note="the checks recorded before the failure are kept")
        res.seconds = time.time() - t
        res.settings.setdefault("resolved", settings[name].as_dict())
        results.append(res)
        done.add()
    seconds = time.time() - start
    checks = [c.to_json() for r in results for c in r.checks]
    graded = [c for c in checks if c["passed"] is not None]
    summary = {
        "kind": KIND,
        "quick": quick,
        "seconds": seconds,
        "num_checks": len(checks),
        "num_graded": len(graded),
        "num_passed": sum(bool(c["passed"]) for c in graded),
        "all_passed": all(c["passed"] for c in graded) and not any(r.error for r in results),
        "failed_cases": {r.name: r.error for r in results if r.error},
        "checks": checks,
        "cases": {r.name: {"title": r.title, "theorem": r.theorem, "hypotheses": r.hypotheses,
                           "figures": [f for f, _ in r.figures], "notes": r.notes, "seconds": r.seconds,
                           "error": r.error,
                           "predicted_geometry": r.settings.get("predicted_geometry"),
                           "settings": r.settings.get("resolved")} for r in results},
        "seed": seed,
        "git_commit": prov["git_commit"],
        "versions": prov["versions"],
    }
    atomic_write_json(folder / "summary.json", summary)
    write_rows(folder / "checks.csv", checks, ["case", "name", "hypotheses", "predicted", "observed", "passed",
                                               "margin", "note"], lineterminator="\r\n")
    rows = [row for r in results for row in r.systems]
    if rows:
        write_rows(folder / "systems.csv", rows, lineterminator="\r\n")
    atomic_write_text(folder / "report.md", render_markdown(results, prov, config.defaults, quick, seconds))
    run.mark(git_commit=prov["git_commit"], quick=quick)
    return summary
