"""Root pytest configuration: JAX's float64 mode stays off here, as in a user's process; the
doctests of attnflow/ that need float64 say so themselves (``dtype="float64"`` or
``jax.enable_x64(True)``), and tests/conftest.py gives test modules a scoped ``x64`` fixture."""
