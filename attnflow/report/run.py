"""``attnflow reproduce``: run the cases, write the report folder atomically.

The report is written into a temporary sibling folder and swapped in at the end, so a
failed or interrupted run never leaves a half-overwritten report.
"""

from __future__ import annotations

from .._x64 import in_float64

import csv
import io
import os
import shutil
import time
from pathlib import Path

from .. import _validate as v
from .._resources import check_count, check_fits
from ..errors import InputError
from ..runio import (
    MARKER,
    atomic_write_json,
    atomic_write_text,
    claim_output_dir,
    discard_output_dir,
    releases_output_dirs,
    load_config,
    provenance,
    write_marker,
)
from .base import CASES, EULER_STEPS, CaseResult, Context
from .render import render_markdown

__all__ = ["reproduce", "case_names", "resolve_settings"]

KIND = "reproduce"
DEFAULT_OUT = "results/reproduce"
GLOBAL_KEYS = ("dtype", "batch", "rel_tol", "rank_tol", "num_saves", "max_steps", "gif_frames")


def case_names() -> list[str]:
    """All case names, in report order.

    Example:
        >>> from attnflow.report import case_names
        >>> case_names()[:2]
        ['thm2_1', 'thm3_1']
    """
    import attnflow.report.cases  # noqa: F401  (registers the cases)

    return list(CASES)


_fraction = lambda meaning: lambda key, x: v.check_number(key, x, meaning, low=0, high=1)
_positive = lambda meaning: lambda key, x: v.check_number(key, x, meaning, low=0)
#: the check of every setting a reproduce config may hold (globally, in [quick] or in a case's table)
_SETTINGS = {
    "dtype": lambda key, x: v.check_choice(key, x, ("float32", "float64"), "the precision of the solves"),
    "batch": lambda key, x: v.check_int(key, x, 1, "random initial configurations per case"),
    "n": lambda key, x: v.check_int(key, x, 1, "tokens"),
    "d": lambda key, x: v.check_int(key, x, 1, "the token dimension"),
    "num_saves": lambda key, x: v.check_int(key, x, 2, "save times from 0 to t1"),
    "max_steps": lambda key, x: check_count(key, v.check_int(key, x, 1, "steps of an adaptive solve"),
                                            fix=f"lower {key}"),
    "gif_frames": lambda key, x: v.check_int(key, x, 0, "frames per animation; 0: none"),
    "rel_tol": _fraction("the cluster and level tolerance, a fraction of the initial size"),
    "rank_tol": _fraction("the numerical rank's threshold, relative to the largest singular value"),
    "t1": _positive("the horizon"),
    "eps": _positive("the perturbation's size"),
    "x0_scale": _positive("the initial tokens' standard deviation"),
}


def _check_table(table: dict, prefix: str) -> None:
    """Check every known setting of one table of the config (``prefix``: ``""``, ``"quick."``, ``"thm2_1."``)."""
    for key, value in table.items():
        if key in _SETTINGS:
            _SETTINGS[key](f"{prefix}{key}", value)


def _validate_global(cfg: dict) -> None:
    """Every key: seed, cases, the global settings, [quick] and every case's table (selected or not)."""
    v.check_int("seed", cfg["seed"], 0, "the seed of every case's draws")
    v.check_names("cases", cfg["cases"], case_names(), "the cases to run; empty: all", allow_empty=True)
    _check_table({k: cfg[k] for k in GLOBAL_KEYS}, "")
    _check_table(cfg["quick"], "quick.")
    for name in case_names():
        _check_table(cfg.get(name, {}), f"{name}.")


def resolve_settings(cfg: dict, name: str, quick: bool) -> dict:
    """Global settings, overlaid by the case's table, overlaid by [quick] (with ``--quick``) (their values
    checked by ``_validate_global``); refuses a saved trajectory (P at every save: batch x num_saves x n x n)
    that cannot fit in memory."""
    s = {k: cfg[k] for k in GLOBAL_KEYS}
    s.update(cfg.get(name, {}))
    if quick:
        q = cfg["quick"]
        for key, value in q.items():
            if key in s or key in GLOBAL_KEYS:
                s[key] = value
    if name in EULER_STEPS:
        v.check_layers(f"{name}.t1", s["t1"], "its Euler step dt", EULER_STEPS[name])
    if "n" in s:
        n, saves, batch, d = s["n"], s["num_saves"], s["batch"], s.get("d", 3)  # cases without d: d <= 3
        default = load_config(None, "reproduce.toml")
        check_fits(f"case {name} ({batch} runs of {n} tokens, {saves} saves)",
                     3.0 * batch * saves * n * n * 8 + 4.0 * batch * saves * n * d * 8,  # P; tokens, states
                     [(f"{name}.n", n, default[name]["n"], 2), ("batch", batch, default["batch"], 1),
                      ("num_saves", saves, default["num_saves"], 1)])
    return s


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
    :class:`~attnflow.report.base.Context`; the mutation tests pass wrong ones); ``figures=False``
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
        from ..runio import merge_config

        cfg = merge_config(cfg, overrides)
    _validate_global(cfg)
    known = case_names()
    selected = list(cases) if cases else (list(cfg["cases"]) or known)
    unknown = [c for c in selected if c not in known]
    if unknown:
        raise InputError(f"unknown case name(s) {', '.join(map(repr, unknown))}; known cases: {', '.join(known)}.")
    selected = [c for c in known if c in selected]  # report order, no duplicates
    settings = {name: resolve_settings(cfg, name, quick) for name in selected}

    out = Path(out)
    existed = out.exists()
    out, _ = claim_output_dir(out, KIND)  # refuses files and foreign folders before any work
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    try:
        context = {"figures": figures} | ({"field_factory": field_factory} if field_factory else {})
        summary = _run(tmp, cfg, settings, selected, quick, progress, context)
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


def _run(folder: Path, cfg: dict, settings: dict, selected: list[str], quick: bool, progress: bool,
         context: dict | None = None) -> dict:
    from tqdm.auto import tqdm

    start = time.time()
    seed = int(cfg["seed"])
    prov = provenance(seed=seed, config=cfg)
    atomic_write_json(folder / "config.json", {"config": cfg, "quick": quick, "cases": selected,
                                               "resolved": settings})
    atomic_write_json(folder / "provenance.json", prov)
    results: list[CaseResult] = []
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
        res.settings.setdefault("resolved", settings[name])
        results.append(res)
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
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=["case", "name", "hypotheses", "predicted", "observed", "passed", "margin",
                                        "note"])
    w.writeheader()
    w.writerows(checks)
    atomic_write_text(folder / "checks.csv", buf.getvalue())
    rows = [row for r in results for row in r.systems]
    if rows:
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
        atomic_write_text(folder / "systems.csv", buf.getvalue())
    atomic_write_text(folder / "report.md", render_markdown(results, prov, cfg, quick, seconds))
    write_marker(folder, KIND, {"git_commit": prov["git_commit"], "quick": quick})
    assert (folder / MARKER).exists()
    return summary
