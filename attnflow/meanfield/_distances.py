r"""Distances between measures: exact W1 on the circle, MMD and sliced W1 on :math:`S^{d-1}`.

**W1 on the circle** (:func:`circle_w1`, :func:`circle_w1_to_density`, :func:`circle_w1_densities`).
With :math:`F, G` the distribution functions of two probability measures on :math:`[0, 2\pi)`
(:math:`F(\theta) = \mu([0, \theta])`),

.. math::  W_1(\mu, \nu) = \min_{c\in\mathbb R}\int_0^{2\pi} |F(\theta) - G(\theta) - c|\, d\theta,

the minimum taken at a median c of :math:`F - G` under :math:`d\theta` (cf. Rabin, Delon and
Gousseau, *Transportation distances on the circle*, 2011). A particle cloud has a step
:math:`F`; a density on the grid :math:`\theta_g = 2\pi g/G` is read as piecewise constant on the
cells :math:`[\theta_g - h/2, \theta_g + h/2)` (its :func:`~attnflow.meanfield.circle_histogram`
bins), so its :math:`F` is piecewise linear and a smooth density is matched to :math:`O(h^2)`. On
every interval between consecutive break points :math:`D = F - G` is linear, so both the median
(bisection on the distribution of D, 64 halvings) and the integral are exact up to rounding; the
median enters without derivative (the envelope theorem: the minimiser's own derivative does not
change the minimum to first order), so gradients in the positions and densities are those of the
integral. O(N log N) for N break points. Each measure is scaled to total mass 1 first.

**MMD on** :math:`S^{d-1}` (:func:`sphere_mmd`) with the von Mises--Fisher kernel
:math:`k_\kappa(x, y) = e^{\kappa(\langle x, y\rangle - 1)}` (positive definite: a positive
combination of the powers of :math:`\langle x, y\rangle`), as a V-statistic,

.. math::  \mathrm{MMD}^2 = \frac1{n^2}\sum_{i,i'} k(x_i, x_{i'}) + \frac1{m^2}\sum_{j,j'} k(y_j, y_{j'})
           - \frac2{nm}\sum_{i,j} k(x_i, y_j),

each double sum in O(n d) memory by the tiled log-sum-exp of :func:`attnflow.kernels.tiled_logsumexp` (O(n m d) time).

**Sliced W1** (:func:`sliced_w1`): the mean over given unit directions :math:`u_p` of the W1
distance on the line between the projections :math:`\langle u_p, x_i\rangle` and
:math:`\langle u_p, y_j\rangle`, each :math:`\int |F_p - G_p|` over the merged sorted projections,
O(P (n + m) log(n + m)).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from .. import _validate as v
from .._x64 import keeps_float64
from ..kernels import DEFAULT_CHUNK, tiled_logsumexp
from ..errors import InputError
from ._measures import _angles, _weights, check_points, check_weights

__all__ = ["circle_w1", "circle_w1_to_density", "circle_w1_densities", "sphere_mmd", "sliced_w1"]

TWO_PI = 2 * math.pi
#: bisection halvings of the median of F - G: below the rounding of float64 for |F - G| <= 1
MEDIAN_HALVINGS = 64


def _particle_events(theta, weights, sign):
    """(positions, jumps, slope changes) of a particle cloud's distribution function (angles in [0, 2 pi))."""
    w = _weights(weights, theta.shape[0], theta.dtype)
    return theta, sign * w, jnp.zeros_like(w)


def _check_density(name, density) -> int:
    return v.check_array(name, density, "a density on the grid 2 pi g / G (G,)", ranks=(1,), nonempty=True)[0]


def _density_events(density, sign, offset: float):
    """Events of a grid density, piecewise constant on the cells centred at 2 pi g / G, after a
    rotation by ``offset`` cells (a Python number, so that the edges are exact): at each cell edge the
    slope of F steps from the cell before to the cell after. Returns (edges, jumps, slope changes,
    the slope just below 0, i.e. of the cell that ends at or contains 0)."""
    density = v.as_float(density)
    size = density.shape[0]
    h = TWO_PI / size
    rho = density / (jnp.sum(density) * h)
    cells = jnp.mod(jnp.arange(size, dtype=rho.dtype) - 0.5 + offset, size)  # left edge of cell g, in cells
    change = rho - jnp.roll(rho, 1)
    below_zero = (math.ceil(0.5 - offset) - 1) % size  # the cell holding the angles just below 0 (= 2 pi)
    return h * cells, jnp.zeros_like(rho), sign * change, sign * rho[below_zero]


def _w1_from_events(pos, jump, slope_change, slope_at_zero):
    r""":math:`\min_c \int_0^{2\pi}|D - c|` for :math:`D = F - G` given by its break points: ``pos`` (any
    order, in [0, 2 pi)), the jump of D at each, the change of D's slope at each, and D's slope just
    below 0, before the events at 0 (the value there is D(0^-) = 0)."""
    dtype = pos.dtype
    pos = jnp.concatenate([jnp.zeros((1,), dtype), pos])
    jump = jnp.concatenate([jnp.zeros((1,), dtype), jump])
    slope_change = jnp.concatenate([jnp.asarray(slope_at_zero, dtype)[None], slope_change])
    # one key-value sort (faster than argsort and gathers); stable, so the added event at 0 stays first among ties
    pos, jump, slope_change = jax.lax.sort((pos, jump, slope_change), num_keys=1, is_stable=True)
    length = jnp.diff(pos, append=jnp.asarray([TWO_PI], dtype))
    slope = jnp.cumsum(slope_change)
    rise = slope * length
    start = jnp.cumsum(jump) + jnp.concatenate([jnp.zeros((1,), dtype), jnp.cumsum(rise)[:-1]])
    end = start + rise
    lo, hi = jnp.minimum(start, end), jnp.maximum(start, end)
    flat = hi - lo <= 0

    def below(c):  # |{theta : D(theta) <= c}|
        part = jnp.clip((c - lo) / jnp.where(flat, 1, hi - lo), 0, 1)
        return jnp.sum(length * jnp.where(flat, (start <= c).astype(dtype), part))

    def halve(_, bounds):
        a, b = bounds
        mid = 0.5 * (a + b)
        enough = below(mid) >= math.pi
        return jnp.where(enough, a, mid), jnp.where(enough, mid, b)

    a0, b0 = jax.lax.stop_gradient(jnp.min(lo)), jax.lax.stop_gradient(jnp.max(hi))
    _, c = jax.lax.fori_loop(0, MEDIAN_HALVINGS, halve, (a0, b0))
    c = jax.lax.stop_gradient(c)
    p, q = start - c, end - c
    same_sign = p * q >= 0
    spread = jnp.where(same_sign, 1, jnp.abs(p - q))
    piece = jnp.where(same_sign, 0.5 * jnp.abs(p + q), 0.5 * (p * p + q * q) / spread)
    return jnp.sum(length * piece)


@keeps_float64
def circle_w1(a: Float[Array, "n *two"], b: Float[Array, "m *two"], weights_a: Float[Array, " n"] | None = None,
              weights_b: Float[Array, " m"] | None = None) -> Float[Array, ""]:
    r"""Exact W1 (geodesic cost) between two particle clouds on the circle (angles or unit tokens).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.meanfield import circle_w1
        >>> round(float(circle_w1(jnp.array([0.1]), jnp.array([6.2]))), 5)   # across 0: 2 pi - 6.1
        0.18319
    """
    check_weights(weights_a, check_points(a, "a"), "weights_a")
    check_weights(weights_b, check_points(b, "b"), "weights_b")
    return _circle_w1(a, b, weights_a, weights_b)


@jax.jit
def _circle_w1(a, b, weights_a, weights_b):
    events_a = _particle_events(_angles(a), weights_a, 1.0)
    events_b = _particle_events(_angles(b), weights_b, -1.0)
    return _w1_from_events(*_combine(events_a, events_b), 0.0)


def _combine(*events):
    """Concatenate (positions, jumps, slope changes) of two measures in one dtype."""
    dtype = jnp.result_type(*[e[0] for e in events])
    return [jnp.concatenate([e[i] for e in events]).astype(dtype) for i in range(3)]


@keeps_float64
def circle_w1_to_density(points: Float[Array, "n *two"], density: Float[Array, " G"],
                         weights: Float[Array, " n"] | None = None) -> Float[Array, ""]:
    r"""Exact W1 between a particle cloud and a density on the grid :math:`2\pi g/G` (piecewise
    constant on its cells; module docstring).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.meanfield import circle_w1_to_density
        >>> n = 8                  # equally spaced particles against the uniform density: pi / (2 n)
        >>> th = (jnp.arange(n) + 0.5) * 2 * jnp.pi / n
        >>> round(float(circle_w1_to_density(th, jnp.ones(32))), 5), round(float(jnp.pi / (2 * n)), 5)
        (0.19635, 0.19635)
    """
    check_weights(weights, check_points(points))
    _check_density("density", density)
    return _w1_to_density(points, density, weights)


@jax.jit
def _w1_to_density(points, density, weights):
    # rotate both measures by half a cell, so that a cell edge sits at 0 (W1 is rotation invariant)
    theta = jnp.mod(_angles(points) + math.pi / density.shape[0], TWO_PI)
    pb, jb, sb, start = _density_events(density, -1.0, 0.5)
    return _w1_from_events(*_combine(_particle_events(theta, weights, 1.0), (pb, jb, sb)), start)


@keeps_float64
def circle_w1_densities(density_a: Float[Array, " G"], density_b: Float[Array, " H"]) -> Float[Array, ""]:
    r"""Exact W1 between two densities on grids :math:`2\pi g/G` and :math:`2\pi h/H` (piecewise constant on their cells).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.meanfield import circle_w1_densities
        >>> g = jnp.zeros(8).at[0].set(1.0)       # all mass in cell 0 against all in cell 2: pi / 2
        >>> round(float(circle_w1_densities(g, jnp.roll(g, 2))), 5)
        1.5708
    """
    _check_density("density_a", density_a)
    _check_density("density_b", density_b)
    return _w1_densities(density_a, density_b)


@jax.jit
def _w1_densities(density_a, density_b):
    # rotate both by half a cell of grid a; in cells of grid b that is size_b / (2 size_a)
    pa, ja, sa, start_a = _density_events(density_a, 1.0, 0.5)
    pb, jb, sb, start_b = _density_events(density_b, -1.0, density_b.shape[0] / (2 * density_a.shape[0]))
    return _w1_from_events(*_combine((pa, ja, sa), (pb, jb, sb)), start_a + start_b)


def _log_kernel_sum(x, y, kappa, chunk_size):
    r""":math:`\log\sum_{i,j} e^{\kappa\langle x_i, y_j\rangle}` by the tiled log-sum-exp (O((n + m) d) memory)."""
    lse = tiled_logsumexp(kappa * x, y, chunk_size=chunk_size)
    return jax.nn.logsumexp(lse)


def _checked_tokens(name, x):
    v.check_array(name, x, "tokens on the sphere (n, d)", ranks=(2,), nonempty=True)
    return v.as_float(x)


@keeps_float64
def sphere_mmd(x: Float[Array, "n d"], y: Float[Array, "m d"], kappa=4.0, *,
               chunk_size: int = DEFAULT_CHUNK) -> Float[Array, ""]:
    r"""MMD between two clouds on :math:`S^{d-1}` with the kernel :math:`e^{\kappa(\langle x, y\rangle - 1)}` (module docstring).

    Tokens are normalised first. Returns :math:`\sqrt{\max(\mathrm{MMD}^2, 0)}` (rounding can
    make the V-statistic slightly negative for equal clouds; use float64 for distances below
    about :math:`10^{-3}`).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from attnflow.meanfield import sphere_mmd
        >>> x = jax.random.normal(jax.random.key(0), (50, 3))
        >>> float(sphere_mmd(x, x)) < 1e-3, float(sphere_mmd(x, -x)) > 0.1
        (True, True)
    """
    x, y = _checked_tokens("x", x), _checked_tokens("y", y)
    if x.shape[1] != y.shape[1]:
        raise InputError(f"x and y must be tokens of one dimension d, got shapes {x.shape} and {y.shape}.")
    v.check_positive("kappa", kappa, "the concentration of the kernel, a finite positive scalar")
    return _mmd(x, y, kappa, v.check_int("chunk_size", chunk_size, meaning="the tile edge"))


@functools.partial(jax.jit, static_argnames=("chunk_size",))
def _mmd(x, y, kappa, chunk_size: int):
    x = x / jnp.linalg.norm(x, axis=-1, keepdims=True)
    y = y / jnp.linalg.norm(y, axis=-1, keepdims=True)
    dtype = jnp.result_type(x, y)
    x, y = x.astype(dtype), y.astype(dtype)
    kappa = jnp.asarray(kappa, dtype)

    def mean_kernel(a, b):
        return jnp.exp(_log_kernel_sum(a, b, kappa, chunk_size) - kappa - jnp.log(a.shape[0] * b.shape[0] * 1.0))

    squared = mean_kernel(x, x) + mean_kernel(y, y) - 2 * mean_kernel(x, y)
    positive = squared > 0
    return jnp.where(positive, jnp.sqrt(jnp.where(positive, squared, 1)), 0)


def _line_w1(a, b):
    r""":math:`\int |F - G|` on the line for two uniform empirical measures (merged sort)."""
    pos = jnp.concatenate([a, b])
    jump = jnp.concatenate([jnp.full(a.shape, 1.0 / a.shape[0], a.dtype), jnp.full(b.shape, -1.0 / b.shape[0], a.dtype)])
    pos, jump = jax.lax.sort((pos, jump), num_keys=1)
    return jnp.sum(jnp.abs(jnp.cumsum(jump)[:-1]) * jnp.diff(pos))


@keeps_float64
def sliced_w1(x: Float[Array, "n d"], y: Float[Array, "m d"], directions: Float[Array, "P d"]) -> Float[Array, ""]:
    r"""Sliced W1: the mean over ``directions`` (normalised) of the W1 distance on the line between the projections.

    Pass random directions (e.g. normalised Gaussian vectors) for the usual Monte Carlo estimate;
    the result is then a random variable with that key. Each slice costs O((n + m) log(n + m)).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.meanfield import sliced_w1
        >>> x = jnp.array([[1.0, 0.0], [0.0, 1.0]])
        >>> round(float(sliced_w1(x, -x, jnp.array([[1.0, 0.0], [0.0, 1.0]]))), 5)   # each slice: 1
        1.0
    """
    x, y = _checked_tokens("x", x), _checked_tokens("y", y)
    shape = v.check_array("directions", directions, "unit directions (P, d) of the slices", ranks=(2,), nonempty=True)
    if not (x.shape[1] == y.shape[1] == shape[1]):
        raise InputError(f"x, y and directions must share the dimension d, got shapes {x.shape}, {y.shape}, {shape}.")
    return _sliced(x, y, directions)


@jax.jit
def _sliced(x, y, directions):
    x = x / jnp.linalg.norm(x, axis=-1, keepdims=True)
    y = y / jnp.linalg.norm(y, axis=-1, keepdims=True)
    dtype = jnp.result_type(x, y, v.as_float(directions))
    u = jnp.asarray(directions, dtype)
    u = u / jnp.linalg.norm(u, axis=-1, keepdims=True)
    per_slice = jax.vmap(lambda d: _line_w1(x.astype(dtype) @ d, y.astype(dtype) @ d))(u)
    return jnp.mean(per_slice)
