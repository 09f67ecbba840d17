r"""Two phase diagrams compared cell by cell: a paired test on the per-system arrays (e.g. dt = 0.1 against 0.01).

Two run folders of the same seed and dtype draw the same start clouds (and weights) whatever their dt,
t1 or checkpoints (common random numbers: system s of a group starts from the same cloud), so the
comparison is *paired*: for every group (n, d, heads, epsilon), beta and checkpoint time t the two
folders share, and every observable, the per-system differences :math:`\delta_s = y_s - y^{\rm ref}_s`
over the systems finite in both runs give the mean difference :math:`\bar\delta` and its Student-t
interval (:func:`attnflow.stats.mean_interval`). A cell **agrees** when that interval contains 0 or
:math:`|\bar\delta|` is at most the observable's *resolution* (default: one ordered pair in
:math:`n(n-1)` for ``pairs_clustered``; 0 for the integer ``clusters`` and ``span``; :data:`ROUNDING` times
the reference's mean for the real-valued ones, the float64 rounding of their sums). The paired test sees
differences far below the diagram's own sampling error; ``within_interval`` says whether
:math:`|\bar\delta|` is inside the reference's own confidence interval of its mean (the diagram's
resolution, what a reader of the two heat maps can tell apart).

:func:`crossing_times` and the ``crossing`` part of :func:`compare_runs` measure how far the
clustering time moves: per system the first time the fraction of clustered pairs reaches a level
(linear between checkpoints), paired as above.

**Precision.** The start clouds are drawn in the run's dtype: a float32 and a float64 run of the same seed
start from *different* clouds (the normal draws of the two precisions differ), so their folders are compared
*unpaired*: the interval is Welch's (:func:`attnflow.stats.difference_interval`) for the difference of the two means over independent clouds
(``paired`` is False in the result), which holds the clouds' sampling error as well as the precision's
effect. The phase job's own float32 check (:func:`compare_columns` on a float64 re-run of a sample from the
float32 clouds) is paired and isolates the arithmetic.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..errors import InputError
from ..stats import difference_interval, mean_interval
from ._config import PhaseConfig, check_phase_config
from ._engine import OBSERVABLES

#: the observables compared by default (those the cell table gives intervals for)
COMPARED = ("pairs_clustered", "clusters", "energy")
#: config keys that must be equal for two runs to be paired (same clouds, same observables)
PAIRED_KEYS = ("seed", "dynamics", "normalisation", "v_ensemble", "qk_ensemble", "weights", "density", "threshold",
               "activation", "ff_weight", "ff_reading", "ff_hidden", "ln_switch", "beta_law", "beta_power")
#: the value a paired key has in a config written before the key existed
_LATER_DEFAULTS = {"ln_switch": 0.0, "beta_law": "constant", "beta_power": 1.0}
#: the default resolution of the real-valued observables, relative to the reference's mean
ROUNDING = 1e-9
#: decimals to which checkpoint times and betas are matched between two runs
MATCH_DECIMALS = 9


def _read_run(folder) -> tuple[PhaseConfig, dict]:
    """The parsed config of a phase run folder and its per-system arrays by group label."""
    folder = Path(folder)
    if not (folder / "config.json").is_file() or not (folder / "systems").is_dir():
        raise InputError(f"{folder} is not a finished phase run folder (it needs config.json and systems/); "
                         "pass a folder written by attnflow phase.")
    config = check_phase_config(json.loads((folder / "config.json").read_text()), str(folder / "config.json"))
    arrays = {}
    for g in config.groups:
        path = folder / "systems" / f"g{g.index:03d}.npz"
        if not path.is_file():
            raise InputError(f"{path} is missing; finish the run (attnflow phase resumes it) before comparing.")
        with np.load(path, allow_pickle=False) as data:
            arrays[g.label] = {k: np.asarray(data[k]) for k in data.files if not k.startswith("__")}
    return config, arrays


def _times(config: PhaseConfig) -> np.ndarray:
    return np.round(np.asarray(config.checkpoint_layers) * config.dt, MATCH_DECIMALS)


def crossing_times(t: np.ndarray, values: np.ndarray, level: float) -> np.ndarray:
    """Per row of ``values`` (S, K) the first time it reaches ``level``, linear between checkpoints ``t``
    (NaN when it never does; ``t[0]`` when it starts there).

    Example:
        >>> import numpy as np
        >>> from attnflow.phase import crossing_times
        >>> crossing_times(np.array([0.0, 1.0, 2.0]), np.array([[0.0, 0.4, 0.8], [0.6, 0.7, 0.9], [0.0, 0.1, 0.2]]), 0.5)
        array([1.25, 0.  ,  nan])
    """
    t = np.asarray(t, float)
    y = np.atleast_2d(np.asarray(values, float))
    out = np.full(y.shape[0], np.nan)
    above = y >= level
    for s in range(y.shape[0]):
        hit = np.flatnonzero(above[s])
        if not hit.size:
            continue
        k = hit[0]
        if k == 0:
            out[s] = t[0]
        else:
            y0, y1 = y[s, k - 1], y[s, k]
            out[s] = t[k - 1] + (level - y0) / (y1 - y0) * (t[k] - t[k - 1])
    return out


def _check_paired(config: PhaseConfig, reference: PhaseConfig, where: str) -> None:
    a, b = config.source, reference.source
    for key in PAIRED_KEYS:
        if a.get(key, _LATER_DEFAULTS.get(key)) != b.get(key, _LATER_DEFAULTS.get(key)):
            raise InputError(f"{where}: the two runs differ in {key!r} ({a.get(key)!r} and {b.get(key)!r}); a "
                             "comparison needs the same seed, dynamics, weights and threshold (change only dt, t1, "
                             "checkpoints, spacing or dtype).")


def _default_resolution(name: str, n: int, reference: np.ndarray) -> np.ndarray:
    """One ordered pair in n(n-1) for the clustered pairs; 0 for the integer counts; 1e-9 of the reference's
    magnitude for the real-valued observables (float64 rounding of their sums, far below any difference of
    the dynamics: two runs that collapse to one point agree to ~1e-16)."""
    if name == "pairs_clustered":
        return np.full(reference.shape, 1.0 / (n * (n - 1)))
    if name in ("clusters", "span"):
        return np.zeros(reference.shape)
    return ROUNDING * np.abs(np.nan_to_num(reference))


def _ranges(values: np.ndarray) -> list[float] | None:
    return [float(values.min()), float(values.max())] if values.size else None


def compare_runs(run, reference, *, observables=COMPARED, confidence: float | None = None,
                 resolution: dict | None = None, level: float = 0.5) -> dict:
    r"""Comparison of phase run folder ``run`` against ``reference`` (module's test), cell by cell: paired when the
    two share their start clouds (same seed and dtype), unpaired otherwise.

    Args:
        run, reference: finished ``attnflow phase`` folders of the same seed, dynamics, weights and threshold
            (e.g. dt = 0.1 and dt = 0.01); compared on the groups, betas and checkpoint times both hold.
        observables: names from :data:`~attnflow.phase.OBSERVABLES`.
        confidence: level of the paired intervals (default: the reference's ``confidence``).
        resolution: ``{observable: value}``: differences at most this large agree (absolute, a number or one
            per checkpoint time; defaults in the module's docstring).
        level: the fraction of clustered pairs whose crossing time is compared (``crossing``).

    Returns:
        ``rows``: columns ``n, d, heads, epsilon, sigma, beta, t, observable, systems, mean, mean_reference, diff,
        diff_lo, diff_hi, resolution, agrees, reference_half_width, within_interval`` (one entry per group,
        beta, t and observable); ``crossing``: per group and beta the paired shift of the crossing time
        (``shift``, ``shift_lo``, ``shift_hi``, ``time_reference``, ``systems``, ``never``: systems without a
        crossing in either run, left out); ``summary``: per group and observable the cells compared, the
        fraction that agree and that are within the reference's interval, and the beta and t ranges of the
        cells that do not agree; ``excluded``: systems non-finite in either run; ``paired``: whether the two
        runs share their clouds (same dtype) and the intervals are paired (module's *Precision*).

    Example:
        >>> import json, pathlib, tempfile
        >>> import numpy as np
        >>> from attnflow.phase import OBSERVABLES, compare_runs, load_phase_config
        >>> def write_run(folder, dt, values):      # what attnflow phase writes: config.json, systems/g000.npz
        ...     cfg = load_phase_config(None)
        ...     cfg.update(beta=[2.0], d=2, n=4, systems=3, t1=1.0, dt=dt, checkpoints=3)
        ...     (folder / "systems").mkdir(parents=True)
        ...     _ = (folder / "config.json").write_text(json.dumps(cfg))
        ...     np.savez(folder / "systems" / "g000.npz", beta_index=np.zeros(3, int), system=np.arange(3),
        ...              finite=np.ones(3, bool), **{name: values for name in OBSERVABLES})
        >>> tmp = pathlib.Path(tempfile.mkdtemp())
        >>> fine = np.array([[0.0, 0.4, 0.9], [0.0, 0.5, 1.0], [0.1, 0.6, 1.0]])  # 3 systems at t = 0, 0.5, 1
        >>> write_run(tmp / "coarse", 0.1, fine + [0.0, 0.1, 0.0])               # ahead by 0.1 at t = 0.5
        >>> write_run(tmp / "fine", 0.05, fine)
        >>> c = compare_runs(tmp / "coarse", tmp / "fine")
        >>> pairs = c["rows"]["observable"] == "pairs_clustered"
        >>> c["rows"]["t"][pairs].tolist(), c["rows"]["diff"][pairs].round(3).tolist()
        ([0.0, 0.5, 1.0], [0.0, 0.1, 0.0])
        >>> c["rows"]["agrees"][pairs].tolist(), c["summary"][0]["disagree_t"]
        ([True, False, True], [0.5, 0.5])
    """
    config, arrays = _read_run(run)
    ref_config, ref_arrays = _read_run(reference)
    _check_paired(config, ref_config, f"comparing {run} with {reference}")
    return compare_columns(config, arrays, ref_config, ref_arrays, observables=observables, confidence=confidence,
                           resolution=resolution, level=level, paired=config.dtype == ref_config.dtype,
                           where=f"{run} and {reference}")


def compare_columns(config: PhaseConfig, arrays: dict, ref_config: PhaseConfig, ref_arrays: dict, *,
                    observables=COMPARED, confidence: float | None = None, resolution: dict | None = None,
                    level: float = 0.5, paired: bool = True, where: str = "the two runs") -> dict:
    """:func:`compare_runs` on per-system columns in memory: ``arrays`` and ``ref_arrays`` map a group's label
    to its columns (``beta_index``, ``system``, ``finite`` and the observables, as in ``systems/g*.npz``) of
    the runs of ``config`` and ``ref_config``. ``paired``: the two runs started system s from the same cloud
    (the differences' Student-t interval); False: from independent clouds (Welch's interval of the difference
    of the means). Returns what :func:`compare_runs` returns, with ``paired``.

    Example:
        >>> import numpy as np
        >>> from attnflow.phase import OBSERVABLES, check_phase_config, load_phase_config
        >>> from attnflow.phase._compare import compare_columns
        >>> cfg = load_phase_config(None)
        >>> cfg.update(beta=[2.0], d=2, n=4, systems=3, t1=1.0, checkpoints=2)
        >>> cfg = check_phase_config(cfg)
        >>> y = np.array([[1.0, 3.0], [1.0, 2.0], [1.0, 2.0]])          # clusters of 3 systems at t = 0, 1
        >>> def cols(v):
        ...     return {cfg.groups[0].label: {"beta_index": np.zeros(3, int), "system": np.arange(3),
        ...                                   "finite": np.ones(3, bool), **{k: v for k in OBSERVABLES}}}
        >>> c = compare_columns(cfg, cols(y + [0, 1]), cfg, cols(y))   # one more cluster at t = 1 in every system
        >>> c["rows"]["diff"][c["rows"]["observable"] == "clusters"].tolist(), c["paired"]
        ([0.0, 1.0], True)
    """
    unknown = [o for o in observables if o not in OBSERVABLES]
    if unknown:
        raise InputError(f"observables {unknown} are not recorded by the phase job; choose from {list(OBSERVABLES)}.")
    confidence = ref_config.confidence if confidence is None else float(confidence)
    resolution = dict(resolution or {})
    t_a, t_b = _times(config), _times(ref_config)
    times = np.intersect1d(t_a, t_b)
    ka, kb = np.searchsorted(t_a, times), np.searchsorted(t_b, times)
    beta_a = np.round(np.asarray(config.beta), MATCH_DECIMALS)
    beta_b = np.round(np.asarray(ref_config.beta), MATCH_DECIMALS)
    groups = [g for g in ref_config.groups if g.label in arrays]
    if not groups or not times.size or not np.intersect1d(beta_a, beta_b).size:
        raise InputError(f"{where} share no (group, beta, checkpoint time) to compare; run them on "
                         "a common grid with checkpoints at common times.")
    rows = {c: [] for c in ("n", "d", "heads", "epsilon", "sigma", "beta", "t", "observable", "systems", "mean",
                            "mean_reference", "diff", "diff_lo", "diff_hi", "resolution", "agrees",
                            "reference_half_width", "within_interval")}
    crossing = {c: [] for c in ("n", "d", "beta", "systems", "never", "time_reference", "shift", "shift_lo",
                                "shift_hi")}
    excluded = 0
    for g in groups:
        A, B = arrays[g.label], ref_arrays[g.label]
        for beta in np.intersect1d(beta_a, beta_b):
            ia, ib = int(np.flatnonzero(beta_a == beta)[0]), int(np.flatnonzero(beta_b == beta)[0])
            sa, sb = A["beta_index"] == ia, B["beta_index"] == ib
            _, pa, pb = np.intersect1d(A["system"][sa], B["system"][sb], return_indices=True)
            rows_a, rows_b = np.flatnonzero(sa)[pa], np.flatnonzero(sb)[pb]
            ok = A["finite"][rows_a] & B["finite"][rows_b]
            excluded += int((~ok).sum())
            rows_a, rows_b = rows_a[ok], rows_b[ok]
            for name in observables:
                ya, yb = A[name][rows_a][:, ka], B[name][rows_b][:, kb]
                diff, lo, hi = difference_interval(ya, yb, confidence, paired=paired)
                ref_mean, ref_lo, ref_hi = mean_interval(yb, confidence)
                res = np.broadcast_to(np.asarray(resolution[name], float) if name in resolution else
                                      _default_resolution(name, g.n, ref_mean), ref_mean.shape)
                K = len(times)
                for key, value in (("n", g.n), ("d", g.d), ("heads", g.heads), ("epsilon", g.epsilon),
                                   ("sigma", g.sigma), ("beta", float(beta)), ("observable", name), ("systems", len(rows_a))):
                    rows[key].append(np.full(K, value, dtype=object if key == "observable" else None))
                rows["resolution"].append(res)
                rows["t"].append(times)
                rows["mean"].append(ya.mean(axis=0) if len(rows_a) else np.full(K, np.nan))
                rows["mean_reference"].append(ref_mean)
                rows["diff"].append(diff)
                rows["diff_lo"].append(lo)
                rows["diff_hi"].append(hi)
                rows["agrees"].append(((lo <= 0) & (hi >= 0)) | (np.abs(diff) <= res))
                half = 0.5 * (ref_hi - ref_lo)
                rows["reference_half_width"].append(half)
                rows["within_interval"].append(np.abs(diff) <= np.maximum(half, res))
            ca = crossing_times(times, A["pairs_clustered"][rows_a][:, ka], level)
            cb = crossing_times(times, B["pairs_clustered"][rows_b][:, kb], level)
            both = np.isfinite(ca) & np.isfinite(cb)
            shift, lo, hi = difference_interval(ca[both][:, None], cb[both][:, None], confidence, paired=paired)
            for key, value in (("n", g.n), ("d", g.d), ("beta", float(beta)), ("systems", int(both.sum())),
                               ("never", int((~both).sum())),
                               ("time_reference", float(cb[both].mean()) if both.any() else np.nan),
                               ("shift", float(shift[0])), ("shift_lo", float(lo[0])), ("shift_hi", float(hi[0]))):
                crossing[key].append(value)
    rows = {k: np.concatenate(v).astype(bool if k in ("agrees", "within_interval") else
                                        object if k == "observable" else float) for k, v in rows.items()}
    for k in ("n", "d", "heads", "systems"):
        rows[k] = rows[k].astype(int)
    crossing = {k: np.asarray(v) for k, v in crossing.items()}
    return {"rows": rows, "crossing": crossing, "excluded": excluded, "confidence": confidence,
            "level": level, "paired": bool(paired), "summary": _summary(rows, groups, observables)}


def _summary(rows: dict, groups, observables) -> list[dict]:
    """Per group and observable: the fraction of cells that agree, and where the others are."""
    out = []
    for g in groups:
        for name in observables:
            sel = (rows["n"] == g.n) & (rows["d"] == g.d) & (rows["heads"] == g.heads) & (
                rows["epsilon"] == g.epsilon) & (rows["sigma"] == g.sigma) & (rows["observable"] == name)
            bad = sel & ~rows["agrees"]
            worst = int(np.flatnonzero(sel)[np.nanargmax(np.abs(rows["diff"][sel]))]) if sel.any() else None
            out.append({"n": g.n, "d": g.d, "heads": g.heads, "epsilon": g.epsilon, "sigma": g.sigma, "observable": name,
                        "cells": int(sel.sum()), "agree_fraction": float(rows["agrees"][sel].mean()),
                        "within_interval_fraction": float(rows["within_interval"][sel].mean()),
                        "disagree_beta": _ranges(rows["beta"][bad]), "disagree_t": _ranges(rows["t"][bad]),
                        "disagree_betas": sorted({float(b) for b in rows["beta"][bad]}),
                        "max_abs_diff": None if worst is None else float(abs(rows["diff"][worst])),
                        "max_at": None if worst is None else {"beta": float(rows["beta"][worst]),
                                                              "t": float(rows["t"][worst])}})
    return out
