r"""The continuity (McKean-Vlasov) equation of the sphere flow on :math:`S^2`, spectral in spherical harmonics.

For :math:`n\to\infty` the empirical measure of the sphere flow on :math:`S^2` (:func:`attnflow.dynamics.sphere_flow`
with d = 3, Q = K = V = I; with independent tokenwise noise of strength :math:`\sigma`) has a density
:math:`\rho(t, x)` that solves

.. math::  \partial_t\rho = \frac{\sigma^2}2\Delta\rho - \mathrm{div}(\rho\, v[\rho]),\qquad
           v[\rho](x) = \frac{\mathrm{Proj}_{x^\perp}\int e^{\beta\langle x,y\rangle}\,y\,\rho(y)\,dy}{Z[\rho](x)},

with :math:`Z = \int e^{\beta\langle x,y\rangle}\rho(y)\,dy` (softmax) or :math:`Z = 1` (mean normalisation,
:math:`P_{ij} = e^{\beta\langle x_i,x_j\rangle}/n`), :math:`\Delta` and div those of the sphere and dy its area
element. Since :math:`\mathrm{Proj}_{x^\perp}\int e^{\beta\langle x,y\rangle}y\,\rho\,dy = \frac1\beta\nabla(K*\rho)`
with :math:`K*\rho(x) = \int e^{\beta\langle x,y\rangle}\rho(y)\,dy`, :math:`v = \frac1\beta\nabla(K*\rho)` (mean) or
:math:`\frac1\beta\nabla\log(K*\rho)` (softmax), and by Funk-Hecke :math:`(K*\rho)_{lm} = 4\pi\, i_l(\beta)\,\rho_{lm}`
(:math:`i_l` the modified spherical Bessel functions, :math:`e^{\beta t} = \sum_l (2l+1)i_l(\beta)P_l(t)`).

**Scheme.** The state is the vector of real harmonic coefficients :math:`a_{lm}`, l <= L (the band limit,
``degree``), of :math:`\rho = \sum a_{lm}Y_{lm}` (:mod:`attnflow.meanfield._sphere_continuity`: the harmonics of
:func:`attnflow.kernels.sphere.sphere_harmonics`, mean square 1). Each evaluation of the tendency synthesises
:math:`\rho`, :math:`\nabla\tilde U` (and :math:`\tilde U` for softmax; :math:`\tilde U = e^{-\beta}K*\rho`, exact
from the coefficients) on a Gauss-Legendre (in :math:`z = \cos\theta`) x equispaced (in :math:`\varphi`) grid of
:math:`\lceil(3L+1)/2\rceil \times 2\lceil(3L+1)/2\rceil` points (Legendre sums against tables, then FFTs along the
rings), forms the flux :math:`F = \rho v` pointwise and projects :math:`-\mathrm{div}F` back onto the harmonics in
weak form, :math:`\dot a_{lm} = \frac1{4\pi}\int F\cdot\nabla Y_{lm}` (FFTs, then Gauss-Legendre sums against the
gradient tables). The grid integrates polynomials of degree 3L exactly, so for the mean normalisation (a degree-L
velocity potential) the scheme is the exact Galerkin truncation to degree L (the 3/2 rule: no aliasing); for softmax
the quotient by :math:`K*\rho` is not band-limited and the grid only damps the aliasing. The degree-0 tendency is
exactly 0 (:math:`\nabla Y_{00} = 0`), so the mass :math:`4\pi a_{00}` is constant to the last bit. The diffusion
is diagonal, :math:`\dot a_{lm} = -\frac{\sigma^2}2 l(l+1)a_{lm}`, and integrated exactly.

**Time stepping**: the project's integrators, as for the circle (:func:`~attnflow.meanfield.solve_continuity`).
``solver="rk4"`` (default): :class:`attnflow.integrate.RKStepper` with the classical RK4 tableau between the save
times, ``steps_per_save`` equal steps (the four stages one ``lax.scan`` body); with :math:`\sigma > 0` its
integrating-factor (Lawson) form, the diffusion exact (``RKStepper(lawson=True)``, stable for any step in the
diffusion). Any name of :data:`attnflow.integrate.SOLVERS`: :func:`attnflow.integrate.solve_ode` (diffrax), constant
or adaptive steps, the diffusion explicit.

**Stability** of the explicit step (checked at the start, refused in one sentence before the solve):
:math:`h\,(\max|v|\sqrt{L(L+1)} + \max|\mathrm{div}\, v|) \le 2\sqrt2`, the advection of degree L at speed
:math:`\max|v|` and the compression rate against RK4's stability on the imaginary axis. Velocities grow as clusters
form: watch ``min_density``.

**Start.** A start above degree L (a longer coefficient vector, or a grid density with content above L) is
projected onto degree <= L before the solve, and the relative :math:`L^2` norm of what was removed is
:attr:`SphereDensityPath.discarded` (``max_discarded`` refuses more). **Positivity** is monitored, not enforced:
:attr:`SphereDensityPath.min_density` is the minimum over the grid (and, with RK4, over every step up to the save).
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int

from .. import _validate as v
from .._x64 import keeps_float64
from ..errors import InputError
from ..fields import build_field
from ..integrate import RK_TABLEAUX, SOLVERS, RKStepper, solve_ode
from ..kernels.sphere import sphere_harmonics
from ._pde import RK4_IMAGINARY_BOUND, check_solve_args, rk4_steps_per_save
from ._sphere_continuity import (FOUR_PI, _check_normalisation, _nodes, _tables, analysis, check_degree,
                                 coefficient_degree, degrees, flat, grid_shape, num_coefficients, padded, synthesis)

__all__ = ["SphereGrid", "sphere_grid", "sphere_density_coefficients", "sphere_density_on_grid", "sphere_density_at",
           "sphere_empirical_coefficients", "sphere_degree_energies", "perturbed_uniform_sphere_density",
           "sample_sphere_density", "SphereDensityPath", "solve_sphere_continuity"]


class SphereGrid(NamedTuple):
    r"""A Gauss-Legendre x equispaced grid on :math:`S^2` (:func:`sphere_grid`).

    Attributes:
        z: (N,) the Gauss-Legendre nodes :math:`z_j = \cos\theta_j`, from the north pole down.
        phi: (P,) the longitudes :math:`2\pi k/P`.
        weights: (N, P) the area weights :math:`w_j\,2\pi/P` (sum :math:`4\pi`): :math:`\int f \approx \sum w f`.
        points: (N, P, 3) the grid points.
    """

    z: Float[Array, " N"]
    phi: Float[Array, " P"]
    weights: Float[Array, "N P"]
    points: Float[Array, "N P 3"]


def _grid(num_theta: int, num_phi: int, dtype) -> SphereGrid:
    z, w = _nodes(num_theta)
    phi = 2 * np.pi * np.arange(num_phi) / num_phi
    s = np.sqrt(np.maximum(1 - z * z, 0))
    points = np.stack([s[:, None] * np.cos(phi), s[:, None] * np.sin(phi), np.broadcast_to(z[:, None], (num_theta,
                                                                                                      num_phi))], -1)
    weights = np.broadcast_to(w[:, None] * (2 * np.pi / num_phi), (num_theta, num_phi))
    return SphereGrid(*(jnp.asarray(a, dtype) for a in (z, phi, weights, points)))


def _float_dtype(dtype):
    return jnp.result_type(float) if dtype is None else jnp.dtype(dtype)


@keeps_float64
def sphere_grid(degree: int, dtype=None) -> SphereGrid:
    r"""The grid of :func:`solve_sphere_continuity` at degree L: :math:`N = \lceil(3L+1)/2\rceil` Gauss-Legendre
    nodes in :math:`z = \cos\theta` times :math:`P = 2N` longitudes; its quadrature is exact for polynomials of
    degree <= 3L on the sphere.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.meanfield import sphere_grid
        >>> grid = sphere_grid(4)
        >>> grid.points.shape, round(float(jnp.sum(grid.weights)), 5)                  # 4 pi
        ((7, 14, 3), 12.56637)
        >>> round(float(jnp.sum(grid.weights * grid.points[..., 2] ** 4)), 5)          # 4 pi / 5
        2.51327
    """
    num_theta, num_phi = grid_shape(degree)
    return _grid(num_theta, num_phi, _float_dtype(dtype))


def _check_coefficients(coefficients, name: str = "coefficients") -> tuple[Array, int]:
    shape = v.check_array(name, coefficients, "real harmonic coefficients ((L+1)^2,) of a density on S^2",
                          min_rank=1, nonempty=True)
    degree = coefficient_degree(shape[-1])
    if degree is None:
        raise InputError(f"{name} must hold (L+1)^2 harmonic coefficients (entry l^2 + l + m) with L >= 1 along its "
                         f"last axis, got {shape[-1]}.")
    return v.as_float(coefficients), degree


def _check_grid_density(density, name: str = "density") -> Array:
    shape = v.check_array(name, density, "a density (N, P) on a Gauss-Legendre x equispaced grid of S^2 "
                          "(sphere_grid)", ranks=(2,), nonempty=True)
    return v.as_float(density), shape


@keeps_float64
def sphere_density_coefficients(density: Float[Array, "N P"], degree: int) -> Float[Array, " H"]:
    r"""The harmonic coefficients :math:`a_{lm} = \frac1{4\pi}\int\rho\,Y_{lm}`, l <= L, of a density given on a
    grid of N Gauss-Legendre nodes x P longitudes (:func:`sphere_grid`, of this or any other degree), by the grid's
    quadrature: exact for a density of degree <= 2N - 1 - L whose longitudinal frequencies stay below P - L (a
    density of degree <= L needs N > L and P > 2L, which are required).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.meanfield import sphere_density_coefficients, sphere_grid
        >>> grid = sphere_grid(4)
        >>> a = sphere_density_coefficients(1 + grid.points[..., 2], 2)           # 1 + z = Y_00 + Y_10 / sqrt 3
        >>> [round(float(c), 6) for c in a[:4]]
        [1.0, 0.0, 0.57735, 0.0]
    """
    density, shape = _check_grid_density(density)
    degree = check_degree(degree)
    _check_grid_fits(shape, degree, "density")
    return _coefficients_of_grid(density, degree)


def _check_grid_fits(shape, degree: int, name: str) -> None:
    if shape[0] < degree + 1 or shape[1] < 2 * degree + 1:
        raise InputError(f"{name} is on a grid of {shape[0]} x {shape[1]} points, too coarse for degree {degree}: it "
                         f"needs at least {degree + 1} x {2 * degree + 1} (sphere_grid({degree}) has "
                         f"{grid_shape(degree)[0]} x {grid_shape(degree)[1]}).")


@functools.partial(jax.jit, static_argnames=("degree",))
def _coefficients_of_grid(density, degree: int):
    num_theta, num_phi = density.shape
    table = jnp.asarray(_tables(degree, num_theta)[0], density.dtype)
    weights = jnp.asarray(_nodes(num_theta)[1] / (2 * num_phi), density.dtype)
    return flat(*analysis(density, table, weights), degree)


def _on_grid(coefficients, degree: int, num_theta: int, num_phi: int):
    table = jnp.asarray(_tables(degree, num_theta)[0], coefficients.dtype)

    def one(c):
        return synthesis(*padded(c, degree), table, num_phi)

    batch = coefficients.shape[:-1]
    out = jax.vmap(one)(coefficients.reshape((-1, coefficients.shape[-1])))
    return out.reshape(batch + (num_theta, num_phi))


@functools.partial(jax.jit, static_argnames=("degree", "num_theta", "num_phi"))
def _on_grid_jit(coefficients, degree: int, num_theta: int, num_phi: int):
    return _on_grid(coefficients, degree, num_theta, num_phi)


@keeps_float64
def sphere_density_on_grid(coefficients: Float[Array, "*T H"], grid_degree: int | None = None
                           ) -> Float[Array, "*T N P"]:
    r""":math:`\rho = \sum_{lm} a_{lm}Y_{lm}` on :func:`sphere_grid` ``(grid_degree)`` (default: the coefficients'
    own degree L; a larger one samples finer, e.g. for plots or :func:`sphere_density_coefficients` at a higher degree),
    for coefficients (..., (L+1)^2): FFT synthesis, O(L^3).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.meanfield import perturbed_uniform_sphere_density, sphere_density_on_grid, sphere_grid
        >>> a = perturbed_uniform_sphere_density(2, 1, 0.5)                    # (1 + 0.5 sqrt(3) z) / (4 pi)
        >>> rho = sphere_density_on_grid(a)
        >>> z = sphere_grid(2).points[..., 2]
        >>> float(jnp.abs(rho - (1 + 0.5 * 3 ** 0.5 * z) / (4 * jnp.pi)).max()) < 1e-6
        True
    """
    coefficients, degree = _check_coefficients(coefficients)
    grid_degree = degree if grid_degree is None else check_degree(grid_degree)
    if grid_degree < degree:
        raise InputError(f"grid_degree must be at least the coefficients' degree {degree} (a coarser grid cannot "
                         f"hold the density), got {grid_degree}.")
    return _on_grid_jit(coefficients, degree, *grid_shape(grid_degree))


@keeps_float64
def sphere_density_at(coefficients: Float[Array, "*T H"], x: Float[Array, "n 3"]) -> Float[Array, "*T n"]:
    r""":math:`\rho(x_i) = \sum_{lm} a_{lm}Y_{lm}(x_i)` at the directions of the points x (n, 3), for coefficients
    (..., (L+1)^2).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.meanfield import perturbed_uniform_sphere_density, sphere_density_at
        >>> a = perturbed_uniform_sphere_density(2, 1, 0.5)                    # (1 + 0.5 sqrt(3) z) / (4 pi)
        >>> rho = sphere_density_at(a, jnp.array([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]))
        >>> [round(float(r * 4 * jnp.pi), 5) for r in rho]
        [1.86603, 1.0]
    """
    coefficients, degree = _check_coefficients(coefficients)
    shape = v.check_array("x", x, "points (n, 3) of the sphere S^2", ranks=(2,), nonempty=True)
    if shape[1] != 3:
        raise InputError(f"x must be points (n, 3) of the sphere S^2, got shape {shape}.")
    return _density_at(coefficients, v.as_float(x), degree)


@functools.partial(jax.jit, static_argnames=("degree",))
def _density_at(coefficients, x, degree: int):
    return coefficients @ sphere_harmonics(x.astype(coefficients.dtype), degree).T


@keeps_float64
def sphere_empirical_coefficients(x: Float[Array, "n 3"], degree: int, weights: Float[Array, " n"] | None = None
                                  ) -> Float[Array, " H"]:
    r"""The harmonic coefficients of the empirical measure :math:`\mu = \sum_i w_i\delta_{x_i}` (default
    :math:`w_i = 1/n`) in the layout of a density: :math:`a_{lm} = \frac1{4\pi}\sum_i w_i Y_{lm}(x_i)`, l <= L, so
    that particles drawn from :math:`\rho` give :math:`a_{lm}(\rho) + O(n^{-1/2})`, and
    :func:`sphere_degree_energies` of them equals :func:`~attnflow.meanfield.harmonic_energies` of the particles.
    O(n L^2) memory.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.meanfield import harmonic_energies, sphere_degree_energies, sphere_empirical_coefficients
        >>> x = jnp.array([[0.0, 0.0, 1.0], [0.6, 0.0, 0.8], [0.0, -1.0, 0.0]])
        >>> a = sphere_empirical_coefficients(x, 2)
        >>> bool(jnp.allclose(sphere_degree_energies(a), harmonic_energies(x, 2), atol=1e-5))
        True
    """
    shape = v.check_array("x", x, "points (n, 3) of the sphere S^2", ranks=(2,), nonempty=True)
    if shape[1] != 3:
        raise InputError(f"x must be points (n, 3) of the sphere S^2, got shape {shape}.")
    degree = check_degree(degree)
    x = v.as_float(x)
    if weights is None:
        weights = jnp.full((shape[0],), 1.0 / shape[0], x.dtype)
    else:
        wshape = v.check_array("weights", weights, "one weight per point (n,)", ranks=(1,))
        if wshape[0] != shape[0]:
            raise InputError(f"weights must hold one weight per point ({shape[0]},), got shape {wshape}.")
        weights = jnp.asarray(weights, x.dtype)
    return _empirical(x, weights, degree)


@functools.partial(jax.jit, static_argnames=("degree",))
def _empirical(x, weights, degree: int):
    return weights @ sphere_harmonics(x, degree) / FOUR_PI


@keeps_float64
def sphere_degree_energies(coefficients: Float[Array, "*T H"]) -> Float[Array, "*T L1"]:
    r"""The degree energies :math:`E_l = \sum_m |\int Y_{lm}\,\rho|^2 = (4\pi)^2\sum_m a_{lm}^2`, l = 0..L, in the
    normalisation of :func:`~attnflow.meanfield.harmonic_energies` (a probability density has :math:`E_0 = 1`, the
    uniform one :math:`E_l = 0` for l >= 1, a point mass :math:`E_l = 2l+1`). Of a difference of two coefficient
    vectors, :math:`\sqrt{\sum_{1 \le l \le l_{max}} E_l}` is a distance between the two measures (their harmonics
    up to :math:`l_{max}` compared).

    Example:
        >>> from attnflow.meanfield import perturbed_uniform_sphere_density, sphere_degree_energies
        >>> [round(float(e), 6) for e in sphere_degree_energies(perturbed_uniform_sphere_density(3, 2, 0.1))]
        [1.0, 0.0, 0.01, 0.0]
    """
    coefficients, degree = _check_coefficients(coefficients)
    return _energies(coefficients, degree)


@functools.partial(jax.jit, static_argnames=("degree",))
def _energies(coefficients, degree: int):
    squares = (FOUR_PI * coefficients) ** 2
    onehot = jnp.asarray(degrees(degree)[:, None] == np.arange(degree + 1)[None, :], coefficients.dtype)
    return squares @ onehot


@keeps_float64
def perturbed_uniform_sphere_density(degree: int, l: int, eps, m: int = 0, dtype=None) -> Float[Array, " H"]:
    r"""The coefficients (degree L) of :math:`\frac1{4\pi}(1 + \varepsilon Y_{lm})` (l <= L, -l <= m <= l; the real
    harmonic of mean square 1, so the relative perturbation has root mean square :math:`|\varepsilon|`): the
    uniform probability density perturbed in one harmonic.

    Example:
        >>> from attnflow.meanfield import perturbed_uniform_sphere_density
        >>> a = perturbed_uniform_sphere_density(2, 1, 0.5, m=1)
        >>> a.shape, [round(float(c * 4 * 3.14159265), 4) for c in a[:4]]
        ((9,), [1.0, 0.0, 0.0, 0.5])
    """
    degree = check_degree(degree)
    l = v.check_int("l", l, minimum=0, meaning="the degree of the perturbation")
    if l > degree:
        raise InputError(f"l must be at most degree = {degree} (the perturbed harmonic's degree), got {l}.")
    if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or abs(m) > l:
        raise InputError(f"m must be an int with |m| <= l = {l} (the perturbed harmonic's order), got {m!r}.")
    v.check_real("eps", eps, "the relative amplitude of the perturbation")
    dtype = _float_dtype(dtype)
    out = jnp.zeros((num_coefficients(degree),), dtype).at[0].set(1 / FOUR_PI)
    return out.at[l * l + l + int(m)].add(jnp.asarray(eps, dtype) / FOUR_PI)


@keeps_float64
def sample_sphere_density(key, coefficients: Float[Array, " H"], n: int, *, batch: int | None = None
                          ) -> Float[Array, "n 3"]:
    r"""n i.i.d. points from the probability density :math:`\rho \propto \max(\sum a_{lm}Y_{lm}, 0)` on
    :math:`S^2` by rejection from the uniform law: a uniform point x is kept with probability :math:`\rho(x)/B`,
    B = 1.05 times the maximum of :math:`\rho` on :func:`sphere_grid` ``(min(2L, 128))`` (a draw above B is refused
    with an :class:`~attnflow.errors.InputError`, never kept biased). Host-side loop over batches of candidates
    (``batch``, default max(4n, 4096)); about :math:`4\pi B n/\mathrm{mass}` candidates. Returned in the
    coefficients' dtype.

    Example:
        >>> import jax
        >>> from attnflow.meanfield import perturbed_uniform_sphere_density, sample_sphere_density
        >>> x = sample_sphere_density(jax.random.key(0), perturbed_uniform_sphere_density(2, 1, 0.5), 4000)
        >>> x.shape, abs(float(x[:, 2].mean()) - 0.5 * 3 ** 0.5 / 3) < 0.05     # E z = 0.5 sqrt(3) E z^2
        ((4000, 3), True)
    """
    coefficients, degree = _check_coefficients(coefficients)
    if coefficients.ndim != 1:
        raise InputError(f"coefficients must be one vector ((L+1)^2,) to sample from, got shape {coefficients.shape}.")
    n = v.check_int("n", n, meaning="the number of points")
    batch = max(4 * n, 4096) if batch is None else v.check_int("batch", batch, meaning="candidates per batch")
    fine = sphere_density_on_grid(coefficients, min(2 * degree, 128))
    bound = 1.05 * float(jnp.max(fine))
    if not bound > 0:
        raise InputError("coefficients give a density that is nowhere positive on the grid; nothing to sample.")
    kept, count, step = [], 0, 0
    while count < n:
        k_points, k_accept = jax.random.split(jax.random.fold_in(key, step))
        step += 1
        x = jax.random.normal(k_points, (batch, 3), coefficients.dtype)
        x = x / jnp.linalg.norm(x, axis=1, keepdims=True)
        rho = sphere_density_at(coefficients, x)
        if float(jnp.max(rho)) > bound:
            raise InputError(f"the density exceeds the rejection bound {bound:.4g} between the grid points; raise the "
                             "degree of the coefficients' grid (the density is too rough for its degree).")
        accept = np.asarray(jax.random.uniform(k_accept, (batch,), coefficients.dtype) * bound < rho)
        chosen = np.asarray(x)[accept]
        kept.append(chosen)
        count += chosen.shape[0]
        if step > 1000:
            raise InputError("sampling kept too few points in 1000 batches: the density is too peaked for rejection "
                             "from the uniform law.")
    return jnp.asarray(np.concatenate(kept)[:n], coefficients.dtype)


class SphereDensityPath(eqx.Module):
    r"""A solution of the continuity equation on :math:`S^2` at the save times: the integrator's
    :class:`~attnflow.integrate.Trajectory` (times, steps, result code) read as a density.

    Attributes:
        ts: (T,) save times.
        coefficients: (T, (L+1)^2) the harmonic coefficients of the density at each save time.
        density: (T, N, P) the density on :func:`sphere_grid` ``(L)``.
        mass: (T,) :math:`4\pi a_{00}` (constant: the degree-0 tendency is exactly 0).
        min_density: (T,) the smallest grid value of :math:`\rho` (positivity monitor; with RK4 over every step
            of the interval that ends at the save time).
        negative: True when ``min_density`` went below 0.
        discarded: the relative :math:`L^2` norm of the start's content above degree L, removed before the solve.
        num_steps: time steps taken.
        result: the solve's :class:`attnflow.integrate.RESULTS` code.
        degree: L (static).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.meanfield import perturbed_uniform_sphere_density, solve_sphere_continuity
        >>> path = solve_sphere_continuity(perturbed_uniform_sphere_density(4, 2, 0.1), 2.0, jnp.array([0.0, 0.5]),
        ...                                steps_per_save=2)
        >>> path.coefficients.shape, path.density.shape, path.energies().shape, int(path.result)
        ((2, 25), (2, 7, 14), (2, 5), 0)
    """

    ts: Float[Array, " T"]
    coefficients: Float[Array, "T H"]
    density: Float[Array, "T N P"]
    mass: Float[Array, " T"]
    min_density: Float[Array, " T"]
    negative: Bool[Array, ""]
    discarded: Float[Array, ""]
    num_steps: Int[Array, ""]
    result: Int[Array, ""]
    degree: int = eqx.field(static=True)

    def energies(self) -> Float[Array, "T L1"]:
        """:func:`sphere_degree_energies` of the density at every save time."""
        return _energies(self.coefficients, self.degree)


def _field(beta, degree: int, normalisation: str, sigma, dtype):
    """The registry's field ``"sphere_continuity"``: the mean-field limit of Q = K = V = I on S^2 (with the
    diffusion sigma^2/2 of tokens with independent noise)."""
    eye = jnp.eye(3, dtype=dtype)
    noiseless = isinstance(sigma, (int, float)) and sigma == 0
    return build_field("sphere_continuity", eye, eye, eye, beta=jnp.asarray(beta, dtype), degree=degree,
                       normalisation=normalisation, diffusion=0.0 if noiseless else sigma * sigma / 2)


def _project(start, degree: int):
    """(coefficients of degree L, the relative L2 norm removed) of a start: coefficients (any degree) or a grid
    density on a Gauss-Legendre grid (its own quadrature)."""
    if start.ndim == 1:
        size = num_coefficients(degree)
        if start.shape[0] >= size:
            kept = start[:size]
            removed = jnp.sum(start[size:] ** 2)
        else:
            kept = jnp.pad(start, (0, size - start.shape[0]))
            removed = jnp.zeros((), start.dtype)
        total = jnp.sum(start ** 2)
        return kept, jnp.sqrt(removed / jnp.where(total > 0, total, 1))
    num_theta, num_phi = start.shape
    kept = _coefficients_of_grid(start, degree)
    residual = start - _on_grid(kept, degree, num_theta, num_phi)
    weights = jnp.asarray(_nodes(num_theta)[1], start.dtype)[:, None]
    total = jnp.sum(weights * start ** 2)
    return kept, jnp.sqrt(jnp.sum(weights * residual ** 2) / jnp.where(total > 0, total, 1))


def _path(field, ts, coefficients, low, discarded, num_steps, result) -> SphereDensityPath:
    degree = field.degree
    density = _on_grid(coefficients, degree, *field.grid_shape)
    return SphereDensityPath(ts=ts, coefficients=coefficients, density=density, mass=FOUR_PI * coefficients[:, 0],
                             min_density=low, negative=jnp.any(low < 0), discarded=discarded, num_steps=num_steps,
                             result=result, degree=degree)


@eqx.filter_jit
def _solve_rk4(field, start, ts, steps: int, noisy: bool):
    a0, discarded = _project(start, field.degree)
    stepper = RKStepper(RK_TABLEAUX["rk4"], ts=ts, steps_per_save=steps, scan_stages=not noisy, lawson=noisy,
                        track_min=lambda a: jnp.min(field.density_on_grid(a)))
    traj = stepper.solve(field, a0)
    coefficients, low = traj.ys
    return _path(field, traj.ts, coefficients, low, discarded, traj.num_steps, traj.result)


@eqx.filter_jit
def _solve_diffrax(field, start, ts, dt, solver: str, rtol, atol, max_steps: int):
    a0, discarded = _project(start, field.degree)
    traj = solve_ode(field, a0, t0=ts[0], t1=ts[-1], ts=ts, solver=solver, rtol=rtol, atol=atol, dt0=dt,
                     adaptive=dt is None, max_steps=max_steps)
    low = jax.vmap(lambda a: jnp.min(field.density_on_grid(a)))(traj.ys)
    return _path(field, traj.ts, traj.ys, low, discarded, traj.num_steps, traj.result)


def _start_degree(start, degree):
    """(the start as a float array, the band limit L)."""
    if isinstance(start, (str, bytes)) or start is None:
        raise InputError(f"start must be harmonic coefficients ((L+1)^2,) or a grid density (N, P), got "
                         f"{type(start).__name__}.")
    rank = len(v.shape_of("start", start))
    if rank == 1:
        start, own = _check_coefficients(start, "start")
        degree = own if degree is None else check_degree(degree)
        return start, degree
    if rank != 2:
        raise InputError(f"start must be harmonic coefficients ((L+1)^2,) or a grid density (N, P) on a "
                         f"Gauss-Legendre grid (sphere_grid), got shape {v.shape_of('start', start)}.")
    start, shape = _check_grid_density(start, "start")
    if degree is None:
        found = [L for L in range(1, 129) if grid_shape(L) == tuple(shape)]
        if not found:
            raise InputError(f"start is a grid density of shape {tuple(shape)}, not that of sphere_grid(L) for any L; "
                             "pass degree= (the band limit L) as well.")
        degree = found[0]
    degree = check_degree(degree)
    _check_grid_fits(shape, degree, "start")
    return start, degree


@keeps_float64
def solve_sphere_continuity(start, beta, ts: Float[Array, " T"], *, degree: int | None = None,
                            normalisation: str = "softmax", sigma=0.0, dt=None, steps_per_save: int | None = None,
                            solver: str = "rk4", rtol: float = 1e-8, atol: float = 1e-10, max_steps: int = 16384,
                            max_discarded: float | None = None) -> SphereDensityPath:
    r"""The density at the times ``ts`` (from ``ts[0]``), solving the continuity equation of the sphere flow on
    :math:`S^2` (module docstring), spectral to degree L.

    ``start``: harmonic coefficients ((L0+1)^2,) of the initial density (e.g.
    :func:`perturbed_uniform_sphere_density`; entry :math:`l^2 + l + m`), or the density (N, P) on a Gauss-Legendre
    x equispaced grid (:func:`sphere_grid`); a probability density for the particles' limit (the mean
    normalisation's velocity scales with the mass). ``degree``: the band limit L (default: the coefficients' own
    degree, or the L of the grid ``sphere_grid(L)`` the density is on); the start is projected onto degree <= L and
    the relative :math:`L^2` norm removed is :attr:`SphereDensityPath.discarded` (``max_discarded`` refuses more).
    ``sigma``: the strength of independent tokenwise noise (diffusion :math:`\frac{\sigma^2}2\Delta`).

    Time stepping: ``solver="rk4"`` (default), constant steps between the save times, ``steps_per_save`` of them, or
    the fewest of at most a concrete ``dt`` that the longest interval needs (the RKStepper with RK4; Lawson with
    noise, the diffusion exact); or a name of :data:`attnflow.integrate.SOLVERS` (diffrax, constant ``dt`` or
    adaptive with ``rtol`` / ``atol`` when ``dt`` is None). A step above the explicit stability bound at the start is
    refused before the solve. Jitted (``equinox.filter_jit``; beta and the times are traced: a new value compiles
    nothing); float64 input is computed in float64.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.meanfield import perturbed_uniform_sphere_density, solve_sphere_continuity
        >>> a0 = perturbed_uniform_sphere_density(4, 2, 0.2)
        >>> path = solve_sphere_continuity(a0, 4.0, jnp.array([0.0, 1.0]), steps_per_save=2)
        >>> e = path.energies()
        >>> bool(e[1, 2] > e[0, 2]), bool(abs(path.mass[1] - path.mass[0]) < 1e-6)    # degree 2 grows; mass kept
        (True, True)
    """
    start, degree = _start_degree(start, degree)
    dtype = start.dtype
    ts = check_solve_args(beta, sigma, normalisation, dt, ts, dtype)
    normalisation = _check_normalisation(normalisation)
    noisy = not (isinstance(sigma, (int, float)) and sigma == 0)
    field = _field(beta, degree, normalisation, jnp.asarray(sigma, dtype) if noisy else 0.0, dtype)
    concrete = v.is_concrete(start) and v.is_concrete(beta)
    if max_discarded is not None:
        v.check_number("max_discarded", max_discarded, "the largest relative L2 norm of the start that may be "
                       "removed above degree L", low=0, closed="low")
        if concrete:
            lost = float(_project(start, degree)[1])
            if not lost <= max_discarded:
                raise InputError(f"start has {lost:.3g} of its L2 norm above degree {degree} (max_discarded = "
                                 f"{max_discarded:g}); use a higher degree or a smoother start.")
    if solver == "rk4":
        steps = rk4_steps_per_save(ts, dt, steps_per_save)
        if concrete and v.is_concrete(ts):
            _check_step(field, start, float(jnp.max(jnp.diff(ts))) / steps, "steps_per_save")
        return _solve_rk4(field, start, ts, steps, noisy)
    if solver not in SOLVERS:
        raise InputError(f"solver must be 'rk4' or one of {sorted(SOLVERS)}, got {solver!r}.")
    if dt is not None and concrete and v.is_concrete(dt):
        _check_step(field, start, float(dt), "dt", diffusion=noisy)
    return _solve_diffrax(field, start, ts, None if dt is None else jnp.asarray(dt, dtype), solver,
                          jnp.asarray(rtol, dtype), jnp.asarray(atol, dtype), int(max_steps))


@eqx.filter_jit
def _speeds(field, start):
    a0, _ = _project(start, field.degree)
    v_theta, v_phi = field.velocity(a0)
    return jnp.max(jnp.sqrt(v_theta ** 2 + v_phi ** 2)), jnp.max(jnp.abs(field.divergence_speed(a0)))


def _check_step(field, start, step: float, key: str, diffusion: bool = False) -> None:
    r"""Refuse an explicit step above :math:`h(\max|v|\sqrt{L(L+1)} + \max|\mathrm{div}\,v|) \le 2\sqrt2` (plus the
    diffusion's :math:`D L(L+1)` where it is explicit), in one sentence naming the key to change."""
    speed, compression = (float(a) for a in _speeds(field, start))
    fix = "more steps_per_save" if key == "steps_per_save" else "a smaller dt"
    L = field.degree
    rate = speed * math.sqrt(L * (L + 1)) + compression
    if diffusion:
        rate += float(field.diffusion) * L * (L + 1)
    if not math.isfinite(rate):
        raise InputError("start gives a velocity that is not finite (a density with K * rho <= 0 somewhere); pass a "
                         "density that is positive on average near every point.")
    if step * rate > RK4_IMAGINARY_BOUND:
        raise InputError(
            f"the time step {step:.4g} is above the explicit stability bound h (max|v| sqrt(L(L+1)) + max|div v|"
            f"{' + D L(L+1)' if diffusion else ''}) <= {RK4_IMAGINARY_BOUND:.3g} (max|v| = {speed:.4g}, "
            f"max|div v| = {compression:.4g} at the start, L = {L}), so the solve would blow up; use a step <= "
            f"{RK4_IMAGINARY_BOUND / rate:.4g} ({fix}).")
