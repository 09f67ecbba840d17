"""Diagnostics on configurations whose answer is known by construction."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attnflow
from attnflow.observables import (
    abz_levels,
    affine_hull,
    boolean_distance,
    classify_tokens,
    cluster_labels,
    codim_projections,
    collapse_bound,
    diameter,
    directions,
    double_log_slope,
    extreme_monotonicity,
    hull_nesting,
    hull_vertices,
    hull_violation,
    leaders,
    leading_vectors,
    level_labels,
    max_norm,
    num_clusters,
    num_levels,
    numerical_rank,
    off_leader_mass,
    polytope_set_residual,
    projections,
    split_coordinates,
    uniform_distance,
    unstable_left_basis,
)

pytestmark = pytest.mark.usefixtures("x64")  # compared with float64 references at float64 tolerances


def blobs(rng, centers, per, radius):
    """Clusters of `per` points within `radius` of each center (shuffled); returns points, labels."""
    centers = np.asarray(centers, float)
    pts, lab = [], []
    for k, c in enumerate(centers):
        u = rng.normal(size=(per, centers.shape[1]))
        u *= radius * rng.uniform(0, 1, size=(per, 1)) / np.linalg.norm(u, axis=1, keepdims=True)
        pts.append(c + u)
        lab += [k] * per
    perm = rng.permutation(len(lab))
    return np.concatenate(pts)[perm], np.asarray(lab)[perm]


def same_partition(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return np.array_equal(a[:, None] == a[None], b[:, None] == b[None])


@pytest.mark.parametrize("seed", range(4))
def test_clusters_recover_planted_partition(seed):
    rng = np.random.default_rng(seed)
    d = 2 + seed % 2
    k = 2 + seed
    centers = rng.normal(size=(k, d)) * 10
    # keep the centers well separated
    while np.min(np.linalg.norm(centers[:, None] - centers[None], axis=-1) + 1e9 * np.eye(k)) < 3:
        centers = rng.normal(size=(k, d)) * 10
    y, lab = blobs(rng, centers, 6, 1e-3)
    got = cluster_labels(jnp.asarray(y), rel_tol=0.01)
    assert same_partition(got, lab)
    assert int(num_clusters(jnp.asarray(y), 0.01)) == k


def test_clusters_chain_is_one_component():
    # 0, 0.9, 1.8, ... : consecutive gaps below tol chain into one cluster (transitive closure)
    y = jnp.arange(20.0)[:, None] * 0.9
    assert int(num_clusters(y, rel_tol=1.0 / 17.1 * 1.0, scale=17.1)) == 1
    assert int(num_clusters(y, rel_tol=0.5 / 17.1, scale=17.1)) == 20


def test_clusters_vmap_jit_and_directions():
    rng = np.random.default_rng(1)
    ys = []
    for k in (1, 2, 3):
        y, _ = blobs(rng, rng.normal(size=(k, 2)) * 50, 12 // k, 1e-4)
        ys.append(y)
    # one blob is ONE cluster only against an outside scale (its own diameter is the blob radius)
    counts = jax.jit(jax.vmap(lambda y: num_clusters(y, 0.01, 50.0)))(jnp.asarray(np.stack(ys)))
    assert int(num_clusters(jnp.asarray(ys[0]), 0.01)) > 1
    assert counts.tolist() == [1, 2, 3]
    x = jnp.asarray([[2.0, 0.0], [5.0, 0.0], [0.0, -3.0]])
    assert int(num_clusters(directions(x), 0.01)) == 2
    assert float(diameter(x)) == pytest.approx(np.hypot(5, 3))


def test_attention_structure_known_matrices():
    n = 6
    P = np.zeros((n, n))
    P[:3, 0] = 1.0
    P[3:, 5] = 1.0
    Pj = jnp.asarray(P)
    assert int(numerical_rank(Pj)) == 2  # rows e_1 and e_6
    assert leaders(Pj).tolist() == [True, False, False, False, False, True]
    assert float(boolean_distance(Pj)) == 0.0
    U = jnp.full((n, n), 1.0 / n)
    assert int(numerical_rank(U)) == 1
    assert float(boolean_distance(U)) == pytest.approx(1 - 1 / n)
    assert float(uniform_distance(U)) == 0.0
    I = jnp.eye(n)
    assert int(numerical_rank(I)) == n
    # tiny off-leader mass is measured accurately (not as 1 - (1 - 1e-30) = 0)
    Q = jnp.asarray([[1.0, 1e-30], [0.5, 0.5]])
    assert off_leader_mass(Q).tolist() == [1e-30, 0.5]


def test_numerical_rank_of_planted_rank():
    rng = np.random.default_rng(3)
    for r in (1, 2, 4):
        A = rng.uniform(size=(8, r)) @ rng.uniform(size=(r, 8))
        P = A / A.sum(1, keepdims=True)
        assert int(numerical_rank(jnp.asarray(P), 1e-8)) == r


def test_double_log_slope_separates_double_from_single_exponential():
    ts = jnp.linspace(0.0, 4.0, 81)
    kappa = 1.7
    dbl = jnp.exp(-0.3 * jnp.exp(kappa * ts))
    assert float(double_log_slope(ts, dbl)) == pytest.approx(kappa, rel=1e-6)
    single = jnp.exp(-3.0 * ts)  # log(-log) = log(3 t): slope decays to 0
    assert float(double_log_slope(ts[40:], single[40:])) < 0.5
    assert np.isnan(float(double_log_slope(ts[:2], dbl[:2])))


def test_hull_vertices_and_token_classes_known_polygon():
    rng = np.random.default_rng(0)
    square = np.array([[-1.0, -1.0], [1.0, -1.0], [1.0, 1.0], [-1.0, 1.0]])
    inner = rng.uniform(-0.5, 0.5, size=(10, 2)) + 0.3  # inside, away from 0 and boundary
    edge = np.array([[0.0, -1.0], [1.0, 0.2]])
    pts = np.concatenate([square, inner, edge, [[0.0, 0.0]]])
    assert sorted(hull_vertices(pts).tolist()) == [0, 1, 2, 3]
    cls = classify_tokens(pts, rel_tol=0.01)
    assert cls[:4].tolist() == [0] * 4
    assert (cls[4:14] == 3).all()
    assert cls[14:16].tolist() == [2, 2]
    assert cls[16] == 1


def test_hull_degenerate_and_3d():
    line = np.array([[0.0, 0.0, 0.0], [1.0, 1.0, 1.0], [0.5, 0.5, 0.5]])
    assert sorted(hull_vertices(line).tolist()) == [0, 1]
    assert hull_violation(np.array([[0.25, 0.25, 0.25]]), line) <= 1e-12
    assert hull_violation(np.array([[0.25, 0.25, 0.5]]), line) > 0.1  # off the span
    cube = np.array([[i, j, k] for i in (0, 1) for j in (0, 1) for k in (0, 1)], float)
    pts = np.concatenate([cube, [[0.5, 0.5, 0.5]]])
    assert sorted(hull_vertices(pts).tolist()) == list(range(8))
    assert hull_violation(np.array([[0.5, 0.5, 1.2]]), pts) == pytest.approx(0.2)
    single = affine_hull(np.ones((3, 2)))
    assert single.scale == 0.0


def test_hull_nesting_detects_growth():
    rng = np.random.default_rng(5)
    z0 = rng.normal(size=(12, 2))
    shrink = np.stack([z0 * s for s in (1.0, 0.8, 0.5)])
    assert np.all(hull_nesting(shrink) <= 1e-12)
    grow = np.stack([z0, z0 * 1.1])
    assert hull_nesting(grow)[0] > 0.01


def test_polytope_set_residual_vertices_and_interior():
    # V = I, A = I: S contains 0 and the vertices v with |v|^2 >= <v, v_j> for all j.
    tri = np.array([[2.0, 0.0], [-1.0, 1.0], [-1.0, -1.0]])
    assert np.allclose(polytope_set_residual(np.concatenate([tri, [[0.0, 0.0]]]), np.eye(2)), 0, atol=1e-12)
    assert polytope_set_residual(np.array([[0.5, 0.1]]), np.eye(2), tri)[0] > 0.1
    # a vertex that fails the identity: v = (0.1, 0) is dominated by (2, 0) direction
    pts = np.array([[2.0, 1.0], [2.0, -1.0], [0.1, 0.0]])
    r = polytope_set_residual(pts, np.eye(2))
    assert r[2] > 0 and np.allclose(r[:2], 0)


def test_hyperplane_levels_planted():
    rng = np.random.default_rng(2)
    V = np.array([[1.0, 0.3], [0.2, 0.4]])
    phi, dual, lam = leading_vectors(V)
    assert np.allclose(V @ phi, lam.real * phi) and np.allclose(dual @ V, lam.real * dual)
    assert dual @ phi == pytest.approx(1.0)
    # plant tokens on the hyperplanes dual.z = a, 0, b with arbitrary transverse parts
    t = np.array([-dual[1], dual[0]])
    a, b = -1.5, 2.0
    lv = rng.choice([a, 0.0, b], size=30)
    lv[:3] = [a, 0.0, b]
    z = lv[:, None] * phi[None] + rng.normal(size=(30, 1)) * t[None] * 5
    s = projections(jnp.asarray(z), dual)
    assert np.allclose(np.asarray(s), lv, atol=1e-12)
    assert int(num_levels(s, 1e-6)) == 3
    which, dist, used = abz_levels(s, 1e-6)
    assert float(dist) < 1e-12 and int(used) == 3
    assert np.array_equal(np.asarray(which), np.select([lv == a, lv == 0], [0, 1], 2))
    _, dist2, used2 = abz_levels(s + 0.5, 1e-6)  # levels a+.5, .5, b+.5: the middle one is not 0
    assert float(dist2) == pytest.approx(0.5) and int(used2) == 2
    labels = level_labels(s, 1e-6)
    assert same_partition(labels, lv)


def test_extreme_monotonicity_on_convex_averaging():
    # z(t+1) = M z(t) with M row-stochastic: max never increases, min never decreases
    rng = np.random.default_rng(4)
    s = [rng.normal(size=10)]
    for _ in range(20):
        M = rng.uniform(size=(10, 10))
        M /= M.sum(1, keepdims=True)
        s.append(M @ s[-1])
    up, down = extreme_monotonicity(jnp.asarray(np.stack(s)))
    assert float(up) <= 1e-15 and float(down) <= 1e-15
    up, _ = extreme_monotonicity(jnp.asarray(np.stack([s[0], s[0] * 2])))
    assert float(up) > 0


def test_split_and_unstable_subspace():
    rng = np.random.default_rng(6)
    B = np.eye(3) + 0.4 * rng.normal(size=(3, 3))
    V = B @ np.diag([1.0, 0.6, -0.5]) @ np.linalg.inv(B)
    W = unstable_left_basis(V)
    assert W.shape == (2, 3)
    assert np.allclose(W @ W.T, np.eye(2), atol=1e-12)
    # left-invariant: rows of W V lie in the row space of W
    WV = W @ V
    assert np.allclose(WV - (WV @ W.T) @ W, 0, atol=1e-10)
    # W annihilates the stable right eigenvector B e_3
    assert np.allclose(W @ B[:, 2], 0, atol=1e-10)
    z = rng.normal(size=(5, 3))
    p = codim_projections(jnp.asarray(z), W)
    assert np.allclose(np.asarray(p), z @ W.T)
    # non-orthogonal F + G split: coordinates reproduce z
    F, G = B[:, :2], B[:, 2:]
    a, c = split_coordinates(z, F, G)
    assert np.allclose(np.asarray(a) @ F.T + np.asarray(c) @ G.T, z)
    assert unstable_left_basis(-np.eye(2)).shape == (0, 2)


def test_collapse_observables_and_thm85_bound():
    n = 8
    assert float(collapse_bound(jnp.zeros((n, 2)))) == pytest.approx(4.0)
    x0 = np.random.default_rng(0).normal(size=(n, 2)) * 5
    sim = attnflow.simulate(x0, np.eye(2), np.eye(2), -np.eye(2), t1=3.0, num_saves=7, dtype="float64",
                            return_attention=True)
    norms = jax.vmap(max_norm)(sim.tokens)
    assert float(norms.max()) <= float(collapse_bound(jnp.asarray(x0))) + 1e-9
    assert float(norms[-1]) < float(norms[0])
    ud = jax.vmap(uniform_distance)(sim.attention)
    assert float(ud[-1]) < float(ud[0])


def test_classify_geometry_planted_configurations():
    from attnflow.observables import GEOMETRY_LABELS, classify_geometry

    rng = np.random.default_rng(7)
    n = 20
    # polytope: three points (V = I)
    pts, _ = blobs(rng, [[2.0, 0.0], [-1.0, 1.5], [-1.0, -1.5]], 7, 1e-5)
    obs = classify_geometry(pts[:n], np.eye(2))
    assert obs.label == "polytope" and obs.num_clusters == 3
    # unclustered Gaussian cloud with V = I: nothing
    obs = classify_geometry(rng.normal(size=(n, 2)), np.eye(2))
    assert obs.label == "none" and obs.num_clusters > n // 2
    # hyperplanes for a 3-d good V whose sub-leading pair is complex (not paranormal with real G? it is:
    # dim F = 1), tokens on phi*.z in {a, 0, b} with free transverse parts
    B = np.eye(3) + 0.3 * rng.normal(size=(3, 3))
    V = B @ np.array([[1.0, 0, 0], [0, 0.3, 0.6], [0, -0.6, 0.3]]) @ np.linalg.inv(B)
    phi, dual, _ = leading_vectors(V)
    lv = rng.choice([-1.0, 0.0, 2.0], size=n)
    trans = rng.normal(size=(n, 3)) * 3
    trans -= np.outer(trans @ dual, phi)  # dual . trans = 0
    z = lv[:, None] * phi[None] + trans
    obs = classify_geometry(z, V)
    assert obs.num_levels == 3 and obs.supports("hyperplanes") and obs.supports("polytope x subspace")
    assert obs.label == "polytope x subspace" and obs.codim == 3
    # paranormal with dim F = 2 (F = the first two coordinates): F-parts at 3 points, G-parts diverging; the
    # F-parts collapse when the reference scale is given
    Vp = np.diag([1.0, 1.0, -0.5])
    fpart, _ = blobs(rng, [[1.0, 0.0], [-1.0, 1.0], [0.0, -1.0]], 7, 1e-6)
    z = np.concatenate([fpart[:n], 300 * rng.normal(size=(n, 1))], axis=1)
    obs = classify_geometry(z, Vp, scale=2.0)  # tolerance from the F-parts' initial size, not from |z|
    assert obs.label == "polytope x subspace" and obs.f_clusters == 3
    collapsed = np.concatenate([1e-7 * rng.normal(size=(n, 2)) + [0.3, 0.1], 300 * rng.normal(size=(n, 1))], 1)
    assert classify_geometry(collapsed, Vp, scale=2.0).f_clusters == 1
    # origin: raw tokens collapsed relative to the given scale
    obs = classify_geometry(rng.normal(size=(n, 2)), -np.eye(2), x=1e-4 * rng.normal(size=(n, 2)), scale=3.0)
    assert obs.label == "origin" and obs.codim == 0
    # codim-k (k = 2 of 3) with a complex top eigenvalue (no hyperplanes): W z takes 2 values
    Vc = np.array([[0.5, 1.0, 0], [-1.0, 0.5, 0], [0, 0, -0.2]])
    W = unstable_left_basis(Vc)
    base = rng.normal(size=(2, 3))
    z = base[rng.integers(0, 2, size=n)] + np.outer(rng.normal(size=n) * 4, [0, 0, 1.0])
    obs = classify_geometry(z, Vc)
    assert W.shape == (2, 3) and obs.num_levels == -1
    assert obs.label == "codim-k" and obs.num_subspaces == 2
    with pytest.raises(attnflow.InputError):
        obs.supports("sphere")
    assert set(obs.criteria) == set(GEOMETRY_LABELS)
    with pytest.raises(attnflow.InputError, match="V must be"):
        classify_geometry(z, np.eye(2))


def test_observables_as_save_fn_in_a_batched_solve():
    """The jnp diagnostics run inside the solve (diffrax SaveAt(fn=...)), batched by vmap."""
    V = np.array([[1.0, 0.3], [0.2, 0.4]])
    _, dual, _ = leading_vectors(V)
    x0 = np.random.default_rng(8).normal(size=(3, 12, 2))

    def save_fn(t, z, args):
        s = projections(z, dual)
        # float output: diffrax pre-fills save buffers with inf, which an int32 buffer cannot hold
        return {"clusters": num_clusters(z, 0.02, 5.0).astype(z.dtype), "max": jnp.max(s), "min": jnp.min(s)}

    Q = np.array([[1.0, 0.2], [0.0, 1.0]])
    sim = attnflow.simulate(x0, Q, Q, V, t1=10.0, picture="rescaled", num_saves=21, dtype="float64", batch="x0",
                            save_fn=save_fn)
    out = sim.states
    assert out["clusters"].shape == (3, 21) and sim.tokens is None
    # Thm 4.2 along every trajectory, computed inside the solve
    assert np.all(np.diff(np.asarray(out["max"]), axis=1) <= 1e-9)
    assert np.all(np.diff(np.asarray(out["min"]), axis=1) >= -1e-9)
    assert np.all(np.asarray(out["clusters"])[:, -1] <= 3)
    full = attnflow.simulate(x0, Q, Q, V, t1=10.0, picture="rescaled", num_saves=21, dtype="float64", batch="x0")
    again = jax.vmap(jax.vmap(lambda z: num_clusters(z, 0.02, 5.0)))(full.states)
    assert np.array_equal(np.asarray(again), np.asarray(out["clusters"]).astype(int))


def test_classifier_refuses_noise_at_every_n():
    """Fixed tolerance (2% of the initial size) + compact clusters: uniform noise is not clustered at any
    n (the old 2%-of-own-diameter single linkage gave 1 level for 1024 points on a line and 253 <= 512
    clusters in the square)."""
    from attnflow.observables import classify_geometry

    rng = np.random.default_rng(11)
    for n in (8, 64, 1024):
        sq = rng.uniform(size=(n, 2))
        o = classify_geometry(sq, np.eye(2), scale=1.0)
        assert not o.supports("polytope") and o.label == "none", (n, o)
        line = np.c_[rng.uniform(size=n), np.zeros(n)]
        o = classify_geometry(line, np.diag([1.0, -0.5]), scale=1.0)
        assert not o.supports("hyperplanes") and not o.supports("polytope"), (n, o)
    # the same tokens pulled onto three points are clustered at every n
    for n in (8, 1024):
        z = np.array([[1.0, 0.0], [-0.5, 0.8], [-0.5, -0.8]])[rng.integers(0, 3, n)] + 1e-4 * rng.normal(size=(n, 2))
        o = classify_geometry(z, np.eye(2), scale=1.0)
        assert o.label == "polytope" and o.num_clusters == 3


def test_classifier_is_one_jax_function_under_vmap():
    from attnflow.observables import GEOMETRY_LABELS, classify_configuration
    from attnflow.spectral import check_batch, unstable_projector

    V = jnp.diag(jnp.array([1.0, -0.5]))
    sb = check_batch(jnp.eye(2)[None], jnp.eye(2)[None], V[None])
    P, k = unstable_projector(V)
    rng = np.random.default_rng(3)
    z = jnp.asarray(np.stack([np.c_[rng.choice([-1.0, 2.0], 12), rng.normal(size=12)], rng.normal(size=(12, 2))]))
    o = jax.jit(jax.vmap(lambda zz: classify_configuration(zz, zz, 3.0, sb.phi_dual[0], sb.stats.lambda1[0],
                                                           sb.paranormal[0], sb.para_dim_F[0], P, k)))(z)
    assert [GEOMETRY_LABELS[int(i)] for i in o.label] == ["polytope x subspace", "none"]
    assert o.num_levels.tolist()[0] == 2
