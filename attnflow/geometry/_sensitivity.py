r"""Sensitivities of a scalar functional :math:`F(\theta)` of the dynamics (e.g. a soft
geometry quantity of the final tokens) with respect to any pytree of parameters
(Q, K, V, beta, x0): the two functions that are not one-liners of ``jax.grad`` / ``jax.jvp``.

* :func:`hvp` -- Hessian-vector product :math:`\nabla^2F(\theta)\,v`, forward-over-reverse
  (``jax.jvp`` of ``jax.grad``): one gradient's memory, no Hessian formed. Through a diffrax
  solve the inner gradient must be reverse-mode-able and its JVP defined: use
  ``diffrax.DirectAdjoint`` there, or the Euler stepper (see docs/gradients.md).
* :func:`per_system_grad` -- :math:`\nabla_\theta F_b(\theta_b)` for a batch of systems in one
  call (``jax.vmap`` of ``jax.grad``).
"""

from __future__ import annotations

from typing import Callable

import jax
from jaxtyping import PyTree

from ..errors import InputError
from .._x64 import keeps_float64

__all__ = ["hvp", "per_system_grad"]


def _check_function(f) -> None:
    if not callable(f):
        raise InputError(f"f must be a function of the parameters returning a scalar, got {type(f).__name__}.")


def _check_same_structure(params: PyTree, vector: PyTree) -> None:
    shapes = lambda tree: jax.tree_util.tree_map(jax.numpy.shape, tree)
    if jax.tree_util.tree_structure(params) != jax.tree_util.tree_structure(vector) or shapes(params) != shapes(vector):
        raise InputError(f"vector must have the structure and shapes of params, got {shapes(vector)} for "
                         f"params {shapes(params)}.")


@keeps_float64
def hvp(f: Callable[[PyTree], jax.Array], params: PyTree, vector: PyTree) -> PyTree:
    r""":math:`\nabla^2 f(\theta)\, v` by forward-over-reverse differentiation
    (:math:`\frac{d}{d\epsilon}\nabla f(\theta + \epsilon v)|_{\epsilon=0}`).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.geometry import hvp
        >>> f = lambda x: jnp.sum(x ** 3)
        >>> hvp(f, jnp.array([1.0, 2.0]), jnp.array([1.0, 0.0])).tolist()   # diag(6 x) v
        [6.0, 0.0]
    """
    _check_function(f)
    _check_same_structure(params, vector)
    return jax.jvp(jax.grad(f), (params,), (vector,))[1]


@keeps_float64
def per_system_grad(f: Callable[..., jax.Array], batched: PyTree, *shared, argnums: int = 0) -> PyTree:
    r"""Gradients :math:`\nabla f(\theta_b, \ldots)` of every system b of ``batched`` (leading axis B)
    in one vmapped call; ``shared`` arguments are the same for all systems.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.geometry import per_system_grad
        >>> per_system_grad(lambda v, c: c * jnp.sum(v ** 2), jnp.array([[1.0], [3.0]]), 2.0).tolist()
        [[4.0], [12.0]]
    """
    _check_function(f)
    if isinstance(argnums, bool) or not isinstance(argnums, int) or not 0 <= argnums <= len(shared):
        raise InputError(f"argnums must be an int in 0..{len(shared)} (the argument of f to differentiate), "
                         f"got {argnums!r}.")
    g = jax.grad(f, argnums=argnums)
    return jax.vmap(g, in_axes=(0,) + (None,) * len(shared))(batched, *shared)
