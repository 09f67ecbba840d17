r"""One chunk of a phase diagram: (beta, system) pairs of one group, stepped with their statistics.

Every pair runs one token cloud through the group's field (:func:`attnflow.fields.build_field`,
the sweep's dynamics) with the Euler layer of the field's registry entry
(:class:`~attnflow.integrate.EulerStepper`'s layer: :math:`y \leftarrow \mathrm{shift}(y, \Delta t\, f(t_k, y))`),
and keeps *statistics* instead of states: the observables :data:`OBSERVABLES` of the directions
:math:`u_i = x_i / |x_i|` of the state the field steps (x on the sphere; z in the rescaled picture;
raw x otherwise) at each checkpoint layer (:attr:`PhaseConfig.checkpoint_layers`).

How the work is laid out (measured on a 2-core CPU, n = 32; benchmarks/bench_phase.py):

* the layers run in :class:`~attnflow.integrate.EulerStepper` with ``save_at`` the checkpoint layers and
  ``loop="fori"``: one ``lax.scan`` over the checkpoint intervals, each a ``fori_loop`` of plain layers,
  and the statistics as its ``save_fn`` (compiled once, however the checkpoints are spaced; no per-layer
  branch, and no (layers + 1)-row buffer of blanks);
* the pairs of a chunk run in cache-sized groups (:func:`attnflow.vmap_systems`, sized by :data:`PAIR_MATRICES`):
  a vmap over thousands of pairs streams their n x n score matrices through memory at every layer;
* the sphere with Q = K = V = I (the model of the sphere literature and the peers' script) is the sphere
  field's registry option ``identity_weights=True`` (:class:`~attnflow.dynamics.IdentitySphereFlow`): it
  skips the three d x d projections, which are exact identities there and cost several times the attention
  itself at d >> n, and its ``vector_field_with_aux`` hands the softmax row sums of the layer that leaves a
  checkpoint to the statistics (``save_aux=True``), which give the energy
  (:func:`attnflow.observables._pairs.sphere_energy_from_row_sums`: -20% a chunk at n = 32, d = 2).

The 1/n normalisation (``normalisation = "mean"``) steps the field divided by
:math:`s(\beta) = \max(\sqrt\beta\,e^{\beta-1/2}, 1)` (:func:`~attnflow.phase.step_scale`): a layer advances the
rescaled time :math:`\tau = s(\beta)\,t` by dt (the 1/n flow's own step is :math:`dt/s(\beta)`, the stepper's dt
for general weights), and every time the job records is :math:`\tau`. With Q = K = V = I the field itself is
divided by s (the option ``log_scale``), computed as the softmax layer times :math:`r_i e^{\beta - \log s}/n`
(:math:`r_i` the row sums of the max-shifted exponentials), so no :math:`e^\beta` is formed and every beta is finite.

Common random numbers: system s of a group starts from the same cloud (and, with
``weights = "per_system"``, draws the same weights) for every beta.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import math
from concurrent.futures import ThreadPoolExecutor

import jax
import jax.numpy as jnp
import numpy as np

from .._lazy import import_ahead
from .._x64 import float64_enabled, float64_scope
from ..ensembles import draw_clouds, draw_clustered_clouds, draw_heads, head_seeds, system_seeds
from ..fields import build_field, field_entry
from ..observables import directions, gram_statistics, span_dimension, sphere_energy_from_row_sums
from ..runs import callback_mesh, kept_jit, sharded
from ._config import PhaseConfig, PhaseGroup, log_step_scale

#: the per-system statistics recorded at every checkpoint, in table order
OBSERVABLES = ("pairs_clustered", "clusters", "energy", "span", "ip_min", "ip_mean", "ip_max")
#: groups of more tokens hold no n x n matrix: in the plane (d = 2) they read their statistics from the sorted angles
#: and Fourier moments (:func:`attnflow.observables.circle_gram_statistics`, O(n log n + n K)) and the sphere with
#: Q^T K = I attends on the Fourier path; in R^3 (d = 3) from a k-d tree and an octree of cubes on the host
#: (:func:`attnflow.observables.sphere_gram_statistics`, the energy from the sphere path's sums) and the identity
#: sphere attends on the sphere path (:class:`attnflow.dynamics.IdentitySphereFlow`, its degree set by the group's
#: largest beta): n = 10^5 and more. Up to it, and in d >= 4, the dense Gram matrix
LARGE_CLOUD_ABOVE = 4096
#: the relative tolerance of the span dimension (eigenvalues of the Gram matrix above it times the trace)
SPAN_REL_TOL = 1e-6
#: n x n arrays one pair holds at once while it steps and reads its statistics (scores, exponentials,
#: Gram matrix, graph, ...), and copies of its (n, d) state: they size the groups of pairs run together
#: on CPU (:func:`_pair_group`: 58 pairs at n = 32, d = 2; 16 at d = 128). On a loaded 2-core CPU, groups
#: of 32 to 256 pairs ran within the noise of each other at n = 32, d = 2, 16 and 512 were slower, and
#: 8 to 32 pairs were alike at d = 128; a vmap of all pairs took about 3x longer.
PAIR_MATRICES, PAIR_STATES = 8, 6
#: a noisy group's Brownian path of system s: the key fold_in(key(seed_s), NOISE_STREAM), seed_s the seed of its cloud
NOISE_STREAM = 1
#: modules the job reads its results with and no earlier step needs (scipy.special: the intervals' Student-t and
#: normal quantiles, the equiangular line's exponential integrals; 0.2 s of one core to import), imported on another
#: thread while XLA compiles the chunk's program, when Python's lock is free, instead of at the job's start
IMPORT_WHILE_COMPILING = ("scipy.special",)


def statistics(x, beta, threshold, *, energy=None, circle_modes: int | None = None,
               sphere_bound: float | None = None) -> dict:
    r"""The observables of one cloud (n, d), read on its directions :math:`x_i/|x_i|` (:data:`OBSERVABLES`).

    The Gram matrix :math:`G_{ij} = \langle u_i, u_j\rangle` is formed once:
    :func:`attnflow.observables.gram_statistics` (clustered pairs, clusters, energy, smallest / mean /
    largest off-diagonal entry) and :func:`~attnflow.observables.span_dimension` of U. ``energy``: the
    energy when the caller has it already (the identity sphere's, from its next layer's softmax).
    ``circle_modes`` (tokens in the plane): the same statistics without the Gram matrix,
    :func:`~attnflow.observables.circle_gram_statistics` with this many Fourier modes for the energy.
    ``sphere_bound`` (tokens in R^3): the same statistics without the Gram matrix,
    :func:`~attnflow.observables.sphere_gram_statistics`, its energy (where not given) at the sphere path's degree of
    this upper bound of beta.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.phase import statistics
        >>> s = statistics(jnp.array([[1.0, 0.0], [2.0, 0.0], [0.0, 1.0]]), 1.0, 0.999)
        >>> round(float(s["pairs_clustered"]), 6), int(s["clusters"]), int(s["span"]), round(float(s["ip_mean"]), 6)
        (0.333333, 2, 2, 0.333333)
    """
    u = directions(x)
    if circle_modes is not None:
        from ..observables import circle_gram_statistics

        pairs = circle_gram_statistics(u, beta, threshold, modes=circle_modes)
    elif sphere_bound is not None:
        from ..observables import sphere_gram_statistics

        pairs = sphere_gram_statistics(u, beta, threshold, energy=energy, max_beta=sphere_bound)
    else:
        pairs = gram_statistics(u @ u.T, beta, threshold, energy=energy)
    return {**pairs, "span": span_dimension(u, SPAN_REL_TOL).astype(u.dtype)}


def order_parameter(ip_mean: np.ndarray, n: int) -> np.ndarray:
    r"""The order parameter :math:`r = |\frac1n\sum_i u_i|` of clouds of n unit directions, from their mean
    off-diagonal inner product :math:`\bar g = \frac{1}{n(n-1)}\sum_{i \ne j}\langle u_i, u_j\rangle` (the
    ``ip_mean`` the job records): exactly

    .. math::  r^2 = \frac{1}{n^2}\sum_{i,j}\langle u_i, u_j\rangle = \frac{1 + (n - 1)\,\bar g}{n},

    so it needs no column of its own in the chunks (rounding can push :math:`r^2` below 0 by an ulp where the
    directions cancel: clipped at 0). On the circle r is the modulus of the first Fourier coefficient of the
    tokens' empirical measure, on :math:`S^{d-1}` the norm of its first harmonic: 1 for one cluster, 0 for a
    balanced cloud; n independent uniform directions have :math:`E r^2 = 1/n`, the finite-n floor of a
    disordered state.

    Example:
        >>> import numpy as np
        >>> from attnflow.phase import order_parameter
        >>> u = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
        >>> g = (u @ u.T)[~np.eye(3, dtype=bool)].mean()
        >>> f"{float(order_parameter(g, 3)):.12f} {float(np.linalg.norm(u.mean(axis=0))):.12f}"
        '0.745355992500 0.745355992500'
    """
    g = np.asarray(ip_mean, np.float64)
    return np.sqrt(np.maximum((1.0 + (n - 1) * g) / n, 0.0)) if n > 1 else np.ones_like(g)


def start_clouds(config: PhaseConfig, group: PhaseGroup, systems) -> np.ndarray:
    """The start clouds (len(systems), n, d) of the given systems of a group, as the job draws them
    (the same for every beta), in the config's dtype.

    On the sphere the last bit of an entry can depend on how many clouds one call draws (XLA:CPU compiles the
    normalisation of a small batch, measured: fewer than 128 clouds of 32 x 2, otherwise): for a few systems the
    clouds can differ from the job's by an ulp. An exact replay of a run needs the job's own program anyway
    (:func:`attnflow.phase.ensemble`).

    Example:
        >>> from attnflow.phase import check_phase_config, load_phase_config, start_clouds
        >>> cfg = load_phase_config(None)
        >>> cfg.update(n=4, d=2, systems=3)
        >>> cfg = check_phase_config(cfg)
        >>> start_clouds(cfg, cfg.groups[0], [0, 2]).shape
        (2, 4, 2)
    """
    seeds = system_seeds(config.seed, group.seed_label, 0, config.systems)[np.asarray(systems)]
    draw = _cloud_drawer(group.n, group.d, config.jax_dtype, group.dynamics.on_sphere, _prepared_start(config))
    with float64_scope():  # a float64 config draws float64 clouds, whatever the caller's mode
        return np.asarray(draw(jnp.asarray(seeds, jnp.uint32)))


def _prepared_start(config: PhaseConfig) -> tuple | None:
    """The prepared start of a config as a hashable (clusters, spread, centres, masses), or None (uniform)."""
    if not config.prepared:
        return None
    return (config.start_clusters, config.start_spread, config.start_centres or None, config.start_masses or None)


@functools.lru_cache(maxsize=16)
def _cloud_drawer(n: int, d: int, dtype, on_sphere: bool, prepared: tuple | None = None):
    """The compiled draw of the start clouds (B, n, d) of B seeds (:func:`attnflow.ensembles.draw_clouds`: n tokens
    :math:`N(0, I_d/d)` from each system's token key, on the sphere when ``on_sphere``; with ``prepared`` =
    (clusters, spread, centres, masses), :func:`attnflow.ensembles.draw_clustered_clouds`), shared by the job
    and :func:`start_clouds`."""
    if prepared is not None:
        k, spread, centres, masses = prepared
        return jax.jit(jax.vmap(lambda s: draw_clustered_clouds(s, n, d, k, spread, dtype, centres=centres,
                                                                masses=masses)))
    return jax.jit(jax.vmap(lambda s: draw_clouds(s, n, d, dtype, on_sphere=on_sphere)))


def program_identity(config: PhaseConfig, group: PhaseGroup) -> str:
    """Every field of the config and the group, as text (of the run settings all but the progress bar and the table
    formats, which no program reads): the name of a chunk program in the command's program store.

    Example:
        >>> from attnflow.phase import check_phase_config, load_phase_config
        >>> from attnflow.phase._engine import program_identity
        >>> cfg = load_phase_config(None)
        >>> cfg.update(beta=[1.0], n=8, d=2, systems=2)
        >>> cfg["run"]["progress"] = False
        >>> quiet = check_phase_config(cfg)
        >>> cfg["run"]["progress"] = True
        >>> shown = check_phase_config(cfg)
        >>> program_identity(quiet, quiet.groups[0]) == program_identity(shown, shown.groups[0])
        True
        >>> cfg["run"]["eig_route"] = "cpu"  # a run setting a program could read
        >>> routed = check_phase_config(cfg)
        >>> program_identity(routed, routed.groups[0]) == program_identity(shown, shown.groups[0])
        False
        >>> cfg["run"]["eig_route"] = "auto"
        >>> cfg["n"] = 9
        >>> other = check_phase_config(cfg)
        >>> program_identity(other, other.groups[0]) == program_identity(shown, shown.groups[0])
        False
        >>> cfg["sigma"] = [0.0, 0.5]  # two groups of one config (the same shapes): two programs
        >>> grid = check_phase_config(cfg)
        >>> program_identity(grid, grid.groups[0]) == program_identity(grid, grid.groups[1])
        False
    """
    fields = {f.name: getattr(config, f.name) for f in dataclasses.fields(config) if f.repr}
    fields["run"] = {k: v for k, v in dataclasses.asdict(config.run).items() if k not in ("progress", "table_formats")}
    return f"{type(config).__name__}{fields!r}|{group!r}"


def pair_index(config: PhaseConfig, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
    """(beta index, system) of the flattened pairs start..stop-1 of a group (beta-major order).

    Example:
        >>> from attnflow.phase import check_phase_config, load_phase_config
        >>> from attnflow.phase._engine import pair_index
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


def _pair_group(pairs: int, n: int, d: int, heads: int, itemsize: int) -> int:
    """Pairs run together (vmapped) in one group: all of them on accelerators; on CPU as many as keep
    :data:`PAIR_MATRICES` n x n arrays and :data:`PAIR_STATES` states each within the cache budget
    (:func:`attnflow._batching.group_size`).
    """
    from .._batching import group_size

    matrices = heads * (PAIR_MATRICES + math.ceil(PAIR_STATES * d / n))
    return group_size(pairs, n, itemsize, matrices=matrices, impl="dense")


def _identity_sphere(config: PhaseConfig, group: PhaseGroup) -> bool:
    """Whether the group runs the sphere with Q = K = V = I (the projections are identities: skipped; not for
    the large clouds of :func:`circle_statistics_modes`, whose Fourier path is the general field's; the large clouds
    in R^3 take its sphere path)."""
    return (group.dynamics.name == "sphere" and config.v_ensemble == "identity"
            and config.qk_ensemble == "identity" and not _large_circle(group))


def circle_statistics_modes(config: PhaseConfig, group: PhaseGroup) -> int | None:
    """The Fourier modes K of a group whose statistics come from :func:`attnflow.observables.circle_gram_statistics`
    (d = 2 and n > :data:`LARGE_CLOUD_ABOVE`): exact to rounding for the group's largest beta; None for
    the others (the dense Gram matrix).

    Example:
        >>> from attnflow.phase import check_phase_config, load_phase_config
        >>> from attnflow.phase._engine import circle_statistics_modes
        >>> cfg = load_phase_config(None)
        >>> cfg.update(n=[64, 20000], d=2, beta=[1.0, 4.0])
        >>> cfg = check_phase_config(cfg)
        >>> [circle_statistics_modes(cfg, g) for g in cfg.groups]
        [None, 22]
    """
    if not _large_circle(group):
        return None
    from ..kernels.fourier import fourier_modes

    return fourier_modes(_largest_beta(config, group), config.dtype)


def _large_circle(group: PhaseGroup) -> bool:
    return group.d == 2 and group.n > LARGE_CLOUD_ABOVE


def sphere_statistics_bound(config: PhaseConfig, group: PhaseGroup) -> float | None:
    """The upper bound of beta (the group's largest) of a group whose statistics come from
    :func:`attnflow.observables.sphere_gram_statistics` (d = 3 and n > :data:`LARGE_CLOUD_ABOVE`); None for the
    others.

    Example:
        >>> from attnflow.phase import check_phase_config, load_phase_config
        >>> from attnflow.phase._engine import sphere_statistics_bound
        >>> cfg = load_phase_config(None)
        >>> cfg.update(n=[64, 20000], d=3, beta=[1.0, 4.0])
        >>> cfg = check_phase_config(cfg)
        >>> [sphere_statistics_bound(cfg, g) for g in cfg.groups]
        [None, 4.0]
    """
    return _largest_beta(config, group) if group.d == 3 and group.n > LARGE_CLOUD_ABOVE else None


def _largest_beta(config: PhaseConfig, group: PhaseGroup) -> float:
    """The group's largest beta (a beta_law: its largest beta_n), which bounds the Fourier modes of its scores."""
    return float(max(config.betas_at(group.n)))


def _attention_options(config: PhaseConfig, group: PhaseGroup) -> dict:
    """The sphere's attention on a large circle with Q^T K = I: the Fourier path, its modes bounded by the group's
    largest beta (the fields are built inside the traced program, so the bound is given)."""
    if (not _large_circle(group) or group.dynamics.name != "sphere" or config.qk_ensemble != "identity"
            or group.dynamics.num_heads != 1):
        return {}
    return {"attention_impl": "fourier", "fourier_max_score": _largest_beta(config, group)}


def _weights(config: PhaseConfig, group: PhaseGroup, systems: np.ndarray) -> tuple[np.ndarray, ...]:
    """Q, K, V of the given systems (leading axis; several heads: (B, H, d, d)), V divided by the spectral
    radius of V (of S = sum_h V_h for several heads), in float64 on the host."""
    heads = group.dynamics.num_heads
    if config.weights == "shared":
        seeds = system_seeds(config.seed, group.seed_label + "|weights", 0, 1)
        drawn = head_seeds(seeds, config.seed, group.seed_label + "|weights", 0, 1, heads)
        take = np.zeros(len(systems), dtype=int)
    else:
        seeds = system_seeds(config.seed, group.seed_label + "|weights", int(systems.min()), int(systems.max()) + 1)
        drawn = head_seeds(seeds, config.seed, group.seed_label + "|weights", int(systems.min()), int(systems.max()) + 1,
                           heads)
        take = systems - int(systems.min())
    Q, K, V = (np.asarray(a, np.float64) for a in draw_heads(drawn, config.v_ensemble, config.qk_ensemble, group.d,
                                                              jnp.float64, config.density))
    S = V.sum(axis=1) if heads > 1 else V
    rho = np.maximum(np.abs(np.linalg.eigvals(S)).max(axis=-1), 1e-30)
    V = V / (rho[:, None, None, None] if heads > 1 else rho[:, None, None])
    return Q[take], K[take], V[take]


def _rescaled_time(t, step, dt):
    r"""The rescaled time :math:`\tau = k\,dt + dt` of the layer that ends at the stepper's time
    :math:`t = k\,\mathrm{step} + \mathrm{step}` (inf stays inf): the layer count k + 1 is t / step rounded,
    exact for fewer than about :math:`10^6` layers in float32."""
    dt = jnp.asarray(dt, t.dtype)
    return (jnp.round(t / step) - 1) * dt + dt


def column_layout(config: PhaseConfig) -> dict[str, tuple[np.dtype, tuple[int, ...]]]:
    """The columns of a chunk (:func:`make_chunk_fn`): name -> (dtype, shape of one pair's entry).

    Example:
        >>> from attnflow.phase import check_phase_config, load_phase_config
        >>> from attnflow.phase._engine import column_layout
        >>> cfg = load_phase_config(None)
        >>> cfg.update(checkpoints=5, t1=1.0)
        >>> layout = column_layout(check_phase_config(cfg))
        >>> layout["energy"], layout["finite"]
        ((dtype('float64'), (5,)), (dtype('bool'), ()))
    """
    dtype = np.dtype(config.dtype)
    K = len(config.checkpoint_layers)
    return {**{name: (dtype, (K,)) for name in OBSERVABLES}, "finite": (np.dtype(bool), ()),
            "t_nonfinite": (dtype, ()), "beta_index": (np.dtype(np.int64), ()), "system": (np.dtype(np.int64), ())}


#: the chunk programs built in this process, by their name in the command's program store, the paths this module's
#: settings chose for them (:data:`LARGE_CLOUD_ABOVE`: the identity sphere, the circle modes, the sphere bound, the
#: attention options), the settings read while tracing and the devices they run on (the last
#: :data:`PROCESS_PROGRAMS` of them): a rerun, a resume or :func:`ensemble` of a config already run in the process
#: traces and compiles nothing
_BUILT: collections.OrderedDict = collections.OrderedDict()
PROCESS_PROGRAMS = 8


def make_chunk_fn(config: PhaseConfig, group: PhaseGroup, mesh, *, cloud_dtype=None, programs: dict | None = None):
    """``compute(start, stop, into=None) -> columns`` of the group's pairs start..stop-1, sharded over ``mesh``.

    ``cloud_dtype``: the precision the start clouds are drawn in (default the config's), then cast to the
    config's: a float64 run of float32 clouds isolates the effect of the arithmetic's precision.
    ``programs``: a dict the caller keeps across the groups of one config; groups that differ only in their
    noise strength sigma > 0 then share one compiled program (sigma is one of its inputs), so that a
    (beta, sigma) grid compiles once.

    Columns (:func:`column_layout`): ``beta_index``, ``system`` (B,), ``finite`` (B,), ``t_nonfinite`` (B,)
    and every observable of :data:`OBSERVABLES` as (B, K) at the K checkpoint layers. ``into``: NumPy arrays
    (B, ...) of the caller's for every column, filled and returned (the results copied once, from each
    device's buffer).
    """
    spec, dtype, layers = group.dynamics, config.jax_dtype, config.num_layers
    entry = field_entry(spec.field)
    dt, threshold, n, d = config.dt, config.threshold, group.n, group.d
    options = {"normalisation": config.normalisation} if spec.field == "sphere" else {}
    options.update(_attention_options(config, group))
    circle_modes = circle_statistics_modes(config, group)
    sphere_bound = sphere_statistics_bound(config, group)
    identity = _identity_sphere(config, group)
    if identity and sphere_bound is not None:  # the sphere path, its degree set by the group's largest beta
        options.update(attention_impl="harmonic", harmonic_max_score=sphere_bound)
    mean = config.normalisation == "mean"
    eye = np.eye(d, dtype=dtype)  # Q = K = V = I of the identity sphere (concrete: its option checks them)
    noisy = group.sigma > 0
    program_key = (group.n, group.d, group.heads, group.epsilon, noisy, cloud_dtype)
    if programs is not None and program_key in programs:
        return _chunk_compute(config, group, identity, noisy, *programs[program_key])
    # the command keeps the traced program (attnflow.runs._programs): named by everything read here
    keep = f"phase chunk|{program_identity(config, group)}|{cloud_dtype}"
    settings = (identity, circle_modes, sphere_bound, sorted(options.items()), SPAN_REL_TOL, PAIR_MATRICES, PAIR_STATES)
    built_key = (keep, repr(settings), tuple(mesh.shape.items()), tuple(int(dev.id) for dev in mesh.devices.flat))
    if built_key in _BUILT:
        _BUILT.move_to_end(built_key)
        if programs is not None:
            programs[program_key] = _BUILT[built_key]
        return _chunk_compute(config, group, identity, noisy, *_BUILT[built_key])

    def one(beta, *arrays):
        # the integrators (and equinox) are imported where the program is traced: a run that reads its kept
        # program back does not import them
        from ..integrate import EulerMaruyamaStepper, EulerStepper, SaveLayers, TokenNoise

        saves = SaveLayers.given(config.checkpoint_layers)
        beta = beta.astype(dtype)
        # a noisy group's strength is an input (one program for every sigma of a grid)
        (sigma, seed, x0, *weights) = arrays if noisy else (None, *arrays)
        # the 1/n normalisation steps f / s(beta) (step_scale): its layers advance the rescaled time by dt
        log_s = log_step_scale(beta) if mean else None
        if identity:  # f / s in the field (log_scale), the stepper's dt the rescaled time's
            field = build_field("sphere", eye, eye, eye, beta=beta, identity_weights=True, log_scale=log_s,
                                **options)
            step = dt
        else:  # the field f, the stepper's dt the unscaled flow's step dt / s
            Q, K, V = (w.astype(dtype) for w in weights)
            field = build_field(spec.field, Q, K, V, beta=beta, picture=spec.picture,
                                **spec.field_options(seed, d, layers, dtype), **options)
            step = jnp.asarray(dt, dtype) * jnp.exp(-log_s) if mean else dt
        if noisy:  # Euler-Maruyama layers on the system's own Brownian path (the same for every beta and sigma)
            # the identity sphere's 1/n field steps the rescaled time tau = s t: its noise is sigma / sqrt(s)
            strength = sigma * jnp.exp(-log_s / 2) if (mean and identity) else sigma
            noise = TokenNoise(strength, jax.random.fold_in(jax.random.key(seed), NOISE_STREAM), sphere=True)
            stepper = EulerMaruyamaStepper(step, layers, noise=noise, shift=entry.shift, save_at=saves,
                                           save_aux=identity, checkpoint=None, loop="fori")
        else:
            stepper = EulerStepper(step, layers, shift=entry.shift, save_at=saves, save_aux=identity, checkpoint=None,
                                   loop="fori")
        if identity:  # the energy of a checkpoint from the row sums of the layer that leaves it (unit tokens)
            def save(t, y, row_sums):
                return statistics(y, beta, threshold, energy=sphere_energy_from_row_sums(row_sums, beta),
                                  sphere_bound=sphere_bound)
        else:
            def save(t, y, args):
                return statistics(y, beta, threshold, circle_modes=circle_modes, sphere_bound=sphere_bound)
        traj = stepper.solve(field, x0, save_fn=save)
        stats = traj.ys
        t_bad = _rescaled_time(traj.t_nonfinite, step, dt) if mean and not identity else traj.t_nonfinite
        finite = jnp.all(jnp.stack([jnp.all(jnp.isfinite(v)) for v in stats.values()])) & jnp.isinf(t_bad)
        return {**stats, "finite": finite, "t_nonfinite": t_bad}

    def run_pairs(*arrays):
        from .._batching import vmap_systems

        count = arrays[0].shape[0]
        group_of = _pair_group(count, n, d, spec.num_heads, jnp.dtype(dtype).itemsize)
        pad = -count % group_of  # whole groups: one compiled group body (a remainder would be a second)
        arrays = [jnp.concatenate([a, jnp.repeat(a[-1:], pad, axis=0)]) if pad else a for a in arrays]
        out = vmap_systems(one, group=group_of)(*arrays)
        return jax.tree_util.tree_map(lambda a: a[:count], out)

    # the sphere's program has no LAPACK call (the span's reduction is jnp): vmapped on every device; the other
    # fields' solves and exponentials are batched LAPACK calls, which can deadlock several CPU devices' shared
    # pool, so there each device loops over its pairs (attnflow.runs.needs_per_system_loop)
    if sphere_bound is not None:  # the statistics call back to the host
        mesh = callback_mesh(mesh)
    fn = sharded(run_pairs, mesh, per_system_loop=False if spec.name == "sphere" else None, keep=keep)
    # the start clouds (threefry keys and normal draws) are a program of their own: it compiles on a second
    # thread while this one compiles the chunk's program (a third of its compile time when drawn inside it)
    cloud_args = (n, d, dtype if cloud_dtype is None else cloud_dtype, spec.on_sphere, _prepared_start(config))
    draw = kept_jit(_cloud_drawer(*cloud_args), f"phase start clouds|{cloud_args}")
    program = (fn, draw, set())  # the program, the clouds' drawer, the chunk lengths compiled
    if programs is not None:
        programs[program_key] = program
    _BUILT[built_key] = program
    while len(_BUILT) > PROCESS_PROGRAMS:
        _BUILT.popitem(last=False)
    return _chunk_compute(config, group, identity, noisy, *program)


def _chunk_compute(config: PhaseConfig, group: PhaseGroup, identity: bool, noisy: bool, fn, draw, compiled: set):
    """The chunk function of :func:`make_chunk_fn` for one group, running the compiled ``fn``."""
    dtype, n, d = config.jax_dtype, group.n, group.d
    betas = np.asarray(config.betas_at(group.n), np.float64)  # (a beta_law: gamma g(n) of the group's n)

    def compute(start: int, stop: int, into: dict | None = None) -> dict:
        b_idx, systems = pair_index(config, start, stop)
        weights = () if identity else _weights(config, group, systems)  # Q = K = V = I are not read
        seeds = np.asarray(system_seeds(config.seed, group.seed_label, 0, config.systems)[systems], np.uint32)
        beta_of = betas[b_idx].astype(dtype)
        sigma_of = (np.full(len(seeds), group.sigma, dtype),) if noisy else ()
        x64 = float64_enabled()

        def clouds():
            with jax.enable_x64(x64):  # the caller's float64 mode (a scope is per thread)
                return np.asarray(draw(seeds), dtype)

        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="attnflow-start-clouds") as pool:
            drawn = []

            def draw_now() -> None:
                drawn.append(pool.submit(clouds))

            def lowered() -> None:
                draw_now()
                import_ahead(*IMPORT_WHILE_COMPILING)

            # the clouds' program is traced once the chunk's is lowered: both trace in Python (one at a time),
            # and the drawer's tracing (and the imports of IMPORT_WHILE_COMPILING) then run while XLA compiles
            # the chunk's program
            if len(seeds) not in compiled:
                fn.precompile(beta_of, *sigma_of, seeds, jax.ShapeDtypeStruct((len(seeds), n, d), dtype), *weights,
                              on_lowered=lowered)
                compiled.add(len(seeds))
            if not drawn:
                draw_now()
            x0 = drawn[0].result()
        if into is None:
            cols = {k: np.asarray(v) for k, v in fn(beta_of, *sigma_of, seeds, x0, *weights).items()}
            cols.update(beta_index=b_idx, system=systems)
            return cols
        cols = fn(beta_of, *sigma_of, seeds, x0, *weights,
                  into={k: v for k, v in into.items() if k not in ("beta_index", "system")})
        into["beta_index"][:], into["system"][:] = b_idx, systems
        return {**cols, "beta_index": into["beta_index"], "system": into["system"]}

    return compute


def ensemble(config, group: int = 0, *, num_devices: int = 1) -> dict[str, np.ndarray]:
    r"""The phase job's ensemble from Python, without a run folder: every observable of one grid group as
    arrays per beta, system and checkpoint.

    ``config`` is a phase config (a table as :func:`load_phase_config` returns it, or a parsed
    :class:`PhaseConfig`); ``group`` indexes its groups (the (n, d, heads, epsilon) cells of
    :attr:`PhaseConfig.groups`). The systems, clouds, weights and steps are the job's own, so the arrays
    are the numbers ``attnflow phase`` stores for that group (its chunk files), arranged by beta and system.

    Returns a dict: ``beta`` (B,) (with a ``beta_law``: the group's :math:`\beta_n = \gamma\,g(n)`, and ``gamma`` (B,)
    the grid's scales), ``t`` (K,) the checkpoint times (the rescaled time :math:`\tau` of the
    1/n normalisation), every observable of :data:`OBSERVABLES` as (B, S, K), ``finite`` (B, S) and
    ``t_nonfinite`` (B, S) (``inf`` where the run stayed finite), and ``order`` (B, S, K), the order parameter
    :math:`|\frac1n\sum_i u_i|` (:func:`~attnflow.phase.order_parameter`).

    Example:
        >>> from attnflow.phase import ensemble, load_phase_config
        >>> cfg = load_phase_config(None)
        >>> cfg.update(beta=[1.0, 4.0], n=[8], d=[2], systems=3, t1=1.0, checkpoints=4)
        >>> out = ensemble(cfg)
        >>> out["beta"].tolist(), out["t"].shape, out["clusters"].shape, bool(out["finite"].all())
        ([1.0, 4.0], (4,), (2, 3, 4), True)
    """
    from ..errors import InputError
    from ..runs import make_mesh
    from ._config import check_phase_config

    config = check_phase_config(config)
    groups = config.groups
    if isinstance(group, bool) or not isinstance(group, (int, np.integer)) or not 0 <= group < len(groups):
        raise InputError(f"group must be an index of the config's {len(groups)} grid group(s) (0 to "
                         f"{len(groups) - 1}), got {group!r}.")
    betas, systems = len(config.beta), config.systems
    with float64_scope() if config.dtype == "float64" else contextlib.nullcontext():
        cols = make_chunk_fn(config, groups[group], make_mesh(num_devices))(0, group_pairs(config))
    out = {name: np.asarray(cols[name]).reshape(betas, systems, *np.shape(cols[name])[1:])
           for name in (*OBSERVABLES, "finite", "t_nonfinite")}
    out["order"] = order_parameter(out["ip_mean"], groups[group].n)
    law = {} if config.beta_law == "constant" else {"gamma": np.asarray(config.beta, np.float64)}
    return {"beta": np.asarray(config.betas_at(groups[group].n), np.float64), **law,
            "t": np.round(np.asarray(config.checkpoint_layers) * config.dt, 12), **out}

