r"""Empirical measures at any n: Fourier modes, moments, harmonic energies, histograms, the energy.

A cloud of n particles :math:`\mu = \sum_j w_j \delta_{x_j}` (weights :math:`w_j = 1/n` unless
given; given weights are scaled to sum 1) is summarised in O(n) (or O(n log n)) time and memory,
never through an n x n matrix:

* on the circle (angles :math:`\theta_j`, or unit tokens (n, 2) with
  :math:`x_j = (\cos\theta_j, \sin\theta_j)`): the Fourier coefficients
  :math:`\hat\mu_m = \int e^{-i m\theta} d\mu = \sum_j w_j e^{-i m\theta_j}` (:func:`fourier_coefficients`)
  and the histogram on G bins centred at :math:`\theta_g = 2\pi g/G` (:func:`circle_histogram`);
* on :math:`S^{d-1}`: the mean :math:`m = \sum_j w_j x_j` and second moment
  :math:`M = \sum_j w_j x_j x_j^\top` (:func:`sphere_moments`), the spherical-harmonic energies of
  degrees l <= 3 (:func:`harmonic_energies`), and on :math:`S^2` the histogram on the z/phi grid
  (:func:`sphere_histogram`, equal-area cells);
* the interaction energy :math:`E_\beta = \frac1{2\beta n^2}\sum_{i,j} e^{\beta\langle x_i, x_j\rangle}`,
  tiled for any d (:func:`interaction_energy_tiled`) or through Fourier modes on the circle
  (:func:`interaction_energy_fourier`).

Each has an O(n^2) definition in :mod:`attnflow.observables` or in closed form, against which the
tests check it on small clouds. All are pure jnp (jit / vmap / grad).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Complex, Float

from .. import _validate as v
from .._x64 import keeps_float64
from ..kernels import DEFAULT_CHUNK, tiled_logsumexp
from ..errors import InputError
from ._blocks import DEFAULT_BLOCK, sum_over_blocks
from ._kernel import kernel_modes

__all__ = [
    "circle_angles",
    "fourier_coefficients",
    "density_fourier_coefficients",
    "sphere_moments",
    "harmonic_energies",
    "circle_histogram",
    "sphere_histogram",
    "interaction_energy_tiled",
    "interaction_energy_fourier",
]

TWO_PI = 2 * math.pi


@keeps_float64
def circle_angles(points: Float[Array, "n *two"]) -> Float[Array, " n"]:
    r"""Angles in :math:`[0, 2\pi)` of points on the circle: angles (n,) taken mod :math:`2\pi`, or
    tokens (n, 2) (any norm) through :math:`\mathrm{atan2}(x_2, x_1)`.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.meanfield import circle_angles
        >>> [round(float(a), 4) for a in circle_angles(jnp.array([[0.0, 2.0], [-1.0, 0.0], [0.0, -1.0]]))]
        [1.5708, 3.1416, 4.7124]
    """
    check_points(points)
    return _angles(points)


def check_points(points, name: str = "points") -> int:
    """Host-side check of angles (n,) or tokens on the circle (n, 2); their number n."""
    shape = v.check_array(name, points, "angles (n,) or tokens on the circle (n, 2)", ranks=(1, 2), nonempty=True)
    if len(shape) == 2 and shape[1] != 2:
        raise InputError(f"{name} must be angles (n,) or tokens on the circle (n, 2), got shape {shape}.")
    return shape[0]


def _angles(points) -> Float[Array, " n"]:
    """Angles in [0, 2 pi) of checked points (traceable)."""
    points = v.as_float(points)
    theta = jnp.arctan2(points[:, 1], points[:, 0]) if points.ndim == 2 else points
    return jnp.mod(theta, TWO_PI)


def check_weights(weights, n: int, name: str = "weights") -> None:
    """Host-side check of particle weights: None, or n numbers >= 0 with a positive sum."""
    if weights is None:
        return
    shape = v.check_array(name, weights, "one weight >= 0 per particle", ranks=(1,))
    if shape[0] != n:
        raise InputError(f"{name} must hold one weight per particle ({n}), got shape {shape}.")
    if v.is_concrete(weights):
        arr = np.asarray(weights, float)
        if np.any(arr < 0) or not arr.sum() > 0:
            raise InputError(f"{name} must be >= 0 with a positive sum (the particles' masses).")


def _weights(weights, n: int, dtype) -> Float[Array, " n"]:
    """The particle weights scaled to sum 1 (uniform 1/n when None; traceable)."""
    if weights is None:
        return jnp.full((n,), 1.0 / n, dtype)
    weights = jnp.asarray(weights, dtype)
    return weights / jnp.sum(weights)


@keeps_float64
def fourier_coefficients(points: Float[Array, "n *two"], num_modes: int, weights: Float[Array, " n"] | None = None,
                         *, block: int = DEFAULT_BLOCK) -> Complex[Array, " K"]:
    r"""Fourier coefficients :math:`\hat\mu_m = \sum_j w_j e^{-i m\theta_j}`, m = 0..num_modes, of a cloud on the circle.

    :math:`\hat\mu_0 = 1`; :math:`\hat\mu_{-m} = \overline{\hat\mu_m}`. A density :math:`\rho` has
    :math:`\hat\rho_m = \int_0^{2\pi} e^{-im\theta}\rho(\theta)\,d\theta` in the same convention.
    O(n K) time, O(block K) memory (particles summed in blocks).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.meanfield import fourier_coefficients
        >>> c = fourier_coefficients(jnp.array([0.0, jnp.pi / 2]), 2)    # (1 + e^{-i m pi/2}) / 2
        >>> [complex(round(float(z.real), 6) + 0.0, round(float(z.imag), 6) + 0.0) for z in c]
        [(1+0j), (0.5-0.5j), 0j]
    """
    n = check_points(points)
    num_modes = v.check_int("num_modes", num_modes, minimum=0, meaning="the highest Fourier mode")
    check_weights(weights, n)
    return _fourier(points, weights, num_modes, v.check_int("block", block, meaning="particles per block"))


@functools.partial(jax.jit, static_argnames=("num_modes", "block"))
def _fourier(points, weights, num_modes: int, block: int):
    theta = _angles(points)
    w = _weights(weights, theta.shape[0], theta.dtype)
    modes = jnp.arange(num_modes + 1, dtype=theta.dtype)

    def block_sum(th, wb):
        phase = -th[:, None] * modes[None, :]
        return jax.lax.complex(wb @ jnp.cos(phase), wb @ jnp.sin(phase))

    return sum_over_blocks(block_sum, (theta, w), block)


@keeps_float64
def density_fourier_coefficients(density: Float[Array, "*T G"], num_modes: int) -> Complex[Array, "*T K"]:
    r"""Fourier coefficients :math:`\hat\rho_m = \frac{2\pi}{G}\sum_g \rho_g e^{-i m\theta_g}`, m = 0..num_modes, of
    densities on the grid :math:`\theta_g = 2\pi g/G` (the convention of :func:`fourier_coefficients`; leading
    axes are kept, e.g. the times of a solution).

    Exact (to rounding) for a trigonometric polynomial of degree < G/2; ``num_modes`` must be below G/2.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.meanfield import circle_grid, density_fourier_coefficients
        >>> rho = (1 + 0.2 * jnp.cos(3 * circle_grid(16))) / (2 * jnp.pi)
        >>> [round(abs(complex(c)), 6) for c in density_fourier_coefficients(rho, 3)]
        [1.0, 0.0, 0.0, 0.1]
    """
    shape = v.check_array("density", density, "densities on the grid 2 pi g / G (..., G)", min_rank=1, nonempty=True)
    num_modes = v.check_int("num_modes", num_modes, minimum=0, meaning="the highest Fourier mode")
    if not 2 * num_modes < shape[-1]:
        raise InputError(f"num_modes must be below G/2 = {shape[-1] / 2:g} for densities on {shape[-1]} grid points, "
                         f"got {num_modes}.")
    return _density_fourier(v.as_float(density), num_modes)


@functools.partial(jax.jit, static_argnames=("num_modes",))
def _density_fourier(density, num_modes: int):
    return jnp.fft.rfft(density, axis=-1)[..., : num_modes + 1] * (TWO_PI / density.shape[-1])


def _tokens(x, what: str = "tokens on the sphere (n, d)") -> Float[Array, "n d"]:
    v.check_array("x", x, what, ranks=(2,), nonempty=True)
    return v.as_float(x)


@keeps_float64
def sphere_moments(x: Float[Array, "n d"], weights: Float[Array, " n"] | None = None
                   ) -> tuple[Float[Array, " d"], Float[Array, "d d"]]:
    r"""The mean :math:`m = \sum_j w_j x_j` and the second moment :math:`M = \sum_j w_j x_j x_j^\top` (O(n d^2)).

    For unit tokens :math:`\mathrm{tr} M = 1`; the uniform measure on :math:`S^{d-1}` has
    :math:`m = 0`, :math:`M = I/d`.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.meanfield import sphere_moments
        >>> m, M = sphere_moments(jnp.array([[1.0, 0.0], [0.0, 1.0]]))
        >>> m.tolist(), M.tolist()
        ([0.5, 0.5], [[0.5, 0.0], [0.0, 0.5]])
    """
    x = _tokens(x)
    check_weights(weights, x.shape[0])
    return _moments(x, weights)


@jax.jit
def _moments(x, weights):
    w = _weights(weights, x.shape[0], x.dtype)
    return w @ x, (x * w[:, None]).T @ x


def _third_moment(x, w, block):
    return sum_over_blocks(lambda xb, wb: jnp.einsum("n,ni,nj,nk->ijk", wb, xb, xb, xb), (x, w), block)


@keeps_float64
def harmonic_energies(x: Float[Array, "n d"], max_degree: int = 2, weights: Float[Array, " n"] | None = None,
                      *, block: int = DEFAULT_BLOCK) -> Float[Array, " L"]:
    r"""Spherical-harmonic energies :math:`E_l = \sum_{Y} |\int Y\, d\mu|^2` of degrees l = 0..max_degree (<= 3 in
    any dimension; on S^2, d = 3, any degree up to :data:`attnflow.kernels.sphere.MAX_DEGREE`, through
    :func:`attnflow.kernels.sphere.degree_energies`, O(n L^2)).

    The sum runs over an :math:`L^2(\sigma)`-orthonormal basis of the harmonics of degree l
    (:math:`\sigma` the uniform probability on :math:`S^{d-1}`), so that
    :math:`E_l = \sum_{i,j} w_i w_j Z_l(\langle x_i, x_j\rangle)` with the zonal harmonic
    :math:`Z_l = \dim(\mathcal H_l)\, C^{(d-2)/2}_l / C^{(d-2)/2}_l(1)` (Gegenbauer; Chebyshev
    for d = 2). The uniform measure has :math:`E_l = 0` for l >= 1, a point mass
    :math:`E_l = \dim\mathcal H_l`. Through moments of the (normalised) tokens, in O(n d^l):

    .. math::  E_0 = 1,\quad E_1 = d\,|m|^2,\quad E_2 = \tfrac{d(d+2)}{2}\,\|M - I/d\|_F^2,\quad
               E_3 = \tfrac{d(d+2)(d+4)}{6}\,\|T^0\|_F^2,

    with :math:`T = \sum_j w_j x_j^{\otimes 3}` and its trace-free part
    :math:`T^0_{abc} = T_{abc} - \frac{1}{d+2}(m_a\delta_{bc} + m_b\delta_{ac} + m_c\delta_{ab})`.
    On the circle :math:`E_l = 2|\hat\mu_l|^2` for l >= 1.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.meanfield import harmonic_energies
        >>> [round(float(e), 5) for e in harmonic_energies(jnp.array([[0.0, 0.0, 1.0]]), 3)]   # dims 1, 3, 5, 7
        [1.0, 3.0, 5.0, 7.0]
        >>> [round(float(e), 5) for e in harmonic_energies(jnp.array([[0.0, 0.0, 1.0]]), 6)]   # on S^2, any degree
        [1.0, 3.0, 5.0, 7.0, 9.0, 11.0, 13.0]
    """
    from ..kernels.sphere import MAX_DEGREE, degree_energies

    max_degree = v.check_int("max_degree", max_degree, minimum=0, meaning="the highest harmonic degree")
    x = _tokens(x)
    check_weights(weights, x.shape[0])
    if max_degree > 3:
        if x.shape[1] != 3:
            raise InputError(f"max_degree must be at most 3 for tokens in d = {x.shape[1]} (energies through moments "
                             f"of order <= 3; any degree on S^2, d = 3), got {max_degree}.")
        if max_degree > MAX_DEGREE:
            raise InputError(f"max_degree must be at most {MAX_DEGREE} on S^2, got {max_degree}.")
        return degree_energies(x, max_degree, _weights(weights, x.shape[0], x.dtype))
    return _harmonic(x, weights, max_degree, v.check_int("block", block, meaning="particles per block"))


@functools.partial(jax.jit, static_argnames=("max_degree", "block"))
def _harmonic(x, weights, max_degree: int, block: int):
    x = x / jnp.linalg.norm(x, axis=-1, keepdims=True)
    d = x.shape[1]
    w = _weights(weights, x.shape[0], x.dtype)
    m = w @ x
    energies = [jnp.ones((), x.dtype), d * jnp.sum(m * m)]
    if max_degree >= 2:
        M = (x * w[:, None]).T @ x
        traceless = M - jnp.eye(d, dtype=x.dtype) / d
        energies.append(d * (d + 2) / 2 * jnp.sum(traceless * traceless))
    if max_degree >= 3:
        eye = jnp.eye(d, dtype=x.dtype)
        trace_part = (jnp.einsum("a,bc->abc", m, eye) + jnp.einsum("b,ac->abc", m, eye)
                      + jnp.einsum("c,ab->abc", m, eye))
        free = _third_moment(x, w, block) - trace_part / (d + 2)
        energies.append(d * (d + 2) * (d + 4) / 6 * jnp.sum(free * free))
    return jnp.stack(energies[: max_degree + 1])


@keeps_float64
def circle_histogram(points: Float[Array, "n *two"], num_bins: int, weights: Float[Array, " n"] | None = None
                     ) -> Float[Array, " G"]:
    r"""Masses of G bins of width :math:`h = 2\pi/G` centred at :math:`\theta_g = g h`: bin g is
    :math:`[\theta_g - h/2, \theta_g + h/2)` (bin 0 wraps around 0). They sum to 1; divide by h for
    a density on the grid of :func:`~attnflow.meanfield.circle_grid`. O(n) (a scatter-add).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.meanfield import circle_histogram
        >>> circle_histogram(jnp.array([0.1, -0.1, 3.2, 1.6]), 4).tolist()
        [0.5, 0.25, 0.25, 0.0]
    """
    check_weights(weights, check_points(points))
    return _circle_histogram(points, weights, v.check_int("num_bins", num_bins, meaning="the number of angle bins"))


@functools.partial(jax.jit, static_argnames=("num_bins",))
def _circle_histogram(points, weights, num_bins: int):
    theta = _angles(points)
    w = _weights(weights, theta.shape[0], theta.dtype)
    index = jnp.floor(theta * (num_bins / TWO_PI) + 0.5).astype(jnp.int32) % num_bins
    return jnp.zeros((num_bins,), theta.dtype).at[index].add(w)


@keeps_float64
def sphere_histogram(x: Float[Array, "n 3"], num_z: int, num_phi: int, weights: Float[Array, " n"] | None = None
                     ) -> Float[Array, "Z P"]:
    r"""Masses of the z/phi grid on :math:`S^2`: ``num_z`` equal bins of :math:`z = x_3 \in [-1, 1]`
    times ``num_phi`` equal bins of the azimuth :math:`\phi = \mathrm{atan2}(x_2, x_1) \in [0, 2\pi)`.

    The cells have equal area :math:`4\pi/(Z P)` (Archimedes: the area of a zone of the sphere is
    :math:`2\pi` times its height), so masses times :math:`Z P/(4\pi)` are a density with respect to
    area. Row 0 is the south cap (z near -1). O(n).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.meanfield import sphere_histogram
        >>> h = sphere_histogram(jnp.array([[0.0, 0.0, -1.0], [0.0, 0.8, 0.6]]), 2, 4)
        >>> h.tolist()    # z = -1, phi = 0: cell (0, 0); z = 0.6, phi = pi/2: cell (1, 1)
        [[0.5, 0.0, 0.0, 0.0], [0.0, 0.5, 0.0, 0.0]]
    """
    x = _tokens(x, "tokens on the sphere S^2 (n, 3)")
    if x.shape[1] != 3:
        raise InputError(f"x must be tokens on S^2 (n, 3) for the z/phi grid, got shape {x.shape}.")
    num_z = v.check_int("num_z", num_z, meaning="the number of bins of z")
    num_phi = v.check_int("num_phi", num_phi, meaning="the number of azimuth bins")
    check_weights(weights, x.shape[0])
    return _sphere_histogram(x, weights, num_z, num_phi)


@functools.partial(jax.jit, static_argnames=("num_z", "num_phi"))
def _sphere_histogram(x, weights, num_z: int, num_phi: int):
    x = x / jnp.linalg.norm(x, axis=-1, keepdims=True)
    w = _weights(weights, x.shape[0], x.dtype)
    iz = jnp.clip(jnp.floor((x[:, 2] + 1) * (num_z / 2)).astype(jnp.int32), 0, num_z - 1)
    phi = jnp.mod(jnp.arctan2(x[:, 1], x[:, 0]), TWO_PI)
    ip = jnp.floor(phi * (num_phi / TWO_PI)).astype(jnp.int32) % num_phi
    return jnp.zeros((num_z, num_phi), x.dtype).at[iz, ip].add(w)


def _check_beta(beta):
    v.check_beta("beta", beta, "the inverse temperature of the kernel e^(beta <x, y>)", scalar=True)


@keeps_float64
def interaction_energy_tiled(x: Float[Array, "n d"], beta, *, chunk_size: int = DEFAULT_CHUNK) -> Float[Array, ""]:
    r""":math:`E_\beta = \frac1{2\beta n^2}\sum_{i,j} e^{\beta\langle x_i, x_j\rangle}` in O(n d + c^2) memory.

    The blocked online-softmax pass of :func:`attnflow.kernels.tiled_logsumexp` (tiles of c x c pairs) returns
    :math:`L_i = \log\sum_j e^{\beta\langle x_i, x_j\rangle}` per row; then
    :math:`E_\beta = \exp(\mathrm{logsumexp}_i L_i - \log(2\beta n^2))`: finite whenever
    :math:`E_\beta` is representable (``inf``, never a wrong finite number, otherwise), as
    :func:`attnflow.observables.interaction_energy`, its O(n^2)-memory definition. O(n^2 d) time;
    reverse-mode gradients (in x and beta) recompute the tiles.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from attnflow.meanfield import interaction_energy_tiled
        >>> from attnflow.observables import interaction_energy
        >>> x = jax.random.normal(jax.random.key(0), (300, 3))
        >>> x = x / jnp.linalg.norm(x, axis=1, keepdims=True)
        >>> a, b = interaction_energy_tiled(x, 2.0, chunk_size=64), interaction_energy(x, 2.0)
        >>> bool(jnp.abs(a / b - 1) < 1e-5)
        True
    """
    x = _tokens(x, "tokens (n, d)")
    _check_beta(beta)
    return _energy_tiled(x, beta, max(1, min(x.shape[0], v.check_int("chunk_size", chunk_size, meaning="the tile edge"))))


@functools.partial(jax.jit, static_argnames=("tile",))
def _energy_tiled(x, beta, tile: int):
    n = x.shape[0]
    beta = jnp.asarray(beta, x.dtype)
    lse = tiled_logsumexp(beta * x, x, chunk_size=tile)
    return jnp.exp(jax.nn.logsumexp(lse) - jnp.log(2 * beta * n * n))


@keeps_float64
def interaction_energy_fourier(points: Float[Array, "n *two"], beta, num_modes: int = 64,
                               *, block: int = DEFAULT_BLOCK) -> Float[Array, ""]:
    r"""The interaction energy on the circle through Fourier modes, in O(n K) time and O(block K) memory.

    With :math:`e^{\beta\cos\psi} = \sum_{m\in\mathbb Z} I_m(\beta) e^{im\psi}` and
    :math:`S_m = \sum_j e^{-im\theta_j} = n\hat\mu_m`,

    .. math::  \sum_{i,j} e^{\beta\cos(\theta_i - \theta_j)} = \sum_m I_m(\beta)\,|S_m|^2
               = n^2\Big(I_0(\beta) + 2\sum_{m\ge 1} I_m(\beta)\,|\hat\mu_m|^2\Big),

    so :math:`E_\beta = \frac{e^\beta}{2\beta}\big(\hat I_0 + 2\sum_{m=1}^{K}\hat I_m|\hat\mu_m|^2\big)`
    (:math:`\hat I_m = I_m e^{-\beta}`, :func:`~attnflow.meanfield.kernel_modes`), truncated at
    K = ``num_modes``: the relative error is at most :math:`2\sum_{m>K}\hat I_m/\hat I_0`. When beta
    is a concrete number, a K for which that bound (:func:`attnflow.kernels.fourier.fourier_modes`' tail bound) can
    exceed :math:`10^{-15}` is refused (the message names the K that suffices). Traceable in beta and the angles.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from attnflow.meanfield import interaction_energy_fourier
        >>> from attnflow.observables import interaction_energy
        >>> th = jax.random.uniform(jax.random.key(1), (200,)) * 6.283
        >>> x = jnp.stack([jnp.cos(th), jnp.sin(th)], axis=1)
        >>> a, b = interaction_energy_fourier(th, 3.0), interaction_energy(x, 3.0)
        >>> bool(jnp.abs(a / b - 1) < 1e-5)
        True
    """
    check_points(points)
    _check_beta(beta)
    num_modes = v.check_int("num_modes", num_modes, meaning="the number of Fourier modes kept")
    if v.is_concrete(beta):
        _check_modes_suffice(float(beta), num_modes)
    return _energy_fourier(points, beta, num_modes, v.check_int("block", block, meaning="particles per block"))


@functools.partial(jax.jit, static_argnames=("num_modes", "block"))
def _energy_fourier(points, beta, num_modes: int, block: int):
    theta = _angles(points)
    dtype = theta.dtype
    beta = jnp.asarray(beta, dtype)
    scaled = kernel_modes(beta, num_modes, dtype)
    c = _fourier(theta, None, num_modes, block)
    power = jnp.abs(c[1:]) ** 2
    total = scaled[0] + 2 * jnp.sum(scaled[1:] * power)
    return jnp.exp(beta + jnp.log(total) - jnp.log(2 * beta))


#: the largest relative error of :func:`interaction_energy_fourier`'s truncation at a concrete beta
ENERGY_MODES_TOL = 1e-15


def _check_modes_suffice(beta: float, num_modes: int) -> None:
    r"""Refuse a truncation whose relative error can exceed :data:`ENERGY_MODES_TOL`: the dropped terms are at
    most :math:`2\sum_{m>K}\hat I_m = T_K` against a total of at least :math:`\hat I_0`, so K must be at least
    :func:`attnflow.kernels.fourier.fourier_modes` of beta with ``tol`` :math:`= 2\,\mathrm{tol}\,\hat I_0(\beta)`
    (the one rule for the number of modes)."""
    from scipy.special import ive

    from ..kernels.fourier import fourier_modes

    need = fourier_modes(beta, tol=2 * ENERGY_MODES_TOL * float(ive(0, beta)))
    if num_modes < need:
        raise InputError(f"num_modes = {num_modes} is too few Fourier modes for beta = {beta:g} (the energy's "
                         f"truncation error could exceed {ENERGY_MODES_TOL:g}); pass num_modes={need} or more.")
