r"""Soft distances of the tokens to the limit sets of the theorems, and of P to its limits.

Every function takes a **fixed** ``scale`` s (lengths are returned in units of s) and a
dimensionless ``temperature`` :math:`\tau`; the absolute temperature of the soft min/max is
:math:`\tau s` (or :math:`\tau` for P, whose entries are already in [0, 1]). Each relaxes a hard
quantity and converges to it as :math:`\tau\to 0` at the rate stated (see
:mod:`attnflow.geometry._smooth`).

* :func:`hyperplane_levels` / :func:`hyperplane_distances` -- Thm 4.2: distance of
  :math:`s_i = \varphi_1^*(z_i)` to :math:`\{a, 0, b\}`, a, b the soft min/max of the s_i.
* :func:`vertex_distances` -- Thm 3.1: distance of each token to a polytope's vertex set.
* :func:`subspace_distances` -- the codimension-k conjecture: distance to the nearest affine
  subspace :math:`\{x : Wx = c_l\}` of a parallel family.
* :func:`boolean_distance_soft` / :func:`uniform_distance_soft` -- P against Thm 2.1's Boolean
  limit and Thm 8.5's uniform limit.
"""

from __future__ import annotations

import jax.numpy as jnp
from jaxtyping import Array, Float

from .. import _validate as v
from .._x64 import keeps_float64
from ..errors import InputError
from ._smooth import boltzmann_max, boltzmann_min, safe_sqrt, soft_max, soft_min

def _tokens_and(z, name, other, want):
    """Shape checks at trace time: z (n, d) and ``other`` of shape ``want(d)``."""
    n_d = v.check_array("z", z, "tokens (n, d); vmap for a batch", ranks=(2,), nonempty=True)
    shape = v.check_array(name, other, "an array")
    expected = want(n_d[1])
    if len(shape) != len(expected) or any(e is not None and e != s for e, s in zip(expected, shape)):
        raise InputError(f"{name} must have shape {tuple('*' if e is None else e for e in expected)} for tokens "
                         f"of dimension d = {n_d[1]}, got {shape}.")


def _temperature(t, scale=1.0):
    """temperature (relative) and scale (the unit of length): finite scalars > 0."""
    v.check_positive("temperature", t, "a relative temperature, a finite positive scalar")
    v.check_positive("scale", scale, "the unit of length, a finite positive scalar")


def _check_attention(P, temperature) -> Array:
    """P a finite square (n, n) matrix and a valid temperature; P as a float array."""
    shape = v.check_array("P", P, "an attention matrix (n, n); vmap for a batch", ranks=(2,), nonempty=True)
    if shape[0] != shape[1] or shape[0] == 0:
        raise InputError(f"P must be a non-empty square attention matrix (n, n), got shape {shape}.")
    _temperature(temperature)
    return v.as_float(P)


__all__ = [
    "hyperplane_levels",
    "hyperplane_distances",
    "vertex_distances",
    "subspace_distances",
    "boolean_distance_soft",
    "uniform_distance_soft",
]


@keeps_float64
def hyperplane_levels(
    s: Float[Array, " n"], scale, temperature: float = 0.01
) -> tuple[Float[Array, ""], Float[Array, ""]]:
    r"""Soft levels :math:`a = \mathrm{smin}_{\tau s}(s_i)`, :math:`b = \mathrm{smax}_{\tau s}(s_i)`.

    Hard quantity: a = min s, b = max s (Thm 4.2, :func:`attnflow.observables.abz_levels`);
    :math:`0 \le \min s - a \le \tau s \log n` and likewise for b.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.geometry import hyperplane_levels
        >>> a, b = hyperplane_levels(jnp.array([-1.0, 0.2, 2.0]), scale=1.0, temperature=1e-4)
        >>> round(float(a), 3), round(float(b), 3)
        (-1.0, 2.0)
    """
    v.check_array("s", s, "projections (n,)", ranks=(1,), nonempty=True)
    _temperature(temperature, scale)
    s = v.as_float(s)
    T = jnp.asarray(temperature, s.dtype) * jnp.asarray(scale, s.dtype)
    return soft_min(s, T), soft_max(s, T)


@keeps_float64
def hyperplane_distances(
    z: Float[Array, "n d"], phi_dual: Float[Array, " d"], scale, temperature: float = 0.01
) -> Float[Array, " n"]:
    r"""Distance of each :math:`s_i = \varphi_1^*(z_i)` to the nearest of the three levels
    :math:`\{a, 0, b\}` (:func:`hyperplane_levels`), in units of ``scale``:
    :math:`\sqrt{\mathrm{bmin}_{(\tau s)^2}\{(s_i - a)^2, s_i^2, (s_i - b)^2\}} / s`.

    Hard quantity: :math:`\min(|s_i - \min s|, |s_i|, |s_i - \max s|)/s`, whose maximum over i
    is the ``dist`` of :func:`attnflow.observables.abz_levels`; the error is
    :math:`O(\tau\log n)` (levels) plus :math:`O(\tau)` (Boltzmann min over three squared
    distances, absolute temperature :math:`(\tau s)^2`). The planes are
    :math:`\{z: \varphi_1^*(z) = c\}`; with :math:`|\varphi_1^*| \ne 1` the value is in units of
    :math:`\varphi_1^*`, as in the theorem.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.geometry import hyperplane_distances
        >>> z = jnp.array([[-1.0, 3.0], [0.0, 1.0], [2.0, 0.0], [0.5, 0.0]])
        >>> hyperplane_distances(z, jnp.array([1.0, 0.0]), scale=1.0, temperature=1e-4).round(3).tolist()
        [0.0, 0.0, 0.0, 0.5]
    """
    _tokens_and(z, "phi_dual", phi_dual, lambda d: (d,))
    _temperature(temperature, scale)
    z = v.as_float(z)
    s = z @ jnp.asarray(phi_dual, z.dtype)
    a, b = hyperplane_levels(s, scale, temperature)
    T = jnp.asarray(temperature, z.dtype) * jnp.asarray(scale, z.dtype)
    sq = jnp.stack([(s - a) ** 2, s * s, (s - b) ** 2], axis=-1)
    return safe_sqrt(boltzmann_min(sq, T * T)) / jnp.asarray(scale, z.dtype)


@keeps_float64
def vertex_distances(
    z: Float[Array, "n d"], vertices: Float[Array, "m d"], scale, temperature: float = 0.01
) -> Float[Array, " n"]:
    r"""Distance of each token to a finite point set (a polytope's vertices, e.g.
    :func:`attnflow.observables.hull_vertices` of a reference cloud, with 0 appended for Thm 3.1's
    limit set), in units of ``scale``:
    :math:`\sqrt{\mathrm{bmin}_{(\tau s)^2}\{|z_i - v_j|^2\}_j}/s`.

    Hard quantity: :math:`\min_j |z_i - v_j| / s`, reached as :math:`\tau\to 0` with squared
    error at most :math:`(m-1)(\tau s)^2/e`. Differentiable in the tokens and in the vertices.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.geometry import vertex_distances
        >>> v = jnp.array([[1.0, 0.0], [-1.0, 0.0]])
        >>> vertex_distances(jnp.array([[1.0, 0.0], [0.0, 0.0]]), v, scale=1.0, temperature=1e-4).round(4).tolist()
        [0.0, 1.0]
    """
    _tokens_and(z, "vertices", vertices, lambda d: (None, d))
    _temperature(temperature, scale)
    z = v.as_float(z)
    diff = z[:, None, :] - jnp.asarray(vertices, z.dtype)[None, :, :]
    sq = jnp.sum(diff * diff, axis=-1)
    T = jnp.asarray(temperature, z.dtype) * jnp.asarray(scale, z.dtype)
    return safe_sqrt(boltzmann_min(sq, T * T)) / jnp.asarray(scale, z.dtype)


@keeps_float64
def subspace_distances(
    z: Float[Array, "n d"], W: Float[Array, "k d"], centers: Float[Array, "L k"], scale,
    temperature: float = 0.01,
) -> Float[Array, " n"]:
    r"""Distance of each token to the nearest affine subspace :math:`\{x: Wx = c_l\}`
    (codimension k = rank W; L parallel subspaces, the conjecture says L <= 3), in units of
    ``scale``. The distance of x to :math:`\{Wx = c\}` is
    :math:`|W^T (WW^T)^{-1}(Wx - c)|` (= :math:`|Wx - c|` for orthonormal rows, e.g.
    :func:`attnflow.observables.unstable_left_basis`).

    Hard quantity: the minimum over l of those distances; squared error
    :math:`\le (L-1)(\tau s)^2/e`. With k = 1, :math:`W = \varphi_1^*` and centres
    :math:`\{a, 0, b\}` it is :func:`hyperplane_distances` (up to the norm of :math:`\varphi_1^*`).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.geometry import subspace_distances
        >>> W = jnp.array([[0.0, 0.0, 2.0]])                      # planes z_3 = c / 2
        >>> c = jnp.array([[0.0], [2.0]])
        >>> z = jnp.array([[5.0, 1.0, 0.0], [0.0, 0.0, 1.0], [0.0, 0.0, 0.25]])
        >>> subspace_distances(z, W, c, scale=1.0, temperature=1e-4).round(4).tolist()
        [0.0, 0.0, 0.25]
    """
    _tokens_and(z, "W", W, lambda d: (None, d))
    k = v.shape_of("W", W)[0]
    _tokens_and(z, "centers", centers, lambda d: (None, k))
    _temperature(temperature, scale)
    z = v.as_float(z)
    W = jnp.asarray(W, z.dtype)
    resid = (z @ W.T)[:, None, :] - jnp.asarray(centers, z.dtype)[None, :, :]  # (n, L, k)
    gram = W @ W.T
    # |W^T G^{-1} r|^2 = r^T G^{-1} r with G = W W^T
    sol = jnp.linalg.solve(gram, resid.reshape(-1, resid.shape[-1]).T).T.reshape(resid.shape)
    sq = jnp.sum(resid * sol, axis=-1)
    T = jnp.asarray(temperature, z.dtype) * jnp.asarray(scale, z.dtype)
    return safe_sqrt(boltzmann_min(sq, T * T)) / jnp.asarray(scale, z.dtype)


@keeps_float64
def boolean_distance_soft(P: Float[Array, "n n"], temperature: float = 1e-3) -> Float[Array, ""]:
    r"""Soft :math:`\max_i (1 - \max_j P_{ij})`: a log-sum-exp max over rows of
    :math:`1 - \mathrm{bmax}_\tau(P_{i\cdot})`.

    Hard quantity: :func:`attnflow.observables.boolean_distance` (max-norm distance to the
    nearest Boolean row-stochastic matrix, 0 exactly at Thm 2.1's limit). Error at most
    :math:`(n-1)\tau/e + \tau\log n`.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.geometry import boolean_distance_soft
        >>> round(float(boolean_distance_soft(jnp.array([[0.9, 0.1], [0.0, 1.0]]), 1e-5)), 3)
        0.1
    """
    P = _check_attention(P, temperature)
    T = jnp.asarray(temperature, P.dtype)
    return soft_max(1.0 - boltzmann_max(P, T, axis=-1), T)


@keeps_float64
def uniform_distance_soft(P: Float[Array, "n n"], temperature: float = 1e-3) -> Float[Array, ""]:
    r"""Soft :math:`\max_{ij}|P_{ij} - 1/n|` (log-sum-exp over the :math:`2n^2` values
    :math:`\pm(P_{ij} - 1/n)`).

    Hard quantity: :func:`attnflow.observables.uniform_distance` (Thm 8.5's limit
    :math:`P \to \frac1n 11^T`); error at most :math:`\tau \log(2n^2)`.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.geometry import uniform_distance_soft
        >>> round(float(uniform_distance_soft(jnp.array([[0.7, 0.3], [0.5, 0.5]]), 1e-5)), 3)
        0.2
    """
    P = _check_attention(P, temperature)
    dev = (P - 1.0 / P.shape[-1]).ravel()
    return soft_max(jnp.concatenate([dev, -dev]), jnp.asarray(temperature, P.dtype))
