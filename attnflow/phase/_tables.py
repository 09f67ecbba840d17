r"""A phase diagram's tables: per-(cell, checkpoint) means with confidence intervals, per-system arrays.

Each mean is over the cell's systems whose whole run stayed finite; the others are excluded and
counted (``nonfinite``), never averaged. Its interval is the Student-t interval
:math:`\bar y \pm t_{(1+c)/2,\,m-1}\, s/\sqrt m` at the config's ``confidence`` c over the m finite
systems (a single system, or systems that all agree, give a zero-width interval;
:func:`attnflow.stats.mean_interval`).
"""

from __future__ import annotations

import numpy as np

from ..stats import mean_interval
from ._config import PhaseConfig, PhaseGroup
from ._engine import OBSERVABLES, order_parameter

#: observables whose mean and interval the cell table holds (the others: mean only)
WITH_INTERVALS = ("pairs_clustered", "clusters", "energy")
#: the cell table's columns, in order: the recorded observables, then the order parameter (derived, with interval)
CELL_COLUMNS = (["beta", "n", "d", "heads", "epsilon", "sigma", "t", "layer", "systems", "nonfinite"]
                + [c for name in OBSERVABLES
                   for c in ((name, f"{name}_lo", f"{name}_hi") if name in WITH_INTERVALS else (name,))]
                + ["order", "order_lo", "order_hi"])


def finite_rows(cols: dict, num_beta: int) -> list[tuple[slice | np.ndarray, int, int]]:
    """Per beta index: the rows of the group's columns ``cols`` that hold its finite runs (a slice where they
    are contiguous, as the job's beta-major pairs are when every run stayed finite: a view, no copy), and the
    counts of its finite and non-finite runs.

    Example:
        >>> import numpy as np
        >>> from attnflow.phase._tables import finite_rows
        >>> cols = {"beta_index": np.array([0, 0, 1, 1, 1]), "finite": np.array([True, True, True, False, True])}
        >>> [(r if isinstance(r, slice) else r.tolist(), m, bad) for r, m, bad in finite_rows(cols, 2)]
        [(slice(0, 2, None), 2, 0), ([2, 4], 2, 1)]
    """
    b_idx, finite = np.asarray(cols["beta_index"]), np.asarray(cols["finite"], bool)
    order = np.argsort(b_idx, kind="stable")
    bounds = np.searchsorted(b_idx[order], np.arange(num_beta + 1))
    out = []
    for b in range(num_beta):
        rows = order[bounds[b]:bounds[b + 1]]
        ok = finite[rows]
        rows = rows[ok]
        if rows.size and rows[-1] - rows[0] == rows.size - 1:  # consecutive (sorted by the stable argsort)
            rows = slice(int(rows[0]), int(rows[-1]) + 1)
        out.append((rows, int(ok.sum()), int((~ok).sum())))
    return out


def cell_rows(config: PhaseConfig, group: PhaseGroup, cols: dict) -> dict:
    """The cell table's columns for one group (``cols``: the group's pairs, all chunks concatenated)."""
    layers = np.asarray(config.checkpoint_layers)
    t = np.round(layers * config.dt, 12)  # 68 * 0.1 is written 6.8
    K = len(layers)
    out = {c: [] for c in CELL_COLUMNS}
    for (rows, good, bad), beta in zip(finite_rows(cols, len(config.beta)), config.betas_at(group.n)):
        out["beta"].append(np.full(K, beta))
        out["n"].append(np.full(K, group.n))
        out["d"].append(np.full(K, group.d))
        out["heads"].append(np.full(K, group.heads))
        out["epsilon"].append(np.full(K, group.epsilon))
        out["sigma"].append(np.full(K, group.sigma))
        out["t"].append(t)
        out["layer"].append(layers)
        out["systems"].append(np.full(K, good))
        out["nonfinite"].append(np.full(K, bad))
        for name in OBSERVABLES:
            mean, lo, hi = mean_interval(cols[name][rows], config.confidence)
            out[name].append(mean)
            if name in WITH_INTERVALS:
                out[f"{name}_lo"].append(lo)
                out[f"{name}_hi"].append(hi)
        # r lies in [0, 1]: its Student-t interval is clipped there (a mean near 1 of few systems can overshoot)
        for column, values in zip(("order", "order_lo", "order_hi"),
                                  mean_interval(order_parameter(cols["ip_mean"][rows], group.n), config.confidence)):
            out[column].append(np.clip(values, 0.0, 1.0))
    return {c: np.concatenate(v) for c, v in out.items()}


def grid_of(cells: dict, group: PhaseGroup, config: PhaseConfig, name: str) -> np.ndarray:
    """The (len(beta), K) array of column ``name`` of one group's rows of the cell table."""
    sel = (cells["n"] == group.n) & (cells["d"] == group.d) & (cells["heads"] == group.heads) & (
        cells["epsilon"] == group.epsilon) & (cells["sigma"] == group.sigma)
    return np.asarray(cells[name][sel], float).reshape(len(config.beta), len(config.checkpoint_layers))


def read_cells(run_dir, name: str = "pairs_clustered", **where) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(values, beta, t)`` of column ``name`` of a run folder's ``cells.csv``: values (len(beta), len(t)).

    ``where`` picks one group when the grid has several (e.g. ``d=3``; any of n, d, heads, epsilon, sigma; a
    table without a sigma column, written before the key existed, has sigma = 0).

    Example:
        >>> import tempfile, pathlib
        >>> from attnflow.phase import read_cells
        >>> out = pathlib.Path(tempfile.mkdtemp())      # a cells.csv as attnflow phase writes it
        >>> rows = ["beta,n,d,heads,epsilon,t,clusters"] + [
        ...     f"{b},6,{d},1,0.1,{t},{c}" for d in (2, 3) for b, c in ((1.0, 2), (4.0, 5)) for t in (0.0, 0.5, 1.0)]
        >>> _ = (out / "cells.csv").write_text("".join(row + chr(10) for row in rows))
        >>> values, beta, t = read_cells(out, "clusters", d=3)
        >>> values.shape, beta.tolist(), t.tolist(), values[:, 0].tolist()
        ((2, 3), [1.0, 4.0], [0.0, 0.5, 1.0], [2.0, 5.0])
    """
    import csv
    from pathlib import Path

    from ..errors import InputError

    path = Path(run_dir) / "cells.csv" if Path(run_dir).is_dir() else Path(run_dir)
    if not path.is_file():
        raise InputError(f"{path} does not exist; pass a folder written by attnflow phase (it holds cells.csv).")
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    if rows and name not in rows[0]:
        raise InputError(f"cells.csv has no column {name!r}; its columns are {list(rows[0])}.")
    for r in rows:
        r.setdefault("sigma", "0.0")
    keys = ("n", "d", "heads", "epsilon", "sigma")
    for key, value in where.items():
        if key not in keys:
            raise InputError(f"read_cells selects a group by n, d, heads, epsilon or sigma, got {key}={value!r}.")
        rows = [r for r in rows if float(r[key]) == float(value)]
    groups = {tuple(r[k] for k in keys) for r in rows}
    if len(groups) != 1:
        raise InputError(f"{path} holds {len(groups)} groups matching {where or 'the selection'}; pick one with "
                         "n=..., d=..., heads=..., epsilon=... or sigma=... .")
    beta = np.unique([float(r["beta"]) for r in rows])
    t = np.unique([float(r["t"]) for r in rows])
    values = np.full((beta.size, t.size), np.nan)
    for r in rows:
        values[np.searchsorted(beta, float(r["beta"])), np.searchsorted(t, float(r["t"]))] = float(r[name])
    return values, beta, t
