r"""One place that builds fields: from a name and options to an :mod:`attnflow.dynamics` module.

Every job (``simulate``, the report, the sweeps, the probes, the extensions) asks this module for
its vector field; none builds its own.
"""

from __future__ import annotations

from .dynamics import AttentionFlow, DiscreteRescaledFlow, RescaledFlow
from .dynamics.layered import LayeredFlow, LayerInterpolation, TimeVaryingFlow
from .errors import InputError
from .weights import AttentionWeights

__all__ = ["make_dynamics", "PICTURES"]

#: the pictures of the paper's flow: raw tokens x, or rescaled z = e^{-tV} x
PICTURES = ("raw", "rescaled")


def make_dynamics(weights, K=None, V=None, *, beta=1.0, picture="raw", method="tsit5", t0=0.0,
                  attention_impl="auto", mask=None, layer_dt=1.0):
    """The dynamics object :func:`simulate` integrates for a picture and method.

    ``weights`` is an :class:`~attnflow.AttentionWeights`, or Q with K and V given. For
    ``method="euler"`` in the rescaled picture this is :class:`DiscreteRescaledFlow`, which
    takes dt from the stepper. Weights with a ``"layer"`` axis (raw picture) give
    :class:`~attnflow.dynamics.LayeredFlow` for the stepper, and for an ODE solver the
    :class:`~attnflow.dynamics.TimeVaryingFlow` through the layer weights placed every
    ``layer_dt`` from ``t0`` (:class:`~attnflow.dynamics.LayerInterpolation`).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow import make_dynamics
        >>> type(make_dynamics(jnp.eye(2), jnp.eye(2), jnp.eye(2), picture="rescaled")).__name__
        'RescaledFlow'
    """
    if picture not in PICTURES:
        raise InputError(f"picture must be one of {PICTURES}, got {picture!r}.")
    args = (weights,) if K is None and V is None else (weights, K, V, beta)
    kw = dict(attention_impl=attention_impl, mask=mask)
    if isinstance(weights, AttentionWeights) and "layer" in weights.axes:
        if picture != "raw":
            raise InputError("weights with a 'layer' axis run in the raw picture only (no common rescaling).")
        if method == "euler":
            return LayeredFlow(weights, **kw)
        return TimeVaryingFlow(LayerInterpolation(weights, layer_dt, t0), **kw)
    if picture == "raw":
        return AttentionFlow(*args, **kw)
    if method == "euler":
        return DiscreteRescaledFlow(*args, **kw)
    return RescaledFlow(*args, t0=t0, **kw)
