r"""The mean-field study's starts on :math:`S^2` (``d = 3`` in ``configs/meanfield.toml``).

* the smooth start of the convergence study, the zonal analogue of the circle's
  :math:`(1 + \sum_k a_k\cos k(\theta - \phi_k))/2\pi`:
  :math:`\rho_0(x) = (1 + \sum_k a_k P_{l_k}(\langle x, u_k\rangle))/4\pi`, :math:`P_l` the Legendre polynomial and
  :math:`u_k = (\sin\phi_k, 0, \cos\phi_k)`; by the addition theorem
  :math:`P_l(\langle x, u\rangle) = \frac1{2l+1}\sum_m Y_{lm}(x)Y_{lm}(u)` (real harmonics of mean square 1) its
  coefficients are exact, and :math:`\sum_k|a_k| < 1` keeps it positive (:math:`|P_l| \le 1`);
* the near-uniform start of the growth study (:func:`near_uniform_sphere_start`): a randomly rotated Fibonacci
  lattice (its low-degree energies are far below those of independent draws, about :math:`(2l+1)/n`), each point
  moved along the surface gradient of :math:`h = \sum_{l \ge 1} g_{lm}Y_{lm}/(l(l+1))`: the uniform measure pushed
  by :math:`x \mapsto x + \nabla h` has the density :math:`(1 - \Delta h)/4\pi = (1 + \sum g_{lm}Y_{lm})/4\pi` to first
  order in g (:math:`\Delta Y_l = -l(l+1)Y_l`), the start the PDE is given.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from .. import _validate as v
from ..errors import InputError

__all__ = ["sphere_start_coefficients", "fibonacci_sphere", "near_uniform_sphere_start"]

FOUR_PI = 4 * math.pi


def _harmonics64(x: np.ndarray, degree: int) -> np.ndarray:
    from ..kernels.sphere import sphere_harmonics

    with jax.enable_x64(True):
        return np.asarray(sphere_harmonics(jnp.asarray(x, jnp.float64), degree))


def sphere_start_coefficients(degree: int, modes, amplitudes, phases) -> np.ndarray:
    r"""The harmonic coefficients ((L+1)^2,) float64, in the layout of :func:`~attnflow.meanfield.sphere_grid`'s
    densities, of :math:`(1 + \sum_k a_k P_{l_k}(\langle x, u_k\rangle))/4\pi` with
    :math:`u_k = (\sin\phi_k, 0, \cos\phi_k)` (module docstring): ``modes`` the degrees :math:`l_k \le L`,
    ``amplitudes`` :math:`a_k`, ``phases`` :math:`\phi_k`.

    Example:
        >>> import numpy as np
        >>> from attnflow.meanfield import sphere_start_coefficients
        >>> a = sphere_start_coefficients(2, [1], [0.5], [0.0])      # (1 + 0.5 z) / (4 pi) = (1 + (0.5/sqrt 3) Y_10)
        >>> np.round(a * 4 * np.pi, 6).tolist()
        [1.0, 0.0, 0.288675, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    """
    degree = v.check_int("degree", degree, 0, "the highest harmonic degree L")
    modes = [v.check_int("modes", int(k), 1, "the degrees of the start's zonal terms") for k in modes]
    if len(modes) != len(amplitudes) or len(modes) != len(phases):
        raise InputError(f"modes, amplitudes and phases must be as long as each other, got {len(modes)}, "
                         f"{len(amplitudes)} and {len(phases)}.")
    if modes and max(modes) > degree:
        raise InputError(f"the start's degrees must be at most degree = {degree}, got {max(modes)}.")
    a = np.zeros((degree + 1) ** 2)
    a[0] = 1.0
    for k, amp, phase in zip(modes, amplitudes, phases):
        u = np.array([[math.sin(phase), 0.0, math.cos(phase)]])
        y = _harmonics64(u, degree)[0]
        rows = slice(k * k, (k + 1) ** 2)
        a[rows] += float(amp) * y[rows] / (2 * k + 1)
    return a / FOUR_PI


def fibonacci_sphere(n: int) -> np.ndarray:
    r"""The Fibonacci lattice (n, 3) float64: :math:`z_i = 1 - (2i+1)/n`, azimuths :math:`\pi(1+\sqrt5)(i+1/2)`.
    Its low-degree energies are far below the :math:`(2l+1)/n` of n independent uniform points (at n = 16384 the
    amplitudes :math:`\sqrt{E_l}` of degrees 1..8 are below 1.2e-5).

    Example:
        >>> import numpy as np
        >>> from attnflow.meanfield import fibonacci_sphere
        >>> x = fibonacci_sphere(1000)
        >>> x.shape, bool(np.allclose(np.linalg.norm(x, axis=1), 1)), bool(np.abs(x.mean(0)).max() < 1e-3)
        ((1000, 3), True, True)
    """
    n = v.check_int("n", n, 1, "the number of points")
    i = np.arange(n) + 0.5
    z = 1 - 2 * i / n
    phi = math.pi * (1 + math.sqrt(5)) * i
    r = np.sqrt(np.maximum(1 - z * z, 0))
    return np.stack([r * np.cos(phi), r * np.sin(phi), z], axis=1)


def _random_rotation(rng: np.random.Generator) -> np.ndarray:
    q, r = np.linalg.qr(rng.normal(size=(3, 3)))
    q = q * np.sign(np.diag(r))
    return q if np.linalg.det(q) > 0 else -q


def near_uniform_sphere_start(n: int, max_degree: int, epsilon: float, rng: np.random.Generator
                              ) -> tuple[np.ndarray, np.ndarray]:
    r"""n points (n, 3) float64 whose empirical measure is :math:`(1 + \sum_{1 \le l \le L}\sum_m g_{lm}Y_{lm})/4\pi`
    to first order in g, and the relative coefficients g ((L+1)^2,), :math:`g_{00} = 0`: every degree
    :math:`1 \le l \le L` = ``max_degree`` has amplitude :math:`\sqrt{\sum_m g_{lm}^2} = \varepsilon/2` in a random
    direction of its (2l+1)-dimensional space (module docstring: a rotated Fibonacci lattice moved along a gradient).
    The PDE's matching start is :math:`(e_{00} + g)/4\pi`.

    Example:
        >>> import numpy as np
        >>> from attnflow.meanfield import sphere_degree_energies, sphere_empirical_coefficients
        >>> from attnflow.meanfield import near_uniform_sphere_start
        >>> x, g = near_uniform_sphere_start(16384, 3, 1e-3, np.random.default_rng(0))
        >>> e = np.asarray(sphere_degree_energies(sphere_empirical_coefficients(x, 3)))
        >>> np.round(np.sqrt(e[1:]) * 1e3, 2).tolist()      # epsilon / 2 = 0.5e-3 in every degree
        [0.5, 0.5, 0.5]
    """
    n = v.check_int("n", n, 2, "the number of points")
    L = v.check_int("max_degree", max_degree, 1, "the highest perturbed degree")
    eps = v.check_number("epsilon", epsilon, "the perturbation's amplitude, in (0, 1)", low=0, high=1)
    g = np.zeros((L + 1) ** 2)
    for l in range(1, L + 1):
        direction = rng.normal(size=2 * l + 1)
        g[l * l:(l + 1) ** 2] = eps / 2 * direction / np.linalg.norm(direction)
    x = fibonacci_sphere(n) @ _random_rotation(rng).T
    scale = np.zeros_like(g)
    l_of = np.floor(np.sqrt(np.arange(g.size))).astype(int)
    scale[1:] = g[1:] / (l_of[1:] * (l_of[1:] + 1))
    from ..kernels.sphere import sphere_harmonics

    with jax.enable_x64(True):
        c = jnp.asarray(scale)
        grad = np.asarray(jax.grad(lambda y: jnp.sum(sphere_harmonics(y, L) @ c))(jnp.asarray(x)))
    tangent = grad - np.sum(grad * x, axis=1, keepdims=True) * x
    y = x + tangent
    return y / np.linalg.norm(y, axis=1, keepdims=True), g
