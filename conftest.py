"""Root pytest configuration: the doctests of attnflow/ run in their own pytest process (see the
Makefile's test target) and, like tests/, compare with float64 numbers, so float64 is enabled
for the test process here (attnflow itself never changes JAX's configuration)."""

import jax

jax.config.update("jax_enable_x64", True)
