"""Vector fields: one interface (``vector_field(t, y, args)``), many dynamics; fields add."""

from ._attention_flows import AttentionFlow, DiscreteRescaledFlow, RescaledFlow, as_weights
from ._base import AbstractAttentionDynamics, AbstractDynamics, FoldedBatch, SumOfFields
from ._feedforward import ACTIVATIONS, FeedForward, TransformerBlock, Wrapped, section12_2_flow
from ._multihead import rescaling_generator
from ._layered import LayerInterpolation, LayeredFlow, TimeVaryingFlow, perturbed_layers
from ._normalised import IdentitySphereFlow, PreNorm, TangentProjected, normalise, sphere_flow
from ._wrapping import AbstractWrapper
from ._hardmax import HardmaxFlow, HardmaxLeaders
from ._ln_schemes import MixNorm, NormalisedGPT, PeriNorm

__all__ = [
    "rescaling_generator",
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
    "IdentitySphereFlow",
    "normalise",
    "HardmaxFlow", "HardmaxLeaders",
    "PeriNorm",
    "MixNorm",
    "NormalisedGPT",
]
