r"""The paper's vector fields written out again from SPEC section 1, independently of
:mod:`attnflow.dynamics` (no attnflow code on this path: plain ``jax.numpy``, its own
max-subtracted softmax, ``jax.scipy.linalg.expm``, diffrax directly), and the report's
universal check built on it: *the saved trajectory solves the paper's equation*.

* raw (1.1): :math:`\dot x_i = \sum_j P_{ij} V x_j`, :math:`P_{ij} = \mathrm{softmax}_j
  \langle Q x_i, K x_j\rangle`;
* rescaled (1.2): :math:`\dot z_i = \sum_j P_{ij} V (z_j - z_i)`, P from :math:`x = e^{tV} z`;
* Euler layers with exact discrete rescaling (1.4): :math:`z[k+1] = z[k] + \Delta t \sum_j
  P_{ij}[k] R^{-1} V (z_j[k] - z_i[k])`, P from :math:`x[k] = R^k z[k]`, :math:`R = I + \Delta t V`
  (raw Euler: :math:`x[k+1] = x[k] + \Delta t \sum_j P_{ij} V x_j`).

The check (:func:`trajectory_defect`): for continuous time, a few saved intervals
:math:`[t_k, t_{k+1}]` are re-integrated from the saved state with this field (diffrax Tsit5,
rtol 1e-10) and compared with the next saved state; for layers, every layer is recomputed
exactly. A vector field that differs from the paper's anywhere along the run leaves a defect of
the size of (interval) x (field error), far above the solvers' error.
"""

from __future__ import annotations

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["PaperField", "paper_field", "trajectory_defect"]


def _softmax_rows(s):
    s = s - jnp.max(s, axis=-1, keepdims=True)
    e = jnp.exp(s)
    return e / jnp.sum(e, axis=-1, keepdims=True)


class PaperField(eqx.Module):
    """f(t, y) of SPEC 1.1 (``picture="raw"``) or 1.2 (``"rescaled"``) for one system y (n, d)."""

    Q: jnp.ndarray
    K: jnp.ndarray
    V: jnp.ndarray
    picture: str = eqx.field(static=True)

    def __call__(self, t, y, args=None):
        A = self.Q.T @ self.K  # <Q x_i, K x_j> = x_i^T A x_j
        x = y if self.picture == "raw" else y @ jax.scipy.linalg.expm(t * self.V).T
        P = _softmax_rows(x @ A @ x.T)
        if self.picture == "raw":
            return P @ (y @ self.V.T)
        return (P @ y - y) @ self.V.T


def paper_field(Q, K, V, picture: str) -> PaperField:
    """f(t, y) of SPEC 1.1 (``picture="raw"``) or 1.2 (``"rescaled"``) for one system y (n, d).

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow.report._reference import paper_field
        >>> f = paper_field(jnp.eye(2), jnp.eye(2), jnp.eye(2), "rescaled")
        >>> float(jnp.abs(f(0.0, jnp.ones((3, 2)), None)).max())
        0.0
    """
    return PaperField(jnp.asarray(Q), jnp.asarray(K), jnp.asarray(V), picture)


def _euler_defect(ts, y, Q, K, V, picture, dt):
    """Exact per-layer residual of the layer recursion (NumPy float64), (B, L)."""
    d = V.shape[0]
    A = Q.T @ K
    R = np.eye(d) + dt * V
    W = np.linalg.solve(R, V) if picture == "rescaled" else V
    L = y.shape[1] - 1
    out = np.empty((y.shape[0], L))
    Rk = np.eye(d)
    for k in range(L):
        yk = y[:, k]
        x = yk @ Rk.T if picture == "rescaled" else yk
        s = np.einsum("bid,de,bje->bij", x, A, x)
        s = s - s.max(axis=-1, keepdims=True)
        P = np.exp(s)
        P /= P.sum(axis=-1, keepdims=True)
        drift = np.einsum("bij,bjd->bid", P, yk) - (yk if picture == "rescaled" else 0.0)
        nxt = yk + dt * drift @ W.T
        out[:, k] = np.max(np.linalg.norm(y[:, k + 1] - nxt, axis=-1), axis=-1)
        if picture == "rescaled":
            Rk = R @ Rk
    return out


def trajectory_defect(ts, y, Q, K, V, *, picture: str, method: str, dt: float | None = None,
                      intervals: int = 12) -> tuple[np.ndarray, np.ndarray]:
    r"""How far the saved trajectory ``y`` (B, T, n, d) at times ``ts`` (T,) is from solving the
    paper's equation: per member and examined step, :math:`\max_i |y_i(t_{k+1}) -
    \Phi_{t_k \to t_{k+1}}(y(t_k))_i|` with :math:`\Phi` the flow of :func:`paper_field` (or the
    exact layer map). Returns (defects (B, S), the indices k of the examined steps (S,)).

    Example:
        >>> import numpy as np
        >>> from attnflow.report._reference import trajectory_defect
        >>> I = np.eye(2); ts = np.arange(4.0); y = np.ones((1, 4, 3, 2))
        >>> defect, steps = trajectory_defect(ts, y, I, I, I, picture="rescaled", method="euler", dt=1.0)
        >>> float(defect.max()), steps.tolist()
        (0.0, [0, 1, 2])
    """
    ts, y = np.asarray(ts, np.float64), np.asarray(y, np.float64)
    Q, K, V = (np.asarray(a, np.float64) for a in (Q, K, V))
    if method == "euler":
        return _euler_defect(ts, y, Q, K, V, picture, float(dt)), np.arange(len(ts) - 1)
    T = len(ts)
    ks = np.unique(np.linspace(0, T - 2, min(intervals, T - 1)).round().astype(int))
    with jax.enable_x64(True):
        field = paper_field(jnp.asarray(Q), jnp.asarray(K), jnp.asarray(V), picture)
        out = _reintegrate(field, jnp.asarray(ts[ks]), jnp.asarray(ts[ks + 1]),
                           jnp.asarray(y[:, ks]))
        end = np.asarray(out)
    defect = np.max(np.linalg.norm(y[:, ks + 1] - end, axis=-1), axis=-1)
    return defect, ks


@eqx.filter_jit
def _reintegrate(field, t0s, t1s, y0s):
    """Integrate ``field`` from each y0s[b, s] at t0s[s] to t1s[s] (Tsit5, rtol 1e-10)."""

    def one(t0, t1, y0):
        sol = diffrax.diffeqsolve(diffrax.ODETerm(field), diffrax.Tsit5(), t0=t0, t1=t1, dt0=None, y0=y0,
                                  stepsize_controller=diffrax.PIDController(rtol=1e-10, atol=1e-12),
                                  saveat=diffrax.SaveAt(t1=True), max_steps=65536, throw=False)
        return jnp.where(sol.result == diffrax.RESULTS.successful, sol.ys[-1], jnp.nan)

    return jax.vmap(jax.vmap(one, in_axes=(0, 0, 0)), in_axes=(None, None, 0))(t0s, t1s, y0s)
