r"""Study 1, distance to failure: from a good triple (Q, K, V0), the smallest perturbation
:math:`\Delta` of V (relative Frobenius norm :math:`\rho = \|\Delta\|_F/\|V_0\|_F`) that makes the
tokens stop approaching <= 3 parallel hyperplanes, against the smallest one that breaks
Definition 4.1, on a ladder of radii :math:`\rho_1 < \rho_2 < \dots`.

**The ladder keeps** :math:`\|V\|_F = \|V_0\|_F`: a pure time rescaling :math:`V \to cV`
(:math:`c \ne 1`, which only slows or speeds the flow, since the attention weights do not depend
on V) is not on it, so no witness is a slowed-down :math:`V_0`. On radius :math:`\rho \in (0, 2)`
a free direction D stands for (:func:`ladder_matrix`)

.. math:: V = V_0 + \rho\|V_0\|_F\big(-\tfrac{\rho}{2}U + \sqrt{1 - \rho^2/4}\,W\big),\quad
   U = V_0/\|V_0\|_F,\ W = \frac{D - \langle D, U\rangle U}{\|D - \langle D, U\rangle U\|_F},

so that :math:`\|V - V_0\|_F = \rho\|V_0\|_F` and :math:`\|V\|_F = \|V_0\|_F` exactly. Adam

* maximises :math:`H(V)`, the soft maximum over tokens of the distance of
  :math:`\varphi_1^*(z_i(T))` to :math:`\{a, 0, b\}` (:func:`attnflow.geometry.hyperplane_distances`,
  :math:`\varphi_1^*` the unit real dual eigenvector of the perturbed V, lengths in units of the fixed
  initial diameter); clustering is lost when :math:`H \ge \varepsilon` at the horizon T;
* minimises the relative Def 4.1 margin
  :math:`m = \min(\text{condition1}/\|V_0\|_F,\ \langle Q\varphi_1, K\varphi_1\rangle/(\|Q\|_F\|K\|_F))`
  (:func:`attnflow.geometry.good_triple_margins`); Def 4.1 is broken when m < 0.

(A penalty formulation :math:`\rho + \mu\,\mathrm{relu}(\varepsilon - H)` stalls: H is flat around a
clustered configuration, so the norm term pulls :math:`\Delta` back to 0; at a fixed radius Adam's
scale-free steps climb the small gradient.) Every V reached by either search (a *member*: one
triple, one radius, one search) is a witness, judged with the hard tools: clustering lost where
:math:`H \ge \varepsilon`, Def 4.1 broken where :func:`attnflow.spectral.check_good_triple` fails.
A member whose loss, gradient, H, margin or V is non-finite is excluded (never compared) and
reported with its step and reason; a triple whose unperturbed H0 or margin is non-finite, whose
V0 fails Def 4.1, or that is not clustered at T without perturbation is excluded likewise. The
distance to each failure is the smallest radius of a witness: an upper bound, at the ladder's
resolution.

Your own weights: ``[weights]`` / ``system.weights_file`` in the config, or
:func:`distance_to_failure` from Python.

Its independent units are the two searches (each one batched optimisation of every member, with its own
checkpoint): several processes (``attnflow probe --coordinator ... --num-processes P --process-id I``) split
them, process p running the searches p, p + P, ... and storing each result as a verified unit in
``units/``; process 0 waits for the other processes' results (:func:`attnflow.runs.wait_for_units`) and
judges every witness as one process would.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from .. import geometry as geo
from ..errors import InputError
from ..geometry import safe_norm
from ..observables import diameter
from ._config import FailureConfig, read_probe_config
from ._optimize import OptimizationResult, failure_reason, finite_guard, optimize
from ._systems import final_tokens, sample_good_triples
from ._tables import fmt, write_rows

__all__ = ["hyperplane_residual", "ladder_matrix", "distance_to_failure", "run_failure"]

SEARCHES = ("clustering", "def41")


def hyperplane_residual(z, V, scale, temperature):
    r"""Soft :math:`\max_i \mathrm{dist}(\varphi_1^*(z_i), \{a, 0, b\})/s` with the unit real dual
    eigenvector of V (temperature :math:`\tau` for the levels, the per-token distance and the
    maximum over tokens).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.probe._failure import hyperplane_residual
        >>> z = jnp.array([[1.0, 5.0], [0.0, -2.0], [-2.0, 0.0]])
        >>> round(float(hyperplane_residual(z, jnp.diag(jnp.array([2.0, 1.0])), 1.0, 1e-4)), 3)
        0.0
    """
    _, _, dual = geo.leading_eigenpair_jax(V)
    w = jnp.real(dual)
    w = w / safe_norm(w)
    dist = geo.hyperplane_distances(z, w, scale, temperature)
    return geo.soft_max(dist, temperature)


def ladder_matrix(D, V0, rho):
    r"""The V of the ladder that the free direction D stands for on radius ``rho`` (see the module
    docstring): :math:`\|V - V_0\|_F = \rho\|V_0\|_F` and :math:`\|V\|_F = \|V_0\|_F`, so V is
    never a time rescaling :math:`cV_0` (:math:`c \ne 1`).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.probe._failure import ladder_matrix
        >>> V0 = jnp.diag(jnp.array([2.0, 1.0]))
        >>> V = ladder_matrix(jnp.array([[0.3, 1.0], [0.0, -0.5]]), V0, 0.5)
        >>> [round(float(jnp.linalg.norm(A)), 6) for A in (V - V0, 0.5 * V0, V, V0)]
        [1.118034, 1.118034, 2.236068, 2.236068]
    """
    n0 = jnp.linalg.norm(V0)
    U = V0 / n0
    P = D - jnp.vdot(U, D) * U
    return V0 + rho * n0 * (-(rho / 2) * U + jnp.sqrt(1 - rho**2 / 4) * P / safe_norm(P))


def _relative_margin(Q, K, V, V0):
    m = geo.good_triple_margins(Q, K, V)
    return jnp.minimum(m.condition1 / jnp.linalg.norm(V0), m.qk / (jnp.linalg.norm(Q) * jnp.linalg.norm(K)))


def _systems(config: FailureConfig):
    """(Q, K, V0, x0) with a leading triple axis, and their description for the report."""
    sy = config.system
    if config.weights is None:
        arrays = sample_good_triples(config.seed, sy.num_triples, sy.d, sy.n, sy.min_gap)
        text = f"{sy.num_triples} Ginibre-based good triples (entries N(0, 1/d), d = {sy.d}, n = {sy.n})"
    else:
        Q, K, V0 = config.weights
        x0 = np.random.default_rng(config.seed).normal(size=(V0.shape[0], sy.n, V0.shape[-1]))
        arrays = (Q, K, V0, x0)
        text = (f"{V0.shape[0]} triple(s) of your own (d = {V0.shape[-1]}, n = {sy.n} tokens N(0, 1), from "
                f"{sy.weights_file or 'the [weights] table'})")
    return tuple(jnp.asarray(a) for a in arrays), text


def _first(witnesses: list[dict], pred) -> dict | None:
    """The witness of smallest radius (then search, then member) among those with ``pred``."""
    found = [w for w in witnesses if pred(w)]
    return min(found, key=lambda w: (w["rho"], w["witness"])) if found else None


def _result_arrays(res: OptimizationResult) -> dict:
    """What process 0 needs of a search another process ran, as arrays (a unit of ``units/``)."""
    return {"params": res.params, "losses": res.losses, "failed_at": res.failed_at, "steps": np.int64(res.steps),
            "resumed_from": np.int64(res.resumed_from), **{f"aux_{k}": v for k, v in res.aux.items()}}


def _result_of(arrays: dict) -> OptimizationResult:
    """The search result a unit of ``units/`` holds (:func:`_result_arrays`)."""
    return OptimizationResult(params=arrays["params"], losses=arrays["losses"], failed_at=arrays["failed_at"],
                              steps=int(arrays["steps"]), resumed_from=int(arrays["resumed_from"]),
                              aux={k[4:]: v for k, v in arrays.items() if k.startswith("aux_")})


def _study(config: FailureConfig, out: Path, progress: bool, interrupt_after: int | None, fingerprint: str,
           process_index: int = 0, process_count: int = 1, work: dict | None = None) -> dict | None:
    """The searches and the hard judgement of every witness; returns the summary (checkpoints
    under ``out/checkpoints``). With several processes each runs its share of the searches (stored in
    ``out/units``, counted in ``work``) and only process 0 returns the summary (the others: None)."""
    from ..spectral import check_good_triple

    dy, fa, op = config.dynamics, config.failure, config.optimizer
    layers = dy.layers
    (Q, K, V0, x0), source = _systems(config)
    scale = jax.vmap(diameter)(x0)
    data = {"Q": Q, "K": K, "V0": V0, "x0": x0, "scale": scale}
    eps, tau = fa.threshold, fa.temperature
    radii = np.asarray(fa.radii, np.float64)
    B, R = V0.shape[0], radii.size
    # members: every (triple, radius) pair, triple-major
    members = {k: jnp.repeat(v, R, axis=0) for k, v in data.items()}
    members["rho"] = jnp.asarray(np.tile(radii, B))

    def tokens(V, x):
        return final_tokens(x["Q"], x["K"], V, x["x0"], dt=dy.dt, layers=layers)

    def perturbed(D, x):
        return finite_guard(ladder_matrix(D, x["V0"], x["rho"]), x["V0"])

    def loss_clustering(D, x):  # maximise the hyperplane residual on the sphere of radius rho
        V, ok = perturbed(D, x)
        H = hyperplane_residual(tokens(V, x), V, x["scale"], tau)
        return jnp.where(ok, -H, jnp.nan), {"H": H, "margin": _relative_margin(x["Q"], x["K"], V, x["V0"]), "V": V}

    def loss_def41(D, x):  # minimise the Def 4.1 margin on the same sphere
        V, ok = perturbed(D, x)
        m = _relative_margin(x["Q"], x["K"], V, x["V0"])
        H = hyperplane_residual(tokens(V, x), V, x["scale"], tau)
        return jnp.where(ok, m, jnp.nan), {"H": H, "margin": m, "V": V}

    D0 = jax.random.normal(jax.random.key(config.seed), (B * R,) + V0.shape[1:], V0.dtype)
    opt = optax.adam(op.learning_rate)
    ck = out / "checkpoints"
    loss_fns = {"clustering": loss_clustering, "def41": loss_def41}

    def search(name: str) -> OptimizationResult:
        return optimize(loss_fns[name], D0, members, optimizer=opt, num_steps=op.num_steps,
                        checkpoint=ck / f"{name}.npz", fingerprint=fingerprint,
                        checkpoint_every=op.checkpoint_every, progress=progress,
                        desc=f"distance to failure ({name})", interrupt_after=interrupt_after)

    if process_count == 1:
        results = {name: search(name) for name in SEARCHES}
    else:  # the searches are the units: process p runs the searches p, p + P, ...
        from ..runs import UnitStore, wait_for_units

        store = UnitStore(out / "units", "probe-search", fingerprint)
        mine = [name for i, name in enumerate(SEARCHES) if i % process_count == process_index]
        held = {name: store.get(f"search-{name}", lambda name=name: _result_arrays(search(name))) for name in mine}
        if work is not None:
            work.update(units_computed=store.computed, units_resumed=store.resumed, units=len(SEARCHES))
        if process_index != 0:
            return None
        others = [name for name in SEARCHES if name not in held]
        wait_for_units(store, [f"search-{name}" for name in others], process_count=process_count,
                       what="search")
        for name in others:  # one that does not verify is run here (resumed from its checkpoint)
            held[name] = store.get(f"search-{name}", lambda name=name: _result_arrays(search(name)))
        results = {name: _result_of(held[name]) for name in SEARCHES}
    Qn, Kn = np.asarray(Q), np.asarray(K)
    m0 = np.asarray(jax.vmap(lambda x: _relative_margin(x["Q"], x["K"], x["V0"], x["V0"]))(data))
    H0 = np.asarray(jax.jit(jax.vmap(lambda x: hyperplane_residual(tokens(x["V0"], x), x["V0"], x["scale"], tau)))(data))
    witnesses = []
    for name in SEARCHES:
        res = results[name]
        H, margin = np.asarray(res.aux["H"]), np.asarray(res.aux["margin"])
        V = np.asarray(res.aux["V"])
        for i in range(B * R):
            b, r = divmod(i, R)
            if res.failed_at[i] >= 0:
                reason, step = failure_reason(int(res.failed_at[i]), op.num_steps), int(res.failed_at[i])
            elif not (np.isfinite(H[i]) and np.isfinite(margin[i]) and np.all(np.isfinite(V[i]))):
                reason, step = "the final H, Def 4.1 margin or V is not finite", res.steps
            else:
                reason, step = None, None
            good = None if reason else bool(check_good_triple(Qn[b], Kn[b], V[i]).good)
            witnesses.append({
                "witness": f"{name}:{i}", "search": name, "member": i, "triple": b, "rho": float(radii[r]),
                "H": float(H[i]), "margin": float(margin[i]), "clustering_lost": None if reason else bool(H[i] >= eps),
                "def41_holds": good, "excluded_at_step": step, "excluded": reason, "V": V[i],
            })
    rows = []
    for b in range(B):
        if not (np.isfinite(H0[b]) and np.isfinite(m0[b])):
            status = "excluded: H0 or the Def 4.1 margin of V0 is not finite (the unperturbed flow overflows)"
        elif not check_good_triple(Qn[b], Kn[b], np.asarray(V0[b])).good:
            status = "excluded: Def 4.1 does not hold at V0"
        elif not H0[b] < 0.5 * eps:
            status = "excluded: not clustered at the horizon without perturbation (H0 >= threshold / 2)"
        else:
            status = "ok"
        mine = [w for w in witnesses if w["triple"] == b]
        ws = [w for w in mine if w["excluded"] is None]
        lost = _first(ws, lambda w: w["clustering_lost"])
        broken = _first(ws, lambda w: not w["def41_holds"])
        lost_holding = _first(ws, lambda w: w["clustering_lost"] and w["def41_holds"])
        broken_clustered = _first(ws, lambda w: not w["def41_holds"] and not w["clustering_lost"])
        order = None
        if lost and broken:
            order = {-1: "earlier", 0: "same", 1: "later"}[int(np.sign(lost["rho"] - broken["rho"]))]
        by_radius = {name: [w for w in mine if w["search"] == name] for name in SEARCHES}
        rows.append({
            "triple": b, "status": status, "H0": float(H0[b]), "margin0": float(m0[b]),
            "clustered_at_V0": bool(np.isfinite(H0[b]) and H0[b] < 0.5 * eps),
            "excluded_members": len(mine) - len(ws),
            "H_max_by_radius": [None if w["excluded"] else w["H"] for w in by_radius["clustering"]],
            "margin_min_by_radius": [None if w["excluded"] else w["margin"] for w in by_radius["def41"]],
            "rho_clustering": lost and lost["rho"], "witness_clustering": lost and lost["witness"],
            "def41_holds_at_clustering_failure": lost and lost["def41_holds"],
            "rho_def41": broken and broken["rho"], "witness_def41": broken and broken["witness"],
            "still_clustered_at_def41_failure": broken and not broken["clustering_lost"],
            "clustering_vs_def41": order,
            "rho_lost_with_def41": lost_holding and lost_holding["rho"],
            "witness_lost_with_def41": lost_holding and lost_holding["witness"],
            "rho_broken_clustered": broken_clustered and broken_clustered["rho"],
            "witness_broken_clustered": broken_clustered and broken_clustered["witness"],
            "some_V_loses_clustering_with_def41": lost_holding is not None,
            "some_V_breaks_def41_and_clusters": broken_clustered is not None,
            "V_clustering_failure": lost and lost["V"].tolist(),
            "V_def41_failure": broken and broken["V"].tolist(),
        })
    ok = [r for r in rows if r["status"] == "ok"]
    both = [r for r in ok if r["clustering_vs_def41"] is not None]
    ratio = np.array([r["rho_clustering"] / r["rho_def41"] for r in both])
    return {
        "study": "distance-to-failure", "systems": source, "triples_sampled": B, "triples": len(ok),
        "triples_excluded": B - len(ok), "layers": layers, "threshold": eps, "radii": radii.tolist(),
        "ladder": "||V||_F = ||V0||_F on every radius (no time rescaling V -> c V0)",
        "both_reached": len(both),
        "clustering_lost_first": sum(r["clustering_vs_def41"] == "earlier" for r in both),
        "same_radius": sum(r["clustering_vs_def41"] == "same" for r in both),
        "def41_broken_first": sum(r["clustering_vs_def41"] == "later" for r in both),
        "clustering_fails_while_def41_holds": sum(r["some_V_loses_clustering_with_def41"] for r in ok),
        "clustered_after_def41_fails": sum(r["some_V_breaks_def41_and_clusters"] for r in ok),
        "clustering_never_lost": sum(r["rho_clustering"] is None for r in ok),
        "median_ratio_rho_clustering_over_rho_def41": float(np.median(ratio)) if ratio.size else None,
        "members": 2 * B * R,
        "excluded_members": [{k: w[k] for k in ("witness", "search", "member", "triple", "rho", "excluded_at_step",
                                                "excluded")} for w in witnesses if w["excluded"]],
        "rows": rows,
        "witnesses": [{k: val for k, val in w.items() if k != "V"} for w in witnesses],
        "V0": np.asarray(V0).tolist(),
    }


def run_failure(config: FailureConfig, out, progress: bool = True, interrupt_after: int | None = None, fingerprint: str = "",
                process_index: int = 0, process_count: int = 1, work: dict | None = None):
    """Run study 1; returns (summary, markdown, figure names), or None on a process other than 0 of a
    multi-process run, which runs its share of the two searches (``work``, when given, receives
    ``units_computed``, ``units_resumed`` and ``units``). See the module docstring."""
    summary = _study(config, out, progress, interrupt_after, fingerprint, process_index, process_count, work)
    if summary is None:
        return None
    ok = [r for r in summary["rows"] if r["status"] == "ok"]
    ratio = np.array([r["rho_clustering"] / r["rho_def41"] for r in ok if r["clustering_vs_def41"] is not None])
    from .. import plot as ap

    figs = ap.save(ap.failure_distances(summary["rows"], ratio), out / "distance_to_failure.png", dpi=110,
                   close=True)[:1]  # the excluded triples are counted in its title
    return summary, _markdown(summary, config, figs, out), figs


def distance_to_failure(Q: Any, K: Any, V: Any, *, progress: bool = False, **settings: Any) -> dict:
    r"""Study 1 for your own triple(s) (Q, K, V0): Q, K of shape (m, d) and V of shape (d, d), or
    stacks (B, m, d), (B, d, d) of B triples; the same computation and the same numbers as
    ``attnflow probe`` with ``[weights]`` (the summary it writes to summary.json, without the
    figures and provenance), in float64, with no output folder.

    ``settings``: any key of ``configs/probe-distance-to-failure.toml`` by its name (``seed``,
    ``n``, ``t1``, ``dt``, ``threshold``, ``temperature``, ``radii``, ``learning_rate``,
    ``num_steps``, ``checkpoint_every``); the others keep the shipped defaults. Checked like a
    config (:func:`attnflow.probe.check_probe_config`) before anything compiles.

    Returns the summary: ``rows`` (one per triple: ``status``, ``rho_clustering``,
    ``rho_def41``, the witnesses' ids, ...), ``witnesses`` (every member, judged with the hard
    tools), ``excluded_members`` (non-finite, with step and reason) and the counts of the report.

    Example:
        >>> import numpy as np
        >>> from attnflow.probe import distance_to_failure
        >>> V0 = np.array([[2.0, 0.2], [0.0, 0.3]])
        >>> r = distance_to_failure(np.eye(2), np.eye(2), V0, n=6, t1=3.0, dt=0.25, radii=[0.5],
        ...                         num_steps=3)
        >>> r["triples_sampled"], len(r["witnesses"]), r["rows"][0]["status"], r["excluded_members"]
        (1, 2, 'ok', [])
    """
    import tempfile

    from ..runs import CONFIG_DIR, load_config
    from ._config import STUDIES

    schema = load_config(None, STUDIES["distance-to-failure"])
    sections = {k: s for s, t in schema.items() if isinstance(t, dict) and s != "weights" for k in t}
    sections["seed"] = None
    for key in ("d", "num_triples", "min_gap", "weights_file"):  # given by the weights themselves
        sections.pop(key)
    overrides: dict = {"weights": {name: np.asarray(a).tolist() for name, a in (("Q", Q), ("K", K), ("V", V))}}
    for key, value in settings.items():
        if key not in sections:
            close = difflib.get_close_matches(key, list(sections), n=1)
            raise InputError(f"distance_to_failure got the unknown setting {key}={value!r}"
                             f"{f' (did you mean {close[0]}?)' if close else ''}; known: {', '.join(sorted(sections))}.")
        if sections[key] is None:
            overrides[key] = value
        else:
            overrides.setdefault(sections[key], {})[key] = value
    config = read_probe_config(CONFIG_DIR / STUDIES["distance-to-failure"], overrides)
    with tempfile.TemporaryDirectory() as tmp, jax.enable_x64(True):
        return _study(config, Path(tmp), progress, None, config.fingerprint)


_TRIPLE_COLUMNS = [
    ("triple", "triple", fmt), ("status", "status", fmt), ("H0", "H0", fmt), ("margin0", "Def 4.1 margin of V0", fmt),
    ("rho_clustering", "rho clustering lost", fmt), ("witness_clustering", "its witness", fmt),
    ("def41_holds_at_clustering_failure", "Def 4.1 holds there", fmt),
    ("rho_def41", "rho Def 4.1 broken", fmt), ("witness_def41", "its witness", fmt),
    ("still_clustered_at_def41_failure", "still clustered there", fmt),
    ("clustering_vs_def41", "clustering lost earlier / same / later", fmt),
    ("rho_lost_with_def41", "rho clustering lost, Def 4.1 holding", fmt), ("witness_lost_with_def41", "its witness", fmt),
    ("rho_broken_clustered", "rho Def 4.1 broken, still clustered", fmt),
    ("witness_broken_clustered", "its witness", fmt),
    ("excluded_members", "non-finite members", fmt),
]
_WITNESS_COLUMNS = [
    ("witness", "witness", fmt), ("search", "search", fmt), ("member", "member", fmt), ("triple", "triple", fmt),
    ("rho", "rho", fmt), ("H", "H", fmt), ("margin", "Def 4.1 margin", fmt),
    ("clustering_lost", "clustering lost", fmt), ("def41_holds", "Def 4.1 holds", fmt),
    ("excluded_at_step", "excluded at step", fmt), ("excluded", "excluded because", fmt),
]


def _markdown(summary, config, figs, out):
    eps = config.failure.threshold
    s = summary
    triples = write_rows(out / "triples.csv", s["rows"], _TRIPLE_COLUMNS)
    write_rows(out / "witnesses.csv", s["witnesses"], _WITNESS_COLUMNS)
    excluded = [w for w in s["witnesses"] if w["excluded"]]
    excluded_table = write_rows(out / "excluded_members.csv", excluded, _WITNESS_COLUMNS[:5] + _WITNESS_COLUMNS[-2:])
    lines = [
        "## Distance to failure (Def 4.1 vs clustering)",
        "",
        f"{s['systems']}, {s['layers']} Euler layers of dt = {config.dynamics.dt} (rescaled picture). On each sphere "
        f"||V - V0||_F = rho ||V0||_F, rho in {s['radii']}, with ||V||_F = ||V0||_F (so no witness is a pure time "
        "rescaling V -> c V0, which would only slow the flow), Adam maximises the hyperplane residual H (clustering "
        f"lost when H >= {eps}, units of the initial diameter) and, separately, minimises the relative Def 4.1 margin "
        "(broken when < 0). Every V reached by either search (a member: triple, radius, search) is a witness, judged "
        "with the hard tools (H >= threshold; check_good_triple); every witness is a row of witnesses.csv (id "
        "search:member). The distance to each failure is the smallest radius of a witness (an upper bound at the "
        "ladder's resolution). The counts are over the triples with status ok in the table below (triples.csv).",
        "",
        f"* excluded: **{s['triples_excluded']}** of {s['triples_sampled']} triples (column status) and "
        f"**{len(excluded)}** of {s['members']} members whose loss, gradient, H, margin or V is non-finite "
        "(never compared; column non-finite members, and the table of excluded members below, excluded_members.csv)",
        f"* both failures found for {s['both_reached']} triples: clustering lost at a smaller radius than Def 4.1 "
        f"for **{s['clustering_lost_first']}**, at the same radius for **{s['same_radius']}**, at a larger one "
        f"for **{s['def41_broken_first']}** (column clustering lost earlier / same / later); median "
        f"rho_clustering / rho_Def4.1 = {fmt(s['median_ratio_rho_clustering_over_rho_def41'])}",
        f"* some V found where clustering is lost while Def 4.1 still holds (check_good_triple): "
        f"**{s['clustering_fails_while_def41_holds']}** triples (column rho clustering lost, Def 4.1 holding; "
        "clustering can fail *earlier* than Def 4.1)",
        f"* some V found where Def 4.1 is broken and the tokens are still on <= 3 hyperplanes (H < {eps}, measured along "
        f"Re phi_1*): **{s['clustered_after_def41_fails']}** triples (column rho Def 4.1 broken, still clustered; "
        "clustering can fail *later*)",
        f"* clustering never lost on the ladder: {s['clustering_never_lost']} triples (column rho clustering lost = -)",
        "",
        *triples,
        "",
    ]
    if excluded:
        lines += ["Excluded members (non-finite; never compared):", "", *excluded_table, ""]
    lines += [*[f"![{f}]({f})" for f in figs], ""]
    return "\n".join(lines)
