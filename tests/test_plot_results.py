"""Result figures of attnflow.plot: spectra, sweeps, phase diagrams, track and probe figures."""

from types import SimpleNamespace

import matplotlib.pyplot as plt
import numpy as np
import pytest

import attnflow.plot as ap


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _labelled(ax):
    assert ax.get_xlabel().strip() and ax.get_ylabel().strip()


def _has_colorbar(fig, n=1):
    # a colour bar is an extra Axes whose label is set on one of its axes
    bars = [a for a in fig.axes if a.get_label() == "<colorbar>"]
    assert len(bars) >= n
    for b in bars:
        assert (b.get_ylabel() or b.get_xlabel()).strip()


def _inside_y(ax, y):
    lo, hi = ax.get_ylim()
    assert min(lo, hi) <= y <= max(lo, hi)


def _rows(layers=1, heads=16, seed=0):
    rng = np.random.default_rng(seed)
    statuses = list(ap.STATUS_COLOURS)
    rows, spectra = [], {}
    for s in range(layers):
        for h in range(heads):
            lam = np.linalg.eigvals(rng.normal(size=(6, 6)))
            top = lam[np.argmax(np.abs(lam))]
            rows.append(SimpleNamespace(layer=s, head=h, lambda1_re=float(top.real), lambda1_im=float(top.imag),
                                        status=statuses[h % 4]))
            spectra[(s, h)] = lam
    return rows, spectra


def _no_overlap(bboxes):
    for i, a in enumerate(bboxes):
        for b in bboxes[i + 1:]:
            assert not a.overlaps(b), (a, b)


# --- spectra -------------------------------------------------------------------------------

def test_eigenvalue_classes_follow_largest_modulus():
    # largest real part (2) is not the largest modulus (-3): Def 4.1(1) fails
    assert ap.eigenvalue_classes([2.0, -3.0, 0.5]).tolist() == ["other", "violation", "other"]
    assert ap.eigenvalue_classes([[3.0, 1.0], [1j, -1j]]).tolist() == [["top", "other"], ["violation", "violation"]]


def test_eigenvalues_one_and_many_spectra():
    rng = np.random.default_rng(1)
    ax = ap.eigenvalues(np.linalg.eigvals(rng.normal(size=(5, 5))), title="one")
    _labelled(ax)
    _inside_y(ax, 0.0)
    _inside_y(ax, 1.0)  # the unit circle
    many = np.stack([np.linalg.eigvals(rng.normal(size=(4, 4))) for _ in range(6)])
    fig, given = plt.subplots()
    assert ap.eigenvalues(many, ax=given) is given
    n_points = sum(len(c.get_offsets()) for c in given.collections)
    assert n_points == many.size


def test_eigenvalues_nonfinite_noted():
    ax = ap.eigenvalues(np.array([2.0, np.nan, 0.5j]))
    assert "non-finite" in ax.get_title()


def test_head_spectra_labels_do_not_overlap_or_clip():
    rows, spectra = _rows(layers=2, heads=16)
    fig = ap.head_spectra(spectra, rows)
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    figbox = fig.bbox
    for ax in fig.axes:
        _labelled(ax)
        texts = [t for t in ax.texts] + [c for c in ax.get_children() if type(c).__name__ == "Annotation"]
        texts = list({id(t): t for t in texts}.values())
        from matplotlib.text import Text

        boxes = [Text.get_window_extent(t, r) for t in texts]  # the text, without the leader line
        assert len(boxes) >= 16
        _no_overlap(boxes)
        for b in boxes:
            assert figbox.x0 <= b.x0 and b.x1 <= figbox.x1 and figbox.y0 <= b.y0 and b.y1 <= figbox.y1


# --- sweeps --------------------------------------------------------------------------------

def _summary_groups():
    rows = []
    for ens in ("ginibre", "positive"):
        for d, f in ((2, 0.7), (8, 0.45), (32, 0.25), (128, 0.12)):
            f = f if ens == "ginibre" else 1.0
            rows.append({"ensemble": ens, "d": d, "n": 200, "frac_cond1": f, "frac_cond1_ci": [f - 0.05, min(f + 0.05, 1)],
                         "frac_cond1_real_part": f / 2, "frac_cond1_real_part_ci": [f / 2 - 0.04, f / 2 + 0.04],
                         "mean_num_real": np.sqrt(2 * d / np.pi) + 0.5, "mean_num_real_se": 0.05})
    return rows


def test_sweep_fractions_aggregates_and_keeps_reference_inside():
    rng = np.random.default_rng(2)
    t = {"d": np.repeat([2, 4, 8, 16], 30), "cond1": rng.random(120) < np.repeat([0.9, 0.8, 0.7, 0.6], 30),
         "ensemble": np.array(["ginibre"] * 120)}
    fig, ax = plt.subplots()
    assert ap.sweep_fractions(t, reference=0.02, reference_label="paper", ax=ax) is ax
    _labelled(ax)
    _inside_y(ax, 0.02)
    # the errorbar series: 4 points, fraction between its Wilson bounds
    line = [ln for ln in ax.get_lines() if len(ln.get_xdata()) == 4][0]
    assert np.all((line.get_ydata() > 0.4) & (line.get_ydata() <= 1.0))


def test_fraction_vs_d_reference_and_plain_ticks():
    fig = ap.fraction_vs_d({"groups": _summary_groups()})
    fig.canvas.draw()
    ax0, ax1 = fig.axes[:2]
    for ax in (ax0, ax1):
        _labelled(ax)
        for tick in ax.get_yticklabels() + ax.get_xticklabels():
            assert "times" not in tick.get_text() and "^" not in tick.get_text(), tick.get_text()
    _inside_y(ax0, 0.14)
    assert ax1.get_yscale() == "linear"  # under two decades: linear, plain ticks


def test_sweep_means_from_csv_folder(tmp_path):
    import csv

    with open(tmp_path / "table.csv", "w", newline="") as f:
        w = csv.DictWriter(f, ["ensemble", "d", "num_real"])
        w.writeheader()
        rng = np.random.default_rng(3)
        for d in (2, 4, 8):
            for _ in range(5):
                w.writerow({"ensemble": "ginibre", "d": d, "num_real": int(rng.integers(0, d + 1))})
    ax = ap.sweep_means(tmp_path, y="num_real", se=None)
    _labelled(ax)


def test_predicted_vs_observed_legend_outside_bars():
    groups = [{"v_ensemble": "ginibre", "qk_ensemble": qk, "d": d, "frac_good": 0.3 + 0.1 * i,
               "frac_consistent_where_predicted": None if i == 2 else 0.9}
              for i, (qk, d) in enumerate([("pd", 2), ("pd", 4), ("uniform", 2), ("uniform", 4)])]
    s = {"crosstab_predicted_observed": {"points": {"points": 5, "hyperplanes": 1}, "hyperplanes": {"hyperplanes": 3}},
         "groups": groups}
    fig = ap.predicted_vs_observed(s)
    fig.canvas.draw()
    heat, bars = fig.axes[0], fig.axes[1]
    _labelled(heat)
    _labelled(bars)
    _has_colorbar(fig)
    leg = bars.get_legend()
    r = fig.canvas.get_renderer()
    assert not leg.get_window_extent(r).overlaps(bars.get_window_extent(r))
    assert "n/a" in bars.get_title()


def test_bars_with_spread_reference_inside_and_many_series_outside():
    rng = np.random.default_rng(4)
    vals = rng.random((6, 3))
    ax = ap.bars_with_spread(vals, labels=["a", "b", "c"], lo=vals - 0.1, hi=vals + 0.1,
                             series=[f"s{i}" for i in range(6)], reference=2.5, reference_label="target",
                             value_label="rate (1/s)", category_label="case")
    ax.figure.canvas.draw()
    _labelled(ax)
    _inside_y(ax, 2.5)
    r = ax.figure.canvas.get_renderer()
    assert not ax.get_legend().get_window_extent(r).overlaps(ax.get_window_extent(r))


def test_crosstab_masks_nonfinite():
    ax = ap.crosstab([[1, np.nan], [2, 3]], rows=["a", "b"], cols=["x", "y"], normalise=None, log_color=True)
    _has_colorbar(ax.figure)
    assert "masked" in ax.get_title()


# --- phase diagrams ------------------------------------------------------------------------

def test_cell_edges_non_uniform_and_log():
    np.testing.assert_allclose(ap.cell_edges([1.0, 2.0, 4.0, 10.0]), [0.5, 1.5, 3.0, 7.0, 13.0])
    np.testing.assert_allclose(ap.cell_edges([0.01, 0.1, 10.0], log=True), [10 ** -2.5, 10 ** -1.5, 1.0, 100.0])
    with pytest.raises(ValueError):
        ap.cell_edges([1.0, 1.0])


def test_phase_diagram_grid_edges_nan_and_colorbar():
    rng = np.random.default_rng(5)
    beta, t = np.array([0.1, 0.3, 1.0, 5.0]), np.array([1.0, 2.0, 5.0, 20.0, 50.0])
    v = rng.random((4, 5))
    v[1, 2] = np.nan
    v[3, 0] = np.inf
    fig, ax = plt.subplots(layout="constrained")
    out = ap.phase_diagram(v, beta=beta, t=t, ax=ax, log_t=True, overlay=(t, 0.1 * t, "boundary"), curves=False)
    assert out is ax
    _labelled(ax)
    _has_colorbar(fig)
    assert "2 of 20 cells non-finite" in ax.get_title()
    mesh = ax.collections[0]
    assert mesh.get_array().mask.sum() == 2
    coords = mesh.get_coordinates()  # (len(beta)+1, len(t)+1, 2)
    np.testing.assert_allclose(coords[0, :, 0], ap.cell_edges(t, log=True))
    np.testing.assert_allclose(coords[:, 0, 1], ap.cell_edges(beta))
    assert ax.get_xlim() == pytest.approx((coords[0, 0, 0], coords[0, -1, 0]))


def test_phase_diagram_log_colour_masks_non_positive():
    v = np.array([[0.0, 1.0], [10.0, 100.0]])
    ax = ap.phase_diagram(v, beta=[1, 2], t=[0.5, 3], log_color=True, label="spread", curves=False)
    assert "non-positive" in ax.get_title()
    _has_colorbar(ax.figure)


def test_curves_at_fixed_t_bands_and_nan():
    rng = np.random.default_rng(6)
    beta, t = np.array([0.1, 0.5, 2.0, 8.0]), np.array([1.0, 3.0, 10.0])
    v = rng.random((4, 3))
    v[2, 1] = np.nan
    fig, ax = plt.subplots()
    assert ap.curves_at_fixed_t(v, beta=beta, t=t, at=[1, 2.9, 10], lo=v - 0.1, hi=v + 0.1, ax=ax) is ax
    _labelled(ax)
    assert [ln.get_label() for ln in ax.get_lines()] == ["$t$ = 1", "$t$ = 3", "$t$ = 10"]
    assert len(ax.collections) == 3  # bands
    assert "1 non-finite point" in ax.get_title()


def test_curves_many_times_legend_outside():
    rng = np.random.default_rng(7)
    t = np.arange(1.0, 9.0)
    ax = ap.curves_at_fixed_t(rng.random((3, 8)), beta=[1, 2, 3], t=t, at=t)
    ax.figure.canvas.draw()
    r = ax.figure.canvas.get_renderer()
    assert not ax.get_legend().get_window_extent(r).overlaps(ax.get_window_extent(r))


# --- track figures -------------------------------------------------------------------------

def _record(L=4, H=3, n=5, shared=True, seed=8):
    rng = np.random.default_rng(seed)
    S = 1 if shared else L
    return {"attentions": rng.dirichlet(np.ones(n), size=(L, H, n)), "clusters": rng.integers(1, n + 1, L + 1),
            "mean_cos": rng.random(L + 1), "boolean": rng.random((L, H)),
            "ideal_clusters": rng.integers(1, n + 1, (S, H, L + 1)), "ideal_mean_cos": rng.random((S, H, L + 1)),
            "ideal_boolean": rng.random((S, H, L)), "ideal_selected_attentions": rng.dirichlet(np.ones(n), size=(L, n))}


@pytest.mark.parametrize("shared", [True, False])
def test_model_vs_flow_same_layer_and_one_colorbar(shared):
    rec = _record(shared=shared)
    layer = 0 if shared else 2
    row = SimpleNamespace(layer=layer, head=1, lambda1_re=1.5, lambda1_im=0.0, status="good")
    fig = ap.model_vs_flow(rec, row, np.array([1.5, 0.2 + 0.1j, 0.2 - 0.1j]), list("abcde"))
    titles = [a.get_title() for a in fig.axes]
    real = [t for t in titles if t.startswith("real P")][0]
    ideal = [t for t in titles if t.startswith("idealised P")][0]
    expected = 3 if shared else 2  # the last layer when weights are shared, else the head's own layer
    assert real == f"real P, layer {expected} head 1"
    assert ideal.startswith(f"idealised P, layer {expected} ")
    bars = [a for a in fig.axes if a.get_label() == "<colorbar>"]
    assert len(bars) == 1 and bars[0].get_ylabel()
    for a in fig.axes:
        if a.get_label() != "<colorbar>":
            _labelled(a)


def test_head_maps_and_flow_vs_spectrum():
    rng = np.random.default_rng(9)
    rank = rng.random((3, 4)) * 5
    rank[0, 0] = np.nan
    fig = ap.head_maps(rank, rng.random((3, 4)), n_mean=5.0)
    _has_colorbar(fig, 2)
    assert "masked" in fig.axes[0].get_title()
    rows, _ = _rows(layers=3, heads=4)
    fig = ap.flow_vs_spectrum(rows, rng.random((3, 4)), rng.integers(1, 5, (3, 4)), n_mean=5.0)
    for a in fig.axes:
        _labelled(a)
        _inside_y(a, a.get_ylim()[0])


# --- probe figures -------------------------------------------------------------------------

def test_probe_figures():
    rng = np.random.default_rng(10)
    x0 = rng.normal(size=(6, 2))
    hz = [{"t": 1.0, "status": "ok", "tokens": x0 * 0.5, "num_clusters": 3, "boundary": 1, "interior": 1},
          {"t": 4.0, "status": "nonfinite"}]
    fig = ap.beyond_pd_tokens(x0, hz, -np.eye(2))
    for a in fig.axes:
        _labelled(a)
    rows = [{"rho_clustering": float(r), "rho_def41": float(q), "margin0": float(m)}
            for r, q, m in rng.random((5, 3)) + 0.05] + [{"rho_clustering": None, "rho_def41": 0.3, "margin0": 0.2}]
    fig = ap.failure_distances(rows, rng.random(5) + 0.5)
    for a in fig.axes:
        _labelled(a)
    assert "never reached" in fig.axes[0].get_title()
    G = rng.normal(size=(2, 3, 3))
    G[0, 1, 1] = np.nan
    fig = ap.sensitivity_maps(G, np.abs(G), title="toy")
    _has_colorbar(fig, 4)
    assert "masked" in fig.axes[0].get_title()


def test_saved_figures_are_files(tmp_path):
    ax = ap.phase_diagram(np.ones((2, 2)), beta=[1, 2], t=[1, 2])
    assert ap.save(ax.figure, tmp_path / "phase.png", close=True) == ["phase.png"]
    assert (tmp_path / "phase.png").stat().st_size > 1000


def test_saving_keeps_a_constrained_layout_whole_and_crops_a_free_one(tmp_path):
    from PIL import Image

    fig, ax = ap.new_axes(figsize=(4.0, 3.0))
    for k in range(6):  # six entries: the legend sits outside the axes, on the right
        ax.plot([0, 1], [k, k], label=f"line {k}")
    ap.legend(ax)
    ax.set_xlabel("time t")
    ax.set_ylabel("inverse temperature beta")
    fig.suptitle("a title above everything")
    ap.save(fig, tmp_path / "constrained.png", dpi=100)
    with Image.open(tmp_path / "constrained.png") as im:
        assert im.size == (400, 300)  # the layout already fits: the canvas is saved as drawn
    renderer = fig.canvas.get_renderer()
    for artist in (ax.get_legend(), fig._suptitle, ax.xaxis.label, ax.yaxis.label):
        box = artist.get_window_extent(renderer)
        assert fig.bbox.x0 <= box.x0 and box.x1 <= fig.bbox.x1 and fig.bbox.y0 <= box.y0 and box.y1 <= fig.bbox.y1
    free = plt.figure(figsize=(4.0, 3.0))  # no layout engine: a label beyond the canvas is kept by cropping
    free.add_subplot().set_ylabel("a long label " * 3)
    free.text(1.1, 0.5, "beyond the right edge")
    ap.save(free, tmp_path / "free.png", dpi=100, close=True)
    with Image.open(tmp_path / "free.png") as im:
        assert im.size[0] > 400
    plt.close(fig)
