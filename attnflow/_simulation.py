r"""One call for the common case: :func:`simulate` a token cloud, or an explicit batch of them.

It validates every input on the host (one clear sentence per problem, before any
compilation), builds the integrator (:class:`~attnflow.integrate.EulerStepper` or
:class:`~attnflow.integrate.ODESolver`) and the field of the requested picture
(:func:`attnflow.fields.make_dynamics`, or the user's ``dynamics=``) once, and hands both to one
jitted runner, ``_run(x0, field, integrator, ...)``:

* ``method="euler"``: the layer stepper (``dt`` required); in the rescaled picture
  this is the exact discrete rescaling of Remark 3.4, so ``x[k] = (I + dt V)^k z[k]``.
* any other method: a diffrax solver (``"tsit5"`` default), adaptive PID control, or
  constant steps when ``dt`` is given.

Batching is explicit (``batch=``, or ``jax.vmap`` around ``simulate``); an array with an
axis more than expected is an error, never a guess. ``simulate`` is traceable: ``jit``,
``vmap`` and ``grad`` over it work with the default settings, and failures are reported
inside jit (``Simulation.result``; ``throw=True`` raises).
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Sequence

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int, PyTree

from . import _fourier, _validate as v
from ._batching import lapack_needs_loop, map_over_batch, vmap_build, vmap_systems
from ._resources import check_memory
from ._x64 import float64_enabled, float64_scope
from ._attention import IMPLS
from .dynamics import AbstractAttentionDynamics, AbstractDynamics, FoldedBatch
from .dynamics._multihead import rescaling_generator
from .errors import InputError
from .fields import PICTURES, make_dynamics
from .integrate import DEFAULT_TOLERANCES, EulerStepper, ODESolver, make_solver, raise_if_failed
from .integrate._euler import plain_shift, sphere_shift
from .integrate._solution import checked
from ._linalg import check_invertible_transfer
from ._weights import AttentionWeights, check_shapes

__all__ = ["simulate", "Simulation", "load", "BATCHABLE"]

#: the .npz key of a saved simulation's metadata (JSON text)
_META_KEY = "__attnflow_simulation__"
#: the array fields of a Simulation, in order
_ARRAY_FIELDS = ("ts", "states", "tokens", "attention", "num_steps", "result", "t_nonfinite")

#: names that ``simulate(batch=...)`` accepts
BATCHABLE = ("x0", "Q", "K", "V", "beta", "weights")


class Simulation(eqx.Module):
    """Result of :func:`simulate`: a leading batch axis B on every per-system array when batched.

    All systems of a batch share their save times, so ``ts`` is (T,) with or without a batch
    (``pcolormesh(sim.ts, ...)`` or ``plot(sim.ts, sim.states[b, :, i, 0])`` fit either way).

    Attributes:
        ts: (T,) save times (layers ``t0 + k dt`` for the Euler stepper), shared by the batch.
        states: (T, n, d) or (B, T, n, d) states in the requested picture (x for ``"raw"``, z for
            ``"rescaled"``), or the pytree returned by ``save_fn``.
        tokens: (T, n, d) or (B, T, n, d) raw tokens x (equal to ``states`` in the raw picture;
            ``None`` when ``save_fn`` was used).
        attention: (T, n, n) or (B, T, n, n) attention matrices P when ``return_attention=True``
            ((T, H, n, n) with H heads).
        num_steps: steps (layers) taken, () or (B,).
        result: 0 on success, else a code of :mod:`attnflow.integrate._solution`
            (1: solver stopped before t1, 2: non-finite state), () or (B,).
        t_nonfinite: where the solution stops being finite (inf if never; the end of the step
            at which it blew up, or where the solver stopped: ``Trajectory.t_nonfinite``), () or (B,).
        picture, method: what was run.

    :meth:`save` writes a simulation to one ``.npz`` file and :func:`attnflow.load` reads it back.
    """

    ts: Float[Array, "T"]
    states: PyTree
    tokens: Float[Array, "*B T n d"] | None
    attention: Float[Array, "*B T n n"] | None
    num_steps: Array
    result: Int[Array, "*B"]
    t_nonfinite: Float[Array, "*B"]
    picture: str = eqx.field(static=True)
    method: str = eqx.field(static=True)

    def save(self, path) -> None:
        """Write this simulation to one ``.npz`` file (arrays and JSON metadata; no pickle).

        Every array keeps its dtype and shape; ``states`` may be the dict / tuple / list pytree of
        a ``save_fn``. The file is written atomically (a temporary file, then a rename), so an
        interrupted save never leaves a half-written file. Read it back with :func:`attnflow.load`.

        Args:
            path: the file to write (``.npz`` is the usual suffix; NumPy reads it with
                ``np.load(path, allow_pickle=False)``).

        Example:
            >>> import tempfile, pathlib, numpy as np, attnflow
            >>> sim = attnflow.simulate(np.eye(3, 2), np.eye(2), np.eye(2), np.eye(2), t1=1.0, num_saves=3)
            >>> path = pathlib.Path(tempfile.mkdtemp()) / "run.npz"
            >>> sim.save(path)
            >>> back = attnflow.load(path)
            >>> back.states.shape, back.ts.dtype, back.picture, bool((back.states == sim.states).all())
            ((3, 3, 2), dtype('float32'), 'raw', True)
        """
        import io
        import json

        from .runio import atomic_write_bytes

        arrays, fields = {}, {}
        for name in _ARRAY_FIELDS:
            fields[name] = _encode_tree(getattr(self, name), name, arrays)
        meta = {"format": "attnflow.Simulation", "format_version": 1, "attnflow_version": _version(),
                "picture": self.picture, "method": self.method, "fields": fields}
        arrays[_META_KEY] = np.array(json.dumps(meta))
        buf = io.BytesIO()
        np.savez(buf, **arrays)
        atomic_write_bytes(path, buf.getvalue())


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
        d = strip(V, "V")[-1]
    else:
        d = weights.d
    if xs[1] != d:
        raise InputError(f"the tokens have dimension d = {xs[1]}, but the weights act on dimension {d}.")
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
    Q: Float[Array, "*B m d"] | AttentionWeights | None = None,
    K: Float[Array, "*B m d"] | None = None,
    V: Float[Array, "*B d d"] | None = None,
    *,
    t1: float,
    t0: float = 0.0,
    picture: str = "raw",
    method: str | diffrax.AbstractSolver = "tsit5",
    dt: float | None = None,
    ts: Any = None,
    num_saves: int = 101,
    save_every: int | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    beta: float | Any = None,
    dtype: str = "float32",
    batch: str | Sequence[str] | None = None,
    return_attention: bool = False,
    save_fn: Callable[[Array, Array, PyTree], PyTree] | None = None,
    max_steps: int | None = 16384,
    batch_mode: str = "vmap",
    attention_impl: str = "auto",
    fourier_max_score: float | None = None,
    mask: Any = None,
    adjoint: diffrax.AbstractAdjoint | None = None,
    throw: bool = True,
    dynamics: AbstractDynamics | None = None,
    shift: str | Callable = "plain",
) -> Simulation:
    r"""Simulate :math:`\dot x_i = \sum_j \mathrm{softmax}_j(\beta\langle Qx_i, Kx_j\rangle) V x_j`.

    Args:
        x0: initial tokens (n, d) (or (B, n, d) with ``batch`` naming ``"x0"``), n >= 2 (one token does
            not interact: P = [1] and :math:`x(t) = e^{tV}x_0`).
        Q, K, V: (m, d), (m, d), (d, d) weights; or ``Q`` an :class:`~attnflow.AttentionWeights`
            (biases, several heads) and K, V omitted.
        t1, t0: time span (layers, for the Euler stepper: ``(t1 - t0)/dt`` layers).
        picture: ``"raw"`` (x) or ``"rescaled"`` (z = e^{-(t - t0)V} x; for Euler,
            z[k] = (I + dt V)^{-k} x[k]).
        method: ``"euler"`` (layer stepper), a diffrax solver name
            (``"tsit5"``, ``"dopri5"``, ``"dopri8"``, ...) or a diffrax solver instance.
        dt: Euler layer step, or a constant step for diffrax (None: adaptive).
        ts / num_saves: save times, or their number on a uniform grid (diffrax).
        save_every: Euler saves every this many layers (default: every layer).
        rtol, atol: adaptive tolerances (defaults depend on dtype).
        beta: inverse temperature, finite and > 0 (default 1, the paper's model; for a negative one
            pass -Q); with an AttentionWeights it is part of the weights.
        dtype: ``"float32"`` (default) or ``"float64"`` (computed in a scoped float64 mode;
            JAX's global configuration is never changed): the precision of the run and of every
            output, whatever the inputs' dtype. Under jit/vmap/grad a float64 run needs
            float64 around the transformation (``with jax.enable_x64(True):``); without it
            ``dtype="float64"`` with traced inputs is an ``InputError``.
        batch: which inputs carry a leading axis of B independent systems: ``"x0"``, a tuple
            of names among ``("x0", "Q", "K", "V", "beta", "weights")``, or ``"all"`` (x0 and
            the weights; add ``"beta"`` to batch beta too).
        return_attention: also return P at every save time.
        save_fn: ``(t, y, args) -> pytree`` of observables saved instead of states.
        batch_mode: ``"vmap"`` (default; each member its own adaptive steps) or
            ``"fold"`` (shared weights: one solve of the stacked state).
        attention_impl: ``"auto"``, ``"dense"``, ``"chunked"`` or ``"fused"`` (see
            :func:`attnflow.attend`), or ``"fourier"``: the O(n K) path for tokens on the unit circle
            (d = 2; :math:`\beta Q^T K` a scaled rotation such as Q = K = I; no mask; see
            :mod:`attnflow._fourier`), which needs states that stay on the circle: ``method="euler"``
            with ``shift="sphere"`` and x0 on the circle (for the ODE flow on the circle pass
            ``dynamics=sphere_flow(..., attention_impl="fourier")``). Forward-mode autodiff needs
            ``"dense"`` (or ``"fourier"``).
        fourier_max_score: with ``attention_impl="fourier"``, an upper bound of the score scale
            :math:`a = |\beta c|` (:math:`\beta Q^T K = c R(\alpha)`) that sets the number of Fourier
            modes; by default the largest a of the (batch of) weights, read on the host, so it is
            needed only when simulate itself runs inside jit / vmap / grad.
        mask: None, ``"causal"`` or a boolean (n, n) attention mask.
        adjoint: diffrax adjoint for gradients (default ``RecursiveCheckpointAdjoint``;
            ``diffrax.BacksolveAdjoint()``, ``diffrax.ForwardMode()``); diffrax solvers only.
        dynamics: a prebuilt field (any :class:`~attnflow.dynamics.AbstractDynamics`: multi-head,
            feed-forward, layer-varying, sphere, ...) to run instead of building one from Q, K, V
            (then omit Q, K, V, beta and picture; ``batch`` may name only ``"x0"``).
            Weights with a ``"layer"`` axis need no ``dynamics``: the stepper runs layer l with
            weights l, an ODE solver interpolates them linearly at spacing (t1 - t0)/L.
        shift: the Euler stepper's update, ``"plain"`` (y + dy), ``"sphere"`` (renormalise every
            token after each layer: post-LN) or a function ``(y, dy) -> y_next``.
        throw: raise when a solve fails (:class:`~attnflow.NonFiniteError` /
            :class:`~attnflow.SolverError` on the host; an ``equinox`` runtime error inside
            jit). With ``throw=False`` see ``Simulation.result``.

    Example:
        >>> import jax, attnflow
        >>> x0 = jax.random.normal(jax.random.key(0), (16, 2))
        >>> I = jax.numpy.eye(2)
        >>> sim = attnflow.simulate(x0, I, I, I, t1=5.0, picture="rescaled", num_saves=11)
        >>> sim.states.shape, sim.tokens.shape, int(sim.result)
        ((11, 16, 2), (11, 16, 2), 0)
        >>> xs = jax.random.normal(jax.random.key(1), (3, 16, 2))
        >>> attnflow.simulate(xs, I, I, I, t1=1.0, num_saves=2, batch="x0").states.shape
        (3, 2, 16, 2)
    """
    if dtype not in ("float32", "float64"):
        raise InputError(f"dtype must be 'float32' or 'float64', got {dtype!r}.")
    if dtype == "float64" and not float64_enabled() and v.is_traced(x0, Q, K, V, beta, dynamics, ts, t0, t1, dt):
        raise InputError(
            "simulate(dtype='float64') was called inside a JAX transformation (jit/vmap/grad) while float64 is "
            "disabled; enter `with jax.enable_x64(True):` around the transformation, or call simulate outside it."
        )
    scope = float64_scope() if dtype == "float64" else contextlib.nullcontext()
    with scope:
        return _simulate(x0, Q, K, V, t1=t1, t0=t0, picture=picture, method=method, dt=dt, ts=ts,
                         num_saves=num_saves, save_every=save_every, rtol=rtol, atol=atol, beta=beta, dtype=dtype,
                         batch=batch, return_attention=return_attention, save_fn=save_fn, max_steps=max_steps,
                         batch_mode=batch_mode, attention_impl=attention_impl, mask=mask, adjoint=adjoint,
                         throw=throw, dynamics=dynamics, shift=shift, fourier_max_score=fourier_max_score)


def _simulate(x0, Q, K, V, *, t1, t0, picture, method, dt, ts, num_saves, save_every, rtol, atol, beta, dtype,
              batch, return_attention, save_fn, max_steps, batch_mode, attention_impl, mask, adjoint, throw,
              dynamics=None, shift="plain", fourier_max_score=None):
    """validate -> build the integrator -> build the field -> run -> :class:`Simulation`."""
    method_name, shift_fn = _check_options(picture, method, batch_mode, attention_impl, shift)
    if dynamics is not None:
        names, B = _check_prebuilt(x0, Q, K, V, beta, dynamics, batch, picture, mask, attention_impl,
                                   return_attention, fourier_max_score)
        weights, beta = None, 1.0
    else:
        weights, beta, names, B = _check_weights(x0, Q, K, V, beta, batch, picture)
    _check_run(t0, t1, method_name, dt, adjoint, batch_mode, names)
    jdtype = jnp.float64 if dtype == "float64" else jnp.float32
    x0, beta = jnp.asarray(x0, jdtype), jnp.asarray(beta, jdtype)
    if dynamics is not None:
        dynamics = jax.tree_util.tree_map(lambda a: a.astype(jdtype) if eqx.is_inexact_array(a) else a, dynamics)
    elif weights is None:
        Q, K, V = (jnp.asarray(a, jdtype) for a in (Q, K, V))
    else:
        weights = weights.astype(jdtype)
    traced = v.is_traced(x0, Q, K, V, beta, weights, dynamics)
    if attention_impl == "fourier" and dynamics is None:
        fourier_max_score = _check_fourier(x0, weights, Q, K, beta, picture=picture, method_name=method_name,
                                           shift=shift_fn, mask=mask, max_score=fourier_max_score, dtype=jdtype)
    elif fourier_max_score is not None and dynamics is None:
        raise InputError(f"fourier_max_score applies to attention_impl='fourier', got attention_impl={attention_impl!r}.")

    def check_size(num_out: int, fix: str) -> None:  # before any save-sized array exists
        _check_output_size(x0, B, num_out, return_attention and save_fn is None,
                           save_fn is None and (picture != "raw" or dynamics is not None), weights, fix)

    if method_name == "euler":
        integrator = _make_stepper(t0, t1, dt, ts, save_every, shift_fn, picture, weights, V, check_size)
    else:
        integrator = _make_ode_solver(method, t0, t1, dt, ts, num_saves, rtol, atol, max_steps, adjoint, dtype,
                                      jdtype, check_size)
    fold = batch_mode == "fold" and B is not None
    batched, shared = _make_field(dynamics, weights, Q, K, V, beta, names, picture=picture, integrator=integrator,
                                  attention_impl=attention_impl, mask=mask, fold=fold,
                                  fourier_max_score=fourier_max_score)

    heads = weights.Q.shape[-3] if weights is not None and "head" in weights.axes else 1  # (..., head, m, d)
    out = _run(x0, batched, shared, integrator, x0_batched="x0" in names, fold=fold, save_fn=save_fn,
               return_attention=return_attention, tokens_are_states=picture == "raw" and dynamics is None,
               loop_members=batched is not None and (picture != "raw" or save_fn is not None) and lapack_needs_loop(),
               heads=heads, impl=attention_impl)
    return _simulation(out, throw=throw, traced=traced, fold=fold, B=B, picture=picture, method_name=method_name)


def _check_options(picture, method, batch_mode, attention_impl, shift) -> tuple[str, Callable]:
    """The method's name and the shift function, after checking the options that are plain choices."""
    method_name = method if isinstance(method, str) else type(method).__name__
    if isinstance(method, str) and method != "euler":
        make_solver(method)  # validates the name
    if picture not in PICTURES:
        raise InputError(f"picture must be one of {PICTURES}, got {picture!r}.")
    if batch_mode not in ("vmap", "fold"):
        raise InputError(f"batch_mode must be 'vmap' or 'fold', got {batch_mode!r}.")
    if attention_impl not in IMPLS:
        raise InputError(f"attention_impl must be one of {IMPLS}, got {attention_impl!r}.")
    shift_fn = {"plain": plain_shift, "sphere": sphere_shift}.get(shift, shift) if isinstance(shift, str) else shift
    if not callable(shift_fn):
        raise InputError(f"shift must be 'plain', 'sphere' or a function (y, dy) -> y_next, got {shift!r}.")
    if shift_fn is not plain_shift and method_name != "euler":
        raise InputError("shift= applies to the Euler layer stepper (method='euler'); an ODE solver integrates "
                         "the field as given (use a tangent-projected field, e.g. sphere_flow, on the sphere).")
    return method_name, shift_fn


def _check_prebuilt(x0, Q, K, V, beta, dynamics, batch, picture, mask, attention_impl, return_attention,
                    fourier_max_score=None):
    """simulate(dynamics=...): the field and x0; returns the batched names and B (None if unbatched)."""
    if not isinstance(dynamics, AbstractDynamics):
        raise InputError(f"dynamics must be an attnflow field (AbstractDynamics), got {type(dynamics).__name__}.")
    if any(a is not None for a in (Q, K, V, beta)):
        raise InputError("with dynamics= omit Q, K, V and beta: the field carries its own weights.")
    if mask is not None or attention_impl != "auto":
        raise InputError("with dynamics= set mask and attention_impl on the field itself, not in simulate.")
    if fourier_max_score is not None:
        raise InputError("with dynamics= set fourier_max_score on the field itself (sphere_flow, AttentionFlow), not "
                         "in simulate.")
    if return_attention and not isinstance(dynamics, AbstractAttentionDynamics):
        raise InputError(f"return_attention=True needs a field with an attention matrix; "
                         f"{type(dynamics).__name__} has none.")
    if picture != "raw":
        raise InputError("with dynamics= the field defines its own picture (its tokens() gives x); "
                         "leave picture='raw'.")
    names = _batch_names(batch, False)
    if set(names) - {"x0"}:
        raise InputError(f"with dynamics= only 'x0' can be batched (vmap over fields yourself), got {names}.")
    shape = v.check_array("x0", x0, "tokens (n, d)")
    if len(shape) != 2 + ("x0" in names):
        raise InputError(f"x0 must be tokens (n, d){' with a leading batch axis B' if names else ''}, "
                         f"got shape {shape}.")
    v.check_num_tokens("x0", shape[-2])
    return names, (shape[0] if names else None)


def _check_weights(x0, Q, K, V, beta, batch, picture):
    """Q, K, V (or one AttentionWeights as Q), beta and x0; returns (weights or None, beta, names, B)."""
    weights = Q if isinstance(Q, AttentionWeights) else None
    names = _batch_names(batch, weights is not None)
    if weights is not None and (K is not None or V is not None):
        raise InputError("pass either an AttentionWeights as Q (and no K, V) or the three matrices Q, K, V.")
    if weights is None and (K is None or V is None):
        raise InputError("simulate needs Q, K and V (or one AttentionWeights as Q).")
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
    return weights, beta, names, B


def _check_run(t0, t1, method_name, dt, adjoint, batch_mode, names) -> None:
    """The time span, the step and the options that depend on the method or the batch."""
    v.check_time_span(t0, t1)
    if method_name == "euler" and dt is None:
        raise InputError("method='euler' (the layer stepper) needs a step dt > 0 (dt=1 is one transformer layer).")
    if dt is not None:
        v.check_positive("dt", dt)
    if adjoint is not None and method_name == "euler":
        raise InputError("adjoint= applies to diffrax solvers; the Euler stepper is differentiated directly "
                         "by JAX (reverse or forward mode).")
    if batch_mode == "fold" and any(n in names for n in ("Q", "K", "V", "beta", "weights")):
        raise InputError("batch_mode='fold' needs weights shared by the whole batch; use batch_mode='vmap'.")


def _check_fourier(x0, weights, Q, K, beta, *, picture, method_name, shift, mask, max_score, dtype) -> float:
    """``attention_impl="fourier"`` on the host: where it applies (one sentence where not) and the bound on the
    score scale a the field's modes are chosen for (the largest a over the batch, unless given)."""
    fix = "use attention_impl='chunked' (or 'auto')"
    if picture != "raw":
        raise InputError(f"attention_impl='fourier' runs in the raw picture only: the rescaled tokens e^(tV) z "
                         f"leave the unit circle; {fix}.")
    if method_name != "euler" or shift is not sphere_shift:
        raise InputError("attention_impl='fourier' attends with tokens on the unit circle, where simulate keeps them "
                         "with method='euler' and shift='sphere' (post-LN layers); for the ODE flow on the circle pass "
                         "dynamics=sphere_flow(..., attention_impl='fourier').")
    if mask is not None:
        raise InputError(f"attention_impl='fourier' takes no mask (a mask breaks the convolution structure); {fix}.")
    if np.shape(x0)[-1] != 2:
        raise InputError(f"attention_impl='fourier' is for tokens on the circle (d = 2), got d = {np.shape(x0)[-1]}; "
                         f"{fix}.")
    if weights is not None and "layer" in weights.axes:
        raise InputError(f"attention_impl='fourier' takes one set of weights for every layer, these have a 'layer' "
                         f"axis; {fix}.")
    if not v.is_traced(x0):
        off = float(np.max(np.abs(np.linalg.norm(np.asarray(x0, np.float64), axis=-1) - 1)))
        if off > _UNIT_TOLERANCE:
            raise InputError(f"x0 must lie on the unit circle for attention_impl='fourier' (|x_i| = 1 to "
                             f"{_UNIT_TOLERANCE:g}), but a token has |x_i| - 1 = {off:.3g}; normalise it "
                             "(attnflow.dynamics.normalise).")
    Qs, Ks, bs = (Q, K, beta) if weights is None else (weights.Q, weights.K, weights.beta)
    if v.is_traced(Qs, Ks, bs):
        if max_score is None:
            raise InputError("simulate(attention_impl='fourier') runs inside jit/vmap/grad here, so it cannot read the "
                             "score scale of the weights; pass fourier_max_score=, an upper bound of a = |beta| |c| "
                             "for beta Q^T K = c R(alpha) (checked at run time).")
        return float(max_score)
    a_max, _ = _fourier.concrete_scale(Qs, Ks, bs, dtype, "simulate")
    if max_score is None:
        return a_max
    if a_max > float(max_score) * (1 + 1e-12):
        raise InputError(f"fourier_max_score = {float(max_score):.6g} is below the largest score scale "
                         f"a = |beta| |c| = {a_max:.6g} of the weights; raise it (it only sets the number of modes).")
    return float(max_score)


#: how far from the unit circle x0 may be for attention_impl="fourier" (float32 rounding of a normalised x0)
_UNIT_TOLERANCE = 1e-6


def _make_stepper(t0, t1, dt, ts, save_every, shift, picture, weights, V,
                  check_size: Callable[[int, str], None]) -> EulerStepper:
    """The layer stepper on t0 + k dt, k = 0..(t1 - t0)/dt (``check_size(saves, fix)`` refuses outputs
    that cannot fit)."""
    if ts is not None:
        raise InputError("ts is not used by method='euler', which saves every save_every layers from t0 "
                         "(the layers t0 + k dt); drop ts and set save_every, or choose an ODE method.")
    span = float(t1) - float(t0)
    num_layers = v.whole_layers(span, float(dt), "the number of layers (t1 - t0)/dt",
                                fix="use a larger dt or a shorter span")
    if num_layers is None:
        raise InputError(
            f"the Euler stepper needs (t1 - t0)/dt to be a positive whole number of layers, "
            f"got (t1 - t0) = {span!r} and dt = {dt!r}."
        )
    save_every = 1 if save_every is None else v.check_int("save_every", save_every, meaning="layers per save")
    if num_layers % save_every:
        raise InputError(
            f"save_every must be a positive divisor of the number of layers {num_layers}, got {save_every}."
        )
    if picture == "rescaled":
        check_invertible_transfer(V if weights is None else
                                  weights.V.sum(axis=-3) if "head" in weights.axes else weights.V, dt)
    if weights is not None and num_layers > weights.num_layers > 1:
        raise InputError(f"the stepper runs {num_layers} layers but the weights hold only "
                         f"{weights.num_layers} (one set per layer).")
    check_size(num_layers // save_every + 1, "raise save_every (fewer saved layers)")
    return EulerStepper(float(dt), num_layers, t0=float(t0), save_every=save_every, shift=shift)


def _make_ode_solver(method, t0, t1, dt, ts, num_saves, rtol, atol, max_steps, adjoint, dtype, jdtype,
                     check_size: Callable[[int, str], None]) -> ODESolver:
    """The diffrax solve from t0 to t1 (adaptive, or constant steps dt); ``check_size(saves, fix)`` refuses
    outputs that cannot fit before the save times are built."""
    if ts is None:
        num_out = v.check_int("num_saves", num_saves, minimum=2, meaning="save times from t0 to t1")
        fix = "lower num_saves"
    else:
        v.check_save_times(ts, t0, t1)
        num_out, fix = np.shape(ts)[0], "pass fewer save times ts"
    for name, tol in (("rtol", rtol), ("atol", atol)):
        if tol is not None:
            v.check_positive(name, tol, "a tolerance of the adaptive step control, a finite positive scalar")
    if max_steps is not None:
        v.check_int("max_steps", max_steps, meaning="the most solver steps, or None")
    check_size(num_out, fix)
    default_rtol, default_atol = DEFAULT_TOLERANCES[dtype]
    ts = (jnp.asarray(ts, jdtype) if ts is not None
          else jnp.linspace(float(t0), float(t1), num_out, dtype=jdtype))
    solver = ODESolver(float(t0), float(t1), ts=ts, solver=make_solver(method),
                       rtol=default_rtol if rtol is None else float(rtol),
                       atol=default_atol if atol is None else float(atol),
                       dt0=None if dt is None else float(dt), adaptive=dt is None, max_steps=max_steps,
                       adjoint=adjoint)
    return solver


def _make_field(dynamics, weights, Q, K, V, beta, names, *, picture, integrator, attention_impl, mask, fold,
                fourier_max_score=None):
    """The field, built once: ``(batched, shared)`` as :func:`attnflow._batching.vmap_build` splits it (batched
    None unless weights are batched); a shared field around a batch of states is a :class:`FoldedBatch` with
    ``fold``."""
    if dynamics is not None:
        field, batched = dynamics, None
    else:
        stepper = isinstance(integrator, EulerStepper)
        kw = dict(picture=picture, method="euler" if stepper else "ode", attention_impl=attention_impl, mask=mask,
                  t0=integrator.t0, fourier_max_score=fourier_max_score)
        if weights is None:
            build = lambda Q, K, V, beta: make_dynamics(Q, K, V, beta=beta, **kw)
            args, axes = (Q, K, V, beta), tuple(0 if n in names else None for n in ("Q", "K", "V", "beta"))
        else:  # the weights carry beta; with a "layer" axis an ODE solver places layer l at t0 + l (t1 - t0)/L
            layer_dt = 1.0 if stepper else (integrator.t1 - integrator.t0) / weights.num_layers
            build = lambda w: make_dynamics(w, layer_dt=layer_dt, **kw)
            args, axes = (weights,), (0 if "weights" in names else None,)
        batched, field = vmap_build(build, axes, *args)
    return batched, (FoldedBatch(field) if fold else field)


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


@eqx.filter_jit
def _run(x0, batched, shared, integrator, *, x0_batched, fold, save_fn, return_attention, tokens_are_states,
         loop_members, heads, impl):
    """Solve ``x0`` with the field ``eqx.combine(batched, shared)`` and post-process, vmapped over the batch
    (``batched``: the field's per-member leaves; ``fold``: one solve of the stacked states)."""

    def solve(field, y0, fn):
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

    def single(x0, batched, shared):
        return solve(shared if batched is None else eqx.combine(batched, shared), x0, save_fn)

    axes = (0 if x0_batched else None, None if batched is None else 0, None)
    if all(ax is None for ax in axes):
        return single(x0, batched, shared)
    return _shared_ts(_run_members(single, axes, x0, batched, shared, loop_members, heads, impl))


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


def load(path) -> Simulation:
    """Read a :class:`Simulation` written by :meth:`Simulation.save` (no pickle is involved).

    The result equals the saved simulation: the same arrays (dtypes, shapes, values), the same
    ``states`` pytree, picture and method. Arrays come back as JAX arrays; float64 arrays
    outside JAX's float64 mode (``jax.enable_x64``) come back as NumPy float64 arrays, since
    JAX would make them float32.

    Args:
        path: a file written by :meth:`Simulation.save`.

    Raises:
        InputError: the file is missing, or is not a simulation saved by attnflow.

    Example:
        >>> import tempfile, pathlib, numpy as np, attnflow
        >>> sim = attnflow.simulate(np.eye(4, 2)[None].repeat(2, 0), np.eye(2), np.eye(2), np.eye(2), t1=1.0,
        ...                         num_saves=5, batch="x0", return_attention=True)
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "batch.npz"
        >>> sim.save(path)
        >>> back = attnflow.load(path)
        >>> back.ts.shape, back.states.shape, back.attention.shape
        ((5,), (2, 5, 4, 2), (2, 5, 4, 4))
    """
    import json
    import os
    import zipfile

    if not os.path.isfile(path):
        raise InputError(f"{path} does not exist (or is not a file); give a file written by Simulation.save.")
    not_ours = f"{path} is not an attnflow simulation (write one with Simulation.save)"
    from .runio import npz_problem

    problem = npz_problem(path)  # numpy would read a text file as a pickle, an empty one not at all
    if problem is not None:
        raise InputError(f"{not_ours}: {problem}.")
    try:
        data = np.load(path, allow_pickle=False)
        if not isinstance(data, np.lib.npyio.NpzFile):
            raise InputError(f"{not_ours}: it is a single NumPy array, not an .npz archive.")
        with data:
            if _META_KEY not in data.files:
                raise InputError(f"{not_ours}: it holds no attnflow metadata.")
            meta = json.loads(str(data[_META_KEY][()]))
            if meta.get("format") != "attnflow.Simulation":
                raise InputError(f"{not_ours}: its metadata names the format {meta.get('format')!r}.")
            if meta.get("format_version", 0) > 1:
                raise InputError(f"{path} was saved by a newer attnflow ({meta.get('attnflow_version')}, file "
                                 f"format {meta['format_version']}); update attnflow to read it.")
            arrays = {k: data[k] for k in data.files if k != _META_KEY}
    except InputError:
        raise
    except (OSError, EOFError, ValueError, zipfile.BadZipFile, json.JSONDecodeError, KeyError) as err:
        raise InputError(f"{not_ours}: {err}") from None
    try:
        fields = {name: _decode_tree(meta["fields"][name], arrays) for name in _ARRAY_FIELDS}
        return Simulation(**fields, picture=str(meta["picture"]), method=str(meta["method"]))
    except (KeyError, TypeError, ValueError) as err:
        raise InputError(f"{not_ours}: its metadata does not match its arrays ({err}).") from None


def _version() -> str:
    from . import __version__

    return __version__


def _encode_tree(tree, where: str, arrays: dict) -> Any:
    """JSON description of ``tree`` (None, an array, or dict / tuple / list of them); arrays go to ``arrays``."""
    if tree is None:
        return None
    if isinstance(tree, dict):
        if not all(isinstance(k, str) for k in tree):
            raise InputError(f"Simulation.save stores dicts with string keys only; {where} has keys {list(tree)}.")
        return {"dict": {k: _encode_tree(val, f"{where}[{k!r}]", arrays) for k, val in tree.items()}}
    if type(tree) in (tuple, list):
        kind = type(tree).__name__
        return {kind: [_encode_tree(val, f"{where}[{i}]", arrays) for i, val in enumerate(tree)]}
    if isinstance(tree, (jax.Array, np.ndarray, np.generic, int, float, bool, complex)):
        a = np.asarray(tree)
        if a.dtype.kind not in "biufc":
            raise InputError(f"Simulation.save stores numeric arrays only; {where} has dtype {a.dtype}.")
        key = f"array_{len(arrays)}"
        arrays[key] = a
        return {"array": key, "dtype": a.dtype.str, "shape": list(a.shape)}
    raise InputError(f"Simulation.save cannot store {where} of type {type(tree).__name__}: save_fn outputs must be "
                     "arrays or dicts (string keys), tuples and lists of them.")


def _decode_tree(spec, arrays: dict):
    """Inverse of :func:`_encode_tree`."""
    if spec is None:
        return None
    if "dict" in spec:
        return {k: _decode_tree(val, arrays) for k, val in spec["dict"].items()}
    if "tuple" in spec:
        return tuple(_decode_tree(val, arrays) for val in spec["tuple"])
    if "list" in spec:
        return [_decode_tree(val, arrays) for val in spec["list"]]
    a = arrays[spec["array"]]
    if a.dtype.str != spec["dtype"] or list(a.shape) != spec["shape"]:
        raise ValueError(f"array {spec['array']} is {a.dtype.str} {list(a.shape)}, the metadata says "
                         f"{spec['dtype']} {spec['shape']}")
    j = jnp.asarray(a)
    return j if j.dtype == a.dtype else a
