"""Random ensembles: properties, and reproducibility per system."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attnflow  # noqa: F401
from attnflow.ensembles import QK_ENSEMBLES, V_ENSEMBLES, draw_systems, sample_QK, sample_V, system_seeds
from attnflow.errors import InputError

pytestmark = pytest.mark.usefixtures("x64")  # the ensembles' default dtype is float64, as the sweeps draw them


def test_system_depends_on_seed_not_batch():
    seeds = system_seeds(5, "grp", 0, 12)
    for v in ("ginibre", "sparse_symmetric"):
        for q in ("spd", "uniform"):
            Q, K, V = draw_systems(seeds, v, q, 5)
            Q2, K2, V2 = draw_systems(seeds[7:9], v, q, 5)  # another batch, other position
            for a, b in ((Q, Q2), (K, K2), (V, V2)):
                np.testing.assert_array_equal(np.asarray(a[7:9]), np.asarray(b))
    # system_seeds: a pure function of (base seed, group, index); distinct across groups and seeds
    a = system_seeds(5, "grp", 0, 1000)
    np.testing.assert_array_equal(a[300:310], system_seeds(5, "grp", 300, 310))
    assert len(np.unique(a)) == 1000
    assert not np.any(np.isin(a, system_seeds(5, "other", 0, 1000)))
    assert not np.any(np.isin(a, system_seeds(6, "grp", 0, 1000)))
    assert a.min() >= 0 and a.max() < 2**31


def test_value_ensembles_have_their_properties():
    d, B = 12, 200
    seeds = system_seeds(0, "props", 0, B)
    V = {e: np.asarray(draw_systems(seeds, e, "identity", d)[2]) for e in V_ENSEMBLES}
    g = V["ginibre"]
    assert abs(g.mean()) < 0.02 and abs(g.var() - 1) < 0.03
    u = V["uniform"]
    assert u.min() >= -1 and u.max() <= 1 and abs(u.var() - 1 / 3) < 0.01
    assert V["positive"].min() > 0 and V["positive"].max() <= 1
    goe = V["goe"]
    np.testing.assert_array_equal(goe, np.swapaxes(goe, 1, 2))
    off = goe[:, ~np.eye(d, dtype=bool)]
    assert abs(off.var() - 1) < 0.05
    w = V["wishart"]
    np.testing.assert_allclose(w, np.swapaxes(w, 1, 2), atol=1e-12)
    assert np.linalg.eigvalsh(w).min() > -1e-10
    s = V["sparse_symmetric"]
    np.testing.assert_array_equal(s, np.swapaxes(s, 1, 2))
    frac = np.mean(s[:, np.triu_indices(d)[0], np.triu_indices(d)[1]] != 0)
    assert abs(frac - 0.1) < 0.01
    np.testing.assert_array_equal(V["identity"], np.broadcast_to(np.eye(d), (B, d, d)))
    # different ensembles of one system use different streams but the same key
    assert not np.allclose(V["ginibre"], V["uniform"])


def test_qk_ensembles():
    seeds = system_seeds(0, "qk", 0, 100)
    for e in QK_ENSEMBLES:
        Q, K, _ = draw_systems(seeds, "ginibre", e, 6)
        A = np.einsum("bji,bjk->bik", np.asarray(Q), np.asarray(K))
        if e == "identity":
            np.testing.assert_array_equal(A, np.broadcast_to(np.eye(6), A.shape))
        elif e == "spd":
            np.testing.assert_allclose(A, np.swapaxes(A, 1, 2), atol=1e-12)
            assert np.linalg.eigvalsh(A).min() >= 0.1 - 1e-9
        else:
            assert A.min() >= -1 and A.max() <= 1 and not np.allclose(A, np.swapaxes(A, 1, 2))


def test_dtype_and_errors():
    Q, K, V = draw_systems(np.array([1, 2]), "ginibre", "spd", 3, dtype=jnp.float32)
    assert V.dtype == jnp.float32 and K.dtype == jnp.float32
    with pytest.raises(InputError, match="V ensemble"):
        draw_systems(np.array([1]), "cauchy", "identity", 3)
    with pytest.raises(InputError, match="Q\\^T K ensemble"):
        sample_QK(jax.random.key(0), "diag", 3)
    with pytest.raises(InputError, match="V ensemble"):
        sample_V(jax.random.key(0), "GOE", 3)
