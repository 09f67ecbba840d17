"""The report's scales: the defect is measured against the state's own size (a growing state is
no failure, a 1% wrong field is), Remark 3.3 grades "most tokens", and the draws do not depend on
the last bits of a computed matrix."""

import numpy as np
import pytest

from attnflow.fields import make_dynamics
from attnflow.report import reproduce
from attnflow.report._base import CaseResult
from attnflow.report._checks import MOST_TOKENS, entrance_time, remark33_check


def _defect_row(summary):
    return next(c for c in summary["checks"] if c["name"] == "solves the paper's equation")


@pytest.fixture(scope="module")
def codim_runs(tmp_path_factory):
    """codim_k with the seed whose state outgrows max|y(0)| e^{1.2 t} by 10^4 at t = 8: once with
    the right field, once with V off by 1% in the integrated field only."""
    base = tmp_path_factory.mktemp("codim")
    kw = dict(cases=["codim_k"], progress=False, figures=False, overrides={"seed": 3, "gif_frames": 0})
    right = reproduce(base / "right", **kw)

    def off_by_a_percent(Q, K, V, **options):
        return make_dynamics(Q, K, 1.01 * V, **options)

    wrong = reproduce(base / "wrong", field_factory=off_by_a_percent, **kw)
    return right, wrong


def test_growing_state_solves_its_equation(codim_runs):
    right, _ = codim_runs
    row = _defect_row(right)
    assert row["passed"] is True and row["margin"] > 1.5, row["observed"]  # > 1.5 decades below 1e-6


def test_one_percent_wrong_field_fails_the_defect(codim_runs):
    _, wrong = codim_runs
    row = _defect_row(wrong)
    assert row["passed"] is False and row["margin"] < -2, row["observed"]  # > 2 decades above 1e-6


def _grade(entrances, T=21, rate=np.log(2.0), rel=0.02):
    """Remark 3.3 on a constructed distance record: token i is far (2) before layer entrances[i],
    inside (0) from then on."""
    ts = np.arange(T, dtype=float)
    dist = np.where(ts[None, :, None] < np.asarray(entrances, float)[None, None, :], 2.0, 0.0)
    res = CaseResult("constructed", "constructed", "Remark 3.3")
    remark33_check(res, ts, dist, "tol", unit="layer", what="the limit set", rate=rate, rel=rel)
    return res.checks[0]


def test_remark33_grades_most_tokens():
    limit = 2 * np.log(50) / np.log(2)  # 11.3 layers
    n_late = int(round((1 - MOST_TOKENS) * 8))  # 2 of 8 tokens may be late
    early, late = [3] * (8 - n_late), [18] * n_late
    ok = _grade(early + late)
    assert ok.passed is True and ok.margin == pytest.approx(limit - 3)
    assert "all entered [18]" in ok.observed
    bad = _grade([3] * (8 - n_late - 1) + [18] * (n_late + 1))  # one more late token: the 75% time is 18
    assert bad.passed is False and bad.margin == pytest.approx(limit - 18)
    never = _grade([3] * 5 + [99] * 3)  # three tokens never enter: no finite time
    assert never.passed is False and never.margin == -np.inf


def test_entrance_time_is_the_last_exit_plus_one():
    rng = np.random.default_rng(4)
    dist = rng.uniform(0, 2, size=(3, 30, 6))
    dist[:, 20:] *= 0.4  # every token inside from save 20 on
    ts = np.linspace(0.0, 2.9, 30)
    for b in range(3):
        inside = np.all(dist[b] <= 1.0, axis=1)
        k = np.nonzero(~inside)[0].max() + 1
        assert entrance_time(ts, dist, 1.0)[b] == ts[k]
    dist[0, -1, 2] = 5.0  # token 2 of member 0 leaves at the last save: never entered
    assert entrance_time(ts, dist, 1.0)[0] == np.inf
    assert np.isfinite(entrance_time(ts, dist, 1.0, 5 / 6)[0])


class _Drawn(Exception):
    pass


def test_good_qk_draw_ignores_the_last_bits_of_V(monkeypatch):
    """The hyperplane cases draw Q, K by tags, not by V's bytes, which differ between BLAS builds
    (OpenBLAS' AVX2 and AVX-512 kernels round B diag B^-1 differently)."""
    from types import SimpleNamespace

    import attnflow.report._cases as cases
    from attnflow.report._draws import hyperplane_V

    def record(rng, V):
        raise _Drawn(rng.normal(size=3))

    monkeypatch.setattr(cases, "good_qk", record)
    ctx = SimpleNamespace(seed=0, settings=SimpleNamespace(n=4, t1=1.0))
    V = hyperplane_V(ctx, 2)
    draws = []
    for W in (V, V * (1 + 4 * np.finfo(float).eps)):
        assert W.tobytes() != V.tobytes() or W is V
        with pytest.raises(_Drawn) as caught:
            cases._hyperplane_case(ctx, None, W)
        draws.append(caught.value.args[0])
    np.testing.assert_array_equal(draws[0], draws[1])
