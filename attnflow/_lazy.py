"""Names of a package imported on first use (PEP 562), so that importing the package stays light, and modules
imported ahead on a thread while the process waits on work that releases Python's lock."""

from __future__ import annotations

import importlib
import threading
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


def import_ahead(*modules: str) -> threading.Thread:
    """Import ``modules`` on a daemon thread, started now: for the moments when this process waits on work that
    releases Python's lock (XLA compiling a program), so that a module needed later is imported by then. A module
    that fails to import is left alone here: the caller's own import raises the error where the module is used.
    Python's import locks make a later import of the same module wait for this one, never import it twice.

    Example:
        >>> import sys
        >>> from attnflow._lazy import import_ahead
        >>> import_ahead("json", "no_such_module_here").join()
        >>> "json" in sys.modules, "no_such_module_here" in sys.modules
        (True, False)
    """

    def run() -> None:
        for module in modules:
            try:
                importlib.import_module(module)
            except Exception:  # raised again where the module is used
                pass

    thread = threading.Thread(target=run, name="attnflow-import-ahead", daemon=True)
    thread.start()
    return thread
