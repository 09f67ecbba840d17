r"""What the dynamics sweep and the phase diagram step: their ``dynamics`` config key, mapped onto the attnflow
fields (shared by both jobs, so that neither imports the other).

One field, many dynamics: every option below is an entry of the field registry
(:func:`attnflow.fields.build_field`), built per system from the drawn (and spectrally
normalised) weights; this module keeps only what is the sweep's own (its options, the per-system
keys and draws, the initial clouds) and builds no field. The sweep then classifies the last
layer exactly as for the plain flow.

* ``attention``: ``DiscreteRescaledFlow(Q, K, V)`` (Remark 3.4, exact); state z; predicted: the
  theorems' geometry.
* ``causal``: the same with ``mask="causal"`` (token i attends to j <= i); state z; predicted:
  the full-attention geometry.
* ``multihead``: ``heads = 1`` is ``attention``; ``heads = H >= 2`` draws H independent triples
  :math:`(Q_h, K_h, V_h)` from the configured ensembles and steps
  ``AttentionFlow(AttentionWeights(.., axes=("head",)))``,
  :math:`\dot x_i = \sum_h\sum_j P^h_{ij} V_h x_j`; raw x, read in :math:`z = R_S^{-L} x`;
  predicted: none (no theorem).
* ``feedforward``: ``ff_reading = "z"``: ``section12_2_flow(Q, K, V, W=W, activation=...)``,
  :math:`\dot z_i = W\sigma(V\sum_j P_{ij}(z_j - z_i))`, P from :math:`e^{tV}z` (SPEC 3), state z;
  ``ff_reading = "x"``: ``Wrapped(AttentionFlow(Q, K, V), W, activation)``,
  :math:`\dot x_i = W\sigma(\sum_j P_{ij} V x_j)`, raw x read in :math:`z = R^{-L} x` (the reading
  in which the paper's observations appear, docs/extensions.md). W = I or Gaussian / sqrt(d)
  (``ff_weight``); predicted: the plain flow's geometry.
* ``layered``: ``LayeredFlow(perturbed_layers(AttentionWeights(Q, K, V), L, epsilon, key))``,
  :math:`X_l = X + \epsilon\|X\|_F G_l/\|G_l\|_F`; raw x read in :math:`z = R^{-L} x`; predicted:
  the shared weights' geometry.
* ``sphere``: ``sphere_flow(Q, K, V)`` with the projected step (``sphere_shift``) from normalised
  starts; state x on the sphere (z = x); predicted: none (no theorem).
* ``prenorm``: ``PreNorm(AttentionFlow(Q, K, V))``, :math:`\dot x_i = \sum_j P_{ij}(N(x)) V N(x_j)`
  with :math:`N(x_j) = x_j/|x_j|` (pre-LN: the residual stream is not normalised); raw x read in
  :math:`z = R^{-L} x`; predicted: none (no theorem).
* ``periln``: ``PeriNorm(AttentionFlow(Q, K, V))``, :math:`\dot x_i = N(\sum_j P_{ij}(N(x)) V N(x_j))` (Peri-LN:
  the attention output normalised too, every token moves at unit speed); raw x read in :math:`z = R^{-L} x`;
  predicted: none.
* ``mixln``: ``MixNorm(AttentionFlow(Q, K, V), switch=ln_switch)``: post-LN (tangent) before the time ``ln_switch``,
  pre-LN after it, from normalised starts; raw x read in :math:`z = R^{-L} x`; predicted: none.
* ``ngpt``: ``NormalisedGPT(AttentionFlow(Q, K, V), alpha=1)``, tokens on the sphere moved along
  :math:`\mathrm{Proj}_{x_i^\perp} N(\sum_j P_{ij} V x_j)` with the projected step, from normalised starts (as
  ``sphere``); predicted: none.
* ``mean``: ``AttentionFlow(Q, K, V, normalisation="mean")``, unnormalised attention,
  :math:`\dot x_i = \frac1n\sum_j e^{\langle Qx_i, Kx_j\rangle} V x_j`; raw x read in
  :math:`z = R^{-L} x` (a run whose scores overflow is recorded as not finite); predicted: none.
* ``block``: ``TransformerBlock(AttentionFlow(Q, K, V), FeedForward(W1, W2, activation))``, one
  layer :math:`x' = x + \Delta t\,\mathrm{attn}(x)`, :math:`x \leftarrow x' + \Delta t\, W_2
  \sigma(W_1 x')` with hidden width ``ff_hidden`` (0: 4d) and Gaussian
  :math:`W_1/\sqrt d`, :math:`W_2/\sqrt h` drawn per system; raw x read in :math:`z = R^{-L} x`;
  predicted: none.

Here :math:`R = I + \Delta t V` (:math:`R_S = I + \Delta t S`, :math:`S = \sum_h V_h`) and L is
the number of layers: a raw-picture run is rescaled at its last layer by L solves with one LU
factorisation of R (:func:`attnflow.fields.rescaled_from_raw`). Independent heads have no rescaled form (their V_h do not commute with S;
:mod:`attnflow.dynamics._multihead`), so the heads' geometry is read in the S-rescaled picture
and nothing is predicted; the spectral columns of such a system are those of
:math:`(Q_1, K_1, S)`. Where a prediction is inherited (causal, feedforward, layered), the
``consistent`` column says whether the extension preserves the base flow's predicted geometry.

Rescaling a raw run amplifies its rounding errors by up to :math:`\|R^{-L}\|` (e.g.
:math:`0.9^{-120} \approx 3\cdot 10^5` for an eigenvalue -1 of V with dt = 0.1, 120 layers),
on top of tokens of size :math:`e^{t_1}`; float32 would leave no correct digit, so the
raw-picture dynamics (layered, multihead with H >= 2, feedforward in the x reading, prenorm, periln,
mean, block) require
``dtype = "float64"``.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from ._activations import ACTIVATIONS
from ._shifts import sphere_shift
from .ensembles import draw_clouds, head_seeds
from .errors import InputError
from .fields import build_field, field_entry, layer_matrix, rescaled_from_raw

__all__ = ["SWEEP_DYNAMICS", "FF_WEIGHTS", "FF_READINGS", "SweepDynamics", "sweep_dynamics", "head_seeds", "layer_key",
           "ff_key", "ff_matrix", "block_mlp", "initial_clouds", "run_final_layer"]

#: values of the sweep's ``dynamics`` key
SWEEP_DYNAMICS = ("attention", "causal", "multihead", "feedforward", "layered", "sphere", "prenorm", "periln", "mixln",
                  "ngpt", "mean", "block")
#: the dynamics with no theorem (predicted "none")
_NO_THEOREM = ("sphere", "prenorm", "periln", "mixln", "ngpt", "mean", "block")
#: the feed-forward output matrix W: the identity, or Gaussian entries / sqrt(d) drawn per system
FF_WEIGHTS = ("identity", "random")
#: the two readings of Section 12.2: sigma inside the rescaled drift (SPEC 3), or on the raw attention output
FF_READINGS = ("z", "x")
#: the registry's picture of each reading
_FF_PICTURES = {"z": "rescaled", "x": "raw"}
#: fold_in tags of a system's key for its per-layer perturbations and its feed-forward W
#: (:mod:`attnflow.ensembles` uses 1, 2, 3 for V, Q^T K and the tokens)
_LAYERS_TAG, _FF_TAG = 4, 5


@dataclass(frozen=True)
class SweepDynamics:
    """The validated dynamics options of a sweep config (see the module table)."""

    name: str
    heads: int
    activation: str
    ff_weight: str
    epsilon: float
    ff_reading: str = "z"
    ff_hidden: int = 0
    #: mixln: the time at which post-LN gives way to pre-LN
    ln_switch: float = 0.0

    @property
    def num_heads(self) -> int:
        """Independent heads drawn per system (1 unless ``multihead``)."""
        return self.heads if self.name == "multihead" else 1

    @property
    def field(self) -> str:
        """The registry name of the field (:data:`attnflow.fields.FIELDS`; one head is ``attention``)."""
        return "attention" if self.name == "multihead" and self.num_heads == 1 else self.name

    @property
    def picture(self) -> str:
        """The picture the field runs in: the exact discrete rescaling where the field has one, else raw
        (feed-forward: its reading)."""
        if self.name == "feedforward":
            return _FF_PICTURES[self.ff_reading]
        return "rescaled" if "rescaled" in field_entry(self.field).pictures else "raw"

    @property
    def on_sphere(self) -> bool:
        """Whether the tokens live on the unit sphere (the field's layers renormalise them: ``sphere``, ``ngpt``),
        so that the starts are drawn on it."""
        return field_entry(self.field).shift is sphere_shift or self.name == "mixln"  # Mix-LN: post-LN first

    @property
    def raw_picture(self) -> bool:
        """Whether the run steps raw tokens and is rescaled at the end (needs float64)."""
        return field_entry(self.field).steps_raw(self.picture)

    def field_options(self, seed, d: int, num_layers: int, dtype) -> dict:
        """The registry options of one system's field: its per-system draws (keys of ``seed``) included."""
        if self.name == "feedforward":
            return {"W": ff_matrix(seed, d, dtype) if self.ff_weight == "random" else None,
                    "activation": self.activation}
        if self.name == "layered":
            return {"num_layers": num_layers, "epsilon": self.epsilon, "key": layer_key(seed)}
        if self.name == "block":
            W1, W2 = block_mlp(seed, d, self.hidden_width(d), dtype)
            return {"W1": W1, "W2": W2, "activation": self.activation}
        if self.name == "mixln":
            return {"switch": self.ln_switch}
        return {}

    @property
    def predicts(self) -> bool:
        """Whether a predicted geometry is reported (no theorem for several heads, or the sphere)."""
        return not (self.num_heads > 1 or self.name in _NO_THEOREM)

    def record(self) -> dict:
        """The options that matter for this dynamics (for summary.json)."""
        out = {"dynamics": self.name}
        if self.name == "multihead":
            out["heads"] = self.heads
        if self.name == "feedforward":
            out.update(activation=self.activation, ff_weight=self.ff_weight, ff_reading=self.ff_reading)
        if self.name == "layered":
            out["epsilon"] = self.epsilon
        if self.name == "block":
            out.update(activation=self.activation, ff_hidden=self.ff_hidden)
        if self.name == "mixln":
            out["ln_switch"] = self.ln_switch
        return out

    def hidden_width(self, d: int) -> int:
        """The block's MLP hidden width (``ff_hidden``; 0 means 4 d)."""
        return self.ff_hidden or 4 * d


def sweep_dynamics(config: dict) -> SweepDynamics:
    """The dynamics options of a sweep config, validated (one InputError sentence per bad key).

    Example:
        >>> from attnflow._sweep_dynamics import sweep_dynamics
        >>> cfg = dict(dynamics="multihead", heads=4, activation="relu", ff_weight="identity", epsilon=0.1,
        ...            ff_reading="z", dtype="float64")
        >>> sweep_dynamics(cfg).num_heads, sweep_dynamics(cfg).predicts
        (4, False)
    """
    name = config["dynamics"]
    if name not in SWEEP_DYNAMICS:
        raise InputError(f"dynamics must be one of {SWEEP_DYNAMICS}, got {name!r}.")
    heads = config["heads"]
    if not isinstance(heads, int) or isinstance(heads, bool) or heads < 1:
        raise InputError(f"heads (independent heads per system, dynamics = 'multihead') must be an integer >= 1, "
                         f"got {heads!r}.")
    if config["activation"] not in ACTIVATIONS:
        raise InputError(f"activation (dynamics = 'feedforward') must be one of {tuple(ACTIVATIONS)}, "
                         f"got {config['activation']!r}.")
    if config["ff_weight"] not in FF_WEIGHTS:
        raise InputError(f"ff_weight (the feed-forward W, dynamics = 'feedforward') must be one of {FF_WEIGHTS}, "
                         f"got {config['ff_weight']!r}.")
    if config["ff_reading"] not in FF_READINGS:
        raise InputError(f"ff_reading (dynamics = 'feedforward': sigma inside the rescaled drift 'z', or on the raw "
                         f"attention output 'x') must be one of {FF_READINGS}, got {config['ff_reading']!r}.")
    eps = config["epsilon"]
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not np.isfinite(eps) or eps < 0:
        raise InputError(f"epsilon (relative Frobenius size of the per-layer perturbation, dynamics = 'layered') "
                         f"must be a finite number >= 0, got {eps!r}.")
    hidden = config.get("ff_hidden", 0)
    if not isinstance(hidden, int) or isinstance(hidden, bool) or hidden < 0:
        raise InputError(f"ff_hidden (hidden width of the block's MLP, dynamics = 'block'; 0 = 4 d) must be an "
                         f"integer >= 0, got {hidden!r}.")
    switch = config.get("ln_switch", 0.0)
    if isinstance(switch, bool) or not isinstance(switch, (int, float)) or not np.isfinite(switch) or switch < 0:
        raise InputError(f"ln_switch (the time at which post-LN gives way to pre-LN, dynamics = 'mixln') must be a "
                         f"finite number >= 0, got {switch!r}.")
    spec = SweepDynamics(name, int(heads), config["activation"], config["ff_weight"], float(eps), config["ff_reading"],
                         int(hidden), float(switch))
    if spec.raw_picture and config["dtype"] != "float64":
        which = {"multihead": " with heads >= 2", "feedforward": " with ff_reading = 'x'"}.get(name, "")
        raise InputError(f"dynamics = {name!r}{which} runs raw tokens "
                         "and rescales them at the last layer, which float32 cannot do accurately: set "
                         "dtype = \"float64\".")
    return spec


def layer_key(seed) -> jax.Array:
    """The key of a system's per-layer perturbations (``dynamics = "layered"``)."""
    return jax.random.fold_in(jax.random.key(seed), _LAYERS_TAG)


def ff_key(seed) -> jax.Array:
    """The key of a system's random feed-forward W (``ff_weight = "random"``; the block's W1, W2 split it)."""
    return jax.random.fold_in(jax.random.key(seed), _FF_TAG)


def ff_matrix(seed, d: int, dtype) -> jax.Array:
    """A system's random feed-forward W (``ff_weight = "random"``): (d, d) with N(0, 1/d) entries."""
    return jax.random.normal(ff_key(seed), (d, d), dtype) / jnp.sqrt(jnp.asarray(d, dtype))


def block_mlp(seed, d: int, hidden: int, dtype) -> tuple[jax.Array, jax.Array]:
    """The block's MLP weights of one system: W1 (h, d) with N(0, 1/d) entries, W2 (d, h) with N(0, 1/h).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow._sweep_dynamics import block_mlp
        >>> [w.shape for w in block_mlp(0, 3, 12, jnp.float32)]
        [(12, 3), (3, 12)]
    """
    k1, k2 = jax.random.split(ff_key(seed))
    W1 = jax.random.normal(k1, (hidden, d), dtype) / jnp.sqrt(jnp.asarray(d, dtype))
    W2 = jax.random.normal(k2, (d, hidden), dtype) / jnp.sqrt(jnp.asarray(hidden, dtype))
    return W1, W2


def run_final_layer(spec: SweepDynamics, seed, Q, K, V, x0, *, dt: float, layers: int, dtype):
    r"""Step the token clouds x0 (C, n, d) of one system (:func:`initial_clouds`); (z, x) at the last layer.

    ``Q, K, V`` are the system's weights, already normalised (V divided by the spectral radius
    of V, or of S for several heads) and cast to ``dtype``: (m, d), (m, d), (d, d), or
    (H, m, d), (H, m, d), (H, d, d) for several heads. ``seed`` is the system's seed (its
    perturbation and feed-forward keys). Traceable (the sweep vmaps it over systems).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from attnflow._sweep_dynamics import SweepDynamics, initial_clouds, run_final_layer
        >>> spec = SweepDynamics("sphere", 1, "relu", "identity", 0.0)
        >>> I = jnp.eye(2)
        >>> z, x = run_final_layer(spec, 0, I, I, I, jax.random.normal(jax.random.key(0), (1, 4, 2)),
        ...                        dt=0.1, layers=5, dtype=jnp.float32)
        >>> bool(jnp.allclose(jnp.linalg.norm(x, axis=-1), 1.0, atol=1e-6))
        True
    """
    from .dynamics import FoldedBatch  # the integrators and flows: imported where a program is traced
    from .integrate import EulerStepper

    d = x0.shape[-1]
    field = build_field(spec.field, Q, K, V, picture=spec.picture, **spec.field_options(seed, d, layers, dtype))
    stepper = EulerStepper(dt, layers, save_every=layers, shift=field_entry(spec.field).shift)
    dyn = stepper.bind(FoldedBatch(field))
    traj = stepper.solve(dyn, x0)
    last = traj.ys[-1]
    if spec.raw_picture:
        return rescaled_from_raw(layer_matrix(V, dt), layers, last), last
    return last, dyn.tokens(traj.ts[-1], last)


def initial_clouds(spec: SweepDynamics, seed, clouds: int, n: int, d: int, dtype):
    """The system's ``clouds`` random token clouds, i.i.d. N(0, I/d), normalised for the sphere
    (:func:`attnflow.ensembles.draw_clouds`).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow._sweep_dynamics import SweepDynamics, initial_clouds
        >>> initial_clouds(SweepDynamics("attention", 1, "relu", "identity", 0.0), 3, 2, 5, 4, jnp.float32).shape
        (2, 5, 4)
    """
    return draw_clouds(seed, n, d, dtype, clouds=clouds, on_sphere=spec.on_sphere)
