"""The Euler layer's two updates, :math:`y + dy` and its projection onto the unit sphere, in a module of their own:
the fields registry (:mod:`attnflow.fields`) names a field's update, and a job's config check reads it, without
importing the integrators (:mod:`attnflow.integrate` re-exports both)."""

from __future__ import annotations

import jax.numpy as jnp
from jaxtyping import Array, Float

__all__ = ["plain_shift", "sphere_shift"]


def plain_shift(y: Float[Array, "n d"], dy: Float[Array, "n d"]) -> Float[Array, "n d"]:
    """The flat-space update ``y + dy``."""
    return y + dy


def sphere_shift(y: Float[Array, "n d"], dy: Float[Array, "n d"]) -> Float[Array, "n d"]:
    r"""Projected step on the unit sphere: :math:`y_i \leftarrow (y_i + dy_i)/\|y_i + dy_i\|`.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.integrate import sphere_shift
        >>> [round(float(a), 4) for a in sphere_shift(jnp.array([[1.0, 0.0]]), jnp.array([[0.0, 1.0]]))[0]]
        [0.7071, 0.7071]
    """
    out = y + dy
    # the squared norm as a sum of columns for small d: XLA:CPU runs a norm over a trailing axis of 2 or 3
    # several times slower inside a fused step (10^6 tokens)
    d = out.shape[-1]
    squares = (sum(out[..., k:k + 1] ** 2 for k in range(1, d)) + out[..., :1] ** 2 if d <= 8
               else jnp.sum(out * out, axis=-1, keepdims=True))
    return out / jnp.sqrt(squares)
