r"""The report's seeded draws: named random streams, initial configurations and the weights of
its cases (shared by the cases, the negative controls and the extensions studies)."""

from __future__ import annotations

import zlib
from typing import TYPE_CHECKING

import numpy as np

from ..errors import InputError
from ..spectral import check_good_triple

if TYPE_CHECKING:
    from ._base import Context

__all__ = ["stream", "initial", "random_spd_factor", "similar", "good_qk", "hyperplane_V", "uniform_qk_with_pd_F_block"]


def random_spd_factor(rng, d: int) -> tuple[np.ndarray, np.ndarray]:
    """Q = K = R with R^T R a random SPD matrix (Wishart + 0.5 I)."""
    M = rng.normal(size=(d, d))
    S = M @ M.T / d + 0.5 * np.eye(d)
    R = np.linalg.cholesky(S).T
    return R, R.copy()


def similar(rng, blocks: np.ndarray) -> np.ndarray:
    """B blocks B^{-1} with a random, well-conditioned, non-orthogonal B (spectrum of ``blocks`` kept)."""
    d = blocks.shape[0]
    for _ in range(100):
        B = np.eye(d) + 0.5 * rng.normal(size=(d, d))
        if np.linalg.cond(B) < 8:
            return B @ blocks @ np.linalg.inv(B)
    return blocks  # pragma: no cover


def good_qk(rng: np.random.Generator, V: np.ndarray, margin: float = 0.1) -> tuple[np.ndarray, np.ndarray]:
    """Gaussian (d, d) Q, K resampled until <Q phi_1, K phi_1> > margin (Def 4.1 (2)); Q^T K is
    left unsymmetric and typically indefinite, which Thm 4.2 allows.

    Example:
        >>> import numpy as np
        >>> from attnflow.report._draws import good_qk
        >>> from attnflow.spectral import check_good_triple
        >>> V = np.array([[1.0, 0.3], [0.2, 0.4]])
        >>> Q, K = good_qk(np.random.default_rng(0), V)
        >>> bool(check_good_triple(Q, K, V).qk_value > 0.1)
        True
    """
    d = V.shape[0]
    for _ in range(1000):
        Q, K = rng.normal(size=(d, d)), rng.normal(size=(d, d))
        if check_good_triple(Q, K, V).qk_value > margin:
            return Q, K
    raise InputError("no Q, K with <Q phi_1, K phi_1> > 0 found in 1000 draws for this V.")  # pragma: no cover


def stream(ctx: Context, *tags) -> np.random.Generator:
    """A seeded generator named by tags: cases that share tags share draws (e.g. Thm 3.1 and
    its Euler versions use the same weights and initial configurations)."""
    return np.random.default_rng([ctx.seed] + [zlib.crc32(str(t).encode()) for t in tags])


def initial(ctx: Context, n: int, d: int, scale: float = 1.0) -> np.ndarray:
    """``batch`` initial configurations (B, n, d) with i.i.d. N(0, scale^2) entries."""
    return scale * stream(ctx, "x0", n, d).normal(size=(int(ctx.settings.batch), n, d))


def hyperplane_V(ctx: Context, d: int) -> np.ndarray:
    """The hyperplane regime of Thm 4.2: lambda_1 = 1.348 with transverse eigenvalues of negative
    real part, whose components diverge in z (d = 2: -0.068; d = 3: -0.3 +- 0.6 i), in a random
    non-orthogonal basis."""
    rng = stream(ctx, "hyperplane_V", d)
    if d == 2:
        return similar(rng, np.diag([1.348, -0.068]))
    return similar(rng, np.array([[1.348, 0, 0], [0, -0.3, 0.6], [0, -0.6, -0.3]]))


def uniform_qk_with_pd_F_block(ctx: Context, d: int = 3, f: int = 2) -> np.ndarray:
    """A U[-1, 1] matrix (Q^T K, with Q = I) whose F-block (F = the first f coordinates) has a
    positive definite symmetric part: the first draw of the seeded stream that has one (a negative
    definite block collapses every F-part to one point, the degenerate polytope)."""
    rng = stream(ctx, "uniform_pd_F", d)
    for _ in range(1000):
        A = rng.uniform(-1, 1, size=(d, d))
        if np.linalg.eigvalsh(0.5 * (A[:f, :f] + A[:f, :f].T)).min() > 0.1:
            return A
    raise RuntimeError("no U[-1,1] draw with a positive definite F-block")  # pragma: no cover
