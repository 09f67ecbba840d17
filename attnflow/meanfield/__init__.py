r"""The n -> infinity limit of the sphere flow: measures at any n, distances, the continuity equation.

The tokens of the sphere flow (:func:`attnflow.dynamics.sphere_flow` with Q = K = V = I) have an
empirical measure :math:`\mu` that solves the continuity equation
:math:`\partial_t\mu + \mathrm{div}(\mu\, v[\mu]) = 0`,
:math:`v[\mu](x) = \mathrm{Proj}_{x^\perp}\int e^{\beta\langle x,y\rangle} y\, d\mu(y) / Z[\mu](x)`,
with :math:`Z = \int e^{\beta\langle x,y\rangle}d\mu(y)` (softmax) or 1 (``normalisation="mean"``).
This package holds what that limit needs, in O(n) or O(n log n) wherever the particles enter:

* :mod:`._measures`, :mod:`._clusters` -- Fourier coefficients, moments, harmonic energies,
  histograms, the interaction energy (tiled, or through Fourier modes on the circle), cluster
  counts by sorted gaps (circle) or occupied cells (:math:`S^2`);
* :mod:`._distances` -- exact W1 on the circle (particles and grid densities), MMD and sliced
  W1 on :math:`S^{d-1}`;
* :mod:`._pde` -- the continuity equation on the circle, Fourier pseudo-spectral in space, RK4 or
  diffrax in time;
* :mod:`._linear` -- growth rates of the modes of the uniform measure (circle and sphere), the most
  unstable mode, and their measurement;
* :mod:`._study` -- particles against the PDE: W1 between them as n grows.

Example:
    >>> import jax.numpy as jnp
    >>> from attnflow.meanfield import circle_w1_to_density, perturbed_uniform_density, solve_continuity
    >>> rho0 = perturbed_uniform_density(32, 2, 0.2)
    >>> path = solve_continuity(rho0, 4.0, jnp.array([0.0, 2.0]), dt=0.05)
    >>> float(circle_w1_to_density(jnp.array([0.0, jnp.pi]), path.density[-1])) < \
    ...     float(circle_w1_to_density(jnp.array([0.0, jnp.pi]), rho0))     # mode 2 grows: two clusters form
    True
"""

from ._clusters import circle_cluster_count, circle_gaps, grid_components, sphere_cluster_count
from ._distances import circle_w1, circle_w1_densities, circle_w1_to_density, sliced_w1, sphere_mmd
from ._kernel import kernel_modes, quadrature_nodes
from ._linear import (
    fit_growth_rates,
    growth_rates,
    most_unstable_mode,
    perturbed_uniform_angles,
    perturbed_uniform_density,
    sphere_growth_rates,
    sphere_kernel_modes,
)
from ._measures import (
    circle_angles,
    circle_histogram,
    density_fourier_coefficients,
    fourier_coefficients,
    harmonic_energies,
    interaction_energy_fourier,
    interaction_energy_tiled,
    sphere_histogram,
    sphere_moments,
)
from ._study import circle_solver, draw_from_density, fit_power_law, particles_vs_pde
from ._pde import (
    NORMALISATIONS,
    CircleContinuity,
    DensityPath,
    circle_grid,
    circle_velocity,
    interpolate_density,
    solve_continuity,
)
from ._config import MeanfieldConfig, check_meanfield_config, load_meanfield_config
from ._run import near_uniform_start, run_meanfield, start_density, time_scale

__all__ = [
    # measures at any n
    "circle_angles", "fourier_coefficients", "density_fourier_coefficients", "sphere_moments", "harmonic_energies",
    "circle_histogram", "sphere_histogram", "interaction_energy_tiled", "interaction_energy_fourier",
    "circle_cluster_count", "circle_gaps", "sphere_cluster_count", "grid_components", "kernel_modes", "quadrature_nodes",
    # distances
    "circle_w1", "circle_w1_to_density", "circle_w1_densities", "sphere_mmd", "sliced_w1",
    # the continuity equation on the circle
    "NORMALISATIONS", "circle_grid", "interpolate_density", "CircleContinuity", "circle_velocity", "DensityPath",
    "solve_continuity",
    # linear instability of the uniform measure
    "growth_rates", "most_unstable_mode", "sphere_kernel_modes", "sphere_growth_rates", "perturbed_uniform_angles",
    "perturbed_uniform_density", "fit_growth_rates",
    # particles against the limit
    "circle_solver", "draw_from_density", "particles_vs_pde", "fit_power_law",
    # the study job (attnflow meanfield)
    "MeanfieldConfig", "load_meanfield_config", "check_meanfield_config", "run_meanfield", "start_density",
    "near_uniform_start", "time_scale",
]
