r"""The stationary clustered states of the noisy mean field, traced by their order parameter: the transition's order.

With independent noise of strength :math:`\sigma` the continuity equation of tokens on :math:`S^{d-1}` (Q = K = V = I)
has zero-flux stationary states :math:`\frac{\sigma^2}2\nabla\rho = \rho\,v[\rho]`, and since
:math:`v[\rho] = \frac1\beta\nabla\Phi` with :math:`\Phi = K*\rho` (1/n attention) or :math:`\log K*\rho` (softmax),
:math:`K(t) = e^{\beta t}`, they solve the fixed-point equation

.. math::  \rho \propto e^{\gamma\Phi[\rho]},\qquad \gamma = \frac{2}{\beta\sigma^2}.

A state clustered about an axis e is zonal, :math:`\rho(x) = f(\langle x, e\rangle)`, expanded in the normalised
Gegenbauer polynomials :math:`Z_l = C_l^{(\lambda)}/C_l^{(\lambda)}(1)`, :math:`\lambda = (d-2)/2` (Chebyshev
:math:`T_l` on the circle, Legendre :math:`P_l` on :math:`S^2`), orthogonal for the weight
:math:`w(z) = (1-z^2)^{\lambda - 1/2}`; by Funk-Hecke :math:`K*Z_l = \hat K_l Z_l` with
:math:`\hat K_l \propto I_{l+\lambda}(\beta)`. The uniform state loses stability where :math:`\gamma\hat K_1 = 1`
(1/n) or :math:`\gamma\hat K_1/\hat K_0 = 1` (softmax): :math:`\sigma_c` of
:func:`~attnflow.meanfield.critical_noise`.

:func:`stationary_branch` fixes the order parameter :math:`r = \int\langle x, e\rangle\,d\rho` and solves for the
state and for :math:`\gamma` together (for each iterate, the :math:`\gamma` that gives the next state the order
parameter r, found by bisection; then the state is replaced, until it no longer changes): this traces the branch
through its fold, where a continuation in :math:`\sigma` would stop. Along the branch :math:`\sigma(r)/\sigma_c`
starts at 1; if it first rises (:math:`\sigma^2/\sigma_c^2 - 1 \approx c\,r^2` with c > 0) the bifurcation is
subcritical: clustered states exist above :math:`\sigma_c`, up to the fold :math:`\sigma_{fold}`, where the uniform
state is stable too (a discontinuous transition, bistable for :math:`\sigma_c < \sigma < \sigma_{fold}`); if it falls
(c < 0), supercritical (continuous). For 1/n attention the sign of c changes at the tricritical
:math:`\beta^*(d)` (:func:`~attnflow.meanfield.tricritical_beta`), which this computation recovers.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from .. import _validate as v
from ..errors import InputError

__all__ = ["stationary_branch", "noise_barrier"]


def _basis(d: int, degree: int, nodes: int):
    """Gauss-Jacobi nodes z, their weights normalised to the probability of <x, e> under the uniform measure, and
    the normalised Gegenbauer polynomials Z_l(z), l = 0..degree (degree + 1, nodes)."""
    from scipy.special import eval_chebyt, eval_gegenbauer, roots_jacobi

    lam = (d - 2) / 2
    z, w = roots_jacobi(nodes, lam - 0.5, lam - 0.5)
    w = w / w.sum()
    if d == 2:
        Z = np.stack([eval_chebyt(l, z) for l in range(degree + 1)])
    else:
        Z = np.stack([eval_gegenbauer(l, lam, z) / eval_gegenbauer(l, lam, 1.0) for l in range(degree + 1)])
    return z, w, Z


def _kernel_ratios(beta: float, d: int, degree: int) -> np.ndarray:
    r""":math:`\hat K_l/\hat K_0`, l = 0..degree, from the project's Funk-Hecke eigenvalues
    (:func:`~attnflow.meanfield._linear.sphere_kernel_modes`, float64, no overflow)."""
    import jax

    from ._linear import sphere_kernel_modes

    with jax.enable_x64(True):
        k = np.asarray(sphere_kernel_modes(float(beta), d, degree), np.float64)
    return k / k[0]


def _free_energy(f, g: float, K, Z, w, norms) -> float:
    r""":math:`\frac{2}{\sigma^2}(F[\rho] - F[\text{uniform}]) = \int f\log f - \frac{\gamma}{2}\sum_{l \ge 1}\hat K_l
    f_l^2\|Z_l\|^2` for the zonal density f at the nodes (probability weights w), with :math:`\gamma\hat K_l =
    g\,\hat K_l/\hat K_1` (the l = 0 terms cancel against the uniform state's)."""
    c_l = (Z * w) @ f / norms
    return float((f * np.log(f)) @ w - g / 2 * np.sum(K[1:] / K[1] * c_l[1:] ** 2 * norms[1:]))


def stationary_branch(beta, amplitudes, *, d: int = 2, normalisation: str = "mean", degree: int = 128,
                      nodes: int = 512, tol: float = 1e-12, max_iterations: int = 2000) -> dict:
    r"""The stationary clustered states of the noisy mean field on :math:`S^{d-1}` at the order parameters
    ``amplitudes`` (each in (0, 1)), and the order of the transition they imply (module docstring).

    Args:
        beta: inverse temperature (> 0).
        amplitudes: order parameters :math:`r = \int\langle x, e\rangle\,d\rho` of the states, increasing, in (0, 1).
        d: the dimension of the ambient space (2: the circle, 3: :math:`S^2`).
        normalisation: ``"mean"`` (1/n attention) or ``"softmax"``.
        degree: the highest zonal degree kept (the states are analytic; a peaked state needs more).
        nodes: Gauss-Jacobi nodes in :math:`z = \langle x, e\rangle`.
        tol: the fixed-point iteration stops when no density value moves by more than tol (relative to its
            largest value).

    Returns a dict: ``beta``, ``d``, ``normalisation``, ``amplitudes`` (R,), ``ratio`` (R,) :math:`\sigma/\sigma_c`
    of each state, ``sigma`` (R,), ``sigma_c``, ``converged`` (R,) bools and ``residual`` (R,) the last change,
    ``z`` (nodes,) the Gauss-Jacobi nodes of :math:`\langle x, e\rangle` and ``density`` (R, nodes) each state there,
    relative to the uniform measure (mean 1 over the law of :math:`\langle x, e\rangle`),
    ``tail`` (R,) the share of the state's norm in its top tenth of degrees (resolution: small), ``free_energy``
    (R,) for 1/n attention :math:`\frac{2}{\sigma^2}(F[\rho] - F[\text{uniform}])` at each state's own
    :math:`\sigma`, with :math:`F = \frac{\sigma^2}2\int\rho\log\rho - \frac1{2\beta}\iint K\rho\rho` the free
    energy the flow descends (NaN for softmax, which has none of this form; see :func:`noise_barrier`), ``landau`` the
    slope c of :math:`\sigma^2/\sigma_c^2 - 1` against :math:`r^2` over the amplitudes up to 0.1 (least squares
    through 0; None with fewer than two of them), ``kind`` (``"discontinuous"`` for c > 0, ``"continuous"``
    otherwise; None without ``landau``) and ``fold_ratio`` (the largest ratio along the traced branch where it
    exceeds 1, the upper edge of the bistable range as far as the amplitudes reach; else None). States that did
    not converge are excluded from ``landau`` and ``fold_ratio`` (NaN ratio).

    Example:
        >>> import numpy as np
        >>> from attnflow.meanfield import stationary_branch, tricritical_beta
        >>> b = stationary_branch(4.0, [0.02, 0.05, 0.3, 0.6])          # above beta*(2) = 2.4469: subcritical
        >>> b["kind"], bool(b["fold_ratio"] > 1)
        ('discontinuous', True)
        >>> stationary_branch(1.5, [0.02, 0.05])["kind"]                  # below it: continuous
        'continuous'
    """
    from ._linear import critical_noise
    from ._pde import _check_normalisation

    normalisation = _check_normalisation(normalisation)
    beta, d, degree, nodes = _check_branch_grid(beta, d, degree, nodes)
    r_all = np.asarray(amplitudes, float).ravel()
    if r_all.size == 0 or not np.all(np.isfinite(r_all)) or np.any(r_all <= 0) or np.any(r_all >= 1) \
            or np.any(np.diff(r_all) <= 0):
        raise InputError(f"amplitudes must be an increasing list of order parameters in (0, 1), got "
                         f"{np.asarray(amplitudes).tolist()}.")
    z, w, Z = _basis(d, degree, nodes)
    K = _kernel_ratios(beta, d, degree)  # K_l / K_0
    norms = (Z ** 2) @ w  # <Z_l, Z_l>
    scale = K[1]  # the exponent g phi / K_1 has g = gamma K_1 (1/n) or gamma K_1 / K_0 (softmax): g = 1 at sigma_c

    def potential(f):  # Phi / K_0 (mean: K * f; softmax: log(K * f) less a constant), at the nodes
        coeff = (Z * w) @ f / norms
        conv = (K * coeff) @ Z
        if normalisation == "mean":
            return conv
        return np.log(np.maximum(conv, np.finfo(float).tiny))

    def state(phi, g):  # the normalised density e^{g phi / scale} at the nodes, and its order parameter
        e = g * (phi - phi.max()) / scale
        f = np.exp(e)
        f = f / (f @ w)
        return f, float((f * z) @ w)

    def solve_gamma(phi, r):
        lo, hi = 1e-6, 1.0
        while state(phi, hi)[1] < r:
            hi *= 2
            if hi > 1e8:
                return math.nan
        for _ in range(200):
            mid = math.sqrt(lo * hi)
            lo, hi = (mid, hi) if state(phi, mid)[1] < r else (lo, mid)
            if hi / lo - 1 < 1e-15:
                break
        return math.sqrt(lo * hi)

    ratios, converged, residuals, tails, energies, states = [], [], [], [], [], []
    f = 1 + d * r_all[0] * z  # the linear state with the first amplitude
    for r in r_all:
        g = math.nan
        change = math.inf
        for _ in range(max_iterations):
            phi = potential(f)
            g = solve_gamma(phi, r)
            if not math.isfinite(g):
                break
            new, _ = state(phi, g)
            change = float(np.max(np.abs(new - f)) / np.max(new))
            f = new
            if change < tol:
                break
        ok = math.isfinite(g) and change < tol
        coeff = np.abs((Z * w) @ f / norms * np.sqrt(norms))
        tails.append(float(np.sqrt(np.sum(coeff[-max(degree // 10, 1):] ** 2) / np.sum(coeff ** 2))))
        ratios.append(1 / math.sqrt(g) if ok else math.nan)  # sigma / sigma_c = sqrt(gamma_c / gamma)
        if normalisation == "mean" and ok:
            energies.append(_free_energy(f, g, K, Z, w, norms))
        else:
            energies.append(math.nan)
        converged.append(ok)
        residuals.append(change)
        states.append(f.copy())
    ratio = np.asarray(ratios)
    small = (r_all <= 0.1) & np.isfinite(ratio)
    landau = None
    if small.sum() >= 2:
        x = r_all[small] ** 2
        landau = float(np.sum(x * (ratio[small] ** 2 - 1)) / np.sum(x * x))
    finite = ratio[np.isfinite(ratio)]
    fold = float(finite.max()) if finite.size and finite.max() > 1 else None
    sigma_c = float(critical_noise(beta, d, normalisation))
    return {"beta": float(beta), "d": d, "normalisation": normalisation, "amplitudes": r_all, "ratio": ratio,
            "sigma": ratio * sigma_c, "sigma_c": sigma_c, "converged": np.asarray(converged),
            "residual": np.asarray(residuals), "tail": np.asarray(tails), "free_energy": np.asarray(energies),
            "z": z, "density": np.asarray(states),
            "landau": landau,
            "kind": None if landau is None else ("discontinuous" if landau > 0 else "continuous"),
            "fold_ratio": fold}


def _check_branch_grid(beta, d, degree, nodes) -> tuple[float, int, int, int]:
    """beta > 0, d >= 2, degree >= 2 and nodes >= 2 degree, as a float and three ints (or one InputError)."""
    beta = v.check_number("beta", beta, "the inverse temperature", low=0)
    d = v.check_int("d", d, 2, "the dimension of the ambient space of the sphere S^{d-1}")
    degree = v.check_int("degree", degree, 2, "the highest zonal degree kept")
    nodes = v.check_int("nodes", nodes, 2 * degree, f"Gauss-Jacobi nodes, at least 2 x degree = {2 * degree}")
    return beta, d, degree, nodes


@functools.lru_cache(maxsize=32)
def _coarse_branch(beta: float, d: int, degree: int, nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """The branch's sigma / sigma_c on the order parameters r = 0.02, 0.03, ..., 0.98 (read-only arrays), kept
    per (beta, d, degree, nodes): every barrier of one beta brackets its two states on this same scan, so a
    curve of barriers over sigma computes it once."""
    coarse = np.round(np.arange(0.02, 0.981, 0.01), 3)
    ratio = np.array(stationary_branch(beta, coarse, d=d, degree=degree, nodes=nodes)["ratio"], dtype=float)
    coarse.flags.writeable = ratio.flags.writeable = False
    return coarse, ratio


def noise_barrier(beta, sigma_ratio, *, d: int = 2, degree: int = 192, nodes: int = 768, tol: float = 1e-7) -> dict:
    r"""The free-energy barrier of a clustered state of 1/n attention at :math:`\sigma = ` ``sigma_ratio`` x
    :math:`\sigma_c` inside the bistable range: the stable clustered state and the saddle (the unstable clustered
    state of the same :math:`\sigma`, the lower part of :func:`stationary_branch`), found by bisection in the order
    parameter on each side of the fold, and :math:`b = \frac{2}{\sigma^2}(F[\text{saddle}] - F[\text{stable}])`.

    n particles with independent noise have the Gibbs measure :math:`\propto e^{-\frac{2}{\sigma^2}U}`,
    :math:`U = -\frac1{2\beta n}\sum_{ij}K(x_i, x_j)`, whose empirical measure obeys a large deviation principle
    with rate :math:`n\,\frac{2}{\sigma^2}(F[\rho] - \min F)`; escaping from the clustered state over the saddle
    then takes a time :math:`T \approx C e^{bn}` (Eyring-Kramers, the prefactor polynomial in n), so b is the slope
    of :math:`\log T` against n. The same in the rescaled time :math:`\tau = e^\beta t`.

    Returns a dict: ``beta``, ``d``, ``ratio``, ``stable_r``, ``saddle_r``, ``fold_r``, ``fold_ratio``, ``slope``
    (b), ``stable_free_energy`` and ``saddle_free_energy`` (each :math:`\frac2{\sigma^2}(F - F[\text{uniform}])`).

    Example:
        >>> from attnflow.meanfield import noise_barrier
        >>> b = noise_barrier(4.0, 1.02, degree=64, nodes=256)   # the circle, inside (1, 1.029): two clustered states
        >>> round(b["stable_r"], 3), b["saddle_r"] < b["fold_r"] < b["stable_r"], b["slope"] > 0
        (0.695, True, True)
    """
    ratio = v.check_number("sigma_ratio", sigma_ratio, "the noise strength over sigma_c", low=1)
    beta, d, degree, nodes = _check_branch_grid(beta, d, degree, nodes)
    coarse, coarse_ratio = _coarse_branch(beta, d, degree, nodes)
    top = int(np.nanargmax(coarse_ratio))
    if not coarse_ratio[top] > ratio:
        raise InputError(f"sigma_ratio = {ratio:g} is outside the bistable range (1, {coarse_ratio[top]:.5g}) of beta = "
                         f"{float(beta):g} in d = {d}: no clustered state there; choose a ratio in that range.")

    def at(r: float) -> float:
        return float(stationary_branch(beta, [r], d=d, degree=degree, nodes=nodes)["ratio"][0])

    def root(lo: float, hi: float, rising: bool) -> float:  # the r in (lo, hi) where the branch has the ratio
        for _ in range(60):
            mid = (lo + hi) / 2
            if (at(mid) < ratio) == rising:
                lo = mid
            else:
                hi = mid
            if hi - lo < tol:
                break
        return (lo + hi) / 2

    fold_r = float(coarse[top])
    below = np.nonzero(coarse_ratio[:top] < ratio)[0]
    saddle_r = root(float(coarse[below[-1]]) if below.size else 1e-4, fold_r, True)
    above = np.nonzero(coarse_ratio[top:] < ratio)[0]
    stable_r = root(fold_r, float(coarse[top + above[0]]) if above.size else 0.999, False)
    states = stationary_branch(beta, [saddle_r, stable_r], d=d, degree=degree, nodes=nodes)
    saddle_f, stable_f = (float(x) for x in states["free_energy"])
    return {"beta": float(beta), "d": d, "ratio": ratio, "stable_r": stable_r, "saddle_r": saddle_r, "fold_r": fold_r,
            "fold_ratio": float(coarse_ratio[top]), "slope": saddle_f - stable_f, "stable_free_energy": stable_f,
            "saddle_free_energy": saddle_f}
