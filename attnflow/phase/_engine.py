r"""One chunk of a phase diagram: (beta, system) pairs of one group, stepped with their statistics.

Every pair runs one token cloud through the group's field (:func:`attnflow.fields.build_field`,
the sweep's dynamics) with the Euler stepper of the field's registry entry, saving *statistics*
instead of states (a ``save_fn``): at each checkpoint layer (:attr:`PhaseConfig.checkpoint_layers`)
the observables :data:`OBSERVABLES` of the directions :math:`u_i = x_i / |x_i|` of the state the
field steps (x on the sphere; z in the rescaled picture; raw x otherwise); between checkpoints the
``save_fn`` computes nothing (a ``lax.cond`` on the layer index, which is the same for every pair).

Common random numbers: system s of a group starts from the same cloud (and, with
``weights = "per_system"``, draws the same weights) for every beta.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ..dynamics import normalise
from ..ensembles import draw_systems, system_seeds, token_key
from ..fields import build_field, field_entry
from ..integrate import EulerStepper
from ..observables import directions, gram_statistics, span_dimension
from ..sweep._fields import head_seeds
from ..sweep._mesh import sharded
from ._config import PhaseConfig, PhaseGroup

#: the per-system statistics recorded at every checkpoint, in table order
OBSERVABLES = ("pairs_clustered", "clusters", "energy", "span", "ip_min", "ip_mean", "ip_max")
#: the relative tolerance of the span dimension (eigenvalues of the Gram matrix above it times the trace)
SPAN_REL_TOL = 1e-6


def statistics(x, beta, threshold) -> dict:
    r"""The observables of one cloud (n, d), read on its directions :math:`x_i/|x_i|` (:data:`OBSERVABLES`).

    The Gram matrix :math:`G_{ij} = \langle u_i, u_j\rangle` is formed once:
    :func:`attnflow.observables.gram_statistics` (clustered pairs, clusters, energy, smallest / mean /
    largest off-diagonal entry) and :func:`~attnflow.observables.span_dimension` of U.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.phase import statistics
        >>> s = statistics(jnp.array([[1.0, 0.0], [2.0, 0.0], [0.0, 1.0]]), 1.0, 0.999)
        >>> round(float(s["pairs_clustered"]), 6), int(s["clusters"]), int(s["span"]), round(float(s["ip_mean"]), 6)
        (0.333333, 2, 2, 0.333333)
    """
    u = directions(x)
    return {**gram_statistics(u @ u.T, beta, threshold), "span": span_dimension(u, SPAN_REL_TOL).astype(u.dtype)}


def pair_index(config: PhaseConfig, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
    """(beta index, system) of the flattened pairs start..stop-1 of a group (beta-major order).

    Example:
        >>> from attnflow.phase import check_phase_config, load_phase_config, pair_index
        >>> cfg = load_phase_config(None)
        >>> cfg.update(beta=[1.0, 2.0], systems=3)
        >>> [a.tolist() for a in pair_index(check_phase_config(cfg), 2, 5)]
        [[0, 1, 1], [2, 0, 1]]
    """
    k = np.arange(start, stop)
    return k // config.systems, k % config.systems


def group_pairs(config: PhaseConfig) -> int:
    """The (beta, system) pairs of one group."""
    return len(config.beta) * config.systems


def _weights(config: PhaseConfig, group: PhaseGroup, systems: np.ndarray) -> tuple[np.ndarray, ...]:
    """Q, K, V of the given systems (leading axis; several heads: (B, H, d, d)), V divided by the spectral
    radius of V (of S = sum_h V_h for several heads), in float64 on the host."""
    heads = group.dynamics.num_heads
    if config.weights == "shared":
        seeds = system_seeds(config.seed, group.label + "|weights", 0, 1)
        drawn = head_seeds(seeds, config.seed, group.label + "|weights", 0, 1, heads)
        take = np.zeros(len(systems), dtype=int)
    else:
        seeds = system_seeds(config.seed, group.label + "|weights", int(systems.min()), int(systems.max()) + 1)
        drawn = head_seeds(seeds, config.seed, group.label + "|weights", int(systems.min()), int(systems.max()) + 1,
                           heads)
        take = systems - int(systems.min())
    flat = drawn.reshape(-1)
    Q, K, V = (np.asarray(a, np.float64) for a in draw_systems(flat, config.v_ensemble, config.qk_ensemble, group.d,
                                                                jnp.float64, config.density))
    d = group.d
    if heads > 1:
        Q, K, V = (a.reshape(-1, heads, d, d) for a in (Q, K, V))
        S = V.sum(axis=1)
    else:
        S = V
    rho = np.maximum(np.abs(np.linalg.eigvals(S)).max(axis=-1), 1e-30)
    V = V / (rho[:, None, None, None] if heads > 1 else rho[:, None, None])
    return Q[take], K[take], V[take]


def make_chunk_fn(config: PhaseConfig, group: PhaseGroup, mesh):
    """``compute(start, stop) -> columns`` of the group's pairs start..stop-1, sharded over ``mesh``.

    Columns: ``beta_index``, ``system`` (B,), ``finite`` (B,), ``t_nonfinite`` (B,) and every
    observable of :data:`OBSERVABLES` as (B, K) at the K checkpoint layers.
    """
    spec, dtype, layers = group.dynamics, config.jax_dtype, config.num_layers
    entry = field_entry(spec.field)
    ckpt = np.asarray(config.checkpoint_layers)
    is_ckpt = np.zeros(layers + 1, dtype=bool)
    is_ckpt[ckpt] = True
    is_ckpt = jnp.asarray(is_ckpt)
    dt, threshold, n, d = config.dt, config.threshold, group.n, group.d
    options = {"normalisation": config.normalisation} if spec.field == "sphere" else {}

    def one(beta, seed, Q, K, V):
        beta = beta.astype(dtype)
        x0 = jax.random.normal(token_key(seed), (n, d), dtype) / jnp.sqrt(jnp.asarray(d, dtype))
        if spec.name == "sphere":
            x0 = normalise(x0)
        field = build_field(spec.field, Q.astype(dtype), K.astype(dtype), V.astype(dtype), beta=beta,
                            picture=spec.picture, **spec.field_options(seed, d, layers, dtype), **options)
        stepper = EulerStepper(dt, layers, save_every=1, shift=entry.shift, checkpoint=None)
        blank = jax.tree_util.tree_map(lambda a: jnp.full_like(a, jnp.nan), statistics(x0, beta, threshold))

        def save(t, y, args):
            k = jnp.round(t / dt).astype(jnp.int32)
            return jax.lax.cond(is_ckpt[k], lambda y: statistics(y, beta, threshold), lambda y: blank, y)

        traj = stepper.solve(stepper.bind(field), x0, save_fn=save)
        stats = {name: traj.ys[name][ckpt] for name in OBSERVABLES}
        finite = jnp.all(jnp.stack([jnp.all(jnp.isfinite(v)) for v in stats.values()])) & (traj.result == 0)
        return {**stats, "finite": finite, "t_nonfinite": traj.t_nonfinite}

    fn = sharded(jax.vmap(one), mesh, per_system_loop=False)
    betas = np.asarray(config.beta, np.float64)

    def compute(start: int, stop: int) -> dict:
        b_idx, systems = pair_index(config, start, stop)
        Q, K, V = _weights(config, group, systems)
        seeds = system_seeds(config.seed, group.label, 0, config.systems)[systems]
        out = fn(betas[b_idx].astype(dtype), jnp.asarray(seeds, jnp.uint32), Q, K, V)
        cols = {k: np.asarray(v) for k, v in out.items()}
        cols.update(beta_index=b_idx, system=systems)
        return cols

    return compute
