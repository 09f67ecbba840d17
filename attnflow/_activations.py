"""The feed-forward layers' pointwise nonlinearities by name, in a module of their own: a job's config check names
them (``activation``) without importing the dynamics (:mod:`attnflow.dynamics` re-exports them)."""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
from jaxtyping import Array

__all__ = ["ACTIVATIONS"]

ACTIVATIONS: dict[str, Callable[[Array], Array]] = {
    "relu": jax.nn.relu,
    "tanh": jnp.tanh,
    "gelu": lambda u: jax.nn.gelu(u, approximate=False),
    "identity": lambda u: u,
}
