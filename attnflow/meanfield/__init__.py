r"""The n -> infinity limit of the sphere flow: measures at any n, distances, the continuity equation.

The tokens of the sphere flow (:func:`attnflow.dynamics.sphere_flow` with Q = K = V = I) have an
empirical measure :math:`\mu` that solves the continuity equation
:math:`\partial_t\mu + \mathrm{div}(\mu\, v[\mu]) = 0`,
:math:`v[\mu](x) = \mathrm{Proj}_{x^\perp}\int e^{\beta\langle x,y\rangle} y\, d\mu(y) / Z[\mu](x)`,
with :math:`Z = \int e^{\beta\langle x,y\rangle}d\mu(y)` (softmax) or 1 (``normalisation="mean"``).
This package holds what that limit needs, in O(n) or O(n log n) wherever the particles enter:

* measures at any n: Fourier coefficients (:func:`fourier_coefficients`), moments, harmonic energies,
  histograms, the interaction energy (tiled, or through Fourier modes on the circle), cluster counts
  by sorted gaps (circle) or occupied cells (:math:`S^2`), and the kernel's modes (:func:`kernel_modes`);
* distances: exact W1 on the circle (particles and grid densities), MMD and sliced W1 on :math:`S^{d-1}`;
* the continuity equation on the circle (:func:`solve_continuity` of a density on :func:`circle_grid`,
  read as a :class:`DensityPath`), Fourier pseudo-spectral in space, RK4 or diffrax in time; its
  right-hand side is the registry's field ``"continuity"`` (:func:`attnflow.fields.build_field`);
* the linear instability of the uniform measure: growth rates of its modes (circle and sphere) and the
  most unstable mode;
* the study job (:func:`run_meanfield`, ``attnflow meanfield``): particles against the PDE (W1 as n grows),
  the growth of the modes of a near-uniform start (:func:`near_uniform_start`) and the clusters that form, on the
  circle or (``d = 3``) on :math:`S^2` (:func:`sphere_start_coefficients`, :func:`near_uniform_sphere_start`).

Example:
    >>> import jax.numpy as jnp
    >>> from attnflow.meanfield import circle_w1_to_density, perturbed_uniform_density, solve_continuity
    >>> rho0 = perturbed_uniform_density(32, 2, 0.2)
    >>> path = solve_continuity(rho0, 4.0, jnp.array([0.0, 2.0]), dt=0.05)
    >>> float(circle_w1_to_density(jnp.array([0.0, jnp.pi]), path.density[-1])) < \
    ...     float(circle_w1_to_density(jnp.array([0.0, jnp.pi]), rho0))     # mode 2 grows: two clusters form
    True
"""

from ._clusters import circle_cluster_count, circle_clusters, circle_gaps, sphere_cluster_count
from ._distances import circle_w1, circle_w1_densities, circle_w1_to_density, sliced_w1, sphere_mmd
from ._kernel import kernel_modes
from ._linear import (critical_noise, fit_growth_rates, growth_rates, most_unstable_mode, noisy_growth_rates,
                      perturbed_uniform_density, sphere_growth_rates, tricritical_beta)
from ._transition import disordered_fluctuations, noisy_transition, order_parameter, particle_transition
from ._sphere_transition import noisy_sphere_transition, sphere_order_parameter
from ._bistable import particle_escape_times, stationary_clustered_state, time_rescaled_noise
from ._branch import noise_barrier, stationary_branch
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
from ._pde import DensityPath, circle_grid, solve_continuity
from ._sphere_pde import (SphereDensityPath, SphereGrid, perturbed_uniform_sphere_density, sample_sphere_density,
                          solve_sphere_continuity, sphere_degree_energies, sphere_density_at,
                          sphere_density_coefficients, sphere_density_on_grid, sphere_empirical_coefficients,
                          sphere_grid)
from ._config import MeanfieldConfig, check_meanfield_config, load_meanfield_config
from ._run import near_uniform_start, run_meanfield, start_density, time_scale
from ._sphere_study import fibonacci_sphere, near_uniform_sphere_start, sphere_start_coefficients

__all__ = [
    # measures at any n
    "circle_angles", "fourier_coefficients", "density_fourier_coefficients", "sphere_moments", "harmonic_energies",
    "circle_histogram", "sphere_histogram", "interaction_energy_tiled", "interaction_energy_fourier",
    "circle_cluster_count", "circle_clusters", "circle_gaps", "sphere_cluster_count", "kernel_modes",
    # distances
    "circle_w1", "circle_w1_to_density", "circle_w1_densities", "sphere_mmd", "sliced_w1",
    # the continuity equation on the circle (its field: attnflow.fields.build_field("continuity", ...))
    "circle_grid", "DensityPath", "solve_continuity",
    # the continuity equation on S^2, spectral in harmonics (its field: build_field("sphere_continuity", ...))
    "sphere_grid", "SphereGrid", "SphereDensityPath", "solve_sphere_continuity", "sphere_density_coefficients",
    "sphere_density_on_grid", "sphere_density_at", "sphere_empirical_coefficients", "sphere_degree_energies",
    "perturbed_uniform_sphere_density", "sample_sphere_density",
    # linear instability of the uniform measure
    "growth_rates", "fit_growth_rates", "most_unstable_mode", "sphere_growth_rates", "perturbed_uniform_density",
    "noisy_growth_rates", "critical_noise", "tricritical_beta", "noisy_transition", "order_parameter",
    "particle_transition", "disordered_fluctuations", "sphere_order_parameter", "noisy_sphere_transition",
    "stationary_clustered_state", "particle_escape_times", "time_rescaled_noise", "stationary_branch", "noise_barrier",
    # the study job (attnflow meanfield)
    "MeanfieldConfig", "load_meanfield_config", "check_meanfield_config", "run_meanfield", "start_density",
    "near_uniform_start", "time_scale", "sphere_start_coefficients", "near_uniform_sphere_start", "fibonacci_sphere",
]
