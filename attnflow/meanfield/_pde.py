r"""The continuity equation of the sphere flow on the circle, solved by a Fourier pseudo-spectral method.

For :math:`n\to\infty` the empirical measure of the circle flow (:func:`attnflow.dynamics.sphere_flow`
with d = 2, Q = K = V = I) has a density :math:`\rho(t, \theta)` that solves (cf. Geshkovski,
Letrouit, Polyanskiy and Rigollet, *A mathematical perspective on Transformers*, 2023, the
continuity equation of the mean-field limit)

.. math::  \partial_t\rho + \partial_\theta(\rho\, v[\rho]) = 0, \qquad
           v[\rho](\theta) = \frac{\int e^{\beta\cos(\theta-\phi)}\sin(\phi-\theta)\,\rho(\phi)\,d\phi}{Z[\rho](\theta)},

with :math:`Z = \int e^{\beta\cos(\theta-\phi)}\rho(\phi)\,d\phi` (softmax) or :math:`Z = 1` (mean
normalisation, :math:`P_{ij} = e^{\beta\langle x_i, x_j\rangle}/n`). Since
:math:`\sin(\phi - \theta)\, e^{\beta\cos(\theta - \phi)} = \frac1\beta\partial_\theta e^{\beta\cos(\theta-\phi)}`,
the velocity is a derivative of the convolution :math:`K*\rho` with :math:`K(\psi) = e^{\beta\cos\psi}`:

.. math::  v = \frac1\beta\,\partial_\theta (K*\rho)\ \ \text{(mean)}, \qquad
           v = \frac1\beta\,\partial_\theta \log(K*\rho)\ \ \text{(softmax)}, \qquad
           \widehat{K*\rho}_m = 2\pi I_m(\beta)\,\hat\rho_m .

**Scheme** (spectral, not finite volume: the kernel is a convolution, diagonal in Fourier
modes, and the solution is analytic for smooth starts, so spectral accuracy is available): the
state is :math:`\rho` at the G points :math:`\theta_g = 2\pi g/G`. :math:`K*\rho` and its
derivative come from the FFT of :math:`\rho` times the exact kernel modes
(:func:`~attnflow.meanfield.kernel_modes`); the flux :math:`f = \rho v` is formed pointwise and
differentiated spectrally, :math:`\partial_t\hat\rho_m = -i m \hat f_m` (the tendency is the registry's
field ``"continuity"``, :class:`~attnflow.meanfield._continuity.CircleContinuity`). The zero mode of the
tendency is exactly 0, so the mass :math:`\frac{2\pi}{G}\sum_g\rho_g` is conserved to rounding.
The modes :math:`|m| > (G-1)/3` of the tendency are removed (the 2/3 rule, ``dealias=True``): for
the mean normalisation, where :math:`v` has the modes of :math:`\rho`, the quadratic product
:math:`\rho v` then aliases nothing into the modes kept (for softmax the quotient by :math:`K*\rho`
is not band-limited, and the rule only damps the aliasing); the Nyquist mode is never
differentiated. The rule holds only for a state inside the kept modes: content of the start above
them would never move and would alias into the kept modes through :math:`\rho v`, so
:func:`solve_continuity` projects the start onto the kept modes, :math:`|m| \le m_{max}` with
:math:`m_{max} = \lfloor (G-1)/3\rfloor` (``dealias=True``) or the highest mode below Nyquist, and
reports the part removed, :math:`\|\rho_0 - P\rho_0\|_2/\|\rho_0\|_2`
(:attr:`DensityPath.discarded`; ``max_discarded`` refuses a start above a tolerance). The
tendency has no content above :math:`m_{max}`, so the state stays in the kept modes. Time stepping: the project's diffrax path (:func:`attnflow.integrate.solve_ode`) on the
grid vector (any of its solvers, constant or adaptive steps), or the classical RK4 with constant
steps between the save times (the default: order 4, and it compiles in a fraction of diffrax's time):
the project's :class:`attnflow.integrate.RKStepper` with ``RK_TABLEAUX["rk4"]``, ``ts=`` and
``steps_per_save``, its four stages one ``lax.scan`` body (``scan_stages``). Either way the solve
is an integrator's :class:`~attnflow.integrate.Trajectory`, read into a :class:`DensityPath` (the
density with its mass, its positivity monitor and the part of the start removed above the kept
modes) whose ``result`` is the integrator's :class:`~attnflow.integrate.RESULTS` code.

**Stability** of the explicit RK4 step: advection of mode m at speed v has the eigenvalue
:math:`i m v`, and RK4 is stable on the imaginary axis up to :math:`2\sqrt2` (:data:`RK4_IMAGINARY_BOUND`),
so :func:`solve_continuity` refuses a step with :math:`h\,\max|v[\rho_0]|\,m_{max} > 2\sqrt 2` before
it solves (checked at the start's velocity, which grows as clusters form: watch ``min_density``).

**Positivity** is not enforced (a spectral scheme can undershoot near steep fronts): the minimum
of :math:`\rho` on the grid at every save time is returned (:attr:`DensityPath.min_density`),
and :attr:`DensityPath.negative` says whether it ever went below 0.
"""

from __future__ import annotations

import functools
import math

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from .. import _validate as v
from .._x64 import keeps_float64
from ..errors import InputError
from ..fields import build_field
from ..integrate import RK_TABLEAUX, SOLVERS, RKStepper, Trajectory, solve_ode
from ._continuity import NORMALISATIONS, _check_normalisation, kept_modes

__all__ = ["NORMALISATIONS", "RK4_IMAGINARY_BOUND", "circle_grid", "kept_modes", "interpolate_density", "circle_velocity",
           "DensityPath", "solve_continuity"]

TWO_PI = 2 * math.pi
#: the classical RK4 is stable for h lambda on the imaginary axis up to |h lambda| = 2 sqrt 2
RK4_IMAGINARY_BOUND = 2 * math.sqrt(2)


@keeps_float64
def circle_grid(num_points: int, dtype=None) -> Float[Array, " G"]:
    r"""The grid :math:`\theta_g = 2\pi g/G`, g = 0..G-1.

    Example:
        >>> from attnflow.meanfield import circle_grid
        >>> [round(float(t), 4) for t in circle_grid(4)]
        [0.0, 1.5708, 3.1416, 4.7124]
    """
    num_points = v.check_int("num_points", num_points, meaning="the number of grid points")
    return (TWO_PI / num_points) * jnp.arange(num_points, dtype=jnp.result_type(float) if dtype is None else dtype)


def _check_density(density, name: str = "density") -> Float[Array, " G"]:
    shape = v.check_array(name, density, "a density on the grid 2 pi g / G (G,)", ranks=(1,), nonempty=True)
    if shape[0] < 4:
        raise InputError(f"{name} must have at least 4 grid points, got {shape[0]}.")
    return v.as_float(density)


@keeps_float64
def interpolate_density(density: Float[Array, " G"], num_points: int) -> Float[Array, " H"]:
    r"""The trigonometric interpolant of a grid density, sampled on a grid of ``num_points`` >= G points.

    Exact for a trigonometric polynomial of degree < G/2 (zero padding of the FFT; the Nyquist
    mode of an even G is split evenly between :math:`\pm G/2`). Use it before
    :func:`~attnflow.meanfield.circle_w1_to_density` to read a spectral solution on cells finer
    than its own grid.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.meanfield import circle_grid
        >>> from attnflow.meanfield._pde import interpolate_density
        >>> fine = interpolate_density(1 + jnp.cos(circle_grid(8)), 32)
        >>> float(jnp.abs(fine - (1 + jnp.cos(circle_grid(32)))).max()) < 1e-6
        True
    """
    density = _check_density(density)
    size = density.shape[0]
    num_points = v.check_int("num_points", num_points, meaning="the number of points of the finer grid")
    if num_points < size:
        raise InputError(f"num_points must be >= the density's {size} grid points, got {num_points}.")
    return _interpolate(density, num_points)


@functools.partial(jax.jit, static_argnames=("num_points",))
def _interpolate(density, num_points: int):
    size = density.shape[0]
    coeffs = jnp.fft.rfft(density)
    if size % 2 == 0:
        coeffs = coeffs.at[-1].multiply(0.5)
    padded = jnp.zeros((num_points // 2 + 1,), coeffs.dtype).at[: coeffs.shape[0]].set(coeffs)
    return jnp.fft.irfft(padded, n=num_points) * (num_points / size)


def _band_limit(density, cutoff: int):
    """(the density's part in the modes |m| <= cutoff, the removed part's relative L2 norm)."""
    coeffs = jnp.fft.rfft(density)
    m = jnp.arange(coeffs.shape[0])
    weight = jnp.where((m == 0) | (2 * m == density.shape[0]), 1.0, 2.0).astype(density.dtype)  # Parseval
    power = weight * jnp.abs(coeffs) ** 2
    removed = jnp.sum(jnp.where(m > cutoff, power, 0))
    total = jnp.sum(power)
    discarded = jnp.sqrt(removed / jnp.where(total > 0, total, 1))
    return jnp.fft.irfft(jnp.where(m <= cutoff, coeffs, 0), n=density.shape[0]), discarded


@keeps_float64
def circle_velocity(density: Float[Array, " G"], beta, normalisation: str = "softmax") -> Float[Array, " G"]:
    r"""The mean-field velocity :math:`v[\rho](\theta_g)` of a density on :func:`circle_grid` (module docstring).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.meanfield import circle_grid
        >>> from attnflow.meanfield._pde import circle_velocity
        >>> rho = (1 + 0.5 * jnp.cos(circle_grid(32))) / (2 * jnp.pi)   # mass gathers at theta = 0
        >>> vel = circle_velocity(rho, 1.0)
        >>> bool(vel[4] < 0 < vel[-4])                                  # both sides move towards 0
        True
    """
    density = _check_density(density)
    v.check_beta("beta", beta, "the inverse temperature", scalar=True)
    return _velocity(density, beta, _check_normalisation(normalisation))


@functools.partial(jax.jit, static_argnames=("normalisation",))
def _velocity(density, beta, normalisation: str):
    return _field(beta, density, normalisation).velocity(density)


def _field(beta, density, normalisation: str, dealias: bool = True, sigma=0.0):
    """The right-hand side of the continuity equation for densities like ``density`` (its grid and dtype): the
    registry's field ``"continuity"``, the mean-field limit of Q = K = V = I on the circle (with the diffusion
    sigma^2/2 of tokens with independent noise)."""
    eye = jnp.eye(2, dtype=density.dtype)
    return build_field("continuity", eye, eye, eye, beta=beta, num_points=density.shape[0],
                       normalisation=normalisation, dealias=dealias, diffusion=_diffusion(sigma))


def _diffusion(sigma):
    """D = sigma^2 / 2, a Python 0.0 for a Python 0 (the noiseless field, as it was)."""
    if isinstance(sigma, (int, float)) and sigma == 0:
        return 0.0
    return sigma * sigma / 2


class DensityPath(eqx.Module):
    r"""A solution of the continuity equation at the save times: the integrator's
    :class:`~attnflow.integrate.Trajectory` (times, steps, result code) read as a density.

    Attributes:
        ts: (T,) save times.
        density: (T, G) the density on :func:`circle_grid` at each save time.
        mass: (T,) :math:`\frac{2\pi}{G}\sum_g\rho_g` (conserved to rounding).
        min_density: (T,) the smallest grid value of :math:`\rho` (positivity monitor).
        negative: True when ``min_density`` went below 0 at a save time.
        discarded: the relative L2 norm :math:`\|\rho_0 - P\rho_0\|_2/\|\rho_0\|_2` of the start's
            content above the kept modes, removed before the solve (0 to rounding for a band-limited start).
        num_steps: accepted time steps.
        result: the solve's :class:`attnflow.integrate.RESULTS` code (``RESULTS.successful`` = 0, ...).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.meanfield import DensityPath, perturbed_uniform_density, solve_continuity
        >>> path = solve_continuity(perturbed_uniform_density(16, 1, 0.1), 1.0, jnp.array([0.0, 0.5]), dt=0.1)
        >>> isinstance(path, DensityPath), path.min_density.shape, int(path.result), float(path.discarded) < 1e-6
        (True, (2,), 0, True)
    """

    ts: Float[Array, " T"]
    density: Float[Array, "T G"]
    mass: Float[Array, " T"]
    min_density: Float[Array, " T"]
    negative: Bool[Array, ""]
    discarded: Float[Array, ""]
    num_steps: Int[Array, ""]
    result: Int[Array, ""]


def _path(traj: Trajectory, density, low, discarded) -> DensityPath:
    """The :class:`DensityPath` of an integrator's solve: its times, steps and result code, with the
    density saved, its minimum ``low`` and the part of the start removed (``discarded``)."""
    return DensityPath(ts=traj.ts, density=density, mass=jnp.sum(density, axis=1) * (TWO_PI / density.shape[1]),
                       min_density=low, negative=jnp.any(low < 0), discarded=discarded, num_steps=traj.num_steps,
                       result=traj.result)


@eqx.filter_jit
def _solve_diffrax(rho0, beta, ts, normalisation, dt, solver, rtol, atol, dealias, max_steps, sigma):
    rho0, discarded = _band_limit(rho0, kept_modes(rho0.shape[0], dealias))
    field = _field(beta, rho0, normalisation, dealias, sigma)
    traj = solve_ode(field, rho0, t0=ts[0], t1=ts[-1], ts=ts, solver=solver, rtol=rtol, atol=atol, dt0=dt,
                     adaptive=dt is None, max_steps=max_steps)
    return _path(traj, traj.ys, jnp.min(traj.ys, axis=1), discarded)


@eqx.filter_jit
def _solve_rk4(rho0, beta, ts, normalisation, steps, dealias, sigma):
    rho0, discarded = _band_limit(rho0, kept_modes(rho0.shape[0], dealias))
    field = _field(beta, rho0, normalisation, dealias, sigma)
    # the classical RK4 between the save times, its four stages one lax.scan body (XLA compiles the
    # field once, not four times), with the minimum of the density over every step; with noise the
    # integrating-factor (Lawson) RK4, the diffusion exact
    noisy = not (isinstance(sigma, (int, float)) and sigma == 0)
    stepper = RKStepper(RK_TABLEAUX["rk4"], ts=ts, steps_per_save=steps, scan_stages=not noisy, track_min=jnp.min,
                        lawson=noisy)
    traj = stepper.solve(field, rho0)
    density, low = traj.ys
    return _path(traj, density, low, discarded)


@keeps_float64
def solve_continuity(density0: Float[Array, " G"], beta, ts: Float[Array, " T"], *, normalisation: str = "softmax",
                     dt=None, steps_per_save: int | None = None, solver: str = "rk4", rtol: float = 1e-8,
                     atol: float = 1e-10, dealias: bool = True, max_steps: int = 16384,
                     max_discarded: float | None = None, sigma=0.0) -> DensityPath:
    r"""The density at the times ``ts`` (from ``ts[0]``), solving the continuity equation on the circle.

    Time stepping:

    * ``solver="rk4"`` (default): the classical fourth-order Runge--Kutta method with constant
      steps (:class:`attnflow.integrate.RKStepper` between the save times); each interval between
      save times is cut into ``steps_per_save`` equal steps, or, given a concrete ``dt``, into the
      fewest steps of at most ``dt`` that the longest interval needs. ``min_density`` is then the minimum over every step of the interval
      that ends at the save time (not only at the save times).
    * any name of :data:`attnflow.integrate.SOLVERS` (e.g. ``"tsit5"``, order 5): the project's
      diffrax path :func:`attnflow.integrate.solve_ode` on the grid vector, with constant steps
      ``dt``, or adaptive steps with ``rtol`` / ``atol`` when ``dt`` is None (``atol`` is absolute:
      scale it to the perturbation you follow); ``min_density`` at the save times.

    ``sigma``: the strength of independent tokenwise noise (:class:`attnflow.integrate.TokenNoise` on the
    circle); its mean-field limit adds the diffusion :math:`\frac{\sigma^2}{2}\partial_\theta^2\rho`, which the
    RK4 path integrates exactly (integrating-factor RK4, ``RKStepper(lawson=True)``: mode m decays by
    :math:`e^{-\sigma^2 m^2 h/2}` over a step) and the diffrax path explicitly.

    The start is first projected onto the modes the scheme moves, :math:`|m| \le m_{max}`
    (:func:`kept_modes`; content above them would stay frozen and alias into the kept modes), and
    the part removed is reported as :attr:`DensityPath.discarded`; ``max_discarded`` (a relative
    L2 norm) refuses a start that loses more than that instead.

    Pure and jitted (``equinox.filter_jit``; beta, dt and the times are traced, so a new value
    compiles nothing); differentiable in ``density0`` and ``beta``. An explicit scheme: the RK4
    step h needs :math:`h\,\max|v[\rho_0]|\,m_{max} \le 2\sqrt2` (RK4 on the imaginary axis),
    refused before the solve when the inputs are concrete; velocities grow as clusters form, and
    with the mean normalisation like :math:`e^\beta` and with the local mass. Float64 input is
    computed in float64 (JAX's float64 mode is switched on for the call).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.meanfield import circle_grid, solve_continuity
        >>> rho0 = (1 + 0.3 * jnp.cos(circle_grid(32))) / (2 * jnp.pi)
        >>> path = solve_continuity(rho0, 2.0, jnp.array([0.0, 1.0]), dt=0.05)
        >>> path.density.shape, bool(abs(path.mass[1] - path.mass[0]) < 1e-6), bool(path.negative)
        ((2, 32), True, False)
    """
    density0 = _check_density(density0, "density0")
    dtype = density0.dtype
    ts = check_solve_args(beta, sigma, normalisation, dt, ts, dtype)
    beta = jnp.asarray(beta, dtype)
    cutoff = kept_modes(density0.shape[0], bool(dealias))
    if max_discarded is not None:
        v.check_number("max_discarded", max_discarded, "the largest relative L2 norm of the start that may be "
                       "removed above the kept modes", low=0, closed="low")
        if v.is_concrete(density0):
            lost = float(_band_limit(density0, cutoff)[1])
            if not lost <= max_discarded:
                raise InputError(
                    f"density0 has {lost:.3g} of its L2 norm above the {cutoff} modes that {density0.shape[0]} "
                    f"grid points move (max_discarded = {max_discarded:g}); use a finer grid or a smoother start.")
    if solver == "rk4":
        steps = rk4_steps_per_save(ts, dt, steps_per_save)
        if all(v.is_concrete(a) for a in (density0, beta, ts)):
            _check_step(density0, beta, normalisation, float(jnp.max(jnp.diff(ts))) / steps, cutoff)
        return _solve_rk4(density0, beta, ts, normalisation, steps, bool(dealias), _sigma_arg(sigma, dtype))
    if solver not in SOLVERS:
        raise InputError(f"solver must be 'rk4' or one of {sorted(SOLVERS)}, got {solver!r}.")
    return _solve_diffrax(density0, beta, ts, normalisation, None if dt is None else jnp.asarray(dt, dtype), solver,
                          jnp.asarray(rtol, dtype), jnp.asarray(atol, dtype), bool(dealias), int(max_steps),
                          _sigma_arg(sigma, dtype))


def rk4_steps_per_save(ts: Array, dt, steps_per_save: int | None) -> int:
    r"""RK4 steps between two save times: ``steps_per_save``, or the fewest steps of at most a concrete ``dt``
    that the longest interval needs, :math:`\max(1, \lceil \max_k (t_{k+1} - t_k) / dt \rceil)` (1e-9 below a
    whole number counts as it); one sentence where neither is given or ``ts`` holds no interval.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.meanfield._pde import rk4_steps_per_save
        >>> rk4_steps_per_save(jnp.array([0.0, 0.5, 2.0]), 0.1, None), rk4_steps_per_save(jnp.array([0.0, 1.0]), None, 4)
        (15, 4)
    """
    if ts.shape[0] < 2:
        raise InputError("ts must hold at least two times (the start and a save time) for solver='rk4'.")
    if steps_per_save is None:
        if dt is None or not (v.is_concrete(dt) and v.is_concrete(ts)):
            raise InputError("solver='rk4' needs steps_per_save (an int), or a concrete dt with concrete ts.")
        longest = float(jnp.max(jnp.diff(ts)))
        steps_per_save = max(1, math.ceil(longest / float(dt) - 1e-9))
    return v.check_int("steps_per_save", steps_per_save, meaning="RK4 steps between two save times")


def check_solve_args(beta, sigma, normalisation: str, dt, ts, dtype) -> Array:
    """The checks every continuity-equation solver makes before it solves (beta, the noise, the normalisation,
    the step, the save times), one sentence for the first that fails; returns ``ts`` in ``dtype``."""
    v.check_beta("beta", beta, "the inverse temperature", scalar=True)
    v.check_real("sigma", sigma, "the strength of the tokens' independent noise, >= 0")
    if v.is_concrete(sigma) and float(sigma) < 0:
        raise InputError(f"sigma must be >= 0 (the strength of the tokens' noise), got {float(sigma)!r}.")
    _check_normalisation(normalisation)
    if dt is not None:
        v.check_positive("dt", dt, "the constant time step, or None for adaptive steps")
    v.check_array("ts", ts, "the save times (T,), non-decreasing, the first one the start", ranks=(1,), nonempty=True)
    ts = jnp.asarray(ts, dtype)
    if v.is_concrete(ts):
        v.check_save_times(ts, ts[0], ts[-1])
    return ts


def _sigma_arg(sigma, dtype):
    """sigma for the jitted solves: a Python 0.0 stays static (the noiseless scheme, one compile), any other
    value is an array (a new sigma compiles nothing)."""
    if isinstance(sigma, (int, float)) and sigma == 0:
        return 0.0
    return jnp.asarray(sigma, dtype)


def _check_step(density0, beta, normalisation: str, step: float, cutoff: int) -> None:
    r"""Refuse an RK4 step above the stability bound :math:`h\,\max|v[\rho_0]|\,m_{max} \le 2\sqrt2`."""
    start, _ = _band_limit(density0, cutoff)
    fastest = float(jnp.max(jnp.abs(_velocity(start, beta, normalisation)))) * cutoff
    if not math.isfinite(fastest):
        raise InputError("density0 gives a velocity that is not finite (a density with K * rho <= 0 somewhere); "
                         "pass a density that is positive on average near every point.")
    if step * fastest > RK4_IMAGINARY_BOUND:
        raise InputError(
            f"the RK4 step dt = {step:.4g} is above the stability bound dt max|v| m_max <= {RK4_IMAGINARY_BOUND:.3g} "
            f"(max|v| = {fastest / cutoff:.4g} at the start, m_max = {cutoff} kept modes), so the solve would "
            f"blow up; use dt <= {RK4_IMAGINARY_BOUND / fastest:.4g} (or more steps_per_save).")
