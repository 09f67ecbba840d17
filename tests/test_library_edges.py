"""Edges of the library's public functions: float64 input stays float64 with JAX's float64 mode off,
the one rule for beta and the number of tokens, and the soft counterparts of the hard counts.

JAX's float64 mode stays off here, as in a user's process (tests/conftest.py).
"""

import dataclasses
import inspect
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attnflow as af
import attnflow.geometry as geometry
import attnflow.meanfield as meanfield
import attnflow.observables as observables

# ----------------------------------------------------------------------------------------------
# float64 in, float64 out

RNG = np.random.default_rng(20261203)
X = RNG.normal(size=(6, 3))  # float64 tokens
XS = X / np.linalg.norm(X, axis=1, keepdims=True)  # on the unit sphere
YS = RNG.normal(size=(5, 3))
YS /= np.linalg.norm(YS, axis=1, keepdims=True)
SCORES = X @ X.T
P = np.exp(SCORES - SCORES.max(axis=1, keepdims=True))
P /= P.sum(axis=1, keepdims=True)  # a row-stochastic attention matrix
Q, K = RNG.normal(size=(3, 3)), RNG.normal(size=(3, 3))
V = np.array([[1.0, 0.3, 0.0], [0.0, 0.5, 0.2], [0.0, 0.0, -0.5]])
PHI = np.array([1.0, 0.2, -0.1])
S = X @ PHI  # projections (n,)
S_T = np.stack([S, 0.9 * S, 0.8 * S])  # projections over time (T, n)
TH = RNG.uniform(0.0, 2 * np.pi, size=9)  # angles on the circle
TH2 = RNG.uniform(0.0, 2 * np.pi, size=7)
RHO = 1.0 + 0.3 * np.cos(2 * np.arange(16) * 2 * np.pi / 16)  # a density on 16 grid points
RHO2 = np.roll(RHO, 3) + 0.1
TS = np.linspace(0.0, 3.0, 31)
W = np.array([[0.0, 0.6, 0.8]])
F_BASIS, G_BASIS = np.array([[1.0], [0.0], [0.0]]), np.array([[0.5, 0.0], [1.0, 0.0], [0.0, 1.0]])


def _f(p):
    return jnp.sum(jnp.sin(p) ** 2)


#: name -> a call with float64 NumPy inputs (and Python numbers for the parameters)
FLOAT64_CASES = {
    # attnflow.observables
    "pairwise_distances": lambda: observables.pairwise_distances(X),
    "diameter": lambda: observables.diameter(X),
    "directions": lambda: observables.directions(X),
    "cluster_tolerance": lambda: observables.cluster_tolerance(X, 0.1),
    "cluster_labels": lambda: observables.cluster_labels(X, 0.5),
    "num_clusters": lambda: observables.num_clusters(X, 0.5),
    "similar_pairs": lambda: observables.similar_pairs(XS, 0.5),
    "cluster_geometry": lambda: observables.cluster_geometry(XS, 0.5),
    "sphere_clusters": lambda: observables.sphere_clusters(XS, 0.5),
    "plateau_geometry": lambda: observables.plateau_geometry(
        np.stack([XS, XS]), observables.plateau_table(np.array([0.0, 1.0]), [[2, 2]], prepared=True), 0.5),
    "close_pairs": lambda: observables.close_pairs(X, 1.5),
    "pairs_clustered": lambda: observables.pairs_clustered(XS, 0.3),
    "clusters_above": lambda: observables.clusters_above(XS, 0.3),
    "gram_statistics": lambda: observables.gram_statistics(XS @ XS.T, 2.0, 0.3),
    "circle_gram_statistics": lambda: observables.circle_gram_statistics(X[:, :2], 2.0, 0.3, modes=12),
    "sphere_gram_statistics": lambda: observables.sphere_gram_statistics(X, 2.0, 0.3),
    "interaction_energy": lambda: observables.interaction_energy(XS, 2.0),
    "sphere_energy_from_row_sums": lambda: observables.sphere_energy_from_row_sums(np.exp(2.0 * (XS @ XS.T - 1.0)).sum(axis=1), 2.0),
    "span_dimension": lambda: observables.span_dimension(X),
    "inner_product_range": lambda: observables.inner_product_range(XS),
    "numerical_rank": lambda: observables.numerical_rank(P),
    "boolean_distance": lambda: observables.boolean_distance(P),
    "leaders": lambda: observables.leaders(P, 0.3),
    "off_leader_mass": lambda: observables.off_leader_mass(P),
    "double_log_slope": lambda: observables.double_log_slope(TS, np.exp(-0.5 * np.exp(2.0 * TS))),
    "affine_hull": lambda: observables.affine_hull(X),
    "hull_vertices": lambda: observables.hull_vertices(X),
    "hull_violation": lambda: observables.hull_violation(0.5 * X, X),
    "hull_nesting": lambda: observables.hull_nesting(np.stack([X, 0.5 * X])),
    "classify_tokens": lambda: observables.classify_tokens(X),
    "polytope_set_residual": lambda: observables.polytope_set_residual(X, Q.T @ K),
    "leading_vectors": lambda: observables.leading_vectors(V),
    "projections": lambda: observables.projections(X, PHI),
    "level_labels": lambda: observables.level_labels(S, 0.1),
    "num_levels": lambda: observables.num_levels(S, 0.1),
    "abz_levels": lambda: observables.abz_levels(S, 0.1),
    "extreme_monotonicity": lambda: observables.extreme_monotonicity(S_T),
    "split_coordinates": lambda: observables.split_coordinates(X, F_BASIS, G_BASIS),
    "unstable_left_basis": lambda: observables.unstable_left_basis(V),
    "codim_projections": lambda: observables.codim_projections(X, W),
    "max_norm": lambda: observables.max_norm(X),
    "uniform_distance": lambda: observables.uniform_distance(P),
    "collapse_bound": lambda: observables.collapse_bound(X),
    "classify_geometry": lambda: observables.classify_geometry(X, V, x=X, scale=1.0),
    "classify_configuration": lambda: observables.classify_configuration(
        X, X, 1.0, PHI, 1.0 + 0j, False, 0, np.diag([1.0, 1.0, 0.0]), 2),
    "clustered": lambda: observables.clustered(X, 0.5),
    "levels_clustered": lambda: observables.levels_clustered(S, 0.1),
    # attnflow.geometry
    "safe_norm": lambda: geometry.safe_norm(X),
    "soft_max": lambda: geometry.soft_max(S, 0.1),
    "soft_min": lambda: geometry.soft_min(S, 0.1),
    "boltzmann_min": lambda: geometry.boltzmann_min(S, 0.1),
    "boltzmann_max": lambda: geometry.boltzmann_max(S, 0.1),
    "soft_cluster_count": lambda: geometry.soft_cluster_count(X, 1.0, 0.5),
    "soft_rank": lambda: geometry.soft_rank(P, 1e-2),
    "soft_pair_fraction": lambda: geometry.soft_pair_fraction(XS, 0.3, 0.1),
    "hyperplane_levels": lambda: geometry.hyperplane_levels(S, 1.0),
    "hyperplane_distances": lambda: geometry.hyperplane_distances(X, PHI, 1.0),
    "vertex_distances": lambda: geometry.vertex_distances(X, X[:2], 1.0),
    "subspace_distances": lambda: geometry.subspace_distances(X, W, np.array([[0.0], [1.0]]), 1.0),
    "boolean_distance_soft": lambda: geometry.boolean_distance_soft(P),
    "uniform_distance_soft": lambda: geometry.uniform_distance_soft(P),
    "eig_sorted": lambda: geometry.eig_sorted(V),
    "leading_eigenpair_jax": lambda: geometry.leading_eigenpair_jax(V),
    "spectral_projector": lambda: geometry.spectral_projector(V, 1),
    "good_triple_margins": lambda: geometry.good_triple_margins(Q, K, V),
    "distance_to_paranormal": lambda: geometry.distance_to_paranormal(V, 1),
    "qk_lambda_min": lambda: geometry.qk_lambda_min(Q, K),
    "hvp": lambda: geometry.hvp(_f, X, np.ones_like(X)),
    "per_system_grad": lambda: geometry.per_system_grad(_f, X),
    # attnflow.meanfield: measures, distances, cluster counts, the kernel
    "circle_angles": lambda: meanfield.circle_angles(XS[:, :2]),
    "fourier_coefficients": lambda: meanfield.fourier_coefficients(TH, 3),
    "density_fourier_coefficients": lambda: meanfield.density_fourier_coefficients(RHO, 3),
    "sphere_moments": lambda: meanfield.sphere_moments(XS),
    "harmonic_energies": lambda: meanfield.harmonic_energies(XS, 3),
    "circle_histogram": lambda: meanfield.circle_histogram(TH, 4),
    "sphere_histogram": lambda: meanfield.sphere_histogram(XS, 2, 4),
    "interaction_energy_tiled": lambda: meanfield.interaction_energy_tiled(XS, 2.0, chunk_size=4),
    "interaction_energy_fourier": lambda: meanfield.interaction_energy_fourier(TH, 2.0),
    "circle_cluster_count": lambda: meanfield.circle_cluster_count(TH, 0.3),
    "circle_clusters": lambda: meanfield.circle_clusters(TH, 0.3),
    "circle_gaps": lambda: meanfield.circle_gaps(TH, 0.3),
    "sphere_cluster_count": lambda: meanfield.sphere_cluster_count(XS, 0.1),
    "kernel_modes": lambda: meanfield.kernel_modes(3.0, 4, dtype="float64"),
    "circle_w1": lambda: meanfield.circle_w1(TH, TH2),
    "circle_w1_to_density": lambda: meanfield.circle_w1_to_density(TH, RHO),
    "circle_w1_densities": lambda: meanfield.circle_w1_densities(RHO, RHO2),
    "sphere_mmd": lambda: meanfield.sphere_mmd(XS, YS),
    "sliced_w1": lambda: meanfield.sliced_w1(XS, YS, X),
}

#: the metastability rule's functions of observed series (cluster counts, times, energies): NumPy on the host,
#: no JAX arithmetic, so their float64 is NumPy's own
NUMPY_SERIES = {"metastable_states", "gathered", "plateaus", "first_plateaus", "merges", "energy_plateaus",
                "plateau_table"}

#: public functions that take no float array: graphs (boolean) and counts; float64 does not arise
NO_FLOAT_INPUT = {"connected_components", "count_components", "pair_fraction", "grid_components",
                  "quadrature_nodes"}
#: the meanfield modules whose public functions keep float64 here (the continuity equation, the linear
#: analysis and the study have tests of their own)
MEANFIELD_MODULES = {"attnflow.meanfield._measures", "attnflow.meanfield._distances", "attnflow.meanfield._clusters",
                     "attnflow.meanfield._kernel"}


def _public_functions(module, only_modules=None):
    names = []
    for name in module.__all__:
        obj = getattr(module, name)
        if not callable(obj) or inspect.isclass(obj):
            continue
        home = getattr(inspect.unwrap(obj), "__module__", "")
        if only_modules is None or home in only_modules:
            names.append(name)
    return names


def test_every_public_function_has_a_float64_case():
    """A new public function of these modules must join FLOAT64_CASES (or say why it takes no float)."""
    public = set(_public_functions(observables) + _public_functions(geometry)
                 + _public_functions(meanfield, MEANFIELD_MODULES))
    assert public - set(FLOAT64_CASES) - NO_FLOAT_INPUT - NUMPY_SERIES == set()
    assert set(FLOAT64_CASES) - public == set()


def _leaves(out):
    """The numbers of a result: arrays, Python and NumPy numbers, inside tuples, dicts, dataclasses, modules."""
    if dataclasses.is_dataclass(out) and not isinstance(out, type):
        out = {f.name: getattr(out, f.name) for f in dataclasses.fields(out)}
    leaves = jax.tree_util.tree_leaves(out)
    return [np.asarray(a) for a in leaves if not isinstance(a, (str, bool))]


def _call_without_truncation(fn):
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*will be truncated to dtype float32.*")
        return fn()


@pytest.mark.parametrize("name", sorted(FLOAT64_CASES))
def test_float64_input_gives_float64_results_with_float64_off(name):
    """Float64 NumPy input, JAX's float64 mode off: every floating result is float64 (complex128 for complex)
    and equals the same call made inside ``jax.enable_x64(True)``. Tolerance: rtol 1e-12, since both are the
    same float64 computation (a float32 computation differs by ~1e-7)."""
    assert not jax.config.jax_enable_x64
    got = _leaves(_call_without_truncation(FLOAT64_CASES[name]))
    assert not jax.config.jax_enable_x64, "the call left float64 mode on"
    with jax.enable_x64(True):
        want = _leaves(FLOAT64_CASES[name]())
    assert len(got) == len(want)
    floats = [a for a in got if a.dtype.kind in "fc"]
    assert floats or all(a.dtype.kind in "biu" for a in got)
    for g, w in zip(got, want):
        if w.dtype.kind == "f":
            assert g.dtype == np.float64, (name, g.dtype)
        elif w.dtype.kind == "c":
            assert g.dtype == np.complex128, (name, g.dtype)
        if w.dtype.kind in "fc":
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-300, err_msg=name)
        else:
            np.testing.assert_array_equal(g, w, err_msg=name)


def test_what_asks_for_float64():
    """Arrays of at least one axis and dtype requests decide; scalars are parameters (as in JAX's promotion)."""
    from attnflow._x64 import wants_float64

    for yes in ([np.ones(2)], {"a": (np.ones((2, 2), np.complex128),)}, jnp.asarray(np.ones(2, np.float32))[None]):
        assert wants_float64(yes) == (not isinstance(yes, jax.Array))
    for request in ("float64", np.float64, jnp.float64, np.dtype("complex128")):
        assert wants_float64(dtype=request)
    for no in (1.0, np.float64(1.0), np.array(2.0), None, "x", float, jnp.float32, np.ones(2, np.float32),
               np.arange(3)):
        assert not wants_float64(no) and not wants_float64(dtype=no)


def test_float64_results_match_independent_numpy_references():
    """Three results against plain NumPy in float64 (rtol 1e-13: a few roundings of O(1) sums)."""
    d = np.sqrt(((X[:, None] - X[None]) ** 2).sum(-1))
    np.testing.assert_allclose(np.asarray(observables.pairwise_distances(X)), d, rtol=1e-13, atol=1e-15)
    gram = XS @ XS.T
    energy = np.exp(2.0 * gram).sum() / (2 * 2.0 * len(XS) ** 2)
    assert float(observables.interaction_energy(XS, 2.0)) == pytest.approx(energy, rel=1e-13)
    step = 1 / (1 + np.exp(-(gram - 0.3) / 0.1))
    frac = (step.sum() - np.trace(step)) / (len(XS) * (len(XS) - 1))
    assert float(geometry.soft_pair_fraction(XS, 0.3, 0.1)) == pytest.approx(frac, rel=1e-13)


@pytest.mark.parametrize("name", ["pairwise_distances", "interaction_energy", "soft_rank", "eig_sorted",
                                  "sphere_mmd", "circle_w1", "fourier_coefficients"])
def test_float32_input_stays_float32(name):
    """float32 input runs as before: float32 (complex64) results, float64 mode untouched."""
    to32 = lambda a: a.astype(np.float32) if isinstance(a, np.ndarray) and a.dtype == np.float64 else a
    cases = {
        "pairwise_distances": lambda: observables.pairwise_distances(to32(X)),
        "interaction_energy": lambda: observables.interaction_energy(to32(XS), 2.0),
        "soft_rank": lambda: geometry.soft_rank(to32(P), 1e-2),
        "eig_sorted": lambda: geometry.eig_sorted(to32(V)),
        "sphere_mmd": lambda: meanfield.sphere_mmd(to32(XS), to32(YS)),
        "circle_w1": lambda: meanfield.circle_w1(to32(TH), to32(TH2)),
        "fourier_coefficients": lambda: meanfield.fourier_coefficients(to32(TH), 3),
    }
    for a in _leaves(cases[name]()):
        assert a.dtype in (np.float32, np.complex64), (name, a.dtype)
    assert not jax.config.jax_enable_x64


def test_float64_functions_work_under_jit_vmap_and_grad_of_the_caller():
    """Inside a caller's jit / vmap / grad the tracers decide: float32 stays float32 and is differentiable."""
    x = jnp.asarray(XS, jnp.float32)
    count = jax.jit(jax.vmap(lambda y: geometry.soft_pair_fraction(y, 0.3, 0.1)))(jnp.stack([x, x]))
    assert count.dtype == jnp.float32 and count.shape == (2,)
    g = jax.grad(lambda y: observables.interaction_energy(y, 2.0))(x)
    assert g.dtype == jnp.float32 and bool(jnp.all(jnp.isfinite(g)))
    with jax.enable_x64(True):  # the caller's own float64 mode: the tracers are float64
        g64 = jax.jit(jax.grad(lambda y: geometry.soft_pair_fraction(y, 0.3, 0.1)))(jnp.asarray(XS))
        assert g64.dtype == jnp.float64


def test_a_float64_simulation_is_post_processed_in_float64():
    """The whole path with float64 off: a float64 run's states through the observables stay float64."""
    sim = af.simulate(XS, np.eye(3), np.eye(3), np.eye(3), t1=1.0, num_saves=3, dtype="float64",
                      return_attention=True)
    for name in ("ts", "states", "tokens", "attention", "t_nonfinite"):
        assert getattr(sim, name).dtype == np.float64, name
    last = sim.states[-1]
    assert observables.diameter(last).dtype == np.float64
    assert observables.boolean_distance(sim.attention[-1]).dtype == np.float64
    assert geometry.soft_cluster_count(last, 1.0).dtype == np.float64
    assert meanfield.sphere_mmd(last, XS).dtype == np.float64


# ----------------------------------------------------------------------------------------------
# one rule for beta and for the number of tokens

I2 = np.eye(2)
X0 = np.random.default_rng(3).normal(size=(5, 2)).astype(np.float32)


@pytest.mark.parametrize("beta", [-1.0, 0.0, -0.0, np.nan, np.inf, -np.inf])
def test_simulate_refuses_a_temperature_that_is_not_positive_and_finite(beta):
    with pytest.raises(af.InputError, match="beta"):
        af.simulate(X0, I2, I2, I2, t1=1.0, num_saves=2, beta=beta)


def test_batched_and_weight_temperatures_follow_the_same_rule():
    with pytest.raises(af.InputError, match=r"beta must be finite and > 0.*entry \(1,\)"):
        af.simulate(X0, I2, I2, I2, t1=1.0, num_saves=2, beta=np.array([1.0, -2.0]), batch="beta")
    with pytest.raises(af.InputError, match="beta must be finite and > 0"):
        af.simulate(X0, af.AttentionWeights(I2, I2, I2, beta=-1.0), t1=1.0, num_saves=2)
    heads = af.AttentionWeights(np.stack([I2, I2]), np.stack([I2, I2]), np.stack([I2, I2]),
                                beta=np.array([1.0, 0.0]), axes=("head",))
    with pytest.raises(af.InputError, match="beta must be finite and > 0"):
        af.simulate(X0, heads, t1=1.0, num_saves=2)


@pytest.mark.parametrize("build", [
    lambda b: af.AttentionFlow(I2, I2, I2, beta=b),
    lambda b: af.RescaledFlow(I2, I2, I2, beta=b),
    lambda b: af.DiscreteRescaledFlow(I2, I2, I2, beta=b),
    lambda b: af.dynamics.sphere_flow(I2, I2, I2, beta=b),
    lambda b: af.fields.build_field("feedforward", I2, I2, I2, beta=b, picture="raw"),
    lambda b: af.dynamics.LayeredFlow(af.AttentionWeights.stack(
        [af.AttentionWeights(I2, I2, I2, beta=b)] * 2, axis="layer")),
    lambda b: af.dynamics.LayerInterpolation(af.AttentionWeights.stack(
        [af.AttentionWeights(I2, I2, I2, beta=b)] * 2, axis="layer")),
])
def test_every_field_constructor_refuses_a_negative_temperature(build):
    build(0.5)  # a positive one is fine
    with pytest.raises(af.InputError, match="beta must be finite and > 0"):
        build(-1.0)


def test_a_traced_temperature_is_checked_for_its_type_only():
    """Under jit / vmap / grad beta is a tracer: no value check, the run goes through."""
    run = lambda b: af.simulate(X0, I2, I2, I2, t1=1.0, num_saves=2, beta=b).states[-1].sum()
    g = jax.grad(run)(1.0)
    values = jax.jit(jax.vmap(run))(jnp.array([0.5, 2.0]))
    assert bool(jnp.isfinite(g)) and values.shape == (2,)
    flows = jax.vmap(lambda b: af.AttentionFlow(I2, I2, I2, beta=b)(0.0, X0))(jnp.array([0.5, 1.0]))
    assert flows.shape == (2, 5, 2)


def test_one_token_is_refused_with_one_sentence_everywhere_simulate_runs():
    want = r"x0 must hold at least 2 tokens, got n = 1 \(one token does not interact"
    with pytest.raises(af.InputError, match=want):
        af.simulate(X0[:1], I2, I2, I2, t1=1.0, num_saves=2)
    with pytest.raises(af.InputError, match=want):
        af.simulate(X0[None, :1], I2, I2, I2, t1=1.0, num_saves=2, batch="x0")
    with pytest.raises(af.InputError, match=want):
        af.simulate(X0[:1], t1=1.0, num_saves=2, dynamics=af.AttentionFlow(I2, I2, I2))
    with pytest.raises(af.InputError, match=want):
        af.simulate(X0[:1], I2, I2, I2, t1=1.0, method="euler", dt=0.5)
    assert af.simulate(X0[:2], I2, I2, I2, t1=1.0, num_saves=2).states.shape == (2, 2, 2)


def test_the_meanfield_kernel_and_the_energies_take_the_same_rule():
    """kernel_modes used to take beta = 0; the energies refused it with another sentence."""
    for call in (lambda b: meanfield.kernel_modes(b, 3), lambda b: observables.interaction_energy(XS, b),
                 lambda b: meanfield.interaction_energy_tiled(XS, b),
                 lambda b: meanfield.interaction_energy_fourier(TH, b)):
        call(1.5)
        for bad in (0.0, -1.0, np.nan):
            with pytest.raises(af.InputError, match="beta must be finite and > 0"):
                call(bad)
        with pytest.raises(af.InputError, match="beta must be one number"):
            call(np.array([1.0, 2.0]))


def test_the_validation_rules_are_the_helpers_the_jobs_share():
    from attnflow._validate import check_beta, check_num_tokens

    assert check_num_tokens("n", np.int64(2)) == 2
    for bad in (1, 0, 2.0, True, "8"):
        with pytest.raises(af.InputError, match="^n must"):
            check_num_tokens("n", bad)
    check_beta("beta", np.array([0.1, 3.0]))
    for bad in ("1", True, None, 1j, np.array([1.0, np.nan])):
        with pytest.raises(af.InputError, match="^beta must"):
            check_beta("beta", bad)


def test_the_mean_field_functions_refuse_a_bad_beta_with_the_one_rule():
    """The continuity equation, its growth rates and the particle study say the library's one sentence."""
    from attnflow.meanfield import growth_rates, perturbed_uniform_density, solve_continuity

    for call in (lambda b: growth_rates(b, 4), lambda b: solve_continuity(perturbed_uniform_density(16, 2, 0.1), b,
                                                                           np.array([0.0, 0.1]), dt=0.05)):
        for bad in (-1.0, 0.0, np.inf):
            with pytest.raises(af.InputError, match=r"^beta must be finite and > 0 \(the inverse temperature\)"):
                call(bad)


# ----------------------------------------------------------------------------------------------
# soft counterparts of the hard counts


def _cloud(seed, n=7, d=3):
    x = np.random.default_rng(seed).normal(size=(n, d))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_soft_pair_fraction_converges_to_the_hard_fraction(seed):
    """|soft - hard| <= e^{-delta / tau}, delta the smallest distance of an inner product to the threshold
    (the docstring's bound; + 1e-15 for the float64 rounding of a mean of O(1) terms)."""
    x, theta = _cloud(seed), 0.2
    gram = x @ x.T
    delta = np.min(np.abs(gram - theta)[~np.eye(len(x), dtype=bool)])
    hard = float(observables.pairs_clustered(x, theta))
    errors = []
    for tau in (delta, delta / 4, delta / 16, delta / 64):
        soft = float(geometry.soft_pair_fraction(x, theta, tau))
        assert abs(soft - hard) <= np.exp(-delta / tau) + 1e-15
        errors.append(abs(soft - hard))
    assert errors[-1] < 1e-20 < errors[0]  # it does converge (and was not exact from the start)


def test_soft_pair_fraction_gradient_matches_finite_differences(x64_here):
    """Central differences in float64 (``jax.grad`` casts its argument itself, so float64 mode is on here),
    h = 1e-5: truncation ~h^2 |f'''| ~ 1e-9 and rounding ~1e-16 / h, so rtol 1e-6 of the largest entry."""
    x = _cloud(5, n=6)
    f = lambda y: geometry.soft_pair_fraction(y, 0.2, 0.3)
    grad = np.asarray(jax.grad(f)(x))
    assert grad.dtype == np.float64 and np.abs(grad).max() > 1e-3
    h, fd = 1e-5, np.zeros_like(x)
    for idx in np.ndindex(*x.shape):
        e = np.zeros_like(x)
        e[idx] = h
        fd[idx] = (float(f(x + e)) - float(f(x - e))) / (2 * h)
    np.testing.assert_allclose(grad, fd, rtol=0, atol=1e-6 * np.abs(fd).max())
    assert float(jax.grad(lambda y: observables.pairs_clustered(y, 0.2))(x).__abs__().max()) == 0.0


def test_soft_pair_fraction_edges():
    assert float(geometry.soft_pair_fraction(np.ones((1, 2)), 0.5, 0.1)) == 0.0
    with pytest.raises(af.InputError, match="temperature"):
        geometry.soft_pair_fraction(_cloud(0), 0.5, 0.0)
    with pytest.raises(af.InputError, match="threshold"):
        geometry.soft_pair_fraction(_cloud(0), np.nan, 0.1)


#: every hard count -> the soft counterpart its docstring points to
HARD_TO_SOFT = {
    observables.pairs_clustered: "soft_pair_fraction",
    observables.pair_fraction: "soft_pair_fraction",
    observables.num_clusters: "soft_cluster_count",
    observables.cluster_labels: "soft_cluster_count",
    observables.clusters_above: "soft_cluster_count",
    observables.count_components: "soft_cluster_count",
    observables.clustered: "soft_cluster_count",
    observables.gram_statistics: "soft_pair_fraction",
    observables.circle_gram_statistics: "soft_pair_fraction",
    observables.sphere_gram_statistics: "soft_pair_fraction",
    observables.numerical_rank: "soft_rank",
    observables.span_dimension: "soft_rank",
    observables.boolean_distance: "boolean_distance_soft",
    observables.uniform_distance: "uniform_distance_soft",
    observables.num_levels: "hyperplane_distances",
    observables.level_labels: "hyperplane_distances",
    observables.levels_clustered: "hyperplane_distances",
    observables.abz_levels: "hyperplane_distances",
    meanfield.circle_cluster_count: "soft_cluster_count",
    meanfield.circle_gaps: "soft_cluster_count",
    meanfield.sphere_cluster_count: "soft_cluster_count",
}


@pytest.mark.parametrize("hard", list(HARD_TO_SOFT), ids=lambda f: f.__name__)
def test_every_hard_count_points_to_its_soft_counterpart(hard):
    """Their gradient is 0 wherever it exists: the docstring says so and names the function to use."""
    soft = HARD_TO_SOFT[hard]
    assert soft in geometry.__all__
    doc = inspect.getdoc(hard)
    assert "See also" in doc and f"attnflow.geometry.{soft}" in doc, hard.__name__
    assert "gradient" in doc.split("See also", 1)[1]
