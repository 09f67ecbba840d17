r"""Baselines attnflow is measured against, each written the way a careful user would.

All integrate the raw attention flow of SPEC 1.1 for a batch of systems that share
weights (x0 of shape (B, n, d); Q, K of shape (m, d); V of shape (d, d)):

.. math::  x_i[k+1] = x_i[k] + \Delta t \sum_j \mathrm{softmax}_j(\beta\langle Q x_i, K x_j\rangle)\, V x_j[k].

* :func:`numpy_euler`: vectorised NumPy (batched matmul, max-subtracted softmax).
* :func:`torch_euler`: batched PyTorch on CPU with ``torch.bmm`` (optional dependency).
* :func:`torchdiffeq_solve`: ``torchdiffeq.odeint`` (dopri5 by default) at given
  tolerances, counting function evaluations (optional dependency).
* :func:`python_loop_euler`: the per-token double Python loop much research code uses
  (only at small n).
* :func:`torch_sphere_euler`: the post-LN sphere flow of one large cloud in PyTorch (CPU), the
  direct sum over query blocks (memory O(block x n)), the baseline of the mean-field rows.

They are correctness-tested against attnflow in ``tests/test_baselines.py``.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "numpy_euler",
    "torch_euler",
    "torchdiffeq_solve",
    "python_loop_euler",
    "torch_sphere_euler",
    "have_torch",
    "have_torchdiffeq",
]


def have_torch() -> bool:
    """Whether PyTorch is importable (the torch rows are skipped otherwise)."""
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def have_torchdiffeq() -> bool:
    """Whether torchdiffeq (and torch) are importable."""
    try:
        import torchdiffeq  # noqa: F401
    except ImportError:
        return False
    return True


def numpy_euler(x0, Q, K, V, *, dt: float, num_steps: int, beta: float = 1.0) -> np.ndarray:
    """Vectorised NumPy forward Euler of the raw flow; x0 (B, n, d) -> x[num_steps] (B, n, d).

    Example:
        >>> import numpy as np
        >>> x = numpy_euler(np.ones((1, 3, 2)), np.eye(2), np.eye(2), np.eye(2), dt=0.5, num_steps=2)
        >>> x.tolist()  # identical tokens: dx/dt = V x, Euler gives 1.5^2
        [[[2.25, 2.25], [2.25, 2.25], [2.25, 2.25]]]
    """
    x = np.array(x0, copy=True)
    Qt = (beta * np.asarray(Q, x.dtype)).T
    Kt = np.asarray(K, x.dtype).T
    Vt = np.asarray(V, x.dtype).T
    for _ in range(num_steps):
        s = (x @ Qt) @ np.swapaxes(x @ Kt, -1, -2)  # (B, n, n)
        s -= s.max(axis=-1, keepdims=True)
        np.exp(s, out=s)
        s /= s.sum(axis=-1, keepdims=True)
        x = x + dt * (s @ (x @ Vt))
    return x


def torch_euler(x0, Q, K, V, *, dt: float, num_steps: int, beta: float = 1.0, threads: int | None = None):
    """Batched PyTorch (CPU) forward Euler with ``torch.bmm``; returns a NumPy array.

    Example:
        >>> import numpy as np
        >>> x = torch_euler(np.ones((1, 3, 2)), np.eye(2), np.eye(2), np.eye(2), dt=0.5, num_steps=2)
        >>> np.allclose(x, 2.25)
        True
    """
    import torch

    if threads is not None:
        torch.set_num_threads(threads)
    x = torch.from_numpy(np.array(x0, copy=True))
    dtype = x.dtype
    Qt = torch.as_tensor(beta * np.asarray(Q), dtype=dtype).T.contiguous()
    Kt = torch.as_tensor(np.asarray(K), dtype=dtype).T.contiguous()
    Vt = torch.as_tensor(np.asarray(V), dtype=dtype).T.contiguous()
    with torch.inference_mode():
        for _ in range(num_steps):
            q, k, v = x @ Qt, x @ Kt, x @ Vt
            p = torch.softmax(torch.bmm(q, k.transpose(1, 2)), dim=-1)  # max-subtracted inside
            x = x + dt * torch.bmm(p, v)
    return x.numpy()


def torchdiffeq_solve(
    x0, Q, K, V, *, t1: float, rtol: float, atol: float, method: str = "dopri5", beta: float = 1.0, options=None
):
    """``torchdiffeq.odeint`` of the raw flow from 0 to t1; returns (x(t1) as NumPy, #evaluations).

    Example:
        >>> import numpy as np
        >>> x, nfe = torchdiffeq_solve(np.ones((1, 3, 1)), np.eye(1), np.eye(1), np.eye(1), t1=1.0, rtol=1e-8, atol=1e-8)
        >>> bool(np.allclose(x, np.e, rtol=1e-6)), nfe > 0
        (True, True)
    """
    import torch
    from torchdiffeq import odeint

    x = torch.from_numpy(np.array(x0, copy=True))
    dtype = x.dtype
    Qt = torch.as_tensor(beta * np.asarray(Q), dtype=dtype).T.contiguous()
    Kt = torch.as_tensor(np.asarray(K), dtype=dtype).T.contiguous()
    Vt = torch.as_tensor(np.asarray(V), dtype=dtype).T.contiguous()
    nfe = [0]

    def f(t, y):
        nfe[0] += 1
        p = torch.softmax(torch.bmm(y @ Qt, (y @ Kt).transpose(1, 2)), dim=-1)
        return torch.bmm(p, y @ Vt)

    ts = torch.tensor([0.0, float(t1)], dtype=dtype)
    with torch.inference_mode():
        ys = odeint(f, x, ts, rtol=rtol, atol=atol, method=method, options=options)
    return ys[-1].numpy(), nfe[0]


def python_loop_euler(x0, Q, K, V, *, dt: float, num_steps: int, beta: float = 1.0) -> np.ndarray:
    """The per-token loop: for every token i, for every token j, a score, then a weighted sum.

    Example:
        >>> import numpy as np
        >>> x = python_loop_euler(np.ones((1, 3, 2)), np.eye(2), np.eye(2), np.eye(2), dt=0.5, num_steps=2)
        >>> np.allclose(x, 2.25)
        True
    """
    x = np.array(x0, copy=True)
    Q, K, V = (np.asarray(a, x.dtype) for a in (Q, K, V))
    B, n, _ = x.shape
    for b in range(B):
        for _ in range(num_steps):
            new = x[b].copy()
            for i in range(n):
                qi = beta * (Q @ x[b, i])
                s = [float(qi @ (K @ x[b, j])) for j in range(n)]
                smax = max(s)
                w = [math.exp(sj - smax) for sj in s]
                z = sum(w)
                drift = sum((w[j] / z) * (V @ x[b, j]) for j in range(n))
                new[i] = x[b, i] + dt * drift
            x[b] = new
    return x


def torch_sphere_euler(x0, Q, K, V, *, dt: float, num_steps: int, beta: float = 1.0, block: int = 2048,
                       threads: int | None = None):
    r"""The projected Euler layers of the sphere flow in PyTorch (CPU), one cloud x0 (n, d) -> x[num_steps]:

    .. math::  x_i \leftarrow N\big(x_i + \Delta t\, \mathrm{Proj}_{x_i^\perp} \textstyle\sum_j
               \mathrm{softmax}_j(\beta\langle Q x_i, K x_j\rangle) V x_j\big), \quad N(y) = y/\|y\|,

    the direct sum over blocks of ``block`` queries (each block's scores (block, n) at once, softmax
    max-subtracted inside ``torch.softmax``), in x0's dtype. Returns a NumPy array.

    Example:
        >>> import numpy as np
        >>> x0 = np.array([[1.0, 0.0], [0.0, 1.0]])
        >>> x = torch_sphere_euler(x0, np.eye(2), np.eye(2), np.eye(2), dt=0.1, num_steps=50, block=1)
        >>> bool(np.allclose(np.linalg.norm(x, axis=1), 1.0)), bool(x[0] @ x[1] > 0.99)  # unit tokens, one cluster
        (True, True)
    """
    import torch

    if threads is not None:
        torch.set_num_threads(threads)
    x = torch.from_numpy(np.array(x0, copy=True))
    dtype = x.dtype
    A = torch.as_tensor(beta * np.asarray(Q, np.float64).T @ np.asarray(K, np.float64), dtype=dtype)  # scores x_i^T (beta Q^T K) x_j
    Vt = torch.as_tensor(np.array(V, copy=True), dtype=dtype).T.contiguous()
    n = x.shape[0]
    with torch.inference_mode():
        for _ in range(num_steps):
            q, v = x @ A, x @ Vt
            drift = torch.empty_like(x)
            for start in range(0, n, block):
                p = torch.softmax(q[start:start + block] @ x.T, dim=-1)
                drift[start:start + block] = p @ v
            drift -= (drift * x).sum(dim=1, keepdim=True) * x  # tangent projection at the unit tokens
            x = x + dt * drift
            x = x / torch.linalg.norm(x, dim=1, keepdim=True)
    return x.numpy()
