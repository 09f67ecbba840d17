r"""Standard normal draws that XLA can fuse: JAX's own threefry stream, with its rounds written out.

``jax.random.normal(key, shape, dtype)`` for a threefry key hashes the flat index i of every entry with
Threefry-2x32 (20 rounds, key :math:`(k_1, k_2)`, counter :math:`(\lfloor i/2^{32}\rfloor, i \bmod 2^{32})`),
turns the two output words into random bits (float32: their xor, its top 23 bits; float64: the two words as one
64-bit integer, its top 52 bits) and those into a uniform u in (-1, 1), and returns
:math:`\sqrt2\,\mathrm{erf}^{-1}(u)`. On the CPU, JAX lowers the 20 rounds as a loop of five blocks of four, each
block a pass over the whole array, so a layer's draw is six passes over memory and cannot join the passes that
use it, and its compilation is three times this module's (a start cloud of 2560 systems: 0.27 against 0.09 s).
:func:`standard_normal` computes the same numbers (equal bit for bit, tested) as one elementwise expression that
XLA fuses with its consumers; keys of other generators, JAX's older non-partitionable threefry stream, float64
outside float64 mode and arrays of 2^32 entries or more go to ``jax.random.normal`` itself. Used by the noise's
layer increments (:mod:`attnflow.integrate`) and the start clouds (:mod:`attnflow.ensembles`).
"""

from __future__ import annotations

import math
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jaxtyping import Array, Float, PRNGKeyArray, UInt32

from ._x64 import float64_enabled

__all__ = ["standard_normal", "normal_sampler", "threefry2x32"]

#: Threefry-2x32's rotation distances, the four rounds of even and of odd blocks (Salmon et al., SC 2011)
ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
#: the constant xored into the third key word (the key schedule's parity)
KEY_PARITY = np.uint32(0x1BD11BDA)


def _rotate_left(x: UInt32[Array, "..."], r: int) -> UInt32[Array, "..."]:
    return lax.shift_left(x, np.uint32(r)) | lax.shift_right_logical(x, np.uint32(32 - r))


def threefry2x32(k1, k2, x1: UInt32[Array, "..."], x2: UInt32[Array, "..."]):
    r"""The Threefry-2x32 hash of the counters :math:`(x_1, x_2)` under the key :math:`(k_1, k_2)`: 20 rounds
    (add, rotate, xor), a key injection after every four.

    Example:
        >>> import jax.numpy as jnp
        >>> from attnflow._normals import threefry2x32
        >>> zero = jnp.uint32(0)   # Random123's known answer for a zero key and counter
        >>> [hex(int(w)) for w in threefry2x32(zero, zero, zero, zero)]
        ['0x6b200159', '0x99ba4efe']
    """
    keys = (k1, k2, k1 ^ k2 ^ KEY_PARITY)
    x1, x2 = x1 + keys[0], x2 + keys[1]
    for block in range(5):
        for r in ROTATIONS[block % 2]:
            x1 = x1 + x2
            x2 = x1 ^ _rotate_left(x2, r)
        x1 = x1 + keys[(block + 1) % 3]
        x2 = x2 + keys[(block + 2) % 3] + np.uint32(block + 1)
    return x1, x2


def _written_out(key) -> bool:
    """Whether :func:`standard_normal` reproduces ``jax.random.normal`` for this key here."""
    if not (isinstance(key, jax.Array) and jnp.issubdtype(key.dtype, jax.dtypes.prng_key)):
        return False
    return str(jax.random.key_impl(key)) == "threefry2x32" and bool(jax.config.jax_threefry_partitionable)


def _uniform(high, low, dtype: np.dtype):
    """The uniform in (-1, 1) of ``jax.random.uniform`` in ``dtype`` (float32, or float64 in float64 mode) from the
    hash's two words: their bits (float32: the xor; float64: the two as one 64-bit integer), the top mantissa bits
    as a float in [1, 2), shifted to [0, 1), then scaled to (-1, 1)."""
    if dtype == np.float64:
        uint, bits = np.uint64, lax.shift_left(high.astype(np.uint64), np.uint64(32)) | low.astype(np.uint64)
    else:
        uint, bits = np.uint32, high ^ low
    info = np.finfo(dtype)
    mantissa = lax.shift_right_logical(bits, uint(info.bits - info.nmant)) | np.array(1.0, dtype).view(uint)
    one = np.array(1.0, dtype)
    lowest = np.nextafter(-one, np.array(0.0, dtype))
    return lax.max(lowest, (lax.bitcast_convert_type(mantissa, dtype) - one) * (one - lowest) + lowest)


def normal_sampler(key: PRNGKeyArray, fold=None, *, fence: Callable = lambda fn: fn()
                   ) -> Callable[..., Float[Array, "..."]]:
    """``(shape, dtype=float32) -> standard_normal(key, shape, dtype)`` (of ``jax.random.fold_in(key, fold)`` if
    ``fold`` is given, an integer >= 0), with the key's two words read now.

    ``fold_in(key, m)`` is the hash of the counter (0, m) under the key; written out here, it joins the
    other small operations of a layer instead of running as JAX's loop of five blocks.

    Read inside a fused draw, the words are loaded again for every entry (XLA:CPU cannot tell that the
    key's buffer is not the output's): 10^6 draws took 15% longer. A caller that fences the draw
    (:func:`~attnflow.integrate._noise.computed_once`) takes the sampler outside the fence, so that the words
    enter it as scalars, and fences the fold too (``fence(fn)`` returns ``fn()``), or XLA may fuse that scalar
    hash into every entry of the draw.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from attnflow._normals import normal_sampler
        >>> key = jax.random.key(7)
        >>> bool(jnp.all(normal_sampler(key)((4,)) == jax.random.normal(key, (4,), jnp.float32)))
        True
        >>> bool(jnp.all(normal_sampler(key, 3)((4,)) == jax.random.normal(jax.random.fold_in(key, 3), (4,))))
        True
    """
    if not _written_out(key):
        key = key if fold is None else jax.random.fold_in(key, fold)
        return lambda shape, dtype=jnp.float32: jax.random.normal(key, shape, dtype)
    words = jax.random.key_data(key)
    first, second = words[0], words[1]
    if fold is not None:
        first, second = fence(lambda: threefry2x32(first, second, jnp.uint32(0), jnp.asarray(fold).astype(np.uint32)))

    def sample(shape, dtype=jnp.float32):
        shape, dtype = tuple(int(s) for s in shape), np.dtype(dtype)
        size = math.prod(shape)
        if size >= 2 ** 32 or size == 0 or dtype not in (np.float32, np.float64) or (
                dtype == np.float64 and not float64_enabled()):
            return jax.random.normal(key if fold is None else jax.random.fold_in(key, fold), shape, dtype)
        counter = lax.iota(np.uint32, size).reshape(shape)
        high, low = threefry2x32(first, second, jnp.zeros(shape, np.uint32), counter)
        u = _uniform(high, low, dtype)
        return np.sqrt(2.0).astype(dtype) * lax.erf_inv(u)

    return sample


def standard_normal(key: PRNGKeyArray, shape: tuple[int, ...], dtype=jnp.float32) -> Float[Array, "..."]:
    """``jax.random.normal(key, shape, dtype)``, bit for bit, as one fusible expression (module docstring).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from attnflow._normals import standard_normal
        >>> key = jax.random.key(7)
        >>> bool(jnp.all(standard_normal(key, (5, 3)) == jax.random.normal(key, (5, 3), jnp.float32)))
        True
    """
    return normal_sampler(key)(shape, dtype)
