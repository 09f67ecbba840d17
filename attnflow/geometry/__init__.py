r"""Differentiable cluster geometry: smooth counterparts of the hard diagnostics of
:mod:`attnflow.observables`, and differentiable margins of the paper's hypotheses.

Every soft quantity names the hard one it relaxes, has a temperature :math:`\tau` and a
**fixed** scale (the user's, or the initial configuration's; never the current cloud's, so that
collapsing cannot game it), and converges to the hard quantity as :math:`\tau\to 0`.

* :mod:`.smooth` -- soft min / max (log-sum-exp and Boltzmann-weighted).
* :mod:`.counts` -- effective number of clusters, effective rank of P, soft fraction of clustered pairs.
* :mod:`.distances` -- distance of the tokens to <= 3 parallel hyperplanes {a, 0, b}, to a
  polytope's vertex set, to a codimension-k subspace family; of P to Boolean and to uniform.
* :mod:`.margins` -- Def 4.1 / Def 5.1 margins and :math:`\lambda_{\min}` of sym(Q^T K), with
  exact eigenvalue / eigenvector / projector derivatives (custom JVPs, no host callback).
* :mod:`.sensitivity` -- gradients, JVPs, Hessian-vector products and per-system gradients of
  any such functional.

Example:
    >>> import jax, jax.numpy as jnp
    >>> import attnflow as af
    >>> from attnflow.geometry import soft_cluster_count
    >>> from attnflow.integrate import solve_euler
    >>> x0 = jax.random.normal(jax.random.key(0), (8, 2))
    >>> def count(V):   # soft cluster count after 10 shared-weight layers, at the fixed scale 2
    ...     x = solve_euler(af.AttentionFlow(jnp.eye(2), jnp.eye(2), V), x0, dt=0.2, num_steps=10).ys[-1]
    ...     return soft_cluster_count(x, scale=2.0, temperature=0.1)
    >>> g = jax.grad(count)(jnp.eye(2))
    >>> g.shape
    (2, 2)
"""

from ._counts import soft_cluster_count, soft_pair_fraction, soft_rank
from ._distances import (
    boolean_distance_soft,
    hyperplane_distances,
    hyperplane_levels,
    subspace_distances,
    uniform_distance_soft,
    vertex_distances,
)
from ._margins import (
    GoodTripleMargins,
    distance_to_paranormal,
    eig_sorted,
    good_triple_margins,
    leading_eigenpair_jax,
    qk_lambda_min,
    spectral_projector,
)
from ._sensitivity import hvp, per_system_grad
from ._smooth import boltzmann_max, boltzmann_min, safe_norm, soft_max, soft_min

__all__ = [
    "soft_max", "soft_min", "boltzmann_min", "boltzmann_max", "safe_norm",
    "soft_cluster_count", "soft_rank", "soft_pair_fraction",
    "hyperplane_levels", "hyperplane_distances", "vertex_distances", "subspace_distances",
    "boolean_distance_soft", "uniform_distance_soft",
    "eig_sorted", "leading_eigenpair_jax", "spectral_projector", "GoodTripleMargins",
    "good_triple_margins", "distance_to_paranormal", "qk_lambda_min",
    "hvp", "per_system_grad",
]
