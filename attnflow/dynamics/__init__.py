"""Vector fields: one interface (``vector_field(t, y, args)``), many dynamics."""

from .attention_flows import AttentionFlow, DiscreteRescaledFlow, RescaledFlow
from .base import AbstractDynamics, FoldedBatch

__all__ = ["AbstractDynamics", "FoldedBatch", "AttentionFlow", "RescaledFlow", "DiscreteRescaledFlow"]
