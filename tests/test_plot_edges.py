"""The edges of attnflow.plot: every public figure function refuses inputs whose shapes disagree, and empty
inputs, with attnflow.errors.InputError before it draws; and the phase figures read as a referee expects
(curves on coarse beta grids, mathtext symbols, legends off the data, the equiangular line qualified)."""

import re
from types import SimpleNamespace as R

import matplotlib

matplotlib.use("agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import attnflow.plot as ap  # noqa: E402
from attnflow.errors import InputError  # noqa: E402
from attnflow.phase import _figures as phase_figures  # noqa: E402

RNG = np.random.default_rng(20)


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _heads(layers=1, heads=2):
    return [R(layer=s, head=h, lambda1_re=1.0 + h, lambda1_im=0.0, status="good")
            for s in range(layers) for h in range(heads)]


def _record(L=2, H=2, n=3, **change):
    rec = {"attentions": RNG.dirichlet(np.ones(n), size=(L, H, n)), "clusters": np.arange(L + 1.0),
           "mean_cos": RNG.random(L + 1), "boolean": RNG.random((L, H)), "ideal_clusters": np.ones((1, H, L + 1)),
           "ideal_mean_cos": RNG.random((1, H, L + 1)), "ideal_boolean": RNG.random((1, H, L)),
           "ideal_selected_attentions": RNG.dirichlet(np.ones(n), size=(L, n))}
    rec.update(change)
    return rec


def _summary(groups=True, table=True):
    g = [{"v_ensemble": "ginibre", "qk_ensemble": "pd", "d": 2, "frac_good": 0.5,
          "frac_consistent_where_predicted": 0.4}] if groups else []
    return {"crosstab_predicted_observed": {"points": {"points": 4, "none": 1}} if table else {}, "groups": g}


def _spectral(ds=(2, 8), extra=0):
    return {"groups": [{"ensemble": "ginibre", "d": d, "frac_cond1": 0.5, "frac_cond1_ci": [0.4, 0.6],
                        "frac_cond1_real_part": 0.3, "frac_cond1_real_part_ci": [0.2, 0.4], "mean_num_real": 1.5,
                        "mean_num_real_se": 0.1} for d in ds]}


T5 = np.linspace(0.0, 1.0, 5)
OK_ROW = {"rho_clustering": 0.1, "rho_def41": 0.2, "margin0": 0.3}
OK_HORIZON = {"t": 1.0, "status": "ok", "tokens": np.ones((4, 2)), "num_clusters": 1, "boundary": 0, "interior": 0}

# each public figure function: a call whose inputs disagree in shape, and a call with an empty input
CASES = {
    "trajectories": (lambda: ap.trajectories(RNG.normal(size=(5, 4, 2)), ts=np.arange(4.0)),
                     lambda: ap.trajectories(np.zeros((5, 0, 2)))),
    "attention_maps": (lambda: ap.attention_maps(RNG.random((3, 4, 5))),
                       lambda: ap.attention_maps(np.zeros((0, 3, 3)))),
    "leader_order": (lambda: ap.leader_order(RNG.random((3, 4))), lambda: ap.leader_order(np.zeros((0, 0)))),
    "cluster_series": (lambda: ap.cluster_series(T5, clusters=[3, 2, 1]), lambda: ap.cluster_series([], clusters=[])),
    "levels": (lambda: ap.levels(T5, RNG.random((4, 3))), lambda: ap.levels([], [])),
    "series_by_parameter": (lambda: ap.series_by_parameter(T5, RNG.random((2, 4))),
                            lambda: ap.series_by_parameter(T5, [])),
    "readable_scale": (lambda: ap.readable_scale(ap.new_axes()[1], RNG.random((2, 3, 4))),
                       lambda: ap.readable_scale(ap.new_axes()[1], [])),
    "frame_indices": (lambda: ap.frame_indices(np.arange(50.0), RNG.random((40, 3, 2)), frames=5),
                      lambda: ap.frame_indices([], np.zeros((0, 3, 2)))),
    "animate": (lambda: ap.animate(RNG.random((5, 3, 2)), "/nonexistent/a.gif", ts=np.arange(3.0)),
                lambda: ap.animate(np.zeros((0, 3, 2)), "/nonexistent/a.gif")),
    "eigenvalues": (lambda: ap.eigenvalues([1.0, 2.0, 3.0], classes=["top", "other"]), lambda: ap.eigenvalues([])),
    "eigenvalue_classes": (lambda: ap.eigenvalue_classes(np.ones((2, 3, 4))), lambda: ap.eigenvalue_classes([])),
    "head_spectra": (lambda: ap.head_spectra({(0, 0): np.ones(3)}, _heads(heads=2)), lambda: ap.head_spectra({}, [])),
    "sweep_fractions": (lambda: ap.sweep_fractions({"d": [2, 4, 8], "cond1": [True, False]}),
                        lambda: ap.sweep_fractions([])),
    "sweep_means": (lambda: ap.sweep_means({"d": [2, 4], "mean_num_real": [1.0, 2.0, 3.0]}),
                    lambda: ap.sweep_means({})),
    "fraction_vs_d": (lambda: ap.fraction_vs_d({"groups": {"d": [2, 4], "frac_cond1": [0.5],
                                                           "frac_cond1_real_part": [0.1, 0.2],
                                                           "mean_num_real": [1.0, 2.0]}}),
                      lambda: ap.fraction_vs_d({"groups": []})),
    "crosstab": (lambda: ap.crosstab([[1, 2, 3], [4, 5, 6]], rows=["a", "b"], cols=["x", "y"]),
                 lambda: ap.crosstab(np.zeros((0, 0)), rows=[], cols=[])),
    "bars_with_spread": (lambda: ap.bars_with_spread([1.0, 2.0], labels=["a", "b"], lo=[0.5, 1.0, 1.5]),
                         lambda: ap.bars_with_spread([], labels=[])),
    "predicted_vs_observed": (lambda: ap.predicted_vs_observed({"crosstab_predicted_observed": {"points": {}}}),
                              lambda: ap.predicted_vs_observed(_summary(groups=False, table=False))),
    "read_table": (lambda: ap.read_table({"d": [2, 4, 8], "cond1": [True, False]}), lambda: ap.read_table([])),
    "phase_diagram": (lambda: ap.phase_diagram(np.ones((3, 5)), beta=[1, 2, 3], t=[0, 1, 2, 3]),
                      lambda: ap.phase_diagram(np.ones((0, 4)), beta=[], t=[0, 1, 2, 3])),
    "curves_at_fixed_t": (lambda: ap.curves_at_fixed_t(np.ones((3, 4)), beta=[1, 2, 3], t=[0, 1, 2, 3], at=[1],
                                                       lo=np.ones((3, 3))),
                          lambda: ap.curves_at_fixed_t(np.ones((3, 4)), beta=[1, 2, 3], t=[0, 1, 2, 3], at=[])),
    "cell_edges": (lambda: ap.cell_edges(np.ones((2, 3))), lambda: ap.cell_edges([])),
    "staircase": (lambda: ap.staircase(T5, np.ones((2, 4))), lambda: ap.staircase([], np.ones((2, 0)))),
    "lifetime_vs_beta": (lambda: ap.lifetime_vs_beta([1.0, 2.0, 3.0], [1.0, 2.0], q25=[1, 1], q75=[2, 2]),
                         lambda: ap.lifetime_vs_beta([], [])),
    "model_vs_flow": (lambda: ap.model_vs_flow(_record(boolean=np.ones((3, 2))), _heads()[1], np.ones(2), list("abc")),
                      lambda: ap.model_vs_flow(_record(), _heads()[1], np.ones(2), [])),
    "head_maps": (lambda: ap.head_maps(np.ones((3, 4)), np.ones((3, 5)), n_mean=4.0),
                  lambda: ap.head_maps(np.ones((0, 4)), np.ones((0, 4)), n_mean=4.0)),
    "flow_vs_spectrum": (lambda: ap.flow_vs_spectrum(_heads(heads=3), np.ones((1, 3)), np.ones((1, 2)), n_mean=4.0),
                         lambda: ap.flow_vs_spectrum([], np.ones((1, 3)), np.ones((1, 3)), n_mean=4.0)),
    "beyond_pd_tokens": (lambda: ap.beyond_pd_tokens(np.ones((4, 2)), [dict(OK_HORIZON, tokens=np.ones((5, 2)))],
                                                     -np.eye(2)),
                         lambda: ap.beyond_pd_tokens(np.ones((4, 2)), [], -np.eye(2))),
    "failure_distances": (lambda: ap.failure_distances([{"rho_clustering": 0.1}], [0.5]),
                          lambda: ap.failure_distances([], [])),
    "sensitivity_maps": (lambda: ap.sensitivity_maps(np.ones((2, 3, 3)), np.ones((2, 2, 3))),
                         lambda: ap.sensitivity_maps(np.ones((2, 0, 0)), np.ones((2, 0, 0)))),
    "circle_density": (lambda: ap.circle_density(np.ones((4, 16)), t=T5), lambda: ap.circle_density(np.ones((5, 0)), t=T5)),
    "sphere_density_map": (lambda: ap.sphere_density_map(np.ones((4, 8)), z=np.zeros(3)),
                           lambda: ap.sphere_density_map(np.ones((0, 8)))),
    "distance_vs_n": (lambda: ap.distance_vs_n([100, 400], np.ones((3, 2, 2)), times=[0.0, 1.0]),
                      lambda: ap.distance_vs_n([], np.ones((0, 2, 2)), times=[0.0, 1.0])),
    "growth_vs_prediction": (lambda: ap.growth_vs_prediction([1, 2, 3], [0.1, 0.2], [[0.1, 0.2, 0.3]]),
                             lambda: ap.growth_vs_prediction([], [], [])),
    "order_vs_noise": (lambda: ap.order_vs_noise([0.9, 1.0, 1.1], [0.5, 0.1], [0.6, 0.5, 0.0]),
                       lambda: ap.order_vs_noise([], [])),
}
# the package's helpers: no data of their own to check (formats, colours, Axes, legends, saving)
HELPERS = {"save", "figure_formats", "current_formats", "new_axes", "new_figure", "colours", "legend", "colorbar"}


def test_every_public_figure_function_has_its_edge_cases():
    public = {name for name in ap.__all__ if callable(getattr(ap, name)) and not isinstance(getattr(ap, name), type)}
    assert public - HELPERS == set(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_mismatched_shapes_are_refused_in_one_sentence(name):
    with pytest.raises(InputError) as err:
        CASES[name][0]()
    message = str(err.value)
    assert message.startswith(f"{name}: ") and message.endswith(".") and message.count(". ") == 0, message


@pytest.mark.parametrize("name", sorted(CASES))
def test_empty_inputs_are_refused_in_one_sentence(name):
    with pytest.raises(InputError) as err:
        CASES[name][1]()
    message = str(err.value)
    assert message.startswith(f"{name}: ") and message.endswith(".") and "empty" in message, message


def test_the_shape_sentence_names_the_input_and_the_axes_it_should_have():
    with pytest.raises(InputError, match=r"values has shape \(3, 5\), expected \(beta=3, t=4\)"):
        ap.phase_diagram(np.ones((3, 5)), beta=[1, 2, 3], t=[0, 1, 2, 3])


def test_bad_options_are_input_errors_too():
    with pytest.raises(InputError, match="overlay"):
        ap.trajectories(RNG.normal(size=(3, 4, 2)), overlay="circle")
    with pytest.raises(InputError, match="formats"):
        with ap.figure_formats("gif"):
            pass
    with pytest.raises(InputError, match="frames"):
        ap.frame_indices(np.arange(5.0), np.zeros((5, 2, 2)), frames=1)


# --- the phase figures ---------------------------------------------------------------------

def _words_outside_maths(text: str) -> str:
    return re.sub(r"\$[^$]*\$", " ", text)


def test_a_coarse_beta_grid_is_drawn_as_curves_and_a_fine_one_as_cells_that_stop_at_zero():
    t = np.linspace(0.0, 10.0, 11)
    coarse = ap.phase_diagram(RNG.random((3, 11)), beta=[1.0, 4.0, 9.0], t=t,
                              overlay=([5.0, 7.0], [1.0, 4.0], "theory"))
    assert not coarse.collections  # no mesh
    assert [ln.get_label() for ln in coarse.lines[:3]] == [r"$\beta$ = 1", r"$\beta$ = 4", r"$\beta$ = 9"]
    markers = [ln for ln in coarse.lines if ln.get_marker() == "D" and len(ln.get_xdata())]
    assert sorted(float(ln.get_xdata()[0]) for ln in markers) == [5.0, 7.0]  # a theory time on each curve
    beta = np.linspace(0.0, 9.0, 10)
    fine = ap.phase_diagram(RNG.random((10, 11)), beta=beta, t=t)
    assert len(fine.collections) == 1
    assert fine.get_ylim() == pytest.approx((0.0, 9.5))  # not from -0.5: no beta below the grid's 0
    assert fine.get_xlim()[0] == 0.0


def test_phase_figure_labels_use_mathtext_for_beta_and_the_energy():
    t = np.linspace(0.0, 4.0, 5)
    axes = [ap.phase_diagram(RNG.random((9, 5)), beta=np.arange(1.0, 10.0), t=t),
            ap.curves_at_fixed_t(RNG.random((3, 5)), beta=[1, 2, 3], t=t, at=[1.0]),
            ap.lifetime_vs_beta([1.0, 2.0, 3.0], [2.0, 3.0, 5.0], fit={"slope": 0.5, "intercept": 0.3}),
            ap.staircase(t, RNG.random((2, 5)), clusters=np.ones((2, 5)))]
    texts = [a.get_xlabel() + " " + a.get_ylabel() for a in axes] + [tx.get_text() for a in axes for tx in
                                                                       (a.get_legend().get_texts() if a.get_legend() else [])]
    assert r"$\beta$" in axes[0].get_ylabel() and r"$E_\beta$" in axes[3].get_ylabel()
    for text in texts:
        assert not re.search(r"\bbeta\b|E_beta", _words_outside_maths(text)), text


def _grids(beta, t):
    return {name: RNG.uniform(0.1, 1.0, (len(beta), len(t))) for name, _, _ in phase_figures.MAPS}


@pytest.mark.parametrize("n, d, words", [(32, 2, "heuristic (n > d)"), (3, 3, "exact (n <= d)")])
@pytest.mark.parametrize("betas", [3, 10])
def test_heat_maps_one_legend_under_every_panel_naming_the_theory_line_exact_or_heuristic(tmp_path, monkeypatch, n, d,
                                                                                        words, betas):
    figures = []
    monkeypatch.setattr(ap, "save", lambda fig, path, close=False: figures.append(fig) or ["p.png"])
    beta, t = np.linspace(1.0, 9.0, betas), np.linspace(0.0, 10.0, 21)
    phase_figures.heat_maps(tmp_path / "p.png", _grids(beta, t), beta, t, log_t=False,
                            overlay=(np.full(betas, 5.0), beta, "equiangular model reaches 0.999"), title="x", n=n, d=d)
    fig = figures[0]
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    assert len(fig.legends) == 1 and not any(a.get_legend() for a in fig.axes)
    box = fig.legends[0].get_window_extent(r)
    labels = [tx.get_text() for tx in fig.legends[0].get_texts()]
    assert f"equiangular model reaches 0.999: {words}" in labels
    panels = [a for a in fig.axes if a.get_label() != "<colorbar>"]
    assert all(box.y1 <= a.get_window_extent(r).y0 for a in panels)  # below every panel, between none of them
    for a in fig.axes:  # every label (the energy colour bar's too) inside the figure
        for label in (a.yaxis.label, a.xaxis.label):
            if label.get_text():
                lb = label.get_window_extent(r)
                assert fig.bbox.x0 <= lb.x0 and lb.x1 <= fig.bbox.x1 and fig.bbox.y0 <= lb.y0 and lb.y1 <= fig.bbox.y1


def test_heat_maps_refuse_a_theory_line_without_n_and_d(tmp_path):
    beta, t = np.linspace(1.0, 9.0, 3), np.linspace(0.0, 10.0, 5)
    with pytest.raises(InputError, match="n and d"):
        phase_figures.heat_maps(tmp_path / "p.png", _grids(beta, t), beta, t, log_t=False,
                                overlay=([5.0], [1.0], "theory"), title="x")


def test_the_staircase_legend_covers_neither_axis_nor_the_time_label():
    t = np.geomspace(0.1, 100.0, 40)
    e = 1 + np.cumsum(RNG.random((4, 40)) > 0.8, axis=1)
    ax = ap.staircase(t, e, clusters=6 - e)
    fig = ax.figure
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    box = ax.get_legend().get_window_extent(r)
    for other in fig.axes:  # the energy axes and the clusters' twin
        assert not box.overlaps(other.get_window_extent(r))
    assert not box.overlaps(ax.xaxis.label.get_window_extent(r))
    assert fig.bbox.y0 <= box.y0


def test_excluded_triples_are_counted_in_the_failure_figure_not_drawn():
    rows = [dict(OK_ROW, status="ok"), dict(OK_ROW, rho_clustering=5.0, status="excluded: not clustered")]
    fig = ap.failure_distances(rows, [0.5])
    assert "1 of 2 triple(s) excluded" in fig._suptitle.get_text()
    assert sum(p.get_height() for p in fig.axes[0].patches) == 2  # the kept triple's two radii only
    fig = ap.failure_distances([dict(OK_ROW, status="excluded: not clustered")] * 2, [])
    assert fig._suptitle.get_text().endswith("no triple to draw")


def test_the_phase_staircase_without_a_finite_system_says_so(tmp_path, monkeypatch):
    figures = []
    monkeypatch.setattr(ap, "save", lambda fig, path, close=False: figures.append(fig) or ["s.png"])
    phase_figures.staircase(tmp_path / "s.png", T5, np.ones((0, 5)), np.ones((0, 5)), r"$\beta$ = 1")
    assert any("no finite system" in t.get_text() for a in figures[0].axes for t in a.texts)


def test_sensitivity_maps_draw_a_truncated_eigenbasis():
    """A real head keeps only V's k leading modes: S is (2, k, k) with k < d (the probe's real-head study)."""
    rng = np.random.default_rng(3)
    fig = ap.sensitivity_maps(rng.normal(size=(2, 6, 6)), rng.normal(size=(2, 3, 3)) + 0j)
    assert len(fig.axes) == 8


def test_read_table_reads_a_summary_s_null_numbers_as_nan(tmp_path):
    """A sweep's summary.json holds a number that is not finite as null (standard JSON): read back as NaN in a
    float column, not as an object column; a column of text keeps its None."""
    from attnflow.runs import atomic_write_json

    rng = np.random.default_rng(3)
    frac = rng.uniform(size=3)
    atomic_write_json(tmp_path / "summary.json", {"groups": [
        {"d": 2, "fraction": frac[0], "slope": np.nan, "note": None},
        {"d": 4, "fraction": frac[1], "slope": 0.5, "note": "x"},
        {"d": 8, "fraction": frac[2], "slope": -np.inf, "note": None}]})
    cols = ap.read_table(tmp_path / "summary.json")
    assert cols["d"].tolist() == [2, 4, 8] and cols["fraction"].tolist() == frac.tolist()
    assert cols["slope"].dtype == np.float64 and np.isnan(cols["slope"][[0, 2]]).all() and cols["slope"][1] == 0.5
    assert cols["note"].tolist() == [None, "x", None]
