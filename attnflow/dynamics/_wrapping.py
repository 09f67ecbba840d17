r"""Fields built on an inner field (diffrax's ``WrapTerm`` pattern).

A wrapper transforms what an inner field computes (a nonlinearity, a projection, normalised
inputs) and otherwise stands in for it: same picture (``tokens``), same attention matrix,
and the layer stepper's grid is passed on (``on_grid``). Subclasses implement only
``vector_field``; see :class:`~attnflow.dynamics.Wrapped`,
:class:`~attnflow.dynamics.TangentProjected` and
:class:`~attnflow.dynamics.PreNorm`.
"""

from __future__ import annotations

import equinox as eqx

from ..errors import InputError
from ._base import AbstractAttentionDynamics, AbstractDynamics

__all__ = ["AbstractWrapper"]


class AbstractWrapper(AbstractAttentionDynamics):
    """Base of fields wrapping ``inner``: delegates ``tokens``, ``attention`` and ``on_grid``."""

    inner: AbstractDynamics

    def _set_inner(self, inner) -> None:
        if not isinstance(inner, AbstractDynamics):
            raise InputError(f"the wrapped field must be an attnflow dynamics, got {type(inner).__name__}.")
        self.inner = inner

    @property
    def state_dim(self):
        return self.inner.state_dim

    def tokens(self, t, y):
        return self.inner.tokens(t, y)

    def score_count(self, y) -> int:
        return self.inner.score_count(y)

    def attention(self, t, y):
        if not isinstance(self.inner, AbstractAttentionDynamics):
            raise InputError(f"the wrapped field {type(self.inner).__name__} has no attention matrix.")
        return self.inner.attention(t, y)

    def on_grid(self, dt, t0, num_layers):
        return eqx.tree_at(lambda f: f.inner, self, self.inner.on_grid(dt, t0, num_layers))
