"""attnflow.geometry: each soft quantity converges to its hard counterpart as the temperature
goes to 0 (with the stated rate), is measured against a fixed scale (collapse cannot game it),
and the hypothesis margins have exact derivatives (central differences, float64)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnflow import geometry as geo
from attnflow import observables as obs
from attnflow.spectral import check_good_triple, is_positive_definite, paranormal_split

pytestmark = pytest.mark.usefixtures("x64")  # compared with float64 references at float64 tolerances

TEMPS = (1e-1, 1e-2, 1e-3, 1e-4)


def _clustered_cloud(rng, groups=3, n=8, d=2, spread=0.0):
    centers = rng.normal(size=(groups, d)) * 2
    labels = np.concatenate([np.arange(groups), rng.integers(0, groups, n - groups)])
    return jnp.asarray(centers[labels] + spread * rng.normal(size=(n, d))), groups


def test_soft_min_max_bounds_and_limits(rng):
    x = jnp.asarray(rng.normal(size=7))
    for T in TEMPS:
        # the documented two-sided bounds (exact inequalities, rounding-level slack)
        assert x.max() - 1e-15 <= geo.soft_max(x, T) <= x.max() + T * np.log(7) + 1e-15
        assert x.min() - T * np.log(7) - 1e-15 <= geo.soft_min(x, T) <= x.min() + 1e-15
        bm = geo.boltzmann_min(x, T)
        assert x.min() - 1e-15 <= bm <= x.min() + 6 * T / np.e + 1e-15
    assert abs(float(geo.boltzmann_max(x, 1e-4)) - float(x.max())) < 6e-4 / np.e


def test_soft_cluster_count_converges_to_num_clusters(rng):
    y, k = _clustered_cloud(rng)
    scale = float(obs.diameter(y))
    errs = [abs(float(geo.soft_cluster_count(y, scale, T)) - k) for T in (0.3, 0.1, 0.03)]
    assert int(obs.num_clusters(y, rel_tol=0.01, scale=scale)) == k
    assert errs[-1] < 1e-12  # n^2 exp(-delta^2 / 2h^2) is below rounding at T = 0.03
    assert errs[0] >= errs[1] >= errs[2]
    # with a small spread, the soft count at tau agrees with the hard count at rel_tol = tau
    y2, _ = _clustered_cloud(rng, spread=1e-4)
    s2 = float(obs.diameter(y2))
    soft = float(geo.soft_cluster_count(y2, s2, 0.02))
    assert abs(soft - int(obs.num_clusters(y2, rel_tol=0.02, scale=s2))) < 1e-3


def test_soft_cluster_count_cannot_be_gamed_by_collapse(rng):
    y = jnp.asarray(rng.normal(size=(8, 2)))
    scale = float(obs.diameter(y))
    spread_out = float(geo.soft_cluster_count(y, scale, 0.05))
    shrunk = float(geo.soft_cluster_count(1e-3 * y, scale, 0.05))
    assert spread_out > 7.0  # 8 separated random tokens
    assert abs(shrunk - 1.0) < 1e-3  # a collapsed cloud is one cluster at the fixed scale
    # whereas a count relative to the current cloud would not change at all
    own = float(geo.soft_cluster_count(1e-3 * y, float(obs.diameter(1e-3 * y)), 0.05))
    assert abs(own - spread_out) < 1e-9


def test_soft_rank_converges_to_rank(rng):
    n = 6
    leaders = rng.integers(0, 3, n)
    P = np.zeros((n, n))
    P[np.arange(n), leaders] = 1.0  # Boolean
    rank = int(np.linalg.matrix_rank(P))
    prev = np.inf
    for T in TEMPS:
        err = abs(float(geo.soft_rank(jnp.asarray(P), T)) - rank)
        assert err <= rank * T**2 + 1e-12  # rank * c / sigma_min^2 with sigma_min >= 1 here
        assert err <= prev
        prev = err
    # a genuinely full-rank random row-stochastic P: soft rank -> n
    P2 = jax.nn.softmax(jnp.asarray(rng.normal(size=(n, n))), axis=1)
    s = np.linalg.svd(np.asarray(P2), compute_uv=False)
    assert abs(float(geo.soft_rank(P2, 1e-4)) - n) <= n * (1e-4 / s.min()) ** 2 + 1e-9
    assert int(obs.numerical_rank(P2, 1e-6)) == n


def test_hyperplane_distances_converge_to_abz_levels(rng):
    z = jnp.asarray(rng.normal(size=(8, 3)))
    phi_dual = jnp.asarray(rng.normal(size=3))
    s = z @ phi_dual
    _, hard_max, _ = obs.abz_levels(s, 1e-3)
    hard = np.min(np.abs(np.asarray(s)[:, None] - np.array([s.min(), 0.0, s.max()])[None]), axis=1)
    assert abs(hard.max() - float(hard_max)) < 1e-14
    prev = np.inf
    for T in TEMPS:
        soft = np.asarray(geo.hyperplane_distances(z, phi_dual, 1.0, T))
        err = np.abs(soft - hard).max()
        assert err <= 3 * T * np.log(8) + 1e-12  # levels O(T log n) + Boltzmann min O(T)
        assert err <= prev + 1e-15
        prev = err
        a, b = geo.hyperplane_levels(s, 1.0, T)
        assert 0 <= float(s.min() - a) <= T * np.log(8) + 1e-15
        assert 0 <= float(b - s.max()) <= T * np.log(8) + 1e-15


def test_vertex_and_subspace_distances_converge(rng):
    z = jnp.asarray(rng.normal(size=(8, 3)))
    verts = jnp.asarray(rng.normal(size=(4, 3)))
    hard_v = np.min(np.linalg.norm(np.asarray(z)[:, None] - np.asarray(verts)[None], axis=-1), axis=1)
    W = jnp.asarray(rng.normal(size=(2, 3)))  # not orthonormal: the Gram matrix is used
    centers = jnp.asarray(rng.normal(size=(3, 2)))
    Wn = np.asarray(W)
    proj = np.eye(3) - Wn.T @ np.linalg.solve(Wn @ Wn.T, Wn)  # onto ker W
    hard_s = []
    for x in np.asarray(z):
        # distance to {Wy = c}: |x - y*| with y* the nearest point of the affine subspace
        ds = [np.linalg.norm(x - (proj @ x + Wn.T @ np.linalg.solve(Wn @ Wn.T, c))) for c in np.asarray(centers)]
        hard_s.append(min(ds))
    hard_s = np.array(hard_s)
    for T in TEMPS:
        sv = np.asarray(geo.vertex_distances(z, verts, 2.0, T)) * 2.0
        ss = np.asarray(geo.subspace_distances(z, W, centers, 2.0, T)) * 2.0
        # squared-distance error <= (m - 1) (T s)^2 / e
        assert np.all(np.abs(sv**2 - hard_v**2) <= 3 * (2 * T) ** 2 / np.e + 1e-12)
        assert np.all(np.abs(ss**2 - hard_s**2) <= 2 * (2 * T) ** 2 / np.e + 1e-12)


def test_P_distances_converge_to_boolean_and_uniform(rng):
    n = 6
    P = jax.nn.softmax(jnp.asarray(2 * rng.normal(size=(n, n))), axis=1)
    hard_b, hard_u = float(obs.boolean_distance(P)), float(obs.uniform_distance(P))
    for T in TEMPS:
        assert abs(float(geo.boolean_distance_soft(P, T)) - hard_b) <= (n - 1) * T / np.e + T * np.log(n) + 1e-14
        assert abs(float(geo.uniform_distance_soft(P, T)) - hard_u) <= T * np.log(2 * n * n) + 1e-14


# ---- margins: values match the NumPy checks, derivatives match central differences ----

def _central_diff(f, X, h=1e-6):
    X = np.asarray(X)
    out = np.zeros_like(X)
    for idx in np.ndindex(X.shape):
        E = np.zeros_like(X)
        E[idx] = h
        out[idx] = (float(f(jnp.asarray(X + E))) - float(f(jnp.asarray(X - E)))) / (2 * h)
    return out


def _rel_err(a, b):
    return np.abs(np.asarray(a) - np.asarray(b)).max() / max(1.0, np.abs(np.asarray(b)).max())


def _good_triple(rng, d=3):
    while True:
        V = rng.normal(size=(d, d))
        Q, K = rng.normal(size=(d, d)), rng.normal(size=(d, d))
        c = check_good_triple(Q, K, V)
        if c.good and c.gap > 0.3:
            return jnp.asarray(Q), jnp.asarray(K), jnp.asarray(V), c


def test_good_triple_margins_match_numpy_check(rng):
    for _ in range(3):
        Q, K, V, c = _good_triple(rng)
        m = geo.good_triple_margins(Q, K, V)
        assert abs(float(m.gap) - c.gap) < 1e-12
        assert abs(float(m.qk) - c.qk_value) < 1e-12 * max(1, abs(c.qk_value))
        assert float(m.condition1) > 0 and abs(float(m.imag)) < 1e-14
        lam, phi, dual = geo.leading_eigenpair_jax(V)
        np.testing.assert_allclose(np.asarray(phi.real), c.eig.phi, atol=1e-12)
        np.testing.assert_allclose(np.asarray(dual.real), c.eig.phi_dual, atol=1e-12)
    # a complex leading pair: condition (1) margin is -|Im lambda_1| < 0, as check_good_triple fails
    R = jnp.asarray([[0.5, -2.0, 0.0], [2.0, 0.5, 0.0], [0.0, 0.0, 1.0]])
    m = geo.good_triple_margins(jnp.eye(3), jnp.eye(3), R)
    assert not check_good_triple(np.eye(3), np.eye(3), np.asarray(R)).condition1
    assert abs(float(m.condition1) + 2.0) < 1e-12


def test_margin_derivatives_match_central_differences(rng):
    Q, K, V, _ = _good_triple(rng)
    fns = {
        "gap": lambda V: geo.good_triple_margins(Q, K, V).gap,
        "condition1": lambda V: geo.good_triple_margins(Q, K, V).condition1,
        "qk": lambda V: geo.good_triple_margins(Q, K, V).qk,
        "phi_dual . x": lambda V: geo.leading_eigenpair_jax(V)[2].real @ jnp.array([0.3, -1.0, 0.7]),
        "phi . x": lambda V: geo.leading_eigenpair_jax(V)[1].real @ jnp.array([0.3, -1.0, 0.7]),
        "paranormal r=1": lambda V: geo.distance_to_paranormal(V + 0.0, 1) + jnp.sum(geo.spectral_projector(V, 1).real ** 2),
    }
    for name, f in fns.items():
        f = jax.jit(f)
        g = np.asarray(jax.grad(f)(V))
        fd = _central_diff(f, V)
        # float64 central differences with h = 1e-6: truncation ~ h^2 |f'''|, rounding ~ eps/h
        assert _rel_err(g, fd) <= 1e-6, name
        # forward mode == reverse mode
        t = jnp.asarray(rng.normal(size=V.shape))
        fwd = jax.jvp(f, (V,), (t,))[1]
        assert abs(float(fwd) - float(jnp.sum(g * t))) <= 1e-10 * max(1.0, abs(float(fwd))), name
    lm = lambda Q: geo.qk_lambda_min(Q, K)  # noqa: E731
    assert _rel_err(jax.grad(lm)(Q), _central_diff(lm, Q)) <= 1e-6
    assert abs(float(lm(Q)) - is_positive_definite(np.asarray(Q.T @ K))[1]) < 1e-12


def test_distance_to_paranormal_zero_exactly_on_paranormal(rng):
    d, r = 4, 2
    S = rng.normal(size=(d, d))  # a non-orthogonal F (+) G
    D = np.diag([1.5, 1.5, 0.4, -0.9])
    V = S @ D @ np.linalg.inv(S)
    split = paranormal_split(V)
    assert split.paranormal and split.F.shape[1] == r
    assert float(geo.distance_to_paranormal(jnp.asarray(V), r)) < 1e-10 * np.abs(V).max()
    # break it: F is no longer a multiple of the identity, or G's radius exceeds lambda
    for D2 in (np.diag([1.5, 1.2, 0.4, -0.9]), np.diag([1.5, 1.5, 0.4, -1.7])):
        V2 = S @ D2 @ np.linalg.inv(S)
        assert not (paranormal_split(V2).paranormal and paranormal_split(V2).F.shape[1] == r)
        assert float(geo.distance_to_paranormal(jnp.asarray(V2), r)) > 0.1
    # the projector's derivative is exact even though the two top eigenvalues coincide
    f = lambda V: jnp.sum(geo.spectral_projector(V, r).real * jnp.arange(16.0).reshape(4, 4))  # noqa: E731
    assert _rel_err(jax.grad(f)(jnp.asarray(V)), _central_diff(f, V)) <= 1e-6


def test_margins_trace_under_jit_grad_vmap_in_any_order(rng):
    Vs = jnp.asarray(rng.normal(size=(3, 3, 3)))
    gap = lambda V: geo.good_triple_margins(jnp.eye(3), jnp.eye(3), V).condition1  # noqa: E731
    g_first = jax.jit(jax.vmap(jax.grad(gap)))(Vs)  # grad first, under jit
    vals = jax.jit(jax.vmap(gap))(Vs)
    g_again = jax.vmap(jax.grad(gap))(Vs)
    np.testing.assert_allclose(g_first, g_again, atol=1e-13)
    assert jnp.all(jnp.isfinite(vals))
    jaxpr = str(jax.make_jaxpr(jax.grad(gap))(Vs[0]))
    assert "callback" not in jaxpr


def test_bad_inputs_get_one_sentence():
    import attnflow as af

    z = jnp.ones((4, 3))
    with pytest.raises(af.InputError, match=r"phi_dual must have shape \(3,\)"):
        geo.hyperplane_distances(z, jnp.ones(2), 1.0)
    with pytest.raises(af.InputError, match="vertices must have shape"):
        geo.vertex_distances(z, jnp.ones((2, 2)), 1.0)
    with pytest.raises(af.InputError, match="centers must have shape"):
        geo.subspace_distances(z, jnp.ones((2, 3)), jnp.ones((3, 1)), 1.0)
    with pytest.raises(af.InputError, match="temperature must be > 0"):
        geo.soft_cluster_count(z, 1.0, 0.0)
    with pytest.raises(af.InputError, match="P must be square"):
        geo.soft_rank(jnp.ones((3, 4)))
    with pytest.raises(af.InputError, match="z must have rank 2"):
        geo.hyperplane_distances(jnp.ones((2, 4, 3)), jnp.ones(3), 1.0)
    with pytest.raises(af.InputError, match="V must be square"):
        geo.good_triple_margins(jnp.eye(3), jnp.eye(3), jnp.ones((3, 2)))
    with pytest.raises(af.InputError, match=r"r \(the dimension of F\) must be an int in 1..3"):
        geo.distance_to_paranormal(jnp.eye(3), 4)
