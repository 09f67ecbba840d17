r"""Noise that composes with every field: tokenwise and common Brownian motion, and its increments.

A noise model is the diffusion :math:`g(t, y)` of the SDE :math:`dy = f(t, y)\,dt + g(t, y) \circ dW_t`
(Stratonovich), written as an operand read from the state and a map that is linear in the increment:

* :class:`TokenNoise`: independent Brownian motions :math:`W_i \in \mathbb R^d`, one per token,
  :math:`g(y)[dW]_i = \sigma\,dW_i` in :math:`\mathbb R^d` or, on the sphere,
  :math:`\sigma\,\Pi_{y_i^\perp} dW_i` with :math:`\Pi_{y^\perp} = I - y y^\top/|y|^2` (on the circle, d = 2,
  the same law from one Brownian motion per token along the unit tangent: :meth:`TokenNoise.coefficient`). Its Ito
  form adds the drift :math:`-(d-1)\frac{\sigma^2}{2}\,y_i/|y_i|^2` (:meth:`TokenNoise.ito_correction`: on the unit
  sphere :math:`-(d-1)\frac{\sigma^2}2 y_i`, the heat kernel's
  :math:`E\langle y_t, y_0\rangle = e^{-(d-1)\sigma^2 t/2}`).
* :class:`CommonNoise`: one :math:`d \times d` matrix of independent Brownian motions :math:`W`, shared by
  every token and acting through the value matrix, as in a transformer whose value matrix is
  :math:`V\,dt + \sigma\,dW`: :math:`g(y)[dW]_i = \sigma\,dW\,\sum_j P_{ij}\,x_j` (tangent-projected on the
  sphere), P the field's attention matrix. Its noise is multiplicative and not commutative: Stratonovich
  solvers and the layer stepper only.

The Brownian path is a function of the noise's ``key`` and of time: the layer stepper draws layer k's
increment from ``fold_in(key, k)`` (``brownian="layers"``: the same path when a run is resumed or repeated),
or evaluates a :class:`diffrax.VirtualBrownianTree` (``brownian="tree"``: the same path whatever the step,
so that a refined dt sees the same Brownian motion); the diffrax SDE solves always use the tree.
"""

from __future__ import annotations

from typing import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, PRNGKeyArray

from .. import _validate as v
from ..errors import InputError
from .._normals import normal_sampler

__all__ = ["AbstractNoise", "TokenNoise", "CommonNoise", "check_noise", "BROWNIAN", "layer_increment",
           "brownian_tree", "tangent", "computed_once"]

#: how a layer stepper draws its Brownian increments (module docstring)
BROWNIAN = ("layers", "tree")
#: the backends where a layer's draw is fenced (:func:`computed_once`) and written out (:mod:`attnflow._normals`):
#: measured on XLA:CPU only; elsewhere JAX's own draw, unfenced
FENCED_BACKENDS = ("cpu",)


def tangent(y: Float[Array, "n d"], w: Float[Array, "n d"]) -> Float[Array, "n d"]:
    r""":math:`\Pi_{y_i^\perp} w_i = w_i - \frac{\langle w_i, y_i\rangle}{|y_i|^2} y_i`, row by row.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.integrate._noise import tangent
        >>> tangent(jnp.array([[2.0, 0.0]]), jnp.array([[3.0, 1.0]])).tolist()
        [[0.0, 1.0]]
    """
    return w - (_row_sum(w * y) / _row_sum(y * y)) * y


def _row_sum(a):
    """Sum over the last axis, keeping it; a sum of columns for small d (XLA:CPU runs a reduction over a trailing
    axis of 2 or 3 several times slower inside a fused step, as :func:`attnflow.integrate.sphere_shift` notes)."""
    d = a.shape[-1]
    if d <= 8:
        total = a[..., :1]
        for k in range(1, d):
            total = total + a[..., k:k + 1]
        return total
    return jnp.sum(a, axis=-1, keepdims=True)


def _check_key(key) -> None:
    if isinstance(key, jax.Array) and jnp.issubdtype(key.dtype, jax.dtypes.prng_key) and key.shape == ():
        return
    shape = getattr(key, "shape", None)
    dtype = getattr(key, "dtype", None)
    if shape == (2,) and dtype is not None and np.dtype(dtype) == np.uint32:
        return
    raise InputError(f"key must be one JAX random key (jax.random.key(seed) or jax.random.PRNGKey(seed)), got "
                     f"{type(key).__name__}" + (f" of shape {shape}" if shape is not None else "") +
                     "; for a batch of paths vmap over keys.")


class AbstractNoise(eqx.Module):
    r"""The diffusion of a noisy flow (module docstring): ``sigma`` (a scalar >= 0), ``key`` (the Brownian path)
    and ``sphere`` (tangent-projected, for tokens on the unit sphere)."""

    sigma: Float[Array, ""] | float
    key: PRNGKeyArray
    sphere: bool = eqx.field(static=True)

    def __init__(self, sigma, key, *, sphere: bool = False):
        v.check_real("sigma", sigma, "the noise strength, a finite scalar >= 0")
        if v.is_concrete(sigma) and float(np.asarray(sigma)) < 0:
            raise InputError(f"sigma must be >= 0 (the noise strength; its sign is the Brownian motion's), got "
                             f"{float(np.asarray(sigma))!r}.")
        _check_key(key)
        if not isinstance(sphere, bool):
            raise InputError(f"sphere must be True or False (project the noise on the tangent spaces of the unit "
                             f"sphere), got {sphere!r}.")
        self.sigma, self.key, self.sphere = sigma, key, sphere

    def member_keys(self, size: int):
        """The keys of the ``size`` members of a batch, one Brownian path each: ``split(key, size)``.

        Example:
            >>> import jax
            >>> from attnflow.integrate import TokenNoise
            >>> TokenNoise(0.1, jax.random.key(0)).member_keys(3).shape
            (3,)
        """
        return jax.random.split(self.key, size)

    def is_zero(self) -> bool:
        """Whether ``sigma`` is a number (not traced) equal to 0: the integrators then skip the noise."""
        return v.is_concrete(self.sigma) and float(np.asarray(self.sigma)) == 0.0

    def control_shape(self, y_shape: tuple[int, ...]) -> tuple[int, ...]:
        """The shape of the Brownian motion W for a state of shape ``y_shape`` (n, d)."""
        raise NotImplementedError

    def operand(self, field, t, y):
        """What the diffusion reads from the state (and the field) before it meets an increment."""
        raise NotImplementedError

    def act(self, operand, dW):
        """The diffusion applied to an increment ``dW`` (linear in ``dW``):
        ``finish(operand, coefficient(operand, dW))``."""
        return self.finish(operand, self.coefficient(operand, dW))

    def coefficient(self, operand, dW):
        """The part of :meth:`act` that reads the increment: what a layer stepper computes once per layer
        (:func:`computed_once`), the draw included; :meth:`finish` turns it into the state's change. A model
        that defines only :meth:`act` has it all here."""
        if type(self).act is not AbstractNoise.act:
            return self.act(operand, dW)
        raise NotImplementedError(f"{type(self).__name__} defines neither act nor coefficient")

    def finish(self, operand, coefficient):
        """The state's change from :meth:`coefficient` (cheap, elementwise: fused into the step's update)."""
        return coefficient

    def diffusion(self, field, t, y, dW) -> Float[Array, "n d"]:
        r""":math:`g(t, y)[dW]`: the state's change for the Brownian increment ``dW``."""
        return self.act(self.operand(field, t, y), dW)

    def ito_correction(self, field, t, y) -> Float[Array, "n d"]:
        r"""The drift that turns the Stratonovich SDE into its Ito form, :math:`\frac12 \sum_k (D g_k) g_k`."""
        raise InputError(f"{type(self).__name__} has no Ito form here (its noise is multiplicative and not "
                         "commutative): use a Stratonovich solver (heun, midpoint, reversible_heun) or the layer "
                         "stepper.")

    def check_state(self, y_shape: tuple[int, ...]) -> None:
        """One sentence when the state cannot carry this noise."""
        if len(y_shape) != 2:
            raise InputError(f"{type(self).__name__} acts on one cloud of tokens (n, d), got a state of shape "
                             f"{tuple(y_shape)}; for a batch of systems vmap over them (with their keys).")


class TokenNoise(AbstractNoise):
    r"""Independent tokenwise Brownian motions: :math:`dy_i \mathrel{+}= \sigma\,dW_i` (projected on the
    tangent space of the unit sphere when ``sphere``).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from attnflow.integrate import TokenNoise
        >>> noise = TokenNoise(0.5, jax.random.key(0), sphere=True)
        >>> y = jnp.array([[1.0, 0.0], [0.0, 1.0]])
        >>> noise.diffusion(None, 0.0, y, jnp.ones((2, 2))).tolist()   # only the tangent part moves a token
        [[0.0, 0.5], [0.5, 0.0]]
        >>> noise.ito_correction(None, 0.0, y).tolist()                 # -(d - 1) sigma^2/2 y
        [[-0.125, -0.0], [-0.0, -0.125]]
    """

    def control_shape(self, y_shape):
        if self.sphere and y_shape[-1] == 2:  # the circle: one tangent direction, one Brownian motion per token
            return (*tuple(y_shape)[:-1], 1)
        return tuple(y_shape)

    def operand(self, field, t, y):
        return y

    def _along_circle(self, y, w) -> bool:
        """Whether ``w`` is one Brownian motion per token along the circle's tangent (:meth:`control_shape`)."""
        return self.sphere and w.shape[-1] == 1 and y.shape[-1] == 2

    def coefficient(self, operand, dW):
        r"""``sigma dW``; on the circle ``sigma dB / |y|`` per token, which :meth:`finish` multiplies by
        :math:`(-y_2, y_1)`: the unit tangent :math:`\hat t = (-y_2, y_1)/|y|` times one Brownian increment.

        On the circle the tangent space is a line, so the projected increment of a plane Brownian motion,
        :math:`\Pi_{y^\perp} dW = \langle dW, \hat t\rangle\,\hat t`, is :math:`dB\,\hat t` with one standard
        Brownian motion :math:`B = \langle W, \hat t\rangle` per token (equal in law, as processes: the same
        generator :math:`\frac{\sigma^2}2\partial_\theta^2`): one normal per token, not two.

        Example:
            >>> import jax, jax.numpy as jnp
            >>> from attnflow.integrate import TokenNoise
            >>> noise, y = TokenNoise(1.0, jax.random.key(0), sphere=True), jnp.array([[2.0, 0.0]])
            >>> noise.finish(y, noise.coefficient(y, jnp.array([[0.5]]))).tolist()   # 0.5 along (0, 1)
            [[-0.0, 0.5]]
        """
        w = self.sigma * dW
        if self._along_circle(operand, dW):  # sigma dB / |y|, per token
            y = operand
            return w * jax.lax.rsqrt(y[..., :1] * y[..., :1] + y[..., 1:] * y[..., 1:])
        return w

    def finish(self, operand, coefficient):
        if not self.sphere:
            return coefficient
        if self._along_circle(operand, coefficient):  # (-y_2, y_1); 1/|y| is in the coefficient
            return coefficient * (operand[..., ::-1] * jnp.asarray([-1, 1], operand.dtype))
        return tangent(operand, coefficient)

    def ito_correction(self, field, t, y):
        if not self.sphere:  # additive noise: the two forms agree
            return jnp.zeros_like(y)
        d = y.shape[-1]
        return -(d - 1) * (self.sigma ** 2 / 2) * y / jnp.sum(y * y, axis=-1, keepdims=True)


class CommonNoise(AbstractNoise):
    r"""One matrix Brownian motion W (d, d) shared by all tokens, through the values:
    :math:`dy_i \mathrel{+}= \sigma\,dW\,(P x)_i` (projected on the sphere when ``sphere``); P is the field's
    attention (one head: an (n, n) matrix), x its tokens.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from attnflow import AttentionFlow
        >>> from attnflow.integrate import CommonNoise
        >>> noise = CommonNoise(1.0, jax.random.key(0))
        >>> flow = AttentionFlow(jnp.eye(2), jnp.eye(2), jnp.zeros((2, 2)))
        >>> y = jnp.array([[1.0, 0.0], [1.0, 0.0]])       # P x = x: every token sees (1, 0)
        >>> noise.diffusion(flow, 0.0, y, jnp.array([[0.0, 0.0], [2.0, 0.0]])).tolist()
        [[0.0, 2.0], [0.0, 2.0]]
    """

    def control_shape(self, y_shape):
        d = y_shape[-1]
        return (d, d)

    def operand(self, field, t, y):
        from ..dynamics import AbstractAttentionDynamics

        if not isinstance(field, AbstractAttentionDynamics):
            raise InputError(f"CommonNoise acts through the attention of the field, got {type(field).__name__}, "
                             "which has none; use an attention field (AttentionFlow, sphere_flow, ...).")
        P = field.attention(t, y)
        if P.ndim != 2:
            raise InputError(f"CommonNoise needs one attention matrix (n, n) (one head), got attention of shape "
                             f"{tuple(P.shape)}.")
        x = field.tokens(t, y)
        return y, P @ x

    def coefficient(self, operand, dW):
        y, mean = operand
        return self.sigma * (mean @ dW.T)

    def finish(self, operand, coefficient):
        return tangent(operand[0], coefficient) if self.sphere else coefficient

    def check_field(self, field) -> None:
        """Refuse the pictures whose state is not the tokens (the common noise acts on x, not on z)."""
        name = type(field).__name__
        if name in ("RescaledFlow", "DiscreteRescaledFlow"):
            raise InputError(f"CommonNoise acts on the tokens x; the {name}'s state is the rescaled z = e^(-tV) x. "
                             "Use the raw picture.")


def check_noise(noise) -> AbstractNoise:
    """``noise`` if it is a noise model, else one sentence."""
    if not isinstance(noise, AbstractNoise):
        raise InputError(f"noise must be a noise model (TokenNoise or CommonNoise), got {type(noise).__name__}.")
    return noise


def layer_increment(noise: AbstractNoise, k, dt, shape, dtype) -> Array:
    r"""Layer k's Brownian increment :math:`W(t_{k+1}) - W(t_k) \sim N(0, \Delta t\,I)`, drawn from
    ``fold_in(key, k)``: a function of the key and the layer only.

    The standard normals are drawn in float32 and cast to ``dtype`` (a float64 draw costs 2.8x as much on CPU;
    the increments are random inputs, whose 24-bit resolution and tails to about 5.3 standard deviations change
    no law at the scale of a step, while the arithmetic keeps ``dtype``): a float32 and a float64 run of the
    same key see the same path.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from attnflow.integrate import TokenNoise
        >>> from attnflow.integrate._noise import layer_increment
        >>> noise = TokenNoise(1.0, jax.random.key(0))
        >>> a = layer_increment(noise, 3, 0.01, (4, 2), jnp.float32)
        >>> bool(jnp.all(a == layer_increment(noise, 3, 0.01, (4, 2), jnp.float32))), a.shape
        (True, (4, 2))
    """
    return layer_increment_sampler(noise, k, dt, shape, dtype)()


def layer_increment_sampler(noise: AbstractNoise, k, dt, shape, dtype) -> Callable[[], Array]:
    """:func:`layer_increment` as a function of no arguments, its key schedule (``fold_in`` and the key's words)
    computed now: a fence around the draw (:func:`computed_once`) then receives the words as scalars
    (:func:`~attnflow._normals.normal_sampler`). Off the CPU, JAX's own ``fold_in`` and normals (the
    same numbers; the written-out rounds are measured on the CPU only, where the fence keeps them to one pass).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from attnflow.integrate import TokenNoise
        >>> from attnflow.integrate._noise import layer_increment, layer_increment_sampler
        >>> noise = TokenNoise(1.0, jax.random.key(0))
        >>> draw = layer_increment_sampler(noise, 2, 0.5, (3, 2), jnp.float32)
        >>> bool(jnp.all(draw() == layer_increment(noise, 2, 0.5, (3, 2), jnp.float32)))
        True
    """
    key = noise.key
    if not jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        key = jax.random.wrap_key_data(key)
    scale = jnp.sqrt(jnp.asarray(dt, dtype))
    if jax.default_backend() not in FENCED_BACKENDS:
        draw_key = jax.random.fold_in(key, k)
        return lambda: scale * jax.random.normal(draw_key, shape, jnp.float32).astype(dtype)
    sample = normal_sampler(key, k, fence=lambda fn: computed_once(fn, k))
    return lambda: scale * sample(shape).astype(dtype)


def computed_once(fn: Callable[[], Array], index) -> Array:
    r"""``fn()``, computed in one pass and written out once, on XLA:CPU (elsewhere simply ``fn()``).

    A draw's hash is cheap operation by operation, so XLA:CPU fuses it into every consumer: a renormalised
    step reads the noise in two passes (the new norms, then the new tokens), and each recomputed the 20 rounds,
    while the inverse error function's logarithm went to passes of its own (10^6 tokens on the circle: the
    noise cost 0.9 of a deterministic layer). A conditional's branch is compiled as its own computation, and
    its result is written once; both branches are ``fn``, so the predicate on the traced ``index`` (which XLA
    cannot fold) never changes the value. GPUs and TPUs read a conditional's predicate on the host, so there
    the fence is left out.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from attnflow.integrate._noise import computed_once
        >>> jax.jit(lambda k: computed_once(lambda: jnp.arange(3.0) * k, k))(2).tolist()
        [0.0, 2.0, 4.0]
    """
    if jax.default_backend() not in FENCED_BACKENDS:
        return fn()
    return jax.lax.cond(jnp.asarray(index) >= 0, fn, fn)


def brownian_tree(noise: AbstractNoise, t0, t1, tol, shape, dtype):
    """The :class:`diffrax.VirtualBrownianTree` of ``noise`` on [t0, t1] (resolution ``tol``)."""
    import diffrax

    key = noise.key
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        key = jax.random.key_data(key)
    return diffrax.VirtualBrownianTree(t0, t1, tol=tol, shape=jax.ShapeDtypeStruct(shape, dtype), key=key)


#: the tree's default resolution: the span over this many halvings, fixed whatever the step, so that runs
#: with different steps over the same span see the same path (each evaluation descends this many levels)
TREE_LEVELS = 16


def tree_tolerance(t0: float, t1: float) -> float:
    """The tree's default resolution on [t0, t1]: (t1 - t0) / 2^TREE_LEVELS."""
    return (float(t1) - float(t0)) / 2.0 ** TREE_LEVELS
