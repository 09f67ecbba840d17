"""The checks at the edge of every public function of :mod:`attnflow.plot`.

A figure function reads each of its array inputs once through an :class:`Inputs`, naming the axes of
the shape it expects (``("beta", "t")``, ``("T", "n", "n")``). The first input that has an axis fixes its
length; every later input must agree. A wrong shape, an input that is not numeric, an empty input or a
missing key is refused with :class:`attnflow.errors.InputError`, in one sentence that names the function,
the input, what it is and what was expected, before anything is drawn.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from ..errors import InputError

__all__ = ["Inputs"]

Shape = tuple  # of axis names (str) and fixed lengths (int)


class Inputs:
    """The inputs of one call of a plot function ``function``, with the axis lengths seen so far.

    Example:
        >>> import numpy as np
        >>> from attnflow.plot._checks import Inputs
        >>> check = Inputs("phase_diagram")
        >>> check.array("beta", [1.0, 2.0, 3.0], ("beta",)).shape
        (3,)
        >>> check.array("t", [0.0, 1.0], ("t",)).shape
        (2,)
        >>> try:
        ...     check.array("values", np.ones((3, 5)), ("beta", "t"))
        ... except Exception as err:
        ...     print(type(err).__name__, err)
        InputError phase_diagram: values has shape (3, 5), expected (beta=3, t=2).
    """

    def __init__(self, function: str):
        self.function = function
        self.sizes: dict[str, int] = {}

    def fail(self, message: str):
        """Raise :class:`~attnflow.errors.InputError` with ``message`` after the function's name."""
        raise InputError(f"{self.function}: {message}")

    def bind(self, axis: str, length: int, name: str) -> None:
        """Fix the length of ``axis`` (from the input ``name``), or check it against the length already fixed."""
        length = int(length)
        if axis in self.sizes and self.sizes[axis] != length:
            self.fail(f"{name} has {length} entries along {axis}, expected {self.sizes[axis]} "
                      f"(the length of {axis} in the inputs before it).")
        if length == 0:
            self.fail(f"{name} is empty, expected at least one entry along {axis}.")
        self.sizes[axis] = length

    def _render(self, shape: Shape) -> str:
        parts = []
        for ax in shape:
            if isinstance(ax, int):
                parts.append(str(ax))
            elif ax in self.sizes:
                parts.append(f"{ax}={self.sizes[ax]}")
            else:
                parts.append(ax)
        return "(" + ", ".join(parts) + (",)" if len(parts) == 1 else ")")

    def _matches(self, shape: tuple[int, ...], want: Shape) -> dict | None:
        if len(shape) != len(want):
            return None
        new: dict[str, int] = {}
        for size, ax in zip(shape, want):
            if isinstance(ax, int):
                if size != ax:
                    return None
                continue
            known = self.sizes.get(ax, new.get(ax))
            if known is not None and known != size:
                return None
            new[ax] = size
        return new

    def array(self, name: str, value, *shapes: Shape, dtype=float, empty: bool = False) -> np.ndarray:
        """``value`` as an array of ``dtype`` whose shape is one of ``shapes`` (tuples of axis names and
        fixed lengths); its new axes' lengths are fixed for the inputs after it. ``empty``: a length-0 axis is
        allowed."""
        try:
            a = np.asarray(value, dtype=dtype)
        except (TypeError, ValueError):
            kind = "complex numbers" if dtype is complex else "numbers"
            self.fail(f"{name} must be an array of {kind}, got {type(value).__name__} "
                      f"{_short(value)} that is not one.")
        for want in shapes:
            new = self._matches(a.shape, want)
            if new is None:
                continue
            if not empty and a.size == 0:
                axis = next((ax for size, ax in zip(a.shape, want) if size == 0), "its axes")
                self.fail(f"{name} is empty (shape {a.shape}), expected at least one entry along {axis}.")
            self.sizes.update(new)
            return a
        expected = " or ".join(self._render(s) for s in shapes)
        self.fail(f"{name} has shape {a.shape}, expected {expected}.")

    def sequence(self, name: str, value, axis: str | None = None, *, empty: bool = False) -> list:
        """``value`` as a list (its length fixes or is checked against ``axis``); refused when empty."""
        if value is None or isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
            self.fail(f"{name} must be a sequence, got {type(value).__name__}.")
        items = list(value)
        if not items and not empty:
            self.fail(f"{name} is empty, expected at least one entry" + (f" along {axis}." if axis else "."))
        if axis is not None and items:
            self.bind(axis, len(items), name)
        return items

    def mapping(self, name: str, value, keys: Iterable[str]) -> Mapping:
        """``value`` as a mapping that holds every one of ``keys``."""
        if not isinstance(value, Mapping):
            self.fail(f"{name} must be a mapping (a dict), got {type(value).__name__}.")
        missing = [k for k in keys if k not in value]
        if missing:
            self.fail(f"{name} lacks the key(s) {missing}, expected {sorted(keys)}.")
        return value

    def fields(self, name: str, items: list, fields: Iterable[str]) -> list:
        """``items`` (records: attributes or keys) each with every one of ``fields``."""
        fields = list(fields)
        for i, item in enumerate(items):
            has = (lambda f: f in item) if isinstance(item, Mapping) else (lambda f: hasattr(item, f))
            missing = [f for f in fields if not has(f)]
            if missing:
                self.fail(f"{name}[{i}] lacks {missing}, expected each entry to have {fields}.")
        return items


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
