r"""The phase transition of noisy tokens on the sphere :math:`S^2`, through the mean-field PDE.

Tokens with independent noise of strength :math:`\sigma` have the McKean-Vlasov limit
:math:`\partial_t\rho = \frac{\sigma^2}2\Delta\rho - \mathrm{div}(\rho\,v[\rho])`
(:func:`~attnflow.meanfield.solve_sphere_continuity` with ``sigma``). The uniform measure loses its linear stability
below :math:`\sigma_c(\beta)` (:func:`~attnflow.meanfield.critical_noise` with d = 3); for the 1/n normalisation the
transition is continuous for :math:`\beta < \beta^*(3) = 1.8162` (:func:`~attnflow.meanfield.tricritical_beta`) and
discontinuous above it, with a range of :math:`\sigma > \sigma_c` where a clustered state is stable too.
:func:`noisy_sphere_transition` measures it as :func:`~attnflow.meanfield.noisy_transition` does on the circle: the
order parameter :math:`r = |\int x\,\rho(x)\,dx|` (:func:`sphere_order_parameter`) at a long time, from a nearly
uniform start and from a clustered one, for each :math:`\sigma` of a grid, read by
:func:`attnflow.meanfield._transition.read_transition`.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from scipy.special import ive

from .. import _validate as v
from ._linear import critical_noise, tricritical_beta
from ._sphere_continuity import (
    FOUR_PI,
    check_degree,
    num_coefficients,
)
from ._sphere_pde import (
    _check_coefficients,
    _check_step,
    _field,
    perturbed_uniform_sphere_density,
    solve_sphere_continuity,
)
from ._transition import check_transition_args, end_states, read_transition

__all__ = ["noisy_sphere_transition", "sphere_order_parameter"]

#: degrees beyond the band limit used to measure the part of the von Mises-Fisher start that is discarded
_TAIL = 60


def sphere_order_parameter(coefficients) -> jax.Array:
    r""":math:`r = |\int_{S^2} x\,\rho(x)\,dx|` of densities given by real harmonic coefficients (..., (L+1)^2):
    0 for the uniform density, 1 for a point mass.

    Only degree 1 contributes. The degree-1 harmonics of mean square 1 are :math:`\sqrt3` times the coordinates, and
    :math:`\int x_j x_k\,dx = \frac{4\pi}3\delta_{jk}`, so :math:`\int x_k\,\rho = \frac{4\pi}{\sqrt3}a_{1m(k)}` and
    :math:`r = \frac{4\pi}{\sqrt3}\big(\sum_m a_{1m}^2\big)^{1/2} = \sqrt{E_1/3}` with :math:`E_1` the degree-1
    energy of :func:`~attnflow.meanfield.sphere_degree_energies`.

    Example:
        >>> from attnflow.meanfield import perturbed_uniform_sphere_density, sphere_order_parameter
        >>> a = perturbed_uniform_sphere_density(2, 1, 0.3)        # (1 + 0.3 sqrt(3) z) / (4 pi): r = 0.3 / sqrt 3
        >>> round(float(sphere_order_parameter(a)), 6), round(0.3 / 3 ** 0.5, 6)
        (0.173205, 0.173205)
    """
    coefficients, _ = _check_coefficients(coefficients)
    return _order(coefficients)


def _order(coefficients):
    """:func:`sphere_order_parameter` without the input checks (a non-finite solve gives NaN, not an error)."""
    return FOUR_PI / math.sqrt(3.0) * jnp.sqrt(jnp.sum(coefficients[..., 1:4] ** 2, axis=-1))


def _vmf_coefficients(kappa: float, degree: int) -> np.ndarray:
    r"""The zonal coefficients of :math:`\rho = \frac{\kappa}{4\pi\sinh\kappa}e^{\kappa z}` to ``degree``:
    :math:`a_{l0} = \frac{\sqrt{2l+1}}{4\pi}\,\frac{I_{l+1/2}(\kappa)}{I_{1/2}(\kappa)}` (Funk-Hecke with the
    generating function :math:`e^{\kappa t} = \sum_l (2l+1)i_l(\kappa)P_l(t)`), in float64 (exponentially scaled
    Bessel functions: no overflow)."""
    out = np.zeros(num_coefficients(degree))
    ls = np.arange(degree + 1)
    ratio = ive(ls + 0.5, kappa) / ive(0.5, kappa)
    out[ls * ls + ls] = np.sqrt(2 * ls + 1) * ratio / FOUR_PI
    return out


def _plan(beta, normalisation: str, degree: int, t1: float, dt: float, saves: int, eps: float, kappa: float):
    """The two starts (float64 coefficients of degree L), the relative L2 norm of the clustered start discarded
    above L, the save times and the RK4 steps between saves; the step checked against the scheme's stability bound
    for both starts (one sentence naming dt, before any solve)."""
    uniform = perturbed_uniform_sphere_density(degree, 1, eps, dtype=jnp.float64)
    full = _vmf_coefficients(kappa, degree + _TAIL)
    kept = num_coefficients(degree)
    discarded = float(np.sqrt(np.sum(full[kept:] ** 2) / np.sum(full ** 2)))
    clustered = jnp.asarray(full[:kept], jnp.float64)
    ts = jnp.concatenate([jnp.linspace(0.0, 0.9 * t1, saves), jnp.array([t1])])
    longest = float(jnp.max(jnp.diff(ts)))
    steps = max(1, math.ceil(longest / dt - 1e-9))
    # the diffusion is integrated exactly (Lawson RK4): only the transport limits the step
    field = _field(jnp.asarray(beta, jnp.float64), degree, normalisation, 0.0, jnp.float64)
    for start in (uniform, clustered):
        _check_step(field, start, longest / steps, "dt")
    return uniform, clustered, discarded, ts, steps


def noisy_sphere_transition(beta, sigmas, *, normalisation: str = "mean", degree: int = 10, t1: float = 100.0,
                            dt: float = 0.02, saves: int = 5, eps: float = 0.02, kappa: float = 4.0) -> dict:
    r"""The order parameter :math:`r = |\int x\rho|` at ``t1`` against the noise :math:`\sigma` on :math:`S^2`,
    from a nearly uniform start :math:`(1 + \varepsilon\sqrt3 z)/4\pi` (r = :math:`\varepsilon/\sqrt3`) and from a
    clustered one, the von Mises-Fisher density :math:`\propto e^{\kappa z}` (r = :math:`\coth\kappa - 1/\kappa`)
    projected to degree L, through the noisy continuity equation (spectral to degree ``degree``, integrating-factor
    RK4 of steps at most ``dt``).

    Returns a dict with the keys of :func:`~attnflow.meanfield.noisy_transition`: ``beta``, ``normalisation``,
    ``sigma`` (S,), ``from_uniform`` and ``from_clustered`` (S,) the order parameter at ``t1`` (NaN where the
    density went non-finite, listed in ``nonfinite``), ``drift`` (S, 2) its change over the last tenth of the run,
    ``min_density`` (S, 2) the smallest density of each run (a spectral scheme does not keep it positive),
    ``sigma_c`` (the closed form for d = 3), ``beta_star`` (:math:`\beta^*(3)`), ``threshold``, ``bistable`` and
    ``nonfinite`` (:func:`~attnflow.meanfield._transition.read_transition`), and ``discarded``, the relative
    :math:`L^2` norm of the clustered start above degree L (removed before the solve).

    Example:
        >>> from attnflow.meanfield import noisy_sphere_transition
        >>> out = noisy_sphere_transition(1.2, [0.6, 1.1], degree=4, t1=30.0, dt=0.1)
        >>> [round(float(r), 2) for r in out["from_uniform"]], out["threshold"]["contains_sigma_c"]
        ([0.97, 0.0], True)
    """
    normalisation, sigmas, t1, dt, saves = check_transition_args(beta, sigmas, normalisation, t1, dt, saves)
    degree = check_degree(degree)
    eps = v.check_number("eps", eps, "the relative amplitude of the nearly uniform start's degree-1 perturbation",
                         low=0, high=1)
    kappa = v.check_number("kappa", kappa, "the concentration of the clustered (von Mises-Fisher) start", low=0)
    with jax.enable_x64(True):
        uniform, clustered, discarded, ts, steps = _plan(beta, normalisation, degree, t1, dt, saves, eps, kappa)
        ends, drift, low = end_states(
            sigmas, (uniform, clustered),
            lambda start, sigma: solve_sphere_continuity(start, beta, ts, normalisation=normalisation,
                                                         steps_per_save=steps, sigma=sigma),
            lambda path: _order(path.coefficients))
    sigma_c = float(critical_noise(beta, 3, normalisation))
    reading = read_transition(sigmas, ends[:, 0], ends[:, 1], drift, sigma_c)
    return {"beta": float(beta), "normalisation": normalisation, "sigma": sigmas, "from_uniform": ends[:, 0],
            "from_clustered": ends[:, 1], "drift": drift, "min_density": low, "sigma_c": sigma_c,
            "beta_star": tricritical_beta(3), "discarded": discarded, **reading}
