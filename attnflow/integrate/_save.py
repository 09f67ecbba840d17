r"""Which layers a layer stepper saves: a static, sorted set of layer indices.

A :class:`SaveLayers` is the layer-grid analogue of diffrax's ``SaveAt(ts=...)``: the stepper
saves the state (or ``save_fn`` of it) at :math:`t_0 + k\Delta t` for every ``k`` of the set, and
only there. The set is static (a tuple of ints in the pytree structure), so a stepper that holds
one is hashable and jit-friendly; the stepper checks it against its ``num_layers``.

Example:
    >>> from attnflow.integrate import SaveLayers
    >>> SaveLayers.uniform(5, 20).layers, SaveLayers.log_spaced(5, 100).layers
    ((0, 5, 10, 15, 20), (0, 1, 5, 22, 100))
    >>> SaveLayers.given([0, 3, 7]).layers
    (0, 3, 7)
"""

from __future__ import annotations

from typing import Sequence

import equinox as eqx
import numpy as np

from .. import _validate as v
from ..errors import InputError

__all__ = ["SaveLayers"]


class SaveLayers(eqx.Module):
    r"""A sorted, duplicate-free, non-empty set of layer indices :math:`0 \le k_0 < k_1 < \dots`.

    Build it with :meth:`uniform`, :meth:`log_spaced` or :meth:`given` (or ``SaveLayers(layers)``,
    the same as :meth:`given`). Whether every layer lies in ``[0, num_layers]`` is checked by the
    stepper that receives it (:meth:`check_within`). The set is held as its first layer and the
    runs of equal gaps after it, so a uniform set of any size costs nothing to build (a ``range``
    is never expanded) and two spellings of one set are equal and hash alike.
    """

    first: int = eqx.field(static=True)
    #: the gaps after ``first`` as runs ``(gap, count)``: ``count`` saves ``gap`` layers apart
    gaps: tuple[tuple[int, int], ...] = eqx.field(static=True)

    def __init__(self, layers: Sequence[int]):
        if isinstance(layers, range):
            if len(layers) == 0:
                raise InputError("save_at must name at least one layer to save, got an empty set.")
            if layers.step < 0 and len(layers) > 1:
                raise InputError(f"save_at must be strictly increasing layer indices (sorted, no duplicates), got {layers}.")
            self.first = int(layers[0])
            self.gaps = ((layers.step, len(layers) - 1),) if len(layers) > 1 else ()
            return
        if isinstance(layers, (str, bytes)) or not np.iterable(layers):
            raise InputError(f"save_at must be a sequence of layer indices (ints), got {type(layers).__name__}.")
        layers = tuple(layers)
        if not layers:
            raise InputError("save_at must name at least one layer to save, got an empty set.")
        bad = [k for k in layers if isinstance(k, bool) or not isinstance(k, (int, np.integer))]
        if bad:
            raise InputError(f"save_at must hold layer indices (ints), got {bad[0]!r}.")
        layers = tuple(int(k) for k in layers)
        if any(b <= a for a, b in zip(layers, layers[1:])):
            raise InputError(f"save_at must be strictly increasing layer indices (sorted, no duplicates), got {layers}.")
        gaps: list[list[int]] = []
        for a, b in zip(layers, layers[1:]):
            if gaps and gaps[-1][0] == b - a:
                gaps[-1][1] += 1
            else:
                gaps.append([b - a, 1])
        self.first, self.gaps = layers[0], tuple((g, c) for g, c in gaps)

    @classmethod
    def given(cls, layers: Sequence[int]) -> "SaveLayers":
        """Exactly these layers (sorted, no duplicates)."""
        return cls(layers)

    @classmethod
    def uniform(cls, every: int, num_layers: int) -> "SaveLayers":
        r"""Layers :math:`0, s, 2s, \dots, L` (``every`` = s a divisor of ``num_layers`` = L): what
        ``save_every=s`` means."""
        every = v.check_int("every", every, meaning="layers per save")
        num_layers = v.check_int("num_layers", num_layers, meaning="the number of layers")
        if num_layers % every:
            raise InputError(f"every must be a positive divisor of num_layers = {num_layers}, got {every!r}.")
        return cls(range(0, num_layers + 1, every))

    @classmethod
    def log_spaced(cls, num: int, last: int) -> "SaveLayers":
        r"""Layer 0 and ``num - 1`` geometrically spaced layers from 1 to ``last``, rounded to ints
        (:math:`k_j = \mathrm{round}(\mathrm{last}^{j/(\mathrm{num}-2)})`); layers that rounding
        makes equal are kept once, so there may be fewer than ``num``."""
        num = v.check_int("num", num, minimum=2, meaning="the number of saved layers")
        last = v.check_int("last", last, meaning="the last saved layer")
        if num == 2:
            return cls((0, last))
        rest = np.unique(np.rint(np.geomspace(1, last, num - 1)).astype(int))
        return cls((0, *(int(k) for k in rest)))

    @property
    def num_saves(self) -> int:
        """How many layers the set holds."""
        return 1 + sum(count for _, count in self.gaps)

    @property
    def last(self) -> int:
        """The last saved layer."""
        return self.first + sum(gap * count for gap, count in self.gaps)

    @property
    def layers(self) -> tuple[int, ...]:
        """The saved layers, in order (expanded: mind the size of a large uniform set)."""
        return tuple(int(k) for k in self.indices())

    def indices(self) -> np.ndarray:
        """The saved layers as an int array."""
        parts = [np.array([self.first])]
        parts += [start + gap * np.arange(1, count + 1) for start, gap, count in self.runs()]
        return np.concatenate(parts)

    def check_within(self, num_layers: int) -> None:
        """An :class:`~attnflow.InputError` unless every layer lies in ``[0, num_layers]``."""
        for k in (self.first, self.last):
            if not 0 <= k <= num_layers:
                raise InputError(f"save_at must hold layers in [0, num_layers = {num_layers}], got layer {k}.")

    def runs(self) -> tuple[tuple[int, int, int], ...]:
        """The gaps between consecutive saved layers as runs ``(start, gap, count)``: ``count``
        saves at ``start + gap, ..., start + count * gap`` (one run for a uniform set)."""
        out, start = [], self.first
        for gap, count in self.gaps:
            out.append((start, gap, count))
            start += gap * count
        return tuple(out)
