"""Exceptions raised by attnflow.

Every error says, in one sentence, which input is wrong, what it is, and what is
expected, so that the fix is obvious before any compilation or long run starts.
"""

from __future__ import annotations


class AttnflowError(Exception):
    """Base class of every error raised by attnflow."""


class InputError(AttnflowError, ValueError):
    """An argument has the wrong shape, dtype, value or type.

    Example:
        >>> import numpy as np, attnflow
        >>> try:
        ...     attnflow.simulate(np.ones((4, 2)), np.eye(2), np.eye(3), np.eye(2), t1=1.0)
        ... except attnflow.InputError as err:
        ...     print(type(err).__name__)
        InputError
    """


class NonFiniteError(AttnflowError, FloatingPointError):
    """The state became non-finite (overflow or NaN) during integration.

    The message names the first time at which a non-finite value was seen.
    """


class SolverError(AttnflowError, RuntimeError):
    """The ODE solver did not reach the final time (e.g. ``max_steps`` exhausted)."""
