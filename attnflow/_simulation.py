r"""One call for the common case: :func:`simulate` a token cloud, or an explicit batch of them.

``simulate(x0, weights_or_field, integrator)``: the start, what moves it (Q, K, V; an
:class:`~attnflow.AttentionWeights`; or any ready field) and how it is integrated (any
:class:`~attnflow.integrate.AbstractIntegrator`; or the flat options ``t1=, method=, dt=, ...``, which
:func:`~attnflow.integrate.make_integrator` turns into one). The integrator's constructor and
:func:`make_integrator` check their own options; this module checks only the rules that combine
arguments (the tokens against the weights, the output size against the saves, a singular
:math:`I + \Delta t V` for the exact discrete rescaling, the Fourier path against the run:
:func:`attnflow.kernels.fourier.plan`). It builds the field of the requested picture once
(:func:`attnflow.fields.make_dynamics`, for batched weights under ``jax.vmap``) and hands field and
integrator to one jitted runner, ``_run(x0, batched, shared, integrator, ...)``:

* the layer stepper (``method="euler"`` or an :class:`~attnflow.integrate.EulerStepper`): in the rescaled
  picture the exact discrete rescaling of Remark 3.4, so ``x[k] = (I + dt V)^k z[k]``.
* any other integrator: a diffrax solve (``"tsit5"`` default; adaptive PID control, or constant steps when
  ``dt`` is given) or an explicit Runge-Kutta stepper (:class:`~attnflow.integrate.RKStepper`).

Batching is explicit (``batch=``, or ``jax.vmap`` around ``simulate``); an array with an
axis more than expected is an error, never a guess. A batch of starts, of weights, of beta or of any
array leaf of a ready field (:func:`attnflow._batching.split_field`) is one compile. ``simulate`` is
traceable: ``jit``, ``vmap`` and ``grad`` over it work with the default settings, and failures are
reported inside jit (``Simulation.result``; ``throw=True`` raises). :class:`Simulation` and its storage
live in :mod:`attnflow._simulation_io`.
"""

from __future__ import annotations

import contextlib
import inspect
from types import SimpleNamespace
from typing import Any, Callable, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, PyTree

from . import _validate as v
from .kernels import fourier as _fourier
from .kernels import IMPLS
from ._batching import (field_batch_sizes, lapack_needs_loop, map_over_batch, split_field, vmap_build,
                        vmap_systems)
from ._linalg import check_invertible_transfer
from ._resources import check_memory
from ._simulation_io import Simulation, load
from ._weights import AttentionWeights, check_shapes
from ._x64 import float64_enabled, float64_scope
from .dynamics import (AbstractAttentionDynamics, AbstractDynamics, DiscreteRescaledFlow, FoldedBatch,
                       RescaledFlow, rescaling_generator)
from .errors import InputError
from .fields import PICTURES, make_dynamics
from .integrate import AbstractIntegrator, EulerStepper, ODESolver, RKStepper, SOLVERS, raise_if_failed
from .integrate import make_integrator, sphere_shift
from .integrate._make import IntegratorPlan, integrator_plan
from .integrate._solution import checked
from .temperature import BetaOfN

__all__ = ["simulate", "Simulation", "load", "make_integrator", "BATCHABLE", "FIELD_BATCHABLE"]

#: names that ``simulate(batch=...)`` accepts with Q, K, V or one AttentionWeights
BATCHABLE = ("x0", "Q", "K", "V", "beta", "weights")
#: with a ready field, ``batch`` names ``"x0"``, ``"field"`` (every array leaf of the field) or the attribute
#: name of any array leaf of the field (``"beta"``, ``"V"``, ``"W"``, ...): :func:`attnflow._batching.split_field`
FIELD_BATCHABLE = ("x0", "field", "<the name of an array leaf of the field>")


def _batch_names(batch, has_weights: bool) -> tuple[str, ...]:
    if batch is None:
        return ()
    names = (batch,) if isinstance(batch, str) else tuple(batch)
    if "all" in names:  # every array input; beta only when named too
        weights = ("weights",) if has_weights else ("Q", "K", "V")
        names = ("x0",) + weights + (("beta",) if "beta" in names else ())
    bad = [b for b in names if b not in BATCHABLE]
    if bad:
        raise InputError(f"batch must name inputs among {BATCHABLE} (or 'all'), got {bad}.")
    return names


def _validate_inputs(x0, weights: AttentionWeights | None, Q, K, V, beta, batch: tuple[str, ...]) -> int | None:
    """Check ranks against the named batch axes; return the batch size B (None if unbatched)."""
    sizes = {}
    base = {"x0": 2, "Q": 2, "K": 2, "V": 2, "beta": 0}
    arrays = {"x0": x0, "beta": beta}
    if weights is None:
        arrays.update(Q=Q, K=K, V=V)
    for name, a in arrays.items():
        shape = v.check_array(name, a, "an array")
        want = base[name] + (1 if name in batch else 0)
        if len(shape) != want:
            hint = ""
            if len(shape) == want + 1 and name not in batch:
                hint = (f"; if the leading axis of {name} is a batch of independent systems, pass "
                        f"batch=({name!r}, ...), and for several heads or layers use AttentionWeights(..., axes=...)")
            what = {"x0": "tokens (n, d)", "Q": "an (m, d) matrix", "K": "an (m, d) matrix",
                    "V": "a (d, d) matrix", "beta": "a scalar"}[name]
            raise InputError(
                f"{name} must be {what}{' with a leading batch axis B' if name in batch else ''}, "
                f"got shape {shape}{hint}."
            )
        if name in batch:
            sizes[name] = shape[0]
    if weights is not None and "weights" in batch:
        sizes["weights"] = weights.V.shape[0]
    for name in ("Q", "K", "V"):
        if weights is not None and name in batch:
            raise InputError(f"batch names {name!r} but the weights were given as one AttentionWeights; "
                             "name 'weights' instead.")
    if "weights" in batch and weights is None:
        raise InputError("batch names 'weights' but Q, K, V were given as matrices; name 'Q', 'K', 'V' instead.")
    if len(set(sizes.values())) > 1:
        raise InputError(
            f"batched inputs must share one batch size B, got {', '.join(f'{k}: {s}' for k, s in sizes.items())}."
        )
    v.check_beta("beta", beta if weights is None else weights.beta)
    xs = np.shape(x0)[-2:]
    v.check_num_tokens("x0", xs[0])
    if xs[1] < 1:
        raise InputError(f"x0 must hold tokens of dimension d >= 1, got shape {np.shape(x0)}.")
    if weights is None:
        strip = lambda a, n: np.shape(a)[1:] if n in batch else np.shape(a)
        vs = strip(V, "V")
        if vs[0] == vs[1] and vs[1] != xs[1]:
            raise InputError(f"the tokens have dimension d = {xs[1]}, so V must be ({xs[1]}, {xs[1]}), got {vs}.")
        # shape checks of the matrices (same sentences as AttentionWeights)
        check_shapes(*(jax.ShapeDtypeStruct(strip(a, n), jnp.float32) for a, n in ((Q, "Q"), (K, "K"), (V, "V"))))
        for name, a in (("Q", Q), ("K", K), ("V", V)):
            v.check_finite(name, a)
    elif xs[1] != weights.d:  # (matrices: V square of the tokens' d above, Q and K of V's by check_shapes)
        raise InputError(f"the tokens have dimension d = {xs[1]}, but the weights act on dimension {weights.d}.")
    return next(iter(sizes.values())) if sizes else None


def _check_output_size(x0, B: int | None, num_saves: int, attention: bool, separate_tokens: bool, weights,
                       fix: str) -> None:
    """Refuse saved outputs that cannot fit: B x T x n x (d per saved array + n H for attention) x itemsize.

    ``separate_tokens``: the raw tokens are stored besides the states (rescaled picture, prebuilt field).
    """
    n, d = x0.shape[-2:]
    copies = 2 if separate_tokens else 1  # the states, and the tokens when they differ from the states
    heads = weights.num_heads if weights is not None else 1
    per_save = n * (copies * d + (n * heads if attention else 0)) * x0.dtype.itemsize
    check_memory(f"simulate with {num_saves} saves of {n} tokens in dimension {d}"
                 f"{f' for {B} systems' if B else ''}", (B or 1) * num_saves * per_save, fix=fix, scale=1)


def simulate(
    x0: Float[Array, "*B n d"],
    weights_or_field: Float[Array, "*B m d"] | AttentionWeights | AbstractDynamics | None = None,
    K: Float[Array, "*B m d"] | AbstractIntegrator | None = None,
    V: Float[Array, "*B d d"] | None = None,
    integrator: AbstractIntegrator | None = None,
    *,
    picture: str = "raw",
    beta: float | Any = None,
    dtype: str = "float32",
    batch: str | Sequence[str] | None = None,
    batch_mode: str = "vmap",
    return_attention: bool = False,
    save_fn: Callable[[Array, Array, PyTree], PyTree] | None = None,
    attention_impl: str = "auto",
    fourier_max_score: float | None = None,
    mask: Any = None,
    throw: bool = True,
    dynamics: AbstractDynamics | None = None,
    positions: Any = None,
    **integrator_options: Any,
) -> Simulation:
    r"""Simulate :math:`\dot x_i = \sum_j \mathrm{softmax}_j(\beta\langle Qx_i, Kx_j\rangle) V x_j` (or any field).

    Three pieces, as in ``diffrax.diffeqsolve(terms, solver, ...)``: the start ``x0``, what moves it
    (``weights_or_field``) and how it is integrated (``integrator``)::

        simulate(x0, Q, K, V, t1=5.0, method="euler", dt=0.5)         # matrices and flat options
        simulate(x0, AttentionWeights(Q, K, V), EulerStepper(0.5, 10))  # weights and an integrator
        simulate(x0, sphere_flow(Q, K, V, 2.0), ODESolver(0.0, 5.0))    # a ready field and an integrator

    The flat options (``t1``, ``method``, ``dt``, ...) build the integrator with
    :func:`~attnflow.integrate.make_integrator`; give them or ``integrator``, not both.

    Args:
        x0: initial tokens (n, d) (or (B, n, d) with ``batch`` naming ``"x0"``), n >= 2 (one token does
            not interact: P = [1] and :math:`x(t) = e^{tV}x_0`).
        weights_or_field: Q, an (m, d) matrix (then K (m, d) and V (d, d) follow); or an
            :class:`~attnflow.AttentionWeights` (biases, several heads, per-layer weights); or a ready field,
            any :class:`~attnflow.dynamics.AbstractDynamics` (multi-head, feed-forward, layer-varying,
            sphere, ...; then picture, beta, mask, attention_impl and fourier_max_score belong to the field).
            Weights with a ``"layer"`` axis: the layer stepper runs layer l with weights l, an ODE solver
            interpolates them linearly at spacing (t1 - t0)/L.
        K, V: the key and value matrices after a matrix Q. After weights or a field, the third positional
            argument may be the integrator: ``simulate(x0, field, integrator)``.
        integrator: any :class:`~attnflow.integrate.AbstractIntegrator`:
            :class:`~attnflow.integrate.EulerStepper` (the layer stepper; in the rescaled picture the
            exact discrete rescaling of Remark 3.4), :class:`~attnflow.integrate.RKStepper` or
            :class:`~attnflow.integrate.ODESolver`. It owns the time grid, the solver, tolerances, the
            adjoint and the stepper's shift.
        picture: ``"raw"`` (x) or ``"rescaled"`` (z = e^{-(t - t0)V} x; for the layer stepper,
            z[k] = (I + dt V)^{-k} x[k]).
        beta: inverse temperature, finite and > 0 (default 1, the paper's model; for a negative one
            pass -Q); with an AttentionWeights it is part of the weights. With a field, ``beta`` is given
            only as a batch (B,) with ``batch`` naming ``"beta"``: it replaces every ``beta`` leaf of the field.
            A law of the context length, :class:`~attnflow.temperature.BetaOfN` (e.g. :math:`\gamma\log n`),
            is evaluated at the tokens' n (a batch of laws, gamma (B,), is a batch of beta).
        dtype: ``"float32"`` (default) or ``"float64"`` (computed in a scoped float64 mode;
            JAX's global configuration is never changed): the precision of the run and of every
            output, whatever the inputs' dtype. Under jit/vmap/grad a float64 run needs
            float64 around the transformation (``with jax.enable_x64(True):``); without it
            ``dtype="float64"`` with traced inputs is an ``InputError``.
        batch: which inputs carry a leading axis of B independent systems. With matrices or weights:
            ``"x0"``, a tuple of names among ``("x0", "Q", "K", "V", "beta", "weights")``, or ``"all"`` (x0
            and the weights; add ``"beta"`` to batch beta too). With a field: ``"x0"``, ``"field"`` (every
            array leaf of the field carries the batch axis, e.g. a field built under ``jax.vmap``) or the
            attribute name of array leaves of the field (``"beta"``, ``"V"``, ``"W"``, ...), whose every leaf
            of that name carries the batch axis (or, for ``"beta"``, is replaced by ``beta=``). One compile
            for the whole batch, whatever is batched.
        batch_mode: ``"vmap"`` (default; each member its own adaptive steps) or
            ``"fold"`` (shared weights: one solve of the stacked state).
        return_attention: also return P at every save time.
        save_fn: ``(t, y, args) -> pytree`` of observables saved instead of states.
        attention_impl: ``"auto"``, ``"dense"``, ``"chunked"``, ``"fused"`` or ``"flash"`` (see
            :func:`attnflow.attend`), or ``"fourier"``: the O(n K) path for tokens on the unit circle
            (d = 2; :math:`\beta Q^T K` a scaled rotation such as Q = K = I; no mask; every rule in
            :func:`attnflow.kernels.fourier.plan`), which needs states that stay on the circle: the layer stepper
            with ``shift="sphere"`` and x0 on the circle (for the ODE flow on the circle pass the field
            ``sphere_flow(..., attention_impl="fourier")``); or ``"harmonic"``: the O(n H) path for tokens on
            S^(d-1), d >= 3 (H harmonics of degree <= L, (L+1)^2 on S^2; :math:`\beta Q^T K = cI`, concrete Q, K and beta, any batch of V; every rule in
            :func:`attnflow.kernels.sphere.harmonic_plan`), exact to rounding for unit tokens (``shift="sphere"``).
            Forward-mode autodiff needs ``"dense"`` (or ``"fourier"``, ``"harmonic"``).
        fourier_max_score: with ``attention_impl="fourier"``, an upper bound of the score scale
            :math:`a = |\beta c|` (:math:`\beta Q^T K = c R(\alpha)`) that sets the number of Fourier
            modes; by default the largest a of the (batch of) weights, read on the host, so it is
            needed only when simulate itself runs inside jit / vmap / grad. Any other attention_impl
            refuses it (the field simulate builds takes the Fourier path only when asked).
        mask: None, ``"causal"`` or a boolean (n, n) attention mask.
        positions: where the tokens sit: an ALiBi slope and/or rotary positions
            (:class:`~attnflow.kernels.Positions`, a kind name or a mapping; see :func:`attnflow.attend`).
        throw: raise when a solve fails (:class:`~attnflow.NonFiniteError` /
            :class:`~attnflow.SolverError` on the host; an ``equinox`` runtime error inside
            jit). With ``throw=False`` see ``Simulation.result``.
        dynamics: the ready field as a keyword (the same as passing it as ``weights_or_field``).
        **integrator_options: the flat options of :func:`~attnflow.integrate.make_integrator`, when no
            ``integrator`` is given: ``t1`` (required), ``t0``, ``method`` (``"euler"``, a diffrax solver name
            or instance; default ``"tsit5"``), ``dt``, ``ts``, ``num_saves``, ``save_every``, ``rtol``,
            ``atol``, ``max_steps``, ``adjoint``, ``shift``, ``noise`` (a :class:`~attnflow.integrate.TokenNoise`
            or :class:`~attnflow.integrate.CommonNoise`: the stochastic layer stepper with ``method="euler"``, a
            diffrax SDE solve with ``method="heun"``, ...). In a batch each member runs on its own Brownian path
            (the noise's :meth:`~attnflow.integrate.TokenNoise.member_keys`).

    Example:
        >>> import jax, jax.numpy as jnp, attnflow
        >>> from attnflow.dynamics import normalise, sphere_flow
        >>> from attnflow.integrate import EulerStepper, ODESolver, sphere_shift
        >>> x0 = jax.random.normal(jax.random.key(0), (16, 2))
        >>> I = jnp.eye(2)
        >>> sim = attnflow.simulate(x0, I, I, I, t1=5.0, picture="rescaled", num_saves=11)
        >>> sim.states.shape, sim.tokens.shape, int(sim.result)
        ((11, 16, 2), (11, 16, 2), 0)
        >>> xs = jax.random.normal(jax.random.key(1), (3, 16, 2))
        >>> attnflow.simulate(xs, I, I, I, t1=1.0, num_saves=2, batch="x0").states.shape
        (3, 2, 16, 2)
        >>> w = attnflow.AttentionWeights(I, I, I, beta=2.0)
        >>> attnflow.simulate(x0, w, EulerStepper(0.25, 8, save_every=4)).states.shape
        (3, 16, 2)
        >>> circle = normalise(x0)
        >>> field = sphere_flow(I, I, I, 1.0)
        >>> one = attnflow.simulate(circle, field, ODESolver(0.0, 1.0, ts=jnp.linspace(0.0, 1.0, 3)))
        >>> one.states.shape, one.method
        ((3, 16, 2), 'tsit5')
        >>> betas = jnp.array([0.5, 1.0, 4.0])                 # one compile for the three temperatures
        >>> curve = attnflow.simulate(circle, field, EulerStepper(0.1, 10, shift=sphere_shift),
        ...                           batch="beta", beta=betas)
        >>> curve.states.shape
        (3, 11, 16, 2)
        >>> from attnflow.integrate import TokenNoise
        >>> noise = TokenNoise(0.5, jax.random.key(2), sphere=True)  # independent noise on every token
        >>> noisy = attnflow.simulate(circle, field, t1=1.0, method="euler", dt=0.1, shift="sphere", noise=noise,
        ...                           batch="beta", beta=betas)      # one Brownian path per temperature
        >>> noisy.states.shape, bool(jnp.allclose(noisy.states[0, -1], noisy.states[1, -1]))
        ((3, 11, 16, 2), False)
    """
    if isinstance(K, AbstractIntegrator) and V is None:  # simulate(x0, weights_or_field, integrator)
        if integrator is not None:
            raise InputError("the integrator is given twice (third argument and integrator=); give it once.")
        K, integrator = None, K
    if dtype not in ("float32", "float64"):
        raise InputError(f"dtype must be 'float32' or 'float64', got {dtype!r}.")
    if dtype == "float64" and not float64_enabled() and v.is_traced(x0, weights_or_field, K, V, beta, dynamics,
                                                                    integrator, integrator_options):
        raise InputError(
            "simulate(dtype='float64') was called inside a JAX transformation (jit/vmap/grad) while float64 is "
            "disabled; enter `with jax.enable_x64(True):` around the transformation, or call simulate outside it."
        )
    if isinstance(beta, BetaOfN) and np.ndim(x0) >= 2:  # beta_n = gamma g(n): n from the tokens (..., n, d)
        beta = beta(int(np.shape(x0)[-2]))
    scope = float64_scope() if dtype == "float64" else contextlib.nullcontext()
    with scope:
        return _simulate(x0, weights_or_field, K, V, integrator, integrator_options, picture=picture, beta=beta,
                         dtype=dtype, batch=batch, batch_mode=batch_mode, return_attention=return_attention,
                         save_fn=save_fn, attention_impl=attention_impl, fourier_max_score=fourier_max_score,
                         mask=mask, throw=throw, dynamics=dynamics, positions=positions)


def _simulate(x0, first, K, V, integrator, options, *, picture, beta, dtype, batch, batch_mode, return_attention,
              save_fn, attention_impl, fourier_max_score, mask, throw, dynamics, positions=None):
    """validate -> the integrator -> the field (or the batch of a ready field) -> run -> :class:`Simulation`."""
    field = _ready_field(first, dynamics)
    _check_choices(picture, batch_mode, attention_impl)
    plan, method_name = _integrator_or_plan(integrator, options, dtype)
    if field is not None:
        names, B = _check_prebuilt(x0, K, V, beta, field, batch, picture, mask, attention_impl, return_attention,
                                   fourier_max_score)
        if positions is not None:
            raise InputError("with dynamics= set positions on the field itself (AttentionFlow, sphere_flow), not in "
                             "simulate.")
        weights, Q = None, None
    else:
        weights, Q, beta, names, B = _check_weights(x0, first, K, V, beta, batch, picture)
    fold = batch_mode == "fold" and B is not None
    if batch_mode == "fold" and set(names) - {"x0"}:
        raise InputError("batch_mode='fold' needs weights shared by the whole batch; use batch_mode='vmap'.")
    jdtype = jnp.float64 if dtype == "float64" else jnp.float32
    x0 = jnp.asarray(x0, jdtype)
    beta = None if beta is None else jnp.asarray(beta, jdtype)
    if field is not None:
        field = jax.tree_util.tree_map(lambda a: a.astype(jdtype) if eqx.is_inexact_array(a) else a, field)
    elif weights is None:
        Q, K, V = (jnp.asarray(a, jdtype) for a in (Q, K, V))
    else:
        weights = weights.astype(jdtype)
    traced = v.is_traced(x0, Q, K, V, beta, weights, field)

    def check_size(num_out: int | None, fix: str) -> None:  # before any save-sized array exists
        if num_out is not None:
            _check_output_size(x0, B, num_out, return_attention and save_fn is None,
                               save_fn is None and (picture != "raw" or field is not None), weights, fix)

    if integrator is None:
        check_size(plan.num_saves, plan.fix)
        integrator = plan.build()
    else:
        check_size(_num_saves(integrator), "save fewer states (the integrator's save times or layers)")
    if field is None:
        _check_fits(integrator, picture, weights, V)
        bound = _fourier_bound(x0, weights, Q, K, beta, integrator, picture=picture, mask=mask,
                               attention_impl=attention_impl, max_score=fourier_max_score, dtype=jdtype)
        batched, shared = _make_field(weights, Q, K, V, beta, names, picture=picture, integrator=integrator,
                                      attention_impl=attention_impl, mask=mask, fourier_max_score=bound,
                                      positions=positions)
        loop = batched is not None and (picture != "raw" or save_fn is not None) and lapack_needs_loop()
    else:
        leaves = tuple(n for n in names if n != "x0")
        batched, shared = split_field(field, leaves, {"beta": beta} if beta is not None else {})
        loop = batched is not None and (save_fn is not None or _transports(field)) and lapack_needs_loop()
    shared = FoldedBatch(shared) if fold else shared

    heads = weights.Q.shape[-3] if weights is not None and "head" in weights.axes else 1  # (..., head, m, d)
    out = _run(x0, batched, shared, integrator, x0_batched="x0" in names, fold=fold, save_fn=save_fn,
               return_attention=return_attention, tokens_are_states=picture == "raw" and field is None,
               loop_members=loop, heads=heads, impl=attention_impl)
    return _simulation(out, throw=throw, traced=traced, fold=fold, B=B, picture=picture, method_name=method_name)


def _ready_field(first, dynamics) -> AbstractDynamics | None:
    """The ready field, given as ``weights_or_field`` or as ``dynamics=`` (once), else None."""
    if dynamics is not None and first is not None:
        raise InputError("with dynamics= omit Q, K, V and beta: the field carries its own weights.")
    field = dynamics if dynamics is not None else first
    if dynamics is not None and not isinstance(dynamics, AbstractDynamics):
        raise InputError(f"dynamics must be an attnflow field (AbstractDynamics), got {type(dynamics).__name__}.")
    return field if isinstance(field, AbstractDynamics) else None


def _check_choices(picture, batch_mode, attention_impl) -> None:
    """The options that are plain choices among names."""
    if picture not in PICTURES:
        raise InputError(f"picture must be one of {PICTURES}, got {picture!r}.")
    if batch_mode not in ("vmap", "fold"):
        raise InputError(f"batch_mode must be 'vmap' or 'fold', got {batch_mode!r}.")
    if attention_impl not in IMPLS:
        raise InputError(f"attention_impl must be one of {IMPLS}, got {attention_impl!r}.")


#: the flat options of make_integrator that simulate passes through (its dtype is simulate's own)
_INTEGRATOR_OPTIONS = tuple(p for p in inspect.signature(make_integrator).parameters if p != "dtype")


def _integrator_or_plan(integrator, options: dict, dtype: str) -> tuple[IntegratorPlan | None, str]:
    """The checked plan of the flat options (None when ``integrator`` is given) and the method's name."""
    unknown = [k for k in options if k not in _INTEGRATOR_OPTIONS]
    if unknown:
        raise InputError(f"simulate takes no option {unknown[0]!r}; the integrator's options are "
                         f"{_INTEGRATOR_OPTIONS} (or pass integrator=).")
    if integrator is None:
        plan = integrator_plan(**options, dtype=dtype)
        return plan, plan.method_name
    if not isinstance(integrator, AbstractIntegrator):
        raise InputError(f"integrator must be an attnflow integrator (EulerStepper, RKStepper, ODESolver), got "
                         f"{type(integrator).__name__}.")
    if options:
        raise InputError(f"the integrator owns its time span, steps and saves: drop {tuple(options)} or build the "
                         "integrator from them (attnflow.integrate.make_integrator).")
    return None, _method_name(integrator)


def _method_name(integrator: AbstractIntegrator) -> str:
    """``Simulation.method`` of an integrator: "euler", the RK tableau's name, the diffrax solver's name."""
    if isinstance(integrator, EulerStepper):
        return "euler"
    if isinstance(integrator, RKStepper):
        return f"rk:{integrator.tableau.name}"
    if isinstance(integrator, ODESolver):
        names = [k for k, cls in SOLVERS.items() if type(integrator.solver) is cls]
        return names[0] if names else type(integrator.solver).__name__
    if _is_sde_solve(integrator):
        return type(integrator.solver).__name__.lower()
    return type(integrator).__name__


def _is_sde_solve(integrator) -> bool:
    """Whether ``integrator`` is a diffrax SDE solve (:class:`~attnflow.integrate.SDESolver`; named here without
    importing diffrax for the other integrators)."""
    return type(integrator).__name__ == "SDESolver" and hasattr(integrator, "noise")


def _num_saves(integrator: AbstractIntegrator) -> int | None:
    """How many states ``integrator`` saves (None for an integrator attnflow does not know)."""
    if getattr(integrator, "save_ts", None) is not None:  # RKStepper between given save times
        return int(np.shape(integrator.save_ts)[0])
    if isinstance(integrator, (EulerStepper, RKStepper)):
        return integrator.save_at.num_saves
    if isinstance(integrator, ODESolver) or _is_sde_solve(integrator):
        return 2 if integrator.ts is None else int(np.shape(integrator.ts)[0])
    return None


def _span(integrator: AbstractIntegrator) -> tuple[Any, Any]:
    """(t0, t1) of an integrator: an ODE solve's span, or a layer grid's first and last layer times."""
    if isinstance(integrator, ODESolver) or _is_sde_solve(integrator):
        return integrator.t0, integrator.t1
    if getattr(integrator, "save_ts", None) is not None:
        return integrator.save_ts[0], integrator.save_ts[-1]
    t0 = getattr(integrator, "t0", 0.0)
    return t0, t0 + integrator.dt * integrator.num_layers if hasattr(integrator, "num_layers") else None


def _check_fits(integrator, picture: str, weights, V) -> None:
    """The rules that combine the integrator with the weights: a singular I + dt V (exact discrete rescaling),
    more layers than per-layer weights."""
    if not isinstance(integrator, EulerStepper):
        return
    if picture == "rescaled":
        check_invertible_transfer(V if weights is None else
                                  weights.V.sum(axis=-3) if "head" in weights.axes else weights.V, integrator.dt)
    if weights is not None and integrator.num_layers > weights.num_layers > 1:
        raise InputError(f"the stepper runs {integrator.num_layers} layers but the weights hold only "
                         f"{weights.num_layers} (one set per layer).")


def _check_prebuilt(x0, K, V, beta, field, batch, picture, mask, attention_impl, return_attention,
                    fourier_max_score=None):
    """simulate(x0, field): the field and x0; returns the batched names and B (None if unbatched)."""
    names = () if batch is None else ((batch,) if isinstance(batch, str) else tuple(batch))
    if any(a is not None for a in (K, V)) or (beta is not None and "beta" not in names):
        raise InputError("with dynamics= omit Q, K, V and beta: the field carries its own weights "
                         "(beta= only with batch naming 'beta', to replace the field's beta by a batch).")
    if mask is not None or attention_impl != "auto":
        raise InputError("with dynamics= set mask and attention_impl on the field itself, not in simulate.")
    if fourier_max_score is not None:
        raise InputError("with dynamics= set fourier_max_score on the field itself (sphere_flow, AttentionFlow), not "
                         "in simulate.")
    if return_attention and not isinstance(field, AbstractAttentionDynamics):
        raise InputError(f"return_attention=True needs a field with an attention matrix; "
                         f"{type(field).__name__} has none.")
    if picture != "raw":
        raise InputError("with dynamics= the field defines its own picture (its tokens() gives x); "
                         "leave picture='raw'.")
    if "all" in names:
        raise InputError("with a ready field, batch names 'x0', 'field' (every array leaf) or the names of the "
                         "field's array leaves (e.g. 'beta'), not 'all'.")
    shape = v.check_array("x0", x0, "tokens (n, d)")
    if len(shape) != 2 + ("x0" in names):
        raise InputError(f"x0 must be tokens (n, d){' with a leading batch axis B' if 'x0' in names else ''}, "
                         f"got shape {shape}.")
    v.check_num_tokens("x0", shape[-2])
    sizes = {"x0": shape[0]} if "x0" in names else {}
    if beta is not None:
        b_shape = v.check_array("beta", beta, "a batch of inverse temperatures (B,)")
        if len(b_shape) != 1:
            raise InputError(f"beta with a field is a batch of inverse temperatures (B,), got shape {b_shape}.")
        v.check_beta("beta", beta)
        sizes["beta"] = b_shape[0]
    leaves = tuple(n for n in names if n != "x0" and not (n == "beta" and beta is not None))
    if leaves:
        sizes.update(field_batch_sizes(field, leaves))
    if len(set(sizes.values())) > 1:
        raise InputError(
            f"batched inputs must share one batch size B, got {', '.join(f'{k}: {s}' for k, s in sizes.items())}."
        )
    return names, (next(iter(sizes.values())) if sizes else None)


def _check_weights(x0, Q, K, V, beta, batch, picture):
    """Q, K, V (or one AttentionWeights as Q), beta and x0; returns (weights or None, Q, beta, names, B)."""
    weights = Q if isinstance(Q, AttentionWeights) else None
    names = _batch_names(batch, weights is not None)
    if weights is not None and (K is not None or V is not None):
        raise InputError("pass either an AttentionWeights as Q (and no K, V) or the three matrices Q, K, V.")
    if weights is None and (Q is None or K is None or V is None):
        raise InputError("simulate needs Q, K and V (or one AttentionWeights, or a field) after x0.")
    if weights is not None and "layer" in weights.axes and picture != "raw":
        raise InputError("weights with a 'layer' axis run in the raw picture only (there is no common rescaling).")
    if weights is not None and beta is not None:
        raise InputError("beta is part of the AttentionWeights; set it there, not in simulate(beta=...).")
    beta = 1.0 if beta is None else beta
    B = _validate_inputs(x0, weights, Q, K, V, beta, names)
    if weights is not None and picture == "rescaled" and "head" in weights.axes:
        members = [weights] if "weights" not in names else [jax.tree_util.tree_map(lambda a: a[i], weights)
                                                             for i in range(B)]
        for w in members:  # several heads rescale only with a common V (dynamics/multihead.py)
            rescaling_generator(w, "simulate(picture='rescaled')")
    return weights, (None if weights is not None else Q), beta, names, B


def _fourier_bound(x0, weights, Q, K, beta, integrator, *, picture, mask, attention_impl, max_score,
                   dtype) -> float | None:
    """:func:`attnflow.kernels.fourier.plan` of the (batch of) weights for this run: the bound on the score scale a the
    fields' modes are chosen for (the largest a over the batch, unless given), or None off the Fourier path."""
    w = weights if weights is not None else SimpleNamespace(Q=Q, K=K, beta=beta, q_bias=None, k_bias=None, axes=(),
                                                             d=np.shape(Q)[-1], dtype=dtype)
    keeps_circle = isinstance(integrator, EulerStepper) and integrator.shift is sphere_shift
    plan = _fourier.plan(w, attention_impl, mask=mask, max_score=max_score, owner="simulate",
                         relative=picture != "raw", keeps_circle=keeps_circle, tokens=x0)
    return None if plan is None else plan.bound


def _transports(field) -> bool:
    """Whether the field moves its state with a matrix function (e^{tV}, R^k: batched LAPACK on CPU)."""
    kinds = (RescaledFlow, DiscreteRescaledFlow)
    return any(isinstance(m, kinds) for m in jax.tree_util.tree_leaves(field, is_leaf=lambda m: isinstance(m, kinds)))


def _make_field(weights, Q, K, V, beta, names, *, picture, integrator, attention_impl, mask, fourier_max_score=None,
                positions=None):
    """The field of the weights, built once: ``(batched, shared)`` as :func:`attnflow._batching.vmap_build` splits
    it (batched None unless weights are batched)."""
    stepper = isinstance(integrator, EulerStepper)
    t0, t1 = _span(integrator)
    kw = dict(picture=picture, method="euler" if stepper else "ode", attention_impl=attention_impl, mask=mask,
              t0=t0, fourier_max_score=fourier_max_score, positions=positions)
    if weights is None:
        build = lambda Q, K, V, beta: make_dynamics(Q, K, V, beta=beta, **kw)
        args, axes = (Q, K, V, beta), tuple(0 if n in names else None for n in ("Q", "K", "V", "beta"))
    else:  # the weights carry beta; with a "layer" axis an ODE solver places layer l at t0 + l (t1 - t0)/L
        layer_dt = 1.0 if stepper else (t1 - t0) / weights.num_layers
        build = lambda w: make_dynamics(w, layer_dt=layer_dt, **kw)
        args, axes = (weights,), (0 if "weights" in names else None,)
    return vmap_build(build, axes, *args)


def _simulation(out, *, throw, traced, fold, B, picture, method_name) -> Simulation:
    """The :class:`Simulation` of ``_run``'s output; failures raised when ``throw`` (inside jit when traced)."""
    ts_out, states, tokens, attention, num_steps, traj = out
    what = f"simulate(picture={picture!r}, method={method_name!r})"
    if throw:
        if traced:
            ts_out, states, tokens, attention = checked((ts_out, states, tokens, attention), traj.result, what)
        else:
            raise_if_failed(traj, what=what)
    result, t_bad = traj.result, traj.t_nonfinite
    if fold:
        result, t_bad = jnp.broadcast_to(result, (B,)), jnp.broadcast_to(t_bad, (B,))
    return Simulation(ts=ts_out, states=states, tokens=tokens, attention=attention, num_steps=num_steps,
                      result=result, t_nonfinite=t_bad, picture=picture, method=method_name)


def _solve_all(x0, batched, shared, integrator, *, x0_batched, fold, save_fn, return_attention, tokens_are_states,
               loop_members, heads, impl):
    """Solve ``x0`` with the field ``eqx.combine(batched, shared)`` and post-process, vmapped over the batch
    (``batched``: the field's per-member leaves; ``fold``: one solve of the stacked states). Compiled once per
    structure of its arguments as :data:`_run`."""

    def solve(field, y0, fn, integrator=integrator):
        field = integrator.bind(field)
        traj = integrator.solve(field, y0, save_fn=fn)
        tokens = attention = None
        if save_fn is None:
            tokens = traj.ys if tokens_are_states else jax.vmap(field.tokens)(traj.ts, traj.ys)
            if return_attention:
                attention = jax.vmap(field.attention)(traj.ts, traj.ys)
        return traj.ts, traj.ys, tokens, attention, traj.num_steps, traj

    if fold:
        # One solve of the stacked state (B, n, d): shared weights, shared steps.
        fn = None if save_fn is None else (lambda t, y, args: jax.vmap(lambda yb: save_fn(t, yb, args))(y))
        ts_, ys, tokens, attention, num_steps, traj = solve(shared, x0, fn)
        front = lambda a: None if a is None else jnp.moveaxis(a, 1, 0)  # (T, B, ...) -> (B, T, ...)
        B = x0.shape[0]
        return (
            ts_,
            jax.tree_util.tree_map(front, ys),
            front(tokens),
            front(attention),
            jnp.broadcast_to(num_steps, (B,)),
            traj,
        )

    def single(x0, member, shared):
        batched, key = member
        # a noisy integrator: each member of a batch runs on its own Brownian path (its key)
        own = integrator if key is None else eqx.tree_at(lambda i: i.noise.key, integrator, key)
        return solve(shared if batched is None else eqx.combine(batched, shared), x0, save_fn, own)

    noise = getattr(integrator, "noise", None)
    keys = None
    if noise is not None and (x0_batched or batched is not None):
        size = x0.shape[0] if x0_batched else jax.tree_util.tree_leaves(batched)[0].shape[0]
        keys = noise.member_keys(size)
    member = (batched, keys)
    axes = (0 if x0_batched else None, None if batched is None and keys is None else 0, None)
    if all(ax is None for ax in axes):
        return single(x0, member, shared)
    return _shared_ts(_run_members(single, axes, x0, member, shared, loop_members, heads, impl))


#: the one jitted runner: a batch (of starts, weights or any leaves of a field) is one compile
_run = eqx.filter_jit(_solve_all)


def _shared_ts(out):
    """The members' save times are the integrator's grid, the same for every member: keep one (T,) copy."""
    ts = out[0]
    one = ts[0] if ts.shape[0] else jnp.zeros(ts.shape[1:], ts.dtype)
    return (one,) + tuple(out[1:])


def _run_members(single, axes, x0, batched, shared, loop_members, heads, impl):
    """``single`` over the batch: one member at a time where LAPACK needs it, else vmapped in groups."""
    if loop_members:
        # XLA:CPU: with a batch of weights, e^{tV} at the stage times of a step, R^{-1} V and a
        # save_fn's own LAPACK calls become independent batched LAPACK calls, which can
        # deadlock the CPU thread pool (attnflow._batching.loop_over_systems; seen with Tsit5,
        # and with Euler plus an SVD in save_fn); one member at a time cannot. Same results.
        return map_over_batch(single, axes)(x0, batched, shared)
    # XLA:CPU: cache-sized groups of systems (attnflow._cache.GROUP_BYTES), same results
    return vmap_systems(single, axes, tokens=x0.shape[-2], itemsize=jnp.dtype(x0.dtype).itemsize, matrices=heads,
                        impl=impl)(x0, batched, shared)
