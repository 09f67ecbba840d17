"""Vector fields: one interface (``vector_field(t, y, args)``), many dynamics; fields add."""

from .attention_flows import AttentionFlow, DiscreteRescaledFlow, RescaledFlow, as_weights
from .base import AbstractAttentionDynamics, AbstractDynamics, FoldedBatch, SumOfFields

__all__ = [
    "AbstractDynamics",
    "AbstractAttentionDynamics",
    "SumOfFields",
    "FoldedBatch",
    "AttentionFlow",
    "RescaledFlow",
    "DiscreteRescaledFlow",
    "as_weights",
]
