"""An independent float64 reference in plain NumPy/SciPy (no attnflow code)."""

import numpy as np
from scipy.integrate import solve_ivp
from scipy.linalg import expm
from scipy.special import softmax as sp_softmax


def ref_attention(x, Q, K, beta=1.0):
    # scores_ij = beta <Q x_i, K x_j>, tokens are rows of x
    S = beta * np.einsum("ia,ja->ij", x @ Q.T, x @ K.T)
    return sp_softmax(S, axis=1)


def ref_raw_field(x, Q, K, V, beta=1.0):
    P = ref_attention(x, Q, K, beta)
    return np.array([sum(P[i, j] * (V @ x[j]) for j in range(x.shape[0])) for i in range(x.shape[0])])


def ref_rescaled_field(t, z, Q, K, V, beta=1.0):
    E = expm(t * V)
    x = z @ E.T
    P = ref_attention(x, Q, K, beta)
    n = z.shape[0]
    return np.array([sum(P[i, j] * (V @ (z[j] - z[i])) for j in range(n)) for i in range(n)])


def ref_solve(x0, Q, K, V, ts, picture="raw", beta=1.0, rtol=1e-12, atol=1e-12):
    n, d = x0.shape

    def f(t, flat):
        y = flat.reshape(n, d)
        dy = ref_raw_field(y, Q, K, V, beta) if picture == "raw" else ref_rescaled_field(t, y, Q, K, V, beta)
        return dy.ravel()

    sol = solve_ivp(f, (ts[0], ts[-1]), x0.ravel(), t_eval=ts, method="DOP853", rtol=rtol, atol=atol)
    assert sol.success
    return sol.y.T.reshape(len(ts), n, d)


def ref_euler(x0, Q, K, V, dt, num_steps, beta=1.0):
    xs = [x0]
    x = x0
    for _ in range(num_steps):
        x = x + dt * ref_raw_field(x, Q, K, V, beta)
        xs.append(x)
    return np.stack(xs)


def ref_components(adjacent):
    """Connected components of a boolean graph (n, n) by flood fill, labelled 0, 1, ... in the order of each
    component's first node."""
    adjacent = np.asarray(adjacent, bool)
    labels, k = -np.ones(len(adjacent), int), 0
    for i in range(len(adjacent)):
        if labels[i] < 0:
            stack = [i]
            while stack:
                j = stack.pop()
                if labels[j] < 0:
                    labels[j] = k
                    stack.extend(np.flatnonzero(adjacent[j] & (labels < 0)))
            k += 1
    return labels
