r"""A phase diagram's tables: per-(cell, checkpoint) means with confidence intervals, per-system arrays.

Each mean is over the cell's systems whose whole run stayed finite; the others are excluded and
counted (``nonfinite``), never averaged. Its interval is the Student-t interval
:math:`\bar y \pm t_{(1+c)/2,\,m-1}\, s/\sqrt m` at the config's ``confidence`` c over the m finite
systems (a single system, or systems that all agree, give a zero-width interval).
"""

from __future__ import annotations

import numpy as np
from scipy import stats as _stats

from ._config import PhaseConfig, PhaseGroup
from ._engine import OBSERVABLES

#: observables whose mean and interval the cell table holds (the others: mean only)
WITH_INTERVALS = ("pairs_clustered", "clusters", "energy")
#: the cell table's columns, in order
CELL_COLUMNS = (["beta", "n", "d", "heads", "epsilon", "t", "layer", "systems", "nonfinite"]
                + [c for name in OBSERVABLES
                   for c in ((name, f"{name}_lo", f"{name}_hi") if name in WITH_INTERVALS else (name,))])


def mean_interval(values: np.ndarray, confidence: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean over axis 0 and its Student-t interval (NaN where no value).

    Example:
        >>> import numpy as np
        >>> from attnflow.phase import mean_interval
        >>> m, lo, hi = mean_interval(np.array([[0.0], [1.0], [2.0], [3.0]]), 0.95)
        >>> float(m[0]), round(float(hi[0] - m[0]), 4)   # t_{0.975, 3} * 1.291 / 2
        (1.5, 2.0543)
    """
    m = values.shape[0]
    if m == 0:
        nan = np.full(values.shape[1:], np.nan)
        return nan, nan, nan
    mean = values.mean(axis=0)
    if m == 1:
        return mean, mean, mean
    half = _stats.t.ppf(0.5 + confidence / 2, m - 1) * values.std(axis=0, ddof=1) / np.sqrt(m)
    return mean, mean - half, mean + half


def cell_rows(config: PhaseConfig, group: PhaseGroup, cols: dict) -> dict:
    """The cell table's columns for one group (``cols``: the group's pairs, all chunks concatenated)."""
    layers = np.asarray(config.checkpoint_layers)
    t = layers * config.dt
    K = len(layers)
    out = {c: [] for c in CELL_COLUMNS}
    for b, beta in enumerate(config.beta):
        sel = cols["beta_index"] == b
        finite = cols["finite"][sel]
        out["beta"].append(np.full(K, beta))
        out["n"].append(np.full(K, group.n))
        out["d"].append(np.full(K, group.d))
        out["heads"].append(np.full(K, group.heads))
        out["epsilon"].append(np.full(K, group.epsilon))
        out["t"].append(t)
        out["layer"].append(layers)
        out["systems"].append(np.full(K, int(finite.sum())))
        out["nonfinite"].append(np.full(K, int((~finite).sum())))
        for name in OBSERVABLES:
            mean, lo, hi = mean_interval(cols[name][sel][finite], config.confidence)
            out[name].append(mean)
            if name in WITH_INTERVALS:
                out[f"{name}_lo"].append(lo)
                out[f"{name}_hi"].append(hi)
    return {c: np.concatenate(v) for c, v in out.items()}


def grid_of(cells: dict, group: PhaseGroup, config: PhaseConfig, name: str) -> np.ndarray:
    """The (len(beta), K) array of column ``name`` of one group's rows of the cell table."""
    sel = (cells["n"] == group.n) & (cells["d"] == group.d) & (cells["heads"] == group.heads) & (
        cells["epsilon"] == group.epsilon)
    return np.asarray(cells[name][sel], float).reshape(len(config.beta), len(config.checkpoint_layers))
