r"""Study 3, sensitivity map: derivatives of the Thm 4.2 hyperplane levels
:math:`a = \min_i \varphi_1^*(z_i(T))`, :math:`b = \max_i \varphi_1^*(z_i(T))` with respect to V,
for Ginibre-based good triples (``[system] source = "ginibre"``) or one trained attention head
(``source = "minilm"``: :mod:`attnflow.probe._real_head`, its own token cloud).

The levels are the soft min / max (:func:`attnflow.geometry.hyperplane_levels`, temperature
:math:`\tau` times the initial diameter) of :math:`\varphi_1^*(z_i)`, :math:`\varphi_1^*` the
dual leading eigenvector of V normalised by :math:`\varphi_1^*(\varphi_1) = 1`, so the total
derivative includes the eigenvector's (exact for simple :math:`\lambda_1`). Each gradient
:math:`G = da/dV` is also shown in V's eigenbasis: a perturbation :math:`dV = X E X^{-1}`
changes a by :math:`\sum_{jk} E_{jk} S_{jk}` with :math:`S_{jk} = x_j^T G\, y_k^T` (right
eigenvectors :math:`x_j`, left :math:`y_k`, :math:`y_k x_j = \delta_{jk}`), so :math:`|S_{jk}|`
is the sensitivity to the perturbation :math:`x_j y_k` (:math:`S_{11}`: moving
:math:`\lambda_1` itself). For a head, :math:`V_h` has rank :math:`d_k`: S is shown on its
:math:`d_k` non-zero modes (the others share the eigenvalue 0 and have no individual basis). Every gradient is checked against a central difference along a
random direction (float64).

Each system's derivatives (the levels, their gradient and the central difference) are an independent
unit: several processes (``attnflow probe --coordinator ... --num-processes P --process-id I``) split
the systems, process p computing the systems p, p + P, ... into verified units in ``units/``; process 0
waits for the others' units (:func:`attnflow.runs.wait_for_units`) and writes the rows, maps and report
as one process would (the random directions are drawn in the same order by every process).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .. import geometry as geo
from ..observables import diameter
from ..spectral import modulus_order
from ._real_head import load_real_head
from ._tables import fmt, write_rows
from ._config import SensitivityConfig
from ._systems import final_tokens, sample_good_triples

__all__ = ["levels_of", "eigenbasis_sensitivity", "run_sensitivity"]


def levels_of(Q, K, V, x0, scale, *, dt, layers, temperature, beta=1.0, biases=None):
    r"""(a, b): soft levels of :math:`\varphi_1^*(z_i)` after ``layers`` Euler layers
    (``beta``, ``biases``: as :func:`attnflow.probe._systems.final_tokens`).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.probe._sensitivity import levels_of
        >>> a, b = levels_of(jnp.eye(2), jnp.eye(2), jnp.diag(jnp.array([1.0, 0.5])), jnp.eye(2), 1.0,
        ...                  dt=0.1, layers=5, temperature=1e-3)
        >>> bool(a < b)
        True
    """
    _, _, dual = geo.leading_eigenpair_jax(V)
    s = final_tokens(Q, K, V, x0, dt=dt, layers=layers, beta=beta, biases=biases) @ jnp.real(dual)
    a, b = geo.hyperplane_levels(s, scale, temperature)
    return jnp.stack([a, b])


def eigenbasis_sensitivity(G: np.ndarray, V: np.ndarray, modes: int):
    r"""Eigenvalues of the ``modes`` largest-modulus eigenvalues of V and the matrix
    :math:`S_{jk} = x_j^T G\, y_k^T` (see the module docstring) on them: right eigenvectors
    :math:`x_j` (unit) and left :math:`y_k` with :math:`y_k x_j = \delta_{jk}`, from one
    ``scipy.linalg.eig`` call (NumPy, float64; V diagonalisable on those modes).

    Example:
        >>> import numpy as np
        >>> from attnflow.probe._sensitivity import eigenbasis_sensitivity
        >>> w, S = eigenbasis_sensitivity(np.eye(2), np.diag([2.0, 1.0]), 2)
        >>> w.real.tolist(), S.real.tolist()
        ([2.0, 1.0], [[1.0, 0.0], [0.0, 1.0]])
    """
    import scipy.linalg

    w, vl, vr = scipy.linalg.eig(V, left=True, right=True)
    order = np.asarray(modulus_order(jnp.asarray(w)))[:modes]
    X = vr[:, order]
    Y = np.conj(vl[:, order]).T  # rows: y_k V = lambda_k y_k
    Y = Y / np.sum(Y * X.T, axis=1, keepdims=True)  # y_k x_k = 1
    return w[order], X.T @ G @ Y.T


def _systems(config: SensitivityConfig):
    """[(label, Q, K, V, x0, beta, biases)] and a description of the systems for the report."""
    sy = config.system
    if sy.source == "minilm":
        h = load_real_head(config.head)
        a = h.assumptions
        text = (f"{h.label} ({'with' if h.biases is not None else 'without'} its biases), beta = {float(h.beta):.4g}; "
                f"lambda_1 = {a['lambda1_re']:.4g}, |lambda_2| = {a['abs_lambda2']:.4g}, <Q phi_1, K phi_1> = "
                f"{a['qk_value']:.3g} (Def 4.1 {'holds' if a['good'] else 'FAILS'}); tokens: the {h.x0.shape[0]} "
                f"hidden states entering layer {config.head.layer} for \"{config.head.text}\" "
                f"({' '.join(h.tokens)})")
        return [(h.label, h.Q, h.K, h.V, h.x0, h.beta, h.biases)], text, int(h.Q.shape[0])
    Q, K, V, x0 = (jnp.asarray(a) for a in sample_good_triples(config.seed, sy.num_triples, sy.d, sy.n, sy.min_gap))
    text = (f"{V.shape[0]} Ginibre-based good triples (d = {sy.d}, n = {sy.n}), tokens N(0, 1)")
    return [(f"triple {b}", Q[b], K[b], V[b], x0[b], 1.0, None) for b in range(V.shape[0])], text, sy.d


def _system_count(config: SensitivityConfig) -> int:
    """How many systems the study has (one trained head, or the Ginibre triples), known without drawing them."""
    return 1 if config.system.source == "minilm" else config.system.num_triples


def run_sensitivity(config: SensitivityConfig, out, progress: bool = True, interrupt_after: int | None = None, fingerprint: str = "",
                    process_index: int = 0, process_count: int = 1, work: dict | None = None):
    """Run study 3; returns (summary, markdown, figure names), or None on a process other than 0 of a
    multi-process run, which computes its share of the systems (``work``, when given, receives
    ``units_computed``, ``units_resumed`` and ``units``). See the module docstring."""
    from tqdm.auto import tqdm

    from .. import plot as ap

    dy, ch = config.dynamics, config.check
    layers = dy.layers
    if work is not None:
        work.update(units_computed=0, units_resumed=0, units=_system_count(config))
    if process_index >= _system_count(config):  # no system of its own: nothing to load
        return None
    systems, description, modes = _systems(config)
    count = len(systems)
    names = [f"system-{b}" for b in range(count)]
    mine = [b for b in range(count) if b % process_count == process_index]
    rng = np.random.default_rng(config.seed + 1)
    f = jax.jit(lambda Q, K, V, x0, s, beta, biases: levels_of(Q, K, V, x0, s, dt=dy.dt, layers=layers,
                                                               temperature=config.levels_temperature, beta=beta, biases=biases))
    jac = jax.jit(jax.jacrev(lambda V, *rest: f(rest[0], rest[1], V, *rest[2:])))

    def derivatives(b: int, U: np.ndarray) -> dict:
        """System b's unit: its initial diameter, levels, gradient and central difference along U."""
        _, Q, K, V, x0, beta, biases = systems[b]
        s = diameter(x0)
        G = np.asarray(jac(V, Q, K, x0, s, beta, biases))  # (2, d, d): da/dV, db/dV
        h = ch.fd_step
        fd = (np.asarray(f(Q, K, V + h * U, x0, s, beta, biases)) - np.asarray(f(Q, K, V - h * U, x0, s, beta, biases))) / (2 * h)
        ab = np.asarray(f(Q, K, V, x0, s, beta, biases))
        return {"s": np.asarray(s), "G": G, "fd": fd, "ab": ab, "U": U}

    directions = [rng.normal(size=np.shape(sys[3])) for sys in systems]  # drawn in order, the same on every process
    units = {}
    if process_count == 1:
        for b in tqdm(range(count), desc="sensitivity map", disable=not progress, leave=False):
            units[b] = derivatives(b, directions[b])
    else:  # the systems are the units: process p computes the systems p, p + P, ...
        from ..runs import UnitStore, wait_for_units

        store = UnitStore(out / "units", "probe-system", fingerprint)
        for b in tqdm(mine, desc="sensitivity map", disable=not progress, leave=False):
            units[b] = store.get(names[b], lambda b=b: derivatives(b, directions[b]))
        if work is not None:
            work.update(units_computed=store.computed, units_resumed=store.resumed)
        if process_index != 0:
            return None
        others = [b for b in range(count) if b not in units]
        wait_for_units(store, [names[b] for b in others], process_count=process_count, what="system")
        for b in others:  # one that does not verify is computed here
            units[b] = store.get(names[b], lambda b=b: derivatives(b, directions[b]))
    rows, figs = [], []
    for b, (label, Q, K, V, x0, beta, biases) in enumerate(systems):
        u = units[b]
        s, G, fd, ab, U = u["s"], u["G"], u["fd"], u["ab"], u["U"]
        if not all(np.all(np.isfinite(a)) for a in (G, fd, ab, s)):  # excluded, never compared
            rows.append({"index": b, "system": label, "status": "excluded: the levels, their gradient or the central "
                         "difference is not finite (the flow overflows)", "a": float(ab[0]), "b": float(ab[1]),
                         "fd_rel_error": None})
            continue
        w, Sa = eigenbasis_sensitivity(G[0], np.asarray(V), modes)
        _, Sb = eigenbasis_sensitivity(G[1], np.asarray(V), modes)
        an = np.einsum("kij,ij->k", G, U)
        rel = float(np.max(np.abs(an - fd)) / max(float(np.max(np.abs(fd))), 1e-2))
        rows.append({"index": b, "system": label, "status": "ok", "a": float(ab[0]), "b": float(ab[1]),
                     "lambda": np.asarray(w).tolist(),
                     "n": int(x0.shape[0]), "d": int(V.shape[0]), "diameter0": float(s),
                     "grad_frobenius": [float(np.linalg.norm(G[0])), float(np.linalg.norm(G[1]))],
                     "da_dV": G[0].tolist(), "db_dV": G[1].tolist(),
                     "abs_S_a": np.abs(Sa).tolist(), "abs_S_b": np.abs(Sb).tolist(),
                     "structure": [_structure(G[i], S) for i, S in enumerate((Sa, Sb))],
                     "fd_rel_error": rel})
        figs += ap.save(ap.sensitivity_maps(G, np.stack([Sa, Sb]), title=label), out / f"sensitivity_{b}.png",
                        dpi=110, close=True)[:1]
    errors = [r["fd_rel_error"] for r in rows if r["status"] == "ok"]
    worst = max(errors) if errors else None
    summary = {"study": "sensitivity", "source": config.system.source, "systems": description,
               "triples": len(rows), "excluded": len(rows) - len(errors), "layers": layers, "rows": rows,
               "max_fd_rel_error": worst, "fd_check_passed": None if worst is None else bool(worst <= ch.fd_tolerance)}
    return summary, _markdown(summary, config, figs, out), figs


def _structure(G, S):
    """Shape of one gradient: share of its squared Frobenius norm in its best rank-one
    approximation, in its largest column (index), and in row 1 of the eigenbasis map S."""
    total = float(np.sum(G ** 2)) or 1.0
    sv = np.linalg.svd(G, compute_uv=False)
    col = np.sum(G ** 2, axis=0)
    S2 = np.abs(S) ** 2
    return {"rank_one_share": float(sv[0] ** 2 / total), "top_column": int(np.argmax(col)),
            "top_column_share": float(np.max(col) / total), "eigen_row1_share": float(S2[0].sum() / (S2.sum() or 1.0))}


def _table_row(r: dict) -> dict:
    """One system's row of the report's table and of sensitivity.csv."""
    row = {"index": r["index"], "system": r["system"], "status": r["status"], "a": r["a"], "b": r["b"],
           "fd_rel_error": r["fd_rel_error"]}
    keys = ("lambda_1", "grad_frobenius_a", "max_S_a", "max_S_b", "rank_one_share", "top_column", "eigen_row1_share")
    if r["status"] != "ok":
        return {**row, **dict.fromkeys(keys)}
    Sa, Sb = np.asarray(r["abs_S_a"]), np.asarray(r["abs_S_b"])
    ja, jb = np.unravel_index(np.argmax(Sa), Sa.shape), np.unravel_index(np.argmax(Sb), Sb.shape)
    st = r["structure"]
    return {**row, "lambda_1": float(np.real(r["lambda"][0])), "grad_frobenius_a": r["grad_frobenius"][0],
            "max_S_a": f"{Sa[ja]:.3g} at {tuple(int(i) + 1 for i in ja)}",
            "max_S_b": f"{Sb[jb]:.3g} at {tuple(int(i) + 1 for i in jb)}",
            "rank_one_share": " / ".join(f"{x['rank_one_share']:.3f}" for x in st),
            "top_column": " / ".join(f"{x['top_column']} ({x['top_column_share']:.2f})" for x in st),
            "eigen_row1_share": " / ".join(f"{x['eigen_row1_share']:.3f}" for x in st)}


_COLUMNS = [
    ("index", "index", fmt), ("system", "system", fmt), ("status", "status", fmt),
    ("a", "a", lambda x: fmt(x, 4)), ("b", "b", lambda x: fmt(x, 4)), ("lambda_1", "lambda_1", lambda x: fmt(x, 4)),
    ("grad_frobenius_a", "abs(da/dV) (Frobenius)", fmt),
    ("max_S_a", "largest abs(da/dV) in eigenbasis (j, k)", fmt), ("max_S_b", "largest abs(db/dV) in eigenbasis (j, k)", fmt),
    ("rank_one_share", "rank-one share a / b", fmt), ("top_column", "largest column (from 0): share a / b", fmt),
    ("eigen_row1_share", "eigenbasis row 1 share a / b", fmt), ("fd_rel_error", "central-difference error", fmt),
]


def _markdown(summary, config, figs, out):
    worst = summary["max_fd_rel_error"]
    check = ("no system with finite levels and gradient to check" if worst is None else
             f"worst relative error {worst:.2e} ({'passed' if summary['fd_check_passed'] else 'FAILED'}, "
             f"tolerance {config.check.fd_tolerance}, column central-difference error)")
    lines = [
        "## Sensitivity map d(a, b)/dV",
        "",
        f"{summary['systems']}; {summary['layers']} Euler layers of dt = {config.dynamics.dt}. Central-difference "
        f"check along a random direction: {check}. Excluded (non-finite levels, gradient or central difference; never "
        f"compared): {summary['excluded']} of {summary['triples']} systems (column status).",
        "",
        "Structure of each gradient G = da/dV (and db/dV): share of its squared Frobenius norm in its best rank-one "
        "approximation, in its largest column (V's input coordinate), and in row 1 of the eigenbasis map "
        "(perturbations x_1 y_k, which write into the phi_1 direction). Every row is also in sensitivity.csv.",
        "",
        *write_rows(out / "sensitivity.csv", [_table_row(r) for r in summary["rows"]], _COLUMNS),
    ]
    lines += ["", *[f"![{f}]({f})" for f in figs], ""]
    return "\n".join(lines)
