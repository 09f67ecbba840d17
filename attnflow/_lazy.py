"""Names of a package imported on first use (PEP 562), so that importing the package stays light."""

from __future__ import annotations

import importlib
from typing import Callable


def lazy_names(package: str, names: dict[str, str], namespace: dict) -> tuple[Callable, Callable]:
    """``(__getattr__, __dir__)`` for ``package`` (its ``__name__``), whose ``names`` (public name -> the
    relative module that defines it, or ``".name"`` for the submodule ``name`` itself) are imported when first
    asked for and then kept in ``namespace`` (the package's ``globals()``), so that later look-ups do not come back
    here.

    Example:
        >>> from attnflow._lazy import lazy_names
        >>> space = {}
        >>> getattr_, dir_ = lazy_names("attnflow", {"InputError": ".errors"}, space)
        >>> getattr_("InputError").__name__, "InputError" in space, dir_()
        ('InputError', True, ['InputError'])
        >>> getattr_, _ = lazy_names("attnflow", {"errors": ".errors"}, space)  # a submodule itself
        >>> getattr_("errors").__name__
        'attnflow.errors'
    """

    def __getattr__(name: str):
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = importlib.import_module(module, package)
        if module != "." + name:  # a name defined in the module (else the submodule itself)
            value = getattr(value, name)
        namespace[name] = value  # later look-ups skip this function
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(names))

    return __getattr__, __dir__
