"""Configs are TOML: the shipped file in ``configs/`` is both the default and the schema.

A user config may only use its keys, with values of the same type (one clear error otherwise);
TOML's ``nan`` and ``inf`` are refused.
"""

from __future__ import annotations

import copy
import difflib
import os
import tomllib
from pathlib import Path
from typing import Any

from ..errors import InputError

__all__ = ["CONFIG_DIR", "default_config_path", "config_path", "load_config", "read_toml", "merge_config"]

CONFIG_DIR = Path(__file__).resolve().parent.parent.parent / "configs"


def default_config_path(name: str) -> Path:
    """Path of a shipped config in ``configs/``.

    Example:
        >>> from attnflow.runs import default_config_path
        >>> default_config_path("reproduce.toml").name
        'reproduce.toml'
    """
    path = CONFIG_DIR / name
    if not path.is_file():
        raise InputError(f"the default config {path} is missing; pass --config PATH explicitly.")
    return path


def _type_name(value: Any) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
            list: "a list", dict: "a table"}.get(type(value), type(value).__name__)


def _check_value(key: str, default: Any, value: Any, where: str) -> Any:
    """``value`` for ``key`` if it has the default's type (an integer passes for a number; a number must be
    finite: TOML's ``nan`` and ``inf`` are refused), list entries checked against the default's first."""
    import math

    if isinstance(default, bool) or isinstance(value, bool):
        ok = isinstance(default, bool) and isinstance(value, bool)
    elif isinstance(default, float):
        ok = isinstance(value, (int, float))
        value = float(value) if ok else value
        if ok and not math.isfinite(value):
            raise InputError(f"config key '{key}' in {where} must be a finite number, got {value!r} "
                             "(TOML's nan and inf are not accepted).")
    elif isinstance(default, list):
        ok = isinstance(value, list)
        if ok and default:
            value = [_check_value(f"{key}[{i}]", default[0], item, where) for i, item in enumerate(value)]
    else:
        ok = isinstance(value, type(default))
    if not ok:
        raise InputError(
            f"config key '{key}' in {where} must be {_type_name(default)} (like the default {default!r}), "
            f"got {_type_name(value)} {value!r}."
        )
    return value


def merge_config(defaults: dict, user: dict, where: str = "config", prefix: str = "") -> dict:
    """Overlay ``user`` on ``defaults``; unknown keys and wrong types raise :class:`InputError`.

    A table whose default is empty (``{}``) accepts any keys (free-form sections).

    Example:
        >>> from attnflow.runs import merge_config
        >>> merge_config({"n": 20, "t1": 10.0}, {"t1": 5})
        {'n': 20, 't1': 5.0}
    """
    out = copy.deepcopy(defaults)
    for key, value in user.items():
        full = f"{prefix}{key}"
        if key not in defaults:
            close = difflib.get_close_matches(key, list(defaults), n=1)
            hint = f" (did you mean '{prefix}{close[0]}'?)" if close else ""
            raise InputError(
                f"unknown config key '{full}' in {where}{hint}; known keys here: "
                f"{', '.join(sorted(defaults)) or '(none)'}."
            )
        default = defaults[key]
        if isinstance(default, dict):
            if not isinstance(value, dict):
                raise InputError(f"config key '{full}' in {where} must be a table, got {_type_name(value)} {value!r}.")
            out[key] = copy.deepcopy(value) if not default else merge_config(default, value, where, f"{full}.")
        else:
            out[key] = _check_value(full, default, value, where)
    return out


def read_toml(path: str | os.PathLike) -> dict:
    """The table of the TOML file ``path``; a missing, unreadable, non-UTF-8 or invalid file raises
    :class:`InputError` naming it.

    Example:
        >>> import tempfile, pathlib
        >>> from attnflow.runs import read_toml
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "c.toml"
        >>> _ = path.write_text("seed = 3")
        >>> read_toml(path)
        {'seed': 3}
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"config file {path} does not exist.")
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except UnicodeDecodeError as err:
        raise InputError(f"config file {path} is not UTF-8 text (byte {err.start}); save it as UTF-8 TOML.") from err
    except tomllib.TOMLDecodeError as err:
        raise InputError(f"config file {path} is not valid TOML: {err}.") from err
    except OSError as err:
        raise InputError(f"config file {path} cannot be read: {err.strerror}.") from err


def config_path(path: str | os.PathLike) -> Path:
    """The file a config argument names: ``path`` itself, or, when no such file exists and ``path`` is a bare
    name, the shipped config of that name in ``configs/`` (with or without its ``.toml``).

    Example:
        >>> from attnflow.runs import config_path
        >>> config_path("phase").name, config_path("meanfield-sphere.toml").parent.name
        ('phase.toml', 'configs')
    """
    p = Path(path)
    if not p.is_file() and p.parent == Path("."):
        for shipped in (CONFIG_DIR / p.name, CONFIG_DIR / f"{p.name}.toml"):
            if shipped.is_file():
                return shipped
    return p


def load_config(path: str | os.PathLike | None, default_name: str) -> dict:
    """Load the shipped default ``configs/<default_name>`` and overlay the user's TOML file ``path`` (None: the
    default alone; a bare name that is no file here: the shipped config of that name, :func:`config_path`); unknown
    keys and wrong types are refused (:func:`merge_config`).

    Example:
        >>> from attnflow.runs import load_config
        >>> load_config(None, "ginibre-spectral.toml")["kind"]
        'spectral'
    """
    defaults_path = default_config_path(default_name)
    defaults = read_toml(defaults_path)
    path = None if path is None else config_path(path)
    if path is None or path.resolve() == defaults_path:
        return defaults
    return merge_config(defaults, read_toml(path), where=str(path))
