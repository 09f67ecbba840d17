"""The one (JAX, batched) implementation of the spectral checks: its numbers against NumPy, eig routing,
traceability."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnflow.ensembles import draw_systems, system_seeds
from attnflow.errors import InputError
from attnflow.spectral import (
    GEOMETRIES,
    check_batch,
    eig_route,
    eigen_stats,
    eigvals_sorted,
    predict_geometry,
)
from attnflow.spectral import _eig as eig_mod

pytestmark = pytest.mark.usefixtures("x64")  # compared with float64 references at float64 tolerances


def _special_triples():
    """Hand-made triples covering every predicted geometry and the tie / defective cases."""
    I3 = np.eye(3)
    out = [
        (I3, I3, I3),  # polytope
        (I3, I3, np.diag([1.0, 1.0, -0.5])),  # paranormal dim F = 2 -> polytope x subspace
        (I3, I3, np.diag([2.0, 1.0, 0.5])),  # paranormal dim F = 1, QK SPD -> Thm 5.2
        (I3, I3, -np.eye(3)),  # origin
        (I3, I3, np.diag([-2.0, 1.0, 0.5])),  # top modulus negative -> codim-k
        (I3, I3, np.array([[0.0, -2.0, 0.0], [2.0, 0.0, 0.0], [0.0, 0.0, 1.0]])),  # complex top -> none
        (I3, I3, np.array([[1.0, 1.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.5]])),  # defective lambda_1 -> codim-k
        (I3, I3, np.diag([1.0, -1.0, 0.5])),  # |lambda_1| = |lambda_2| tie -> codim-k
        (I3, np.array([[1.0, 2.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]), np.diag([2.0, 1.0, 0.5])),  # non-sym QK, good -> hyperplanes
        (I3, -np.eye(3), np.diag([2.0, 1.0, 0.5])),  # <Q phi, K phi> < 0 -> Section 12.1
        (I3, I3, -np.diag([1.0, 2.0, 3.0])),  # all negative: none
    ]
    return out


def _random_triples(rng, B, d):
    trip = []
    for v, q in [("ginibre", "identity"), ("ginibre", "uniform"), ("positive", "spd"), ("goe", "uniform"),
                 ("sparse_symmetric", "identity"), ("wishart", "spd")]:
        Q, K, V = draw_systems(system_seeds(1, f"{v}{q}{d}", 0, B), v, q, d)
        trip += list(zip(np.asarray(Q), np.asarray(K), np.asarray(V)))
    # m != d (rectangular Q, K) and a generic Q
    for _ in range(B):
        trip.append((rng.normal(size=(2, d)), rng.normal(size=(2, d)), rng.normal(size=(d, d))))
    return trip


@pytest.mark.parametrize("d", [3, 6])
def test_numbers_match_an_independent_numpy_computation(d):
    """The quantities behind every decision (eigenvalues by modulus, gap, <Q phi, K phi>, the
    smallest eigenvalue of sym(Q^T K), dim F) against plain NumPy, written here from the
    definitions; the decisions themselves are tested by hand in test_prediction_table.py."""
    rng = np.random.default_rng(d)
    trip = _random_triples(rng, 25, d) if d == 6 else _special_triples() + _random_triples(rng, 25, d)
    groups = {}
    for t in trip:  # group by m (shape of Q)
        groups.setdefault(t[0].shape, []).append(t)
    for items in groups.values():
        Q, K, V = (jnp.asarray(np.stack(a)) for a in zip(*items))
        r = check_batch(Q, K, V, route="device")
        for b, (q, k, v) in enumerate(items):
            w = np.linalg.eigvals(v)
            w = w[np.lexsort((-w.real, -np.abs(w)))]
            np.testing.assert_allclose(np.asarray(r.stats.eigenvalues[b]), w, rtol=1e-9, atol=1e-9)
            np.testing.assert_allclose(float(r.stats.gap[b]), w[0].real - abs(w[1]), rtol=1e-9, atol=1e-9)
            lam_min = np.linalg.eigvalsh(0.5 * (q.T @ k + k.T @ q)).min()
            np.testing.assert_allclose(float(r.qk_min_eig[b]), lam_min, rtol=1e-9, atol=1e-9)
            if abs(w[0].imag) < 1e-9 and abs(abs(w[0]) - abs(w[1])) > 1e-6:
                vals, vecs = np.linalg.eig(v)
                phi = np.real(vecs[:, np.argmin(np.abs(vals - w[0]))])
                np.testing.assert_allclose(float(r.qk[b]), (q @ phi) @ (k @ phi) / (phi @ phi), rtol=1e-7,
                                           atol=1e-9)
            if bool(r.paranormal[b]):
                lam = w[0].real
                dim_F = d - np.linalg.matrix_rank(v - lam * np.eye(d), tol=1e-8 * max(1.0, lam))
                assert int(r.para_dim_F[b]) == dim_F == int(np.sum(np.abs(w - lam) < 1e-6 * max(1, lam)))


def test_auto_route_is_traceable_whatever_was_called_first(monkeypatch):
    """Under jit / grad the auto route never picks the host callback: even when the
    probe says the backend cannot do eig (so concrete calls take the host route)."""
    V = jax.random.normal(jax.random.key(3), (4, 3, 3), jnp.float64)
    Q = K = jnp.broadcast_to(jnp.eye(3), (4, 3, 3))
    monkeypatch.setattr(eig_mod, "_device_can_eig", lambda backend: False)
    assert eig_route("auto") == "host"
    check_batch(Q, K, V)  # a concrete call first, on the host route

    def loss(V):
        r = check_batch(Q, K, V)
        return jnp.sum(r.stats.gap) + jnp.nansum(r.qk_min_eig)

    g = jax.grad(loss)(V)
    # finite differences of the gap (the eigenvalues are simple for this draw)
    eps = 1e-6
    E = jnp.zeros_like(V).at[1, 0, 2].set(eps)
    fd = (loss(V + E) - loss(V - E)) / (2 * eps)
    np.testing.assert_allclose(float(g[1, 0, 2]), float(fd), rtol=1e-5, atol=1e-7)
    jitted = jax.jit(lambda v: check_batch(Q, K, v).predicted)
    np.testing.assert_array_equal(np.asarray(jitted(V)), np.asarray(check_batch(Q, K, V, "device").predicted))


def test_special_cases_cover_every_prediction():
    Q, K, V = (jnp.asarray(np.stack(a)) for a in zip(*_special_triples()))
    r = check_batch(Q, K, V)
    expected = ["polytope", "polytope x subspace", "polytope x subspace", "origin", "codim-k", "none", "codim-k",
                "codim-k", "hyperplanes", "polytope x subspace", "none"]  # the comments of _special_triples
    assert [GEOMETRIES[int(c)] for c in r.predicted] == expected
    # one batch, one system at a time: the same answers
    for b, trip in enumerate(_special_triples()):
        assert predict_geometry(*trip).geometry == expected[b]


def test_leading_vectors_are_eigenvectors():
    Q, K, V = draw_systems(system_seeds(2, "vec", 0, 300), "ginibre", "identity", 7)
    r = check_batch(Q, K, V)
    real = np.abs(np.asarray(r.stats.lambda1.imag)) == 0
    assert real.sum() > 50
    lam = np.asarray(r.stats.lambda1.real)[real]
    phi, dual, Vn = np.asarray(r.phi)[real], np.asarray(r.phi_dual)[real], np.asarray(V)[real]
    np.testing.assert_allclose(np.einsum("bij,bj->bi", Vn, phi), lam[:, None] * phi, atol=1e-8)
    np.testing.assert_allclose(np.einsum("bi,bij->bj", dual, Vn), lam[:, None] * dual, atol=1e-6)
    np.testing.assert_allclose(np.einsum("bi,bi->b", dual, phi), 1.0, atol=1e-10)
    np.testing.assert_allclose(np.linalg.norm(phi, axis=1), 1.0, atol=1e-12)
    assert np.all(np.isnan(np.asarray(r.phi)[~real]))
    assert np.all(np.isnan(np.asarray(r.qk)[~real]))


def test_routes_agree_and_auto_falls_back_to_host(monkeypatch):
    V = jax.random.normal(jax.random.key(0), (64, 9, 9), jnp.float64)
    ref = eigvals_sorted(V, "device")
    for route in ("host", "cpu"):
        np.testing.assert_allclose(np.asarray(eigvals_sorted(V, route)), np.asarray(ref), rtol=1e-10, atol=1e-10)
    # modulus is non-increasing along each row
    assert np.all(np.diff(np.abs(np.asarray(ref)), axis=1) <= 1e-12)
    probe = eig_mod._device_can_eig
    # a backend without an eig lowering: "auto" must route to the host callback
    monkeypatch.setattr(eig_mod, "_device_can_eig", lambda backend: False)
    assert eig_route("auto") == "host"
    jitted = jax.jit(lambda v: eigen_stats(v, "auto").cond1)  # traceable on the fallback path
    np.testing.assert_array_equal(np.asarray(jitted(V)), np.asarray(eigen_stats(V, "device").cond1))
    # and the real probe on this (CPU) backend says the device can do it
    assert probe("cpu") is True


def test_cpu_route_refuses_tracing_and_bad_route():
    V = jnp.eye(3)[None]
    with pytest.raises(InputError, match="cannot run under jit"):
        jax.jit(lambda v: eigvals_sorted(v, "cpu"))(V)
    with pytest.raises(InputError, match="eig route"):
        eigvals_sorted(V, "gpu")
    with pytest.raises(InputError, match="stack"):
        check_batch(jnp.eye(3), jnp.eye(3), jnp.eye(3))


def test_known_spectral_facts():
    d = 16
    Vg = draw_systems(system_seeds(3, "facts", 0, 1500), "ginibre", "identity", d)[2]
    st = eigen_stats(Vg)
    # E[#real] = sqrt(2d/pi) + 1/2 + o(1) (Edelman-Kostlan-Shub), within 4 standard errors
    nr = np.asarray(st.num_real, float)
    assert abs(nr.mean() - (np.sqrt(2 * d / np.pi) + 0.5)) < 4 * nr.std() / np.sqrt(nr.size) + 0.05
    # the real-part reading is satisfied far more often than the correct one
    assert float(st.cond1_real_part.mean()) > float(st.cond1.mean()) + 0.15
    # Perron-Frobenius: positive matrices always satisfy Def 4.1(1)
    Vp = draw_systems(system_seeds(3, "pf", 0, 200), "positive", "identity", d)[2]
    assert bool(eigen_stats(Vp).cond1.all())
    # GOE: real spectrum
    Vs = draw_systems(system_seeds(3, "goe", 0, 100), "goe", "identity", d)[2]
    assert np.all(np.asarray(eigen_stats(Vs).num_real) == d)


def test_float32_inputs_and_shard_friendly_jit():
    Q, K, V = draw_systems(system_seeds(4, "f32", 0, 16), "ginibre", "spd", 5, dtype=jnp.float32)
    r = jax.jit(lambda q, k, v: check_batch(q, k, v, "device"))(Q, K, V)
    r64 = check_batch(Q.astype(jnp.float64), K.astype(jnp.float64), V.astype(jnp.float64))
    assert r.phi.dtype == jnp.float32
    # decisions away from the margins agree with float64
    safe = np.abs(np.asarray(r64.stats.gap)) > 1e-3
    np.testing.assert_array_equal(np.asarray(r.stats.cond1)[safe], np.asarray(r64.stats.cond1)[safe])
