"""Vector fields: one interface (``vector_field(t, y, args)``), many dynamics; fields add."""

from .attention_flows import AttentionFlow, DiscreteRescaledFlow, RescaledFlow, as_weights
from .base import AbstractAttentionDynamics, AbstractDynamics, FoldedBatch, SumOfFields
from .feedforward import ACTIVATIONS, FeedForward, TransformerBlock, Wrapped, section12_2_flow
from .layered import LayerInterpolation, LayeredFlow, TimeVaryingFlow, perturbed_layers
from .normalised import PreNorm, TangentProjected, normalise, sphere_flow
from .wrapping import AbstractWrapper

__all__ = [
    "AbstractDynamics",
    "AbstractAttentionDynamics",
    "SumOfFields",
    "FoldedBatch",
    "AttentionFlow",
    "RescaledFlow",
    "DiscreteRescaledFlow",
    "as_weights",
    # extensions: feed-forward, layer-varying weights, normalisation
    "AbstractWrapper",
    "Wrapped",
    "FeedForward",
    "TransformerBlock",
    "section12_2_flow",
    "ACTIVATIONS",
    "LayeredFlow",
    "TimeVaryingFlow",
    "LayerInterpolation",
    "perturbed_layers",
    "TangentProjected",
    "PreNorm",
    "sphere_flow",
    "normalise",
]
