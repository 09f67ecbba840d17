"""attnflow.plot's flow figures: labelled axes, colour bars, ax= honoured, non-finite input masked
and said, 3-d and projected clouds, and animation frames placed where the cloud moves."""

import numpy as np
import pytest

matplotlib = pytest.importorskip("matplotlib")
import matplotlib.pyplot as plt  # noqa: E402

import attnflow.plot as ap  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def cloud(T=8, n=6, d=2, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(T, n, d)).cumsum(axis=0) * 0.1 + rng.normal(size=(1, n, d))


def labelled(ax):
    return bool(ax.get_xlabel()) and bool(ax.get_ylabel())


def all_text(fig):
    texts = [fig._suptitle.get_text() if fig._suptitle else ""]
    for ax in fig.axes:
        texts += [ax.get_title(), ax.get_xlabel(), ax.get_ylabel()] + [t.get_text() for t in ax.texts]
    return " ".join(texts)


# ------------------------------------------------------------------------------------------- trajectories
@pytest.mark.parametrize("overlay", [None, "hull", "hyperplanes", "subspace"])
def test_trajectories_2d_overlays(overlay):
    z = cloud()
    ax = ap.trajectories(z, ts=np.linspace(0, 1, len(z)), overlay=overlay, phi_dual=np.array([1.0, 0.5]),
                         subspace=np.array([[1.0], [1.0]]))
    assert isinstance(ax, matplotlib.axes.Axes) and labelled(ax)
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("$z_1$", "$z_2$")
    if overlay is not None:  # the overlay is drawn in its own colour, beyond the grey paths
        assert len(ax.lines) > z.shape[1]


def test_trajectories_into_given_axes_and_batch():
    fig, ax = plt.subplots()
    z = np.stack([cloud(seed=0), cloud(seed=1)])
    out = ap.trajectories(z, system=1, ax=ax)
    assert out is ax and len(ax.lines) == z.shape[2]
    np.testing.assert_allclose(ax.lines[0].get_xydata(), z[1, :, 0])


def test_trajectories_3d_and_projection():
    ax = ap.trajectories(cloud(d=3), overlay="hyperplanes", phi_dual=np.array([1.0, 0.0, 0.5]))
    assert hasattr(ax, "zaxis") and ax.get_zlabel() == "$z_3$" and labelled(ax)
    ax = ap.trajectories(cloud(d=5), overlay="hull")
    assert not hasattr(ax, "zaxis")
    assert ax.get_xlabel().startswith("PC 1") and ax.get_ylabel().startswith("PC 2")


def test_trajectories_d1_against_t():
    ax = ap.trajectories(cloud(d=1), ts=np.linspace(0, 2, 8), ylabel="$x e^{-t}$")
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("$t$", "$x e^{-t}$")


def test_trajectories_nan_masked_and_noted():
    z = cloud()
    z[3, 2, 0] = np.nan
    z[5, 1, 1] = np.inf
    ax = ap.trajectories(z, overlay="hull", title="run 0")
    assert "2 non-finite values masked" in ax.get_title()
    ys = np.concatenate([line.get_xydata().ravel() for line in ax.lines])
    assert not np.any(np.isinf(ys))  # inf is never drawn as a value


def test_trajectories_from_simulation():
    import attnflow

    x0 = np.random.default_rng(0).normal(size=(4, 2))
    sim = attnflow.simulate(x0, np.eye(2), np.eye(2), np.eye(2), t1=0.5, num_saves=5, return_attention=True)
    ax = ap.trajectories(sim)
    assert labelled(ax)
    fig = ap.attention_maps(sim)
    assert fig.axes[-1].get_ylabel() == "attention weight $P_{ij}$"


# --------------------------------------------------------------------------------------------- attention
def attention(T=6, n=7, seed=0):
    return np.random.default_rng(seed).dirichlet(np.ones(n), size=(T, n))


def test_attention_maps_colour_bar_labels_and_order():
    P = attention()
    fig = ap.attention_maps(P, ts=np.linspace(0, 3, len(P)), ranks=np.arange(len(P)))
    panels, cbar = fig.axes[:-1], fig.axes[-1]
    assert len(panels) == 4 and cbar.get_ylabel() == "attention weight $P_{ij}$"
    assert panels[0].get_xlabel() == "key token j" and panels[0].get_ylabel() == "query token i"
    assert panels[0].get_title().startswith("t = 0") and "rank 0" in panels[0].get_title()
    order = ap.leader_order(P[-1])
    np.testing.assert_allclose(panels[-1].images[0].get_array(), P[-1][np.ix_(order, order)])
    leaders = np.argmax(P[-1][order], axis=1)
    assert np.all(np.diff(leaders) >= 0)  # rows grouped by leader


def test_attention_maps_heads_times_and_input_order():
    P = np.stack([attention(seed=0), attention(seed=1)], axis=1)  # (T, H, n, n)
    fig = ap.attention_maps(P, head=1, times=[0.0, 5.0], order=None)
    assert len(fig.axes) == 3
    np.testing.assert_allclose(fig.axes[1].images[0].get_array(), P[-1, 1])
    assert "head 1" in fig._suptitle.get_text()


def test_attention_maps_into_given_figure_and_nan():
    P = attention()
    P[-1, 0, 0] = np.nan
    fig = plt.figure()
    out = ap.attention_maps(P, fig=fig)
    assert out is fig and "non-finite value masked" in fig._suptitle.get_text()
    assert np.ma.is_masked(fig.axes[3].images[0].get_array())


# ----------------------------------------------------------------------------------------------- series
def test_cluster_series_readable_right_axis():
    t = np.linspace(0, 10, 50)
    counts = np.stack([np.maximum(8 - t, 2).round(), np.maximum(6 - t, 1).round()])
    bdist = np.exp(-np.exp(t))  # underflows to 0 and sub-normal numbers: the old axis read 1e-314
    ax = ap.cluster_series(t, clusters=counts, rank=counts, boolean_distance=np.stack([bdist, bdist]),
                           xlabel="layer")
    right = ax.right_axis
    assert labelled(ax) and right.get_ylabel() == "dist(P, Boolean)" and ax.get_xlabel() == "layer"
    assert right.get_yscale() == "log" and right.get_ylim()[0] >= ap.LOG_FLOOR / 10
    assert "shown at 1e-16" in ax.get_title()


def test_cluster_series_linear_when_narrow_and_nan():
    t = np.linspace(0, 1, 5)
    b = np.array([0.5, 0.4, np.nan, 0.2, 0.1])
    fig, ax = plt.subplots()
    out = ap.cluster_series(t, clusters=[3, 3, 2, 2, 2], boolean_distance=b, ax=ax)
    assert out is ax and ax.right_axis.get_yscale() == "linear"
    assert "1 non-finite value masked" in ax.get_title()


def test_levels_and_nan():
    t = np.linspace(0, 1, 6)
    s = np.outer(1 - t / 2, [1.0, -0.5, 0.2])
    s[2, 1] = np.nan
    fig, ax = plt.subplots()
    out = ap.levels(t, s, ax=ax, labels=["a", "b", "c"], title="levels")
    assert out is ax and labelled(ax) and "masked" in ax.get_title()
    assert ax.get_legend() is not None


def test_series_by_parameter_colour_bar_and_legend():
    t = np.linspace(0, 1, 5)
    ys = np.arange(18 * 5, dtype=float).reshape(18, 5) % 7 + 1
    ax = ap.series_by_parameter(t, ys, values=np.linspace(0.5, 25, 18), parameter="beta", ylabel="clusters")
    assert labelled(ax) and ax.figure.axes[-1].get_ylabel() == "beta"
    assert ax.get_legend() is None  # the colour bar names the curves
    fig, ax2 = plt.subplots()
    curves = {f"setting {k}": ys[k] for k in range(8)}
    out = ap.series_by_parameter(t, curves, ax=ax2, ylabel="y")
    assert out is ax2 and len(ax2.get_legend().get_texts()) == 8
    assert len({tuple(line.get_color()) if not isinstance(line.get_color(), str) else line.get_color()
                for line in ax2.lines}) == 8


# -------------------------------------------------------------------------------------------- animation
def test_frame_indices_follow_the_motion():
    ts = np.linspace(0, 12, 241)
    rng = np.random.default_rng(0)
    base, target = rng.normal(size=(5, 2)), rng.normal(size=(5, 2))
    w = 1 - np.exp(-3 * np.minimum(ts, 3.0))  # moves until t = 3, then stops
    z = base + w[:, None, None] * (target - base)
    idx = ap.frame_indices(ts, z, frames=40)
    # progress spacing: all but the closing frame lie in the motion (t <= 3, a quarter of the run);
    # uniform spacing would put three quarters of them after it
    assert np.mean(ts[idx] <= 3.0) >= 0.9
    assert idx[0] == 0 and idx[-1] == len(ts) - 1 and len(idx) >= 20
    uniform = ap.frame_indices(ts, z, frames=40, spacing="uniform")
    assert np.mean(ts[uniform] <= 3.0) < 0.3
    log = ap.frame_indices(ts, z, frames=10, spacing="log")
    assert np.all(np.diff(ts[log][1:]) > 0) and log[-1] == len(ts) - 1
    still = ap.frame_indices(ts, np.zeros((len(ts), 3, 2)), frames=5)  # no motion: uniform in t
    np.testing.assert_array_equal(still, ap.frame_indices(ts, None, frames=5, spacing="uniform"))


def test_animate_writes_gif(tmp_path):
    z = cloud(T=12, d=3)
    z[4, 0, 0] = np.nan
    name = ap.animate(z, tmp_path / "cloud.gif", ts=np.linspace(0, 1, 12), frames=4, overlay="hull", title="run")
    assert name == "cloud.gif" and (tmp_path / name).read_bytes()[:3] == b"GIF"
    assert not list(tmp_path.glob(".*"))  # no temporary file left


def test_saved_flow_figures(tmp_path):
    ax = ap.trajectories(cloud(), overlay="hull")
    assert ap.save(ax.figure, tmp_path / "t.png", close=True) == ["t.png"]
    assert (tmp_path / "t.png").stat().st_size > 1000
