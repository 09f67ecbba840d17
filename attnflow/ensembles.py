r"""Random weight ensembles, seeded per system.

Value matrices V (d, d):

* ``"ginibre"``  -- real Ginibre, i.i.d. :math:`N(0,1)` entries (SPEC section 4);
* ``"goe"``      -- symmetric, off-diagonal :math:`N(0,1)`, diagonal :math:`N(0,2)` (the law of
  :math:`(G + G^T)/\sqrt 2`; real spectrum);
* ``"uniform"``  -- i.i.d. :math:`U[-1,1]` entries;
* ``"positive"`` -- i.i.d. :math:`U(0,1]` entries (Perron-Frobenius: Def 4.1(1) always holds);
* ``"wishart"``  -- :math:`M M^T / d`, M Ginibre (positive semi-definite);
* ``"sparse_symmetric"`` -- symmetric, each upper entry :math:`N(0,1)` with probability
  ``density`` (default 0.1), else 0;
* ``"identity"`` -- :math:`I_d` (Thm 3.1).

Attention matrices :math:`A = Q^T K` (we return ``Q = I_d``, ``K = A``):

* ``"identity"`` -- :math:`A = I`;
* ``"spd"``      -- :math:`A = M M^T/d + 0.1\, I` (symmetric positive definite);
* ``"uniform"``  -- i.i.d. :math:`U[-1,1]` entries (Section 12.1: neither symmetric nor PD).

Token clouds (:func:`draw_clouds`): i.i.d. :math:`N(0, I_d/d)` tokens from the system's token key,
normalised onto the unit sphere for the sphere's dynamics.

Reproducibility: a system's matrices and clouds are a function of its integer seed (and ensemble,
d, n) only -- never of the batch it is drawn in. :func:`system_seeds` derives per-system seeds
from a base seed, a group label and the system index; :func:`head_seeds` those of a system's
further heads. Every job draws its systems here: the sweeps, the phase diagrams.
"""

from __future__ import annotations

import functools
import hashlib

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from ._normals import normal_sampler
from ._x64 import keeps_float64
from .errors import InputError

__all__ = ["V_ENSEMBLES", "QK_ENSEMBLES", "sample_V", "sample_QK", "draw_systems", "draw_heads", "draw_clouds",
           "draw_clustered_clouds", "cluster_sizes", "system_seeds", "head_seeds", "token_key"]

V_ENSEMBLES = ("ginibre", "goe", "uniform", "positive", "wishart", "sparse_symmetric", "identity")
QK_ENSEMBLES = ("identity", "spd", "uniform")

V_TAG, QK_TAG, X_TAG = 1, 2, 3  # fold_in tags: independent streams per system


def _float_dtype(dtype):
    """``dtype``, or by default (None) JAX's default float: float64 when its float64 mode is on, else
    float32 (what a float64 request gave there, with JAX's truncation warning, before it was the default).
    An explicit float64 is kept with the mode off (:func:`attnflow._x64.keeps_float64` on the callers)."""
    return jnp.dtype(jax.dtypes.canonicalize_dtype(jnp.float64) if dtype is None else dtype)


def _check(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise InputError(f"{name} must be one of {allowed}, got {value!r}.")


def _symmetrize_exact(S):
    """Copy the upper triangle onto the lower one."""
    return jnp.where(jnp.triu(jnp.ones(S.shape, bool)), S, S.T)


@keeps_float64
def sample_V(key: Array, ensemble: str, d: int, dtype=None, density: float = 0.1) -> Float[Array, "d d"]:
    """One value matrix V (d, d) from ``ensemble`` (see the module docstring), of ``dtype`` (default: JAX's
    default float; an explicit float64 is kept with JAX's float64 mode off).

    Example:
        >>> import jax
        >>> from attnflow.ensembles import sample_V
        >>> V = sample_V(jax.random.key(0), "positive", 3)
        >>> V.shape, bool((V > 0).all())
        ((3, 3), True)
    """
    _check("V ensemble", ensemble, V_ENSEMBLES)
    dtype = _float_dtype(dtype)
    if ensemble == "identity":
        return jnp.eye(d, dtype=dtype)
    if ensemble == "uniform":
        return jax.random.uniform(key, (d, d), dtype, minval=-1.0, maxval=1.0)
    if ensemble == "positive":
        return 1.0 - jax.random.uniform(key, (d, d), dtype)  # in (0, 1]
    k1, k2 = jax.random.split(key)
    G = jax.random.normal(k1, (d, d), dtype)
    if ensemble == "ginibre":
        return G
    if ensemble == "goe":
        off = jnp.triu(G, 1)  # off-diagonal N(0, 1), diagonal N(0, 2): law of (G + G^T)/sqrt 2
        return off + off.T + jnp.diag(jnp.sqrt(jnp.asarray(2.0, dtype)) * jnp.diag(G))
    if ensemble == "wishart":
        return _symmetrize_exact(G @ G.T / d)
    # sparse_symmetric
    mask = jax.random.bernoulli(k2, density, (d, d))
    upper = jnp.triu(jnp.where(mask, G, 0.0))
    return upper + jnp.triu(upper, 1).T


@keeps_float64
def sample_QK(key: Array, ensemble: str, d: int, dtype=None) -> tuple[Float[Array, "d d"], Float[Array, "d d"]]:
    """(Q, K) with ``Q = I`` and ``K = A`` so that :math:`Q^T K = A` is drawn from ``ensemble``.

    Example:
        >>> import jax
        >>> from attnflow.ensembles import sample_QK
        >>> Q, K = sample_QK(jax.random.key(0), "spd", 4)
        >>> bool((jax.numpy.linalg.eigvalsh(Q.T @ K) > 0).all())
        True
    """
    _check("Q^T K ensemble", ensemble, QK_ENSEMBLES)
    dtype = _float_dtype(dtype)
    eye = jnp.eye(d, dtype=dtype)
    if ensemble == "identity":
        return eye, eye
    if ensemble == "uniform":
        return eye, jax.random.uniform(key, (d, d), dtype, minval=-1.0, maxval=1.0)
    M = jax.random.normal(key, (d, d), dtype)
    return eye, _symmetrize_exact(M @ M.T / d) + 0.1 * eye


@keeps_float64
def draw_systems(seeds: Int[Array, " B"], v_ensemble: str, qk_ensemble: str, d: int,
                 dtype=None, density: float = 0.1):
    """Stacks (Q, K, V) of shape (B, d, d), system b drawn from ``jax.random.key(seeds[b])``.

    Example:
        >>> import numpy as np
        >>> from attnflow.ensembles import draw_systems
        >>> Q, K, V = draw_systems(np.array([7, 8, 9]), "ginibre", "identity", 4)
        >>> _, _, V1 = draw_systems(np.array([9]), "ginibre", "identity", 4)
        >>> bool((V[2] == V1[0]).all())   # a system depends on its seed, not on its batch
        True
    """
    _check("V ensemble", v_ensemble, V_ENSEMBLES)
    _check("Q^T K ensemble", qk_ensemble, QK_ENSEMBLES)
    return _draw(jnp.asarray(seeds, dtype=jnp.uint32), v_ensemble, qk_ensemble, int(d), _float_dtype(dtype), float(density))


@functools.partial(jax.jit, static_argnums=(1, 2, 3, 4, 5))
def _draw(seeds, v_ensemble, qk_ensemble, d, dtype, density):
    def one(seed):
        key = jax.random.key(seed)
        V = sample_V(jax.random.fold_in(key, V_TAG), v_ensemble, d, dtype, density)
        Q, K = sample_QK(jax.random.fold_in(key, QK_TAG), qk_ensemble, d, dtype)
        return Q, K, V

    return jax.vmap(one)(seeds)


@keeps_float64
def draw_heads(seeds, v_ensemble: str, qk_ensemble: str, d: int, dtype=None, density: float = 0.1):
    """(Q, K, V) of B systems: one head each for seeds (B,), shape (B, d, d) (:func:`draw_systems`); H heads each
    for seeds (B, H) (:func:`head_seeds`), shape (B, H, d, d), head h of system b drawn from ``seeds[b, h]``.

    Example:
        >>> import numpy as np
        >>> from attnflow.ensembles import draw_heads, draw_systems, head_seeds, system_seeds
        >>> s = system_seeds(0, "g", 0, 3)
        >>> Q, K, V = draw_heads(head_seeds(s, 0, "g", 0, 3, 2), "ginibre", "identity", 4)
        >>> V.shape, bool((V[:, 0] == draw_systems(s, "ginibre", "identity", 4)[2]).all())   # head 0: the system's own
        ((3, 2, 4, 4), True)
    """
    if jnp.ndim(seeds) == 1:
        return draw_systems(seeds, v_ensemble, qk_ensemble, d, dtype, density)
    B, H = jnp.shape(seeds)
    return tuple(a.reshape(B, H, d, d) for a in draw_systems(seeds.reshape(-1), v_ensemble, qk_ensemble, d, dtype,
                                                              density))


def token_key(seed) -> Array:
    """The key of a system's initial token clouds (independent of its weights' streams)."""
    return jax.random.fold_in(jax.random.key(seed), X_TAG)


@keeps_float64
def draw_clouds(seed, n: int, d: int, dtype=None, *, clouds: int | None = None, on_sphere: bool = False):
    r"""A system's random start: n tokens i.i.d. :math:`N(0, I_d/d)` from its token key (:func:`token_key`),
    (n, d), or ``clouds`` independent clouds of them, (clouds, n, d) (the first cloud is the (n, d) one);
    normalised onto the unit sphere when ``on_sphere``. Traceable in ``seed`` (vmap it over systems).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.ensembles import draw_clouds
        >>> x = draw_clouds(7, 5, 3, jnp.float32, clouds=2, on_sphere=True)
        >>> x.shape, bool(jnp.allclose(jnp.linalg.norm(x, axis=-1), 1.0)), bool((x[0] == draw_clouds(7, 5, 3, jnp.float32, on_sphere=True)).all())
        ((2, 5, 3), True, True)
    """
    from .dynamics import normalise

    shape = (n, d) if clouds is None else (clouds, n, d)
    dtype = _float_dtype(dtype)
    # jax.random.normal(token_key(seed), shape, dtype), the same numbers with the hash written out (a third of
    # the compile time: attnflow._normals)
    x0 = normal_sampler(jax.random.key(seed), X_TAG)(shape, dtype) / jnp.sqrt(jnp.asarray(d, dtype))
    return normalise(x0) if on_sphere else x0


def cluster_sizes(n: int, masses) -> np.ndarray:
    """Token counts of clusters with the given ``masses`` (fractions summing to 1) among n tokens: largest-remainder
    rounding, every cluster at least one token.

    Example:
        >>> from attnflow.ensembles import cluster_sizes
        >>> cluster_sizes(10, [0.5, 0.25, 0.25]).tolist(), cluster_sizes(32, [0.25] * 4).tolist()
        ([5, 3, 2], [8, 8, 8, 8])
    """
    m = np.asarray(masses, np.float64)
    raw = m * n
    sizes = np.maximum(np.floor(raw).astype(int), 1)
    for i in np.argsort(-(raw - np.floor(raw)), kind="stable")[: max(n - sizes.sum(), 0)]:
        sizes[i] += 1
    while sizes.sum() > n:  # the floor of one token per cluster overshot: take from the largest
        sizes[np.argmax(sizes)] -= 1
    return sizes


@keeps_float64
def draw_clustered_clouds(seed, n: int, d: int, clusters: int, spread: float, dtype=None, *, centres=None,
                          masses=None):
    r"""A prepared start: n unit tokens in ``clusters`` tight clusters on :math:`S^{d-1}`,
    :math:`x_i = N(c_{a(i)} + \text{spread}\,\xi_i)` with :math:`\xi_i \sim N(0, I_d)` and N the normalisation
    (an angular spread of about ``spread`` per direction). The centres :math:`c_a` are ``centres`` ((clusters, d),
    normalised) or drawn uniformly on the sphere from the system's token key; cluster a holds
    :func:`cluster_sizes` (n, ``masses``) consecutive tokens (equal masses by default). Traceable in ``seed``.

    Example:
        >>> import jax.numpy as jnp, numpy as np
        >>> from attnflow.ensembles import draw_clustered_clouds
        >>> x = np.asarray(draw_clustered_clouds(3, 8, 2, 2, 0.0, jnp.float64, centres=[[1.0, 0.0], [0.0, 2.0]]))
        >>> x.dtype, x[:, 0].round(6).tolist(), bool(np.allclose(np.linalg.norm(x, axis=-1), 1.0))
        (dtype('float64'), [1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0], True)
    """
    from .dynamics import normalise

    dtype = _float_dtype(dtype)
    sizes = cluster_sizes(n, [1.0 / clusters] * clusters if masses is None else masses)
    labels = np.repeat(np.arange(clusters), sizes)
    key_centres, key_jitter = jax.random.split(token_key(seed))
    if centres is None:
        c = normalise(jax.random.normal(key_centres, (clusters, d), dtype))
    else:
        c = normalise(jnp.asarray(centres, dtype))
    return normalise(c[labels] + spread * jax.random.normal(key_jitter, (n, d), dtype))


def _splitmix64(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.uint64)
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def system_seeds(base_seed: int, group: str, start: int, stop: int) -> np.ndarray:
    """Per-system 31-bit seeds for systems ``start .. stop-1`` of ``group`` (a stable label such as
    ``"ginibre/identity/d=8"``); a pure function of (base_seed, group, index).

    Example:
        >>> from attnflow.ensembles import system_seeds
        >>> a = system_seeds(0, "ginibre/d=8", 0, 10)
        >>> bool((a[5:] == system_seeds(0, "ginibre/d=8", 5, 10)).all())
        True
    """
    tag = int.from_bytes(hashlib.sha256(f"{int(base_seed)}|{group}".encode()).digest()[:8], "little")
    with np.errstate(over="ignore"):
        x = np.uint64(tag) + np.arange(start, stop, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    return (_splitmix64(x) & np.uint64(0x7FFFFFFF)).astype(np.int64)


def head_seeds(seeds: np.ndarray, base_seed: int, group: str, start: int, stop: int, num_heads: int) -> np.ndarray:
    """Seeds of every head: (B,) for one head (the system's seed), (B, H) for several.

    Head 0 uses the system's own seed (so one head draws exactly the single-head system);
    head h >= 1 the seeds of the group label ``f"{group}|head={h}"`` (pure functions of
    (base seed, group, index), like :func:`system_seeds`).

    Example:
        >>> from attnflow.ensembles import head_seeds, system_seeds
        >>> s = system_seeds(0, "g", 0, 3)
        >>> h = head_seeds(s, 0, "g", 0, 3, 2)
        >>> h.shape, bool((h[:, 0] == s).all())
        ((3, 2), True)
    """
    if num_heads == 1:
        return seeds
    cols = [seeds] + [system_seeds(base_seed, f"{group}|head={h}", start, stop) for h in range(1, num_heads)]
    return np.stack(cols, axis=1)
