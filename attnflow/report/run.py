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

from ..errors import InputError
from ..runio import (
    MARKER,
    atomic_write_json,
    atomic_write_text,
    claim_output_dir,
    load_config,
    provenance,
    write_marker,
)
from .base import CASES, CaseResult, Context
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


def _validate_global(cfg: dict) -> None:
    if cfg["dtype"] not in ("float32", "float64"):
        raise InputError(f"config key 'dtype' must be 'float32' or 'float64', got {cfg['dtype']!r}.")
    for key in ("batch", "num_saves", "max_steps"):
        if cfg[key] < 1:
            raise InputError(f"config key '{key}' must be >= 1, got {cfg[key]!r}.")
    if not 0 < cfg["rel_tol"] < 1:
        raise InputError(f"config key 'rel_tol' must lie in (0, 1), got {cfg['rel_tol']!r}.")
    if not 0 < cfg["rank_tol"] < 1:
        raise InputError(f"config key 'rank_tol' must lie in (0, 1), got {cfg['rank_tol']!r}.")


def resolve_settings(cfg: dict, name: str, quick: bool) -> dict:
    """Global settings, overlaid by the case's table, overlaid by [quick] (with ``--quick``)."""
    s = {k: cfg[k] for k in GLOBAL_KEYS}
    s.update(cfg.get(name, {}))
    if quick:
        q = cfg["quick"]
        for key, value in q.items():
            if key in s or key in GLOBAL_KEYS:
                s[key] = value
    for key, value in s.items():
        if key in ("n", "d", "batch") and (not isinstance(value, int) or value < 1):
            raise InputError(f"config key '{name}.{key}' must be a positive integer, got {value!r}.")
        if key in ("t1", "eps", "x0_scale") and not value > 0:
            raise InputError(f"config key '{name}.{key}' must be > 0, got {value!r}.")
    return s


@in_float64
def reproduce(out: str | os.PathLike = DEFAULT_OUT, *, config: str | os.PathLike | None = None,
              quick: bool = False, cases: list[str] | None = None, progress: bool = True) -> dict:
    """Run the selected cases (default: the config's ``cases``, or all) and write the report
    folder ``out`` (report.md, summary.json, checks.csv, systems.csv, figures, config, provenance).

    Returns the summary dict (also written to ``summary.json``).

    Example:
        >>> from attnflow.report import reproduce
        >>> import tempfile, os
        >>> d = tempfile.mkdtemp()
        >>> s = reproduce(os.path.join(d, "r"), quick=True, cases=["remark7_9"], progress=False)
        >>> [c["name"] for c in s["checks"]]
        ['clusters of z', 'rank of lim P', 'raw |x_1 - x_2| non-decreasing']
    """
    cfg = load_config(config, "reproduce.toml")
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
        summary = _run(tmp, cfg, settings, selected, quick, progress)
        _swap(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if not existed and out.is_dir() and not any(out.iterdir()):
            out.rmdir()
        raise
    return summary


def _swap(tmp: Path, out: Path) -> None:
    old = out.parent / f".{out.name}.old-{os.getpid()}"
    if out.exists():
        os.replace(out, old)
    os.replace(tmp, out)
    if old.exists():
        shutil.rmtree(old, ignore_errors=True)


def _run(folder: Path, cfg: dict, settings: dict, selected: list[str], quick: bool, progress: bool) -> dict:
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
        res = fn(Context(name, settings[name], folder, quick, seed))
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
        "all_passed": all(c["passed"] for c in graded),
        "checks": checks,
        "cases": {r.name: {"title": r.title, "theorem": r.theorem, "hypotheses": r.hypotheses,
                           "figures": [f for f, _ in r.figures], "notes": r.notes, "seconds": r.seconds,
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
