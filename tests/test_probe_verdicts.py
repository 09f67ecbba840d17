"""The probe never concludes from a non-finite number and takes a user's own weights: a member
that overflows is frozen and reported with its step and reason (the others continue), every
report bullet is a count over a table row that is also in the CSV tables, the ladder of
distance to failure never holds a time rescaling of V0, the config takes (Q, K, V0) from a
table or an .npz file (and the same numbers come from attnflow.probe.distance_to_failure), and
every numeric key of the probe configs is range-checked before anything compiles."""

import csv
import json

import jax.numpy as jnp
import numpy as np
import optax
import pytest

import attnflow as af
from attnflow.cli.main import main as cli_main
from attnflow.probe import (NonFiniteLossError, distance_to_failure, load_probe_config, optimize, run_probe)
from attnflow.probe._failure import ladder_matrix
from attnflow.runs import json_text

pytestmark = pytest.mark.usefixtures("x64")  # the ladder and the overflow checks compare float64 numbers

SETTINGS = {"n": 6, "t1": 3.0, "dt": 0.25, "radii": [0.1, 1.0], "num_steps": 3, "checkpoint_every": 3}
SECTIONS = {"n": "system", "t1": "dynamics", "dt": "dynamics", "radii": "failure", "num_steps": "optimizer",
            "checkpoint_every": "optimizer"}


def _csv(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


# --- the optimisation loop: per-member masking ------------------------------------------------

def _quadratic(p, c):
    return jnp.sum((p - c) ** 2), p[0]


def test_a_member_that_overflows_at_its_start_is_frozen_and_the_others_continue():
    # member 1's data overflow: its loss is inf at step 0, before any update
    data = jnp.array([[2.0], [1e300]])
    with pytest.warns(RuntimeWarning, match=r"member\(s\) \[1\] of 2 were frozen"):
        res = optimize(_quadratic, jnp.zeros((2, 3)), data, optimizer=optax.sgd(0.25), num_steps=30, progress=False)
    assert res.failed_at.tolist() == [-1, 0] and res.finite.tolist() == [True, False]
    np.testing.assert_allclose(res.params[0], 2.0, rtol=1e-6)  # the finite member ran to the end
    assert res.params[1].tolist() == [0.0, 0.0, 0.0]  # frozen where it failed
    assert not np.isfinite(res.losses[:, 1]).any() and np.isfinite(res.losses[:, 0]).all()


def test_a_non_finite_gradient_alone_freezes_a_member():
    # sqrt(|p|) has a finite value but an infinite gradient at p = 0 (member 1 starts there)
    def loss(p, c):
        return jnp.sum(jnp.sqrt(jnp.abs(p - c))), p[0]

    with pytest.warns(RuntimeWarning):
        res = optimize(loss, jnp.zeros((2, 1)), jnp.array([[1.0], [0.0]]), optimizer=optax.adam(0.1), num_steps=3,
                       progress=False)
    assert res.failed_at.tolist() == [-1, 0] and np.all(np.isfinite(np.asarray(res.params)))


def test_all_members_non_finite_stops_with_a_message_right_for_the_step():
    with pytest.raises(NonFiniteLossError, match=r"member\(s\) \[0, 1\] non-finite at its start \(step 0") as err:
        optimize(_quadratic, jnp.zeros((2, 1)), jnp.array([[1e300], [jnp.inf]]), optimizer=optax.sgd(0.1),
                 num_steps=5, progress=False)
    assert "learning rate" not in str(err.value)

    # finite for p < 1, NaN beyond: member 0 walks in after 2 updates, member 1 after 1
    def walls(p, c):
        return jnp.where(p[0] < 1.0, jnp.sum((p - c) ** 2), jnp.nan), p[0]

    with pytest.raises(NonFiniteLossError, match=r"\[1\] non-finite at step 1, after 1 update\(s\): the updates "
                                                 r"reached .*learning rate.*\[0\] non-finite at step 2"):
        optimize(walls, jnp.zeros((2, 1)), jnp.array([[1.5], [3.0]]), optimizer=optax.sgd(0.3), num_steps=10,
                 progress=False)


# --- distance to failure: user weights, exclusions, traceable report, the ladder ---------------

def test_the_ladder_keeps_the_norm_of_V0_so_no_witness_is_a_time_rescaling():
    rng = np.random.default_rng(0)
    V0 = jnp.asarray(rng.normal(size=(3, 3)))
    n0 = float(jnp.linalg.norm(V0))
    # a direction pointing (nearly) at 0: a plain sphere around V0 would hold V = (1 - rho) V0
    for D in (-V0 + 1e-3 * rng.normal(size=(3, 3)), jnp.asarray(rng.normal(size=(3, 3)))):
        for rho in (0.1, 0.5, 1.0, 1.5):
            V = ladder_matrix(D, V0, rho)
            np.testing.assert_allclose(float(jnp.linalg.norm(V - V0)), rho * n0, rtol=1e-12)
            np.testing.assert_allclose(float(jnp.linalg.norm(V)), n0, rtol=1e-12)
            c = float(jnp.vdot(V, V0)) / n0**2  # best time rescaling c V0 of V: far from V
            assert float(jnp.linalg.norm(V - c * V0)) >= 0.99 * rho * np.sqrt(1 - rho**2 / 4) * n0


def test_user_weights_with_an_overflowing_triple_are_excluded_and_reported(tmp_path):
    Q = K = np.eye(2)
    V = np.array([[[2.0, 0.2], [0.0, 0.3]]] * 2)  # one V0 for both Q, K
    V[1, 0, 0] = 1e200  # triple 1 overflows (its H0 and every member's loss are non-finite)
    (tmp_path / "cfg").mkdir()
    np.savez(tmp_path / "cfg" / "mine.npz", Q=Q, K=K, V=V)
    lines = ['study = "distance-to-failure"', "[system]", f"n = {SETTINGS['n']}", 'weights_file = "mine.npz"']
    for section in ("dynamics", "failure", "optimizer"):
        lines.append(f"[{section}]")
        lines += [f"{k} = {json.dumps(v)}" for k, v in SETTINGS.items() if SECTIONS[k] == section]
    (tmp_path / "cfg" / "mine.toml").write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    with pytest.warns(RuntimeWarning, match="frozen"):
        assert cli_main(["probe", str(tmp_path / "cfg" / "mine.toml"), "--out", str(out), "--no-progress"]) == 0
    s = json.loads((out / "summary.json").read_text())
    R = len(SETTINGS["radii"])
    assert s["triples_sampled"] == 2 and s["triples_excluded"] == 1
    assert s["rows"][1]["status"].startswith("excluded: H0") and s["rows"][1]["excluded_members"] == 2 * R
    # every member of triple 1 is frozen at step 0, as its start, in both searches; none of triple 0
    assert {(w["triple"], w["excluded_at_step"]) for w in s["excluded_members"]} == {(1, 0)}
    assert len(s["excluded_members"]) == 2 * R
    assert all("at its start (step 0" in w["excluded"] for w in s["excluded_members"])
    # a non-finite member yields no verdict (a NaN residual is not "still clustered")
    for w in s["witnesses"]:
        assert (w["clustering_lost"] is None) == (w["def41_holds"] is None) == (w["excluded"] is not None)
    report = (out / "report.md").read_text()
    assert f"excluded: **1** of 2 triples (column status) and **{2 * R}** of {4 * R} members" in report
    assert "Excluded members (non-finite; never compared)" in report and "time rescaling" in report

    # every bullet is a count over a column of the triple table (report.md and triples.csv)
    triples, witnesses = _csv(out / "triples.csv"), {w["witness"]: w for w in _csv(out / "witnesses.csv")}
    assert [int(r["triple"]) for r in triples] == [0, 1] and len(witnesses) == 4 * R
    ok = [r for r in triples if r["status"] == "ok"]
    assert s["clustering_fails_while_def41_holds"] == sum(r["rho_lost_with_def41"] != "" for r in ok)
    assert s["clustered_after_def41_fails"] == sum(r["rho_broken_clustered"] != "" for r in ok)
    assert s["clustering_never_lost"] == sum(r["rho_clustering"] == "" for r in ok)
    assert s["same_radius"] == sum(r["clustering_vs_def41"] == "same" for r in ok)
    for r in triples:  # the witness named in a row is a row of witnesses.csv with that radius and verdict
        for rho, wid in (("rho_clustering", "witness_clustering"), ("rho_lost_with_def41", "witness_lost_with_def41"),
                         ("rho_def41", "witness_def41"), ("rho_broken_clustered", "witness_broken_clustered")):
            assert (r[rho] == "") == (r[wid] == "")
            if r[wid]:
                w = witnesses[r[wid]]
                assert float(w["rho"]) == float(r[rho]) and w["triple"] == r["triple"] and w["excluded"] == ""
    table = report.split("| triple | status |")[1].split("\n\n")[0].splitlines()[2:]
    assert [line.split(" | ")[0] for line in table] == ["| 0", "| 1"]  # one report row per triple
    assert len(_csv(out / "excluded_members.csv")) == 2 * R
    for key in ("V_clustering_failure", "V_def41_failure"):  # the ladder: ||V||_F = ||V0||_F
        if s["rows"][0][key] is not None:
            np.testing.assert_allclose(np.linalg.norm(s["rows"][0][key]), np.linalg.norm(V[0]), rtol=1e-10)

    # the Python entry: the same numbers as the job, for the same weights and settings
    with pytest.warns(RuntimeWarning):
        r = distance_to_failure(Q, K, V, **SETTINGS)
    for key in ("rows", "witnesses", "excluded_members"):  # as the file holds them: NaN is JSON's null
        assert json.loads(json_text(r[key])) == s[key]


def test_inline_weights_table_is_read_and_checked(tmp_path):
    cfg = tmp_path / "w.toml"
    cfg.write_text('study = "distance-to-failure"\n[weights]\nQ = [[1.0, 0.0], [0.0, 1.0]]\n'
                   'K = [[1.0, 0.0], [0.0, 1.0]]\nV = [[2.0, 0.2], [0.0, 0.3]]\n')
    c = load_probe_config(cfg)
    assert c["weights"]["V"] == [[2.0, 0.2], [0.0, 0.3]]
    bad = {
        "V = [[2.0, 0.2], [0.0]]": "ragged",
        "V = [[2.0, nan], [0.0, 0.3]]": "non-finite",
        "V = [[2.0, 0.2, 0.0], [0.0, 0.3, 0.0]]": "V must be square",
        "V = [[2.0]]": "Q and K must have shape",
        'V = "eye"': "V must",
    }
    for line, match in bad.items():
        cfg.write_text(f'study = "distance-to-failure"\n[weights]\nQ = [[1.0, 0.0], [0.0, 1.0]]\n'
                       f"K = [[1.0, 0.0], [0.0, 1.0]]\n{line}\n")
        with pytest.raises(af.InputError, match=match):
            load_probe_config(cfg)
    cfg.write_text('study = "distance-to-failure"\n[weights]\nQ = [[1.0]]\nK = [[1.0]]\nV = [[1.0]]\n')
    with pytest.raises(af.InputError, match="d >= 2"):
        load_probe_config(cfg)
    cfg.write_text('study = "distance-to-failure"\n[weights]\nQ = [[1.0]]\n')
    with pytest.raises(af.InputError, match="exactly Q, K and V, got Q"):
        load_probe_config(cfg)
    cfg.write_text('study = "distance-to-failure"\n[system]\nweights_file = "absent.npz"\n')
    with pytest.raises(af.InputError, match="'system.weights_file' = .*absent.npz"):
        load_probe_config(cfg)
    np.savez(tmp_path / "w.npz", Q=np.eye(2), K=np.eye(2), V=np.eye(2))
    cfg.write_text('study = "distance-to-failure"\n[system]\nweights_file = "w.npz"\n[weights]\nQ = [[1.0]]\n')
    with pytest.raises(af.InputError, match="not both"):
        load_probe_config(cfg)
    with pytest.raises(af.InputError, match="unknown setting d=3"):
        distance_to_failure(np.eye(2), np.eye(2), np.eye(2), d=3)
    with pytest.raises(af.InputError, match=r"\[weights\] Q contains 1 non-finite"):
        distance_to_failure(np.array([[np.nan, 0.0], [0.0, 1.0]]), np.eye(2), np.eye(2))


# --- the other studies: excluded systems, and a stop that is right for its step ----------------

def test_sensitivity_excludes_a_system_that_overflows(tmp_path, monkeypatch):
    import attnflow.probe._sensitivity as sens

    real = sens._systems

    def with_an_overflowing_copy(config):
        systems, text, modes = real(config)
        label, Q, K, V, x0, beta, biases = systems[0]
        return systems + [("overflowing copy", Q, K, V.at[0, 0].set(1e200), x0, beta, biases)], text, modes

    monkeypatch.setattr(sens, "_systems", with_an_overflowing_copy)
    config = load_probe_config("probe-sensitivity.toml", {"system": {"num_triples": 1, "n": 5, "d": 2},
                                                          "dynamics": {"t1": 1.0, "dt": 0.25}})
    s = run_probe(config, tmp_path, progress=False)
    assert s["excluded"] == 1 and s["rows"][1]["status"].startswith("excluded")
    assert s["fd_check_passed"] and np.isfinite(s["max_fd_rel_error"])  # from the finite system only
    rows = _csv(tmp_path / "sensitivity.csv")
    assert [r["status"][:8] for r in rows] == ["ok", "excluded"] and rows[1]["fd_rel_error"] == ""
    assert "1 of 2 systems (column status)" in (tmp_path / "report.md").read_text()


def test_a_study_whose_every_member_overflows_stops_at_step_0_with_the_right_reason(tmp_path):
    V = [[1e200, 0.2], [0.0, 0.3]]
    with pytest.raises(NonFiniteLossError, match=r"\[0\] non-finite at its start \(step 0, before any update\)") as err:
        distance_to_failure(np.eye(2), np.eye(2), V, n=4, t1=0.5, dt=0.25, radii=[0.5], num_steps=2)
    assert "learning rate" not in str(err.value)


def test_beyond_pd_tables_trace_the_best_start_and_the_verdict(tmp_path):
    config = load_probe_config("probe-beyond-pd.toml", {"system": {"num_starts": 2, "n": 5},
                                                        "dynamics": {"t1": 1.0, "dt": 0.25},
                                                        "optimizer": {"num_steps": 2}, "check": {"horizons": [1.0, 2.0]}})
    s = run_probe(config, tmp_path, progress=False)
    starts, horizons = _csv(tmp_path / "starts.csv"), _csv(tmp_path / "horizons.csv")
    assert [r["best"] for r in starts].index("true") == s["best_start"]
    assert float(starts[s["best_start"]]["soft_count"]) == s["best_soft_count"]
    assert [float(h["horizon"]) for h in horizons] == [1.0, 2.0] and all(h["status"] == "ok" for h in horizons)
    report = (tmp_path / "report.md").read_text()
    assert "| start | status |" in report and "| horizon (x t1) |" in report


# --- every key range-checked, before anything compiles or the folder is claimed ----------------

BAD = [
    ("distance-to-failure", {"optimizer": {"learning_rate": -0.1}}, "optimizer.learning_rate"),
    ("distance-to-failure", {"optimizer": {"learning_rate": 0.0}}, "optimizer.learning_rate"),
    ("distance-to-failure", {"optimizer": {"learning_rate": float("nan")}}, "optimizer.learning_rate"),
    ("distance-to-failure", {"optimizer": {"num_steps": 0}}, "optimizer.num_steps"),
    ("distance-to-failure", {"optimizer": {"checkpoint_every": 0}}, "optimizer.checkpoint_every"),
    ("distance-to-failure", {"failure": {"radii": []}}, "failure.radii"),
    ("distance-to-failure", {"failure": {"radii": [0.1, float("inf")]}}, r"failure.radii\[1\]"),
    ("distance-to-failure", {"failure": {"radii": [2.5]}}, r"failure.radii\[0\]"),
    ("distance-to-failure", {"failure": {"threshold": float("nan")}}, "failure.threshold"),
    ("distance-to-failure", {"failure": {"temperature": 0.0}}, "failure.temperature"),
    ("distance-to-failure", {"system": {"n": 0}}, "system.n"),
    ("distance-to-failure", {"system": {"d": 0}}, "system.d"),
    ("distance-to-failure", {"system": {"num_triples": 0}}, "system.num_triples"),
    ("distance-to-failure", {"system": {"min_gap": -1.0}}, "system.min_gap"),
    ("distance-to-failure", {"dynamics": {"t1": float("nan")}}, "dynamics.t1"),
    ("distance-to-failure", {"dynamics": {"dt": 0.0}}, "dynamics.dt"),
    ("distance-to-failure", {"dynamics": {"t1": 1.0, "dt": 0.3}}, "whole number of layers"),
    ("distance-to-failure", {"seed": -1}, "'seed'"),
    ("beyond-pd", {"system": {"qk_norm": -1.0}}, "system.qk_norm"),
    ("beyond-pd", {"system": {"d": 1}}, "system.d"),
    ("beyond-pd", {"system": {"num_starts": 0}}, "system.num_starts"),
    ("beyond-pd", {"check": {"horizons": []}}, "check.horizons"),
    ("beyond-pd", {"check": {"horizons": [2.0, 1.0]}}, "increasing"),
    ("beyond-pd", {"check": {"horizons": [1.0, 1.01]}}, r"check.horizons\[1\]"),
    ("beyond-pd", {"check": {"rel_tol": 1.5}}, "check.rel_tol"),
    ("beyond-pd", {"objective": {"pd_margin": 0.0}}, "objective.pd_margin"),
    ("beyond-pd", {"objective": {"penalty": float("inf")}}, "objective.penalty"),
    ("beyond-pd", {"objective": {"temperature": -0.2}}, "objective.temperature"),
    ("sensitivity", {"check": {"fd_step": 0.0}}, "check.fd_step"),
    ("sensitivity", {"check": {"fd_tolerance": float("nan")}}, "check.fd_tolerance"),
    ("sensitivity", {"levels": {"temperature": float("inf")}}, "levels.temperature"),
    ("sensitivity", {"system": {"source": "gpt"}}, "system.source"),
    ("sensitivity", {"system": {"source": "minilm"}, "head": {"layer": -1}}, "head.layer"),
    ("sensitivity", {"system": {"source": "minilm"}, "head": {"text": " "}}, "head.text"),
    ("sensitivity", {"system": {"source": "minilm"}, "head": {"layer": 6}}, "head.layer' must be below 6"),
    ("sensitivity", {"system": {"source": "minilm"}, "head": {"head": 12}}, "head.head' must be below 12"),
]


@pytest.mark.parametrize("study, overrides, key", BAD, ids=[f"{s}-{k}" for s, _, k in BAD])
def test_every_bad_value_is_refused_before_the_folder_is_claimed(tmp_path, study, overrides, key):
    with pytest.raises(af.InputError, match=key):
        load_probe_config(f"probe-{study}.toml", overrides)
    # a config dict built by hand is checked again by run_probe, before --out is created
    config = load_probe_config(f"probe-{study}.toml")
    for section, values in overrides.items():
        if isinstance(values, dict):
            config[section].update(values)
        else:
            config[section] = values
    with pytest.raises(af.InputError, match=key):
        run_probe(config, tmp_path / "o", progress=False)
    assert not (tmp_path / "o").exists()


def test_toml_nan_and_inf_literals_are_refused(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('study = "distance-to-failure"\n[failure]\nthreshold = nan\n')
    with pytest.raises(af.InputError, match=r"'failure.threshold' .*must be a finite number.*got nan"):
        load_probe_config(cfg)
    cfg.write_text('study = "beyond-pd"\n[dynamics]\nt1 = inf\n')
    with pytest.raises(af.InputError, match="dynamics.t1"):
        load_probe_config(cfg)


def test_a_run_that_cannot_fit_is_refused(monkeypatch):
    monkeypatch.setenv("ATTNFLOW_MEMORY_LIMIT", "1e8")
    load_probe_config("probe-distance-to-failure.toml")  # the shipped sizes fit
    with pytest.raises(af.InputError, match=r"needs about .* lower system.n to at most about"):
        load_probe_config("probe-distance-to-failure.toml", {"system": {"n": 4000}})
    with pytest.raises(af.InputError, match="lower system.n"):
        load_probe_config("probe-beyond-pd.toml", {"system": {"n": 4000}})
