r"""One place that builds fields: from a name and options to an :mod:`attnflow.dynamics` module.

Every job (``simulate``, the report, the sweeps, the probes, the extensions) asks this module for
its vector field; none builds its own. :func:`build_field` looks the name up in :data:`FIELDS`
and calls the entry's builder with one :class:`~attnflow.AttentionWeights` (made from Q, K, V
and beta when matrices are given) and the options; the result is an ordinary equinox module,
so building is traceable (the sweep builds one field per system inside ``vmap``).

The registered names (pictures: the default first; every raw run is read in z = R^{-L} x at the
end except the sphere's, whose state is read; the Euler shift is plain except on the sphere):

* ``attention`` (raw, rescaled): ``AttentionFlow`` (raw); ``DiscreteRescaledFlow`` (rescaled,
  Euler layers: exact, Remark 3.4); ``RescaledFlow`` (rescaled, ODE). Weights with a ``"layer"``
  axis (raw): ``LayeredFlow`` (Euler) or ``TimeVaryingFlow`` through ``LayerInterpolation`` (ODE).
* ``causal`` (raw, rescaled): ``attention`` with ``mask="causal"`` (token i attends to j <= i).
* ``multihead`` (raw): ``AttentionFlow`` of weights with a ``"head"`` axis,
  :math:`\dot x_i = \sum_h\sum_j P^h_{ij} V_h x_j`.
* ``feedforward`` (rescaled, raw): Section 12.2 with options ``W``, ``activation``, ``bias``;
  rescaled: ``section12_2_flow``, :math:`\dot z_i = W\sigma(V\sum_j P_{ij}(z_j - z_i))`, P from
  :math:`e^{tV}z`; raw: ``Wrapped(AttentionFlow)``, :math:`\dot x_i = W\sigma(\sum_j P_{ij} V x_j)`.
* ``layered`` (raw): ``attention`` of ``perturbed_layers(w, num_layers, epsilon, key)``,
  :math:`X_l = X + \epsilon\|X\|_F G_l/\|G_l\|_F`.
* ``sphere`` (raw, ``sphere_shift``): ``sphere_flow``, post-LN attention on the unit sphere (option
  ``normalisation``); ``identity_weights=True`` (Q = K = V = I given): ``IdentitySphereFlow``, the same
  field without the projections, whose ``vector_field_with_aux`` also returns the softmax row sums (the
  energy's by-product), and whose 1/n field may be divided by :math:`s = e^{\text{log\_scale}}`; with
  ``attention_impl="harmonic"`` and ``harmonic_max_score`` (an upper bound of beta) it takes the sphere path for a
  traced beta as well.
* ``continuity`` (raw, state read as it is): the n -> infinity limit of ``sphere`` with Q = K = V = I on the
  circle (the 2 x 2 identity given, with beta), the right-hand side
  :math:`-\partial_\theta(\rho\, v[\rho])` of the continuity equation on a density of ``num_points`` grid
  points (options ``normalisation``, ``dealias``, ``diffusion`` :math:`D = \sigma^2/2` of noisy tokens, adding
  :math:`D\,\partial_\theta^2\rho`; :func:`attnflow.meanfield.solve_continuity` integrates it).
* ``sphere_continuity`` (raw, state read as it is): the same limit on the sphere :math:`S^2` (the 3 x 3 identity
  given, with beta), the right-hand side of the continuity equation on the real harmonic coefficients of a density
  up to degree ``degree`` (options ``normalisation``, ``diffusion`` :math:`D = \sigma^2/2`, adding :math:`D\Delta\rho`;
  :func:`attnflow.meanfield.solve_sphere_continuity` integrates it).
* ``prenorm`` (raw): ``PreNorm(AttentionFlow)``, :math:`\dot x_i = \sum_j P_{ij}(N(x)) V N(x_j)`.
* ``periln`` (raw): ``PeriNorm(AttentionFlow)``, :math:`\dot x_i = N(\sum_j P_{ij}(N(x)) V N(x_j))` (Peri-LN: the
  output normalised too).
* ``mixln`` (raw): ``MixNorm(AttentionFlow, switch)``, post-LN (tangent) before the time ``switch``, pre-LN after.
* ``ngpt`` (raw, ``sphere_shift``): ``NormalisedGPT(AttentionFlow, alpha)``,
  :math:`\dot x_i = \alpha\,\mathrm{Proj}_{x_i^\perp} N(\sum_j P_{ij} V x_j)` (option ``alpha``, default 1).
* ``mean`` (raw): ``AttentionFlow(normalisation="mean")``, :math:`\frac1n` instead of the softmax
  denominator.
* ``block`` (raw): ``TransformerBlock(AttentionFlow, FeedForward(W1, W2, b1, b2, activation))``.

An entry (:class:`FieldEntry`) also says how the Euler stepper moves its tokens (``shift``:
:func:`~attnflow.integrate.plain_shift` or :func:`~attnflow.integrate.sphere_shift`) and whether
a run in its raw picture is read in the rescaled coordinates at the end,
:math:`z = R^{-L}x` with :math:`R = I + \Delta t V` (:func:`rescaled_from_raw`,
:func:`layer_matrix`; :meth:`FieldEntry.steps_raw`).

Adding a dynamics touches its own module in :mod:`attnflow.dynamics` and one entry here, e.g.::

    @register_field("damped", pictures=("raw",))
    def _damped(w, how, *, gamma=0.5):  # keyword arguments are the field's options
        return AttentionFlow(w, **how.attention) + Damping(gamma)

after which ``build_field("damped", Q, K, V, gamma=0.1)`` works in every job (a job that offers a
choice of fields, like the sweep's ``dynamics`` key, lists the names it runs).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from . import _validate as v
from ._shifts import plain_shift, sphere_shift
from .errors import InputError

if TYPE_CHECKING:
    from .dynamics import AbstractDynamics
    from ._weights import AttentionWeights

__all__ = ["FIELDS", "PICTURES", "STEPPERS", "FieldEntry", "FieldContext", "register_field", "field_entry",
           "build_field", "make_dynamics", "layer_matrix", "rescaled_from_raw"]

#: the pictures of the paper's flow: raw tokens x, or rescaled z = e^{-tV} x
PICTURES = ("raw", "rescaled")
#: what integrates the field: the Euler layer stepper or an ODE solver (some fields differ: the exact
#: discrete rescaling exists only on the layer grid, per-layer weights are interpolated for a solver)
STEPPERS = ("euler", "ode")


@dataclass(frozen=True)
class FieldContext:
    """What every builder is told besides its options: the picture, the integrator, and the attention's
    implementation and mask (``how.attention`` is the keyword arguments of the attention flows)."""

    picture: str
    stepper: str
    attention_impl: str = "auto"
    mask: Any = None
    #: the Fourier path's bound on the score scale (``AttentionFlow(fourier_max_score=...)``), when set
    fourier_max_score: float | None = None
    #: where the tokens sit (ALiBi, rotary: ``AttentionFlow(positions=...)``), when set
    positions: Any = None

    @property
    def attention(self) -> dict:
        extra = {} if self.fourier_max_score is None else {"fourier_max_score": self.fourier_max_score}
        if self.positions is not None:
            extra["positions"] = self.positions
        return {"attention_impl": self.attention_impl, "mask": self.mask, **extra}


@dataclass(frozen=True)
class FieldEntry:
    """One registered field: its builder ``build(weights, how, **options)`` and what a run of it needs.

    ``pictures``: the pictures it runs in (the first is the default); ``shift``: the Euler stepper's
    update (plain, or projected onto the sphere); ``rescaled_reading``: whether a run in the raw picture
    is read in :math:`z = R^{-L}x` at the end (False where the state itself is read: the sphere);
    ``weight_axes``: the axes of weights made from matrices (``("head",)`` for several heads);
    ``options``: the builder's keyword arguments and their defaults (:data:`REQUIRED` for none).
    """

    name: str
    build: Callable[..., AbstractDynamics]
    pictures: tuple[str, ...] = ("raw",)
    shift: Callable = plain_shift
    rescaled_reading: bool = True
    weight_axes: tuple[str, ...] = ()
    options: dict = field(default_factory=dict)

    def steps_raw(self, picture: str | None = None) -> bool:
        """Whether a run in ``picture`` (default: the entry's first) steps raw tokens and is read in
        :math:`z = R^{-L}x` at the end.

        Example:
            >>> from attnflow.fields import field_entry
            >>> field_entry("feedforward").steps_raw("raw"), field_entry("sphere").steps_raw()
            (True, False)
        """
        return (picture or self.pictures[0]) == "raw" and self.rescaled_reading


#: marks an option without a default (it must be given)
REQUIRED = inspect.Parameter.empty
#: the registry: name -> :class:`FieldEntry` (filled by :func:`register_field`)
FIELDS: dict[str, FieldEntry] = {}


def register_field(name: str, *, pictures: tuple[str, ...] = ("raw",), shift: Callable = plain_shift,
                   rescaled_reading: bool = True, weight_axes: tuple[str, ...] = ()):
    """Decorator: register ``build(weights, how, **options)`` under ``name``; its keyword-only
    arguments are the field's options (their defaults the defaults). Returns the builder unchanged."""

    def add(build):
        params = list(inspect.signature(build).parameters.values())[2:]
        FIELDS[name] = FieldEntry(name, build, tuple(pictures), shift, rescaled_reading, tuple(weight_axes),
                                  {p.name: p.default for p in params})
        return build

    return add


def field_entry(name: str) -> FieldEntry:
    """The registry entry of ``name`` (an :class:`InputError` sentence for an unknown one).

    Example:
        >>> from attnflow.fields import field_entry
        >>> field_entry("sphere").shift.__name__
        'sphere_shift'
    """
    if name not in FIELDS:
        raise InputError(f"field must be one of {tuple(FIELDS)}, got {name!r}.")
    return FIELDS[name]


def _as_weights(weights, K, V, beta, axes) -> AttentionWeights:
    from .dynamics import as_weights
    from ._weights import AttentionWeights

    if isinstance(weights, AttentionWeights) or not axes:
        return as_weights(weights, K, V, beta)
    if K is None or V is None:
        return as_weights(weights, K, V, beta)  # its sentence for missing matrices
    return AttentionWeights(weights, K, V, beta, axes=axes)


def build_field(name: str, weights, K=None, V=None, *, beta=1.0, picture: str | None = None,
                stepper: str = "euler", attention_impl: str = "auto", mask=None, fourier_max_score=None,
                positions=None, **options) -> AbstractDynamics:
    r"""The field ``name`` (:data:`FIELDS`) for the weights and options.

    ``weights`` is an :class:`~attnflow.AttentionWeights`, or Q with K and V given (with a leading
    head axis for ``multihead``). ``picture`` defaults to the entry's first; ``stepper`` says what
    integrates it (``"euler"``: :class:`~attnflow.integrate.EulerStepper` with ``FIELDS[name].shift``,
    which binds the layer grid; ``"ode"``: a solver). Unknown names, pictures and options are refused
    with one :class:`InputError` sentence. Traceable (build it inside ``jit`` / ``vmap``).
    ``fourier_max_score`` bounds the score scale for ``attention_impl="fourier"`` (see
    :class:`~attnflow.AttentionFlow`); ``positions`` (ALiBi, rotary) is passed to the attention flows
    (:class:`~attnflow.kernels.Positions`), and fields without an attention matrix of tokens refuse it.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from attnflow.fields import build_field
        >>> I = jnp.eye(2)
        >>> type(build_field("attention", I, I, I, picture="rescaled")).__name__
        'DiscreteRescaledFlow'
        >>> f = build_field("feedforward", I, I, I, picture="raw", activation="tanh")
        >>> f(0.0, jax.random.normal(jax.random.key(0), (4, 2))).shape
        (4, 2)
    """
    entry = field_entry(name)
    picture = entry.pictures[0] if picture is None else picture
    if picture not in entry.pictures:
        raise InputError(f"field {name!r} runs in the picture(s) {entry.pictures}, got picture {picture!r}.")
    if stepper not in STEPPERS:
        raise InputError(f"stepper must be one of {STEPPERS}, got {stepper!r}.")
    unknown = [k for k in options if k not in entry.options]
    if unknown:
        raise InputError(f"field {name!r} takes no option {unknown[0]!r}; its options are {tuple(entry.options)}.")
    missing = [k for k, default in entry.options.items() if default is REQUIRED and k not in options]
    if missing:
        raise InputError(f"field {name!r} needs the option {missing[0]!r} (its options are {tuple(entry.options)}).")
    w = _as_weights(weights, K, V, beta, entry.weight_axes)
    return entry.build(w, FieldContext(picture, stepper, attention_impl, mask, fourier_max_score, positions), **options)


def make_dynamics(weights, K=None, V=None, *, beta=1.0, picture="raw", method="tsit5", t0=0.0,
                  attention_impl="auto", mask=None, layer_dt=1.0, fourier_max_score=None, positions=None):
    """The dynamics object :func:`simulate` integrates for a picture and method (``build_field("attention", ...)``).

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
    return build_field("attention", weights, K, V, beta=beta, picture=picture,
                       stepper="euler" if method == "euler" else "ode", attention_impl=attention_impl, mask=mask,
                       fourier_max_score=fourier_max_score, positions=positions, t0=t0, layer_dt=layer_dt)


def layer_matrix(V: Float[Array, "*H d d"], dt) -> Float[Array, "d d"]:
    r"""One layer's linear part :math:`R = I + \Delta t\, S` (S = V, or :math:`\sum_h V_h` for a head axis).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.fields import layer_matrix
        >>> layer_matrix(jnp.stack([jnp.eye(2), jnp.eye(2)]), 0.5).tolist()
        [[2.0, 0.0], [0.0, 2.0]]
    """
    S = V.sum(axis=0) if V.ndim == 3 else V
    return jnp.eye(S.shape[-1], dtype=S.dtype) + jnp.asarray(dt, S.dtype) * S


def rescaled_from_raw(R: Float[Array, "d d"], num_layers, x: Float[Array, "... n d"]) -> Float[Array, "... n d"]:
    r""":math:`z = R^{-L} x` for tokens x (..., n, d): L solves with one LU factorisation of R.

    The discrete rescaling of a raw run after L layers (Remark 3.4). ``num_layers`` may be traced
    (e.g. vmapped over saved layers; then not reverse-differentiable).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.fields import rescaled_from_raw
        >>> rescaled_from_raw(2.0 * jnp.eye(2), 3, jnp.ones((1, 2))).tolist()
        [[0.125, 0.125]]
    """
    lu = jax.scipy.linalg.lu_factor(R)
    flat = x.reshape(-1, x.shape[-1]).T
    z = jax.lax.fori_loop(0, num_layers, lambda _, y: jax.scipy.linalg.lu_solve(lu, y), flat)
    return z.T.reshape(x.shape)


# ------------------------------------------------------------------------------------------------
# the registry


@register_field("attention", pictures=("raw", "rescaled"))
def _attention(w, how, *, t0=0.0, layer_dt=1.0):
    from .dynamics import (AttentionFlow, DiscreteRescaledFlow, LayeredFlow, LayerInterpolation, RescaledFlow,
                           TimeVaryingFlow)

    if "layer" in w.axes:
        if how.picture != "raw":
            raise InputError("weights with a 'layer' axis run in the raw picture only (no common rescaling).")
        if how.stepper == "euler":
            return LayeredFlow(w, **how.attention)
        return TimeVaryingFlow(LayerInterpolation(w, layer_dt, t0), **how.attention)
    if how.picture == "raw":
        return AttentionFlow(w, **how.attention)
    if how.stepper == "euler":
        return DiscreteRescaledFlow(w, **how.attention)
    return RescaledFlow(w, t0=t0, **how.attention)


@register_field("causal", pictures=("raw", "rescaled"))
def _causal(w, how, *, t0=0.0, layer_dt=1.0):
    if how.mask is not None:
        raise InputError(f"field 'causal' sets its own mask (token i attends to j <= i), got mask={how.mask!r}.")
    causal = FieldContext(how.picture, how.stepper, how.attention_impl, "causal", positions=how.positions)
    return _attention(w, causal, t0=t0, layer_dt=layer_dt)


@register_field("multihead", weight_axes=("head",))
def _multihead(w, how):
    from .dynamics import AttentionFlow

    return AttentionFlow(w, **how.attention)


@register_field("feedforward", pictures=("rescaled", "raw"))
def _feedforward(w, how, *, W=None, activation="relu", bias=None):
    from .dynamics import AttentionFlow, section12_2_flow, Wrapped

    if how.picture == "rescaled":
        return section12_2_flow(w, W=W, activation=activation, bias=bias, **how.attention)
    return Wrapped(AttentionFlow(w, **how.attention), W, activation, bias)


@register_field("layered")
def _layered(w, how, *, num_layers=REQUIRED, epsilon=REQUIRED, key=REQUIRED, t0=0.0, layer_dt=1.0):
    from .dynamics import perturbed_layers

    return _attention(perturbed_layers(w, num_layers, epsilon, key), how, t0=t0, layer_dt=layer_dt)


@register_field("sphere", shift=sphere_shift, rescaled_reading=False)
def _sphere(w, how, *, normalisation="softmax", identity_weights=False, log_scale=None, harmonic_max_score=None):
    from .dynamics import sphere_flow

    if identity_weights:
        return _identity_sphere(w, how, normalisation, log_scale, harmonic_max_score)
    if log_scale is not None:
        raise InputError("field 'sphere' takes log_scale with identity_weights=True only (the 1/n field of "
                         "Q = K = V = I divided by e^log_scale): drop log_scale, or pass identity_weights=True.")
    if harmonic_max_score is not None:
        raise InputError("field 'sphere' takes harmonic_max_score with identity_weights=True only (the bound of a "
                         "traced beta on the sphere path of Q = K = V = I): drop it, or pass identity_weights=True.")
    return sphere_flow(w, normalisation=normalisation, **how.attention)


def _identity_head(w) -> bool:
    """Whether the weights are one head of Q = K = V = the identity without biases (traced matrices are not
    read)."""
    identity = lambda a: jnp.array_equal(a, jnp.eye(a.shape[-1], dtype=a.dtype))
    return not (w.axes or w.Q.shape[-2] != w.d or any(
            v.is_concrete(a) and not bool(identity(a)) for a in (w.Q, w.K, w.V)) or any(
            b is not None for b in (w.q_bias, w.k_bias, w.v_bias)))


def _identity_sphere(w, how, normalisation, log_scale, harmonic_max_score=None):
    """The sphere's ``identity_weights=True``: :class:`~attnflow.dynamics.IdentitySphereFlow` of beta, once the
    weights are checked to be one head of Q = K = V = I (where concrete) and no mask is asked for."""
    from .dynamics import IdentitySphereFlow

    if not _identity_head(w):
        raise InputError("field 'sphere' with identity_weights=True reads no weights: give Q = K = V = the "
                         "identity (one head, no biases), or drop identity_weights.")
    if how.mask is not None:
        raise InputError(f"field 'sphere' with identity_weights=True attends to every token: drop the mask, or "
                         f"drop identity_weights (got mask={how.mask!r}).")
    if how.positions is not None:
        raise InputError("field 'sphere' with identity_weights=True takes no positions (ALiBi, rotary): drop them.")
    return IdentitySphereFlow(w.beta, normalisation=normalisation, log_scale=log_scale,
                              attention_impl=how.attention_impl, harmonic_max_score=harmonic_max_score)


@register_field("continuity", rescaled_reading=False)
def _continuity(w, how, *, num_points=REQUIRED, normalisation="softmax", dealias=True, diffusion=0.0):
    # imported here: the field lives with the mean-field maths it is made of, and attnflow.meanfield's solver
    # builds it through this registry
    from .meanfield._continuity import CircleContinuity

    if w.d != 2 or not _identity_head(w):
        raise InputError("field 'continuity' is the mean-field limit of Q = K = V = I on the circle: give the 2 x 2 "
                         "identity as Q, K and V (one head, no biases), with beta.")
    if how.mask is not None:
        raise InputError(f"field 'continuity' moves a density, where every point attends to every other: drop the "
                         f"mask (got mask={how.mask!r}).")
    if how.positions is not None:
        raise InputError("field 'continuity' takes no positions (ALiBi, rotary): drop them.")
    return CircleContinuity(w.beta, num_points, normalisation=normalisation, dealias=dealias, diffusion=diffusion,
                            dtype=w.beta.dtype)


@register_field("sphere_continuity", rescaled_reading=False)
def _sphere_continuity(w, how, *, degree=REQUIRED, normalisation="softmax", diffusion=0.0):
    # imported here, like "continuity": the field lives with the mean-field maths it is made of
    from .meanfield._sphere_continuity import SphereContinuity

    if w.d != 3 or not _identity_head(w):
        raise InputError("field 'sphere_continuity' is the mean-field limit of Q = K = V = I on the sphere S^2: give "
                         "the 3 x 3 identity as Q, K and V (one head, no biases), with beta.")
    if how.mask is not None:
        raise InputError(f"field 'sphere_continuity' moves a density, where every point attends to every other: "
                         f"drop the mask (got mask={how.mask!r}).")
    if how.positions is not None:
        raise InputError("field 'sphere_continuity' takes no positions (ALiBi, rotary): drop them.")
    return SphereContinuity(w.beta, degree, normalisation=normalisation, diffusion=diffusion, dtype=w.beta.dtype)


@register_field("prenorm")
def _prenorm(w, how):
    from .dynamics import AttentionFlow, PreNorm

    return PreNorm(AttentionFlow(w, **how.attention))


@register_field("periln")
def _periln(w, how):
    from .dynamics import AttentionFlow, PeriNorm

    return PeriNorm(AttentionFlow(w, **how.attention))


@register_field("mixln")
def _mixln(w, how, *, switch=REQUIRED):
    from .dynamics import AttentionFlow, MixNorm

    return MixNorm(AttentionFlow(w, **how.attention), switch)


@register_field("ngpt", shift=sphere_shift, rescaled_reading=False)
def _ngpt(w, how, *, alpha=1.0):
    from .dynamics import AttentionFlow, NormalisedGPT

    return NormalisedGPT(AttentionFlow(w, **how.attention), alpha)


@register_field("mean")
def _mean(w, how):
    from .dynamics import AttentionFlow

    return AttentionFlow(w, normalisation="mean", **how.attention)


@register_field("block")
def _block(w, how, *, W1=REQUIRED, W2=REQUIRED, b1=None, b2=None, activation="gelu"):
    from .dynamics import AttentionFlow, FeedForward, TransformerBlock

    return TransformerBlock(AttentionFlow(w, **how.attention), FeedForward(W1, W2, b1, b2, activation=activation))


@register_field("hardmax", rescaled_reading=False)
def _hardmax(w, how, *, sphere=False, centred=False, tie_tol=None):
    # the beta = infinity limit: each token attends uniformly to its maximisers (attnflow.dynamics._hardmax); the
    # Euler shift is plain, so step sphere=True with shift=sphere_shift; the state is read as it is
    from .dynamics import HardmaxFlow

    if how.positions is not None:
        raise InputError("field 'hardmax' takes no positions (ALiBi, rotary): drop them.")
    return HardmaxFlow(w, sphere=sphere, centred=centred, tie_tol=tie_tol, mask=how.mask)
