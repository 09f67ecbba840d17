"""``attnflow`` entry point; each sub-command lives in its own module and registers itself."""

from __future__ import annotations

import argparse
import sys

# (module, attribute) pairs; each module defines add_parser(subparsers).
COMMANDS = [
    ("attnflow.cli.reproduce", "add_parser"),
    ("attnflow.cli.sweep", "add_parser"),
    ("attnflow.cli.track", "add_parser"),
    ("attnflow.cli.probe", "add_parser"),
    ("attnflow.cli.extensions", "add_parser"),
]


def build_parser() -> argparse.ArgumentParser:
    import importlib

    parser = argparse.ArgumentParser(
        prog="attnflow",
        description="Simulate self-attention as an interacting particle system "
        "(tokens = particles, layers = time) and measure the cluster geometry.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for module, attr in COMMANDS:
        getattr(importlib.import_module(module), attr)(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    from ..errors import AttnflowError

    parser = build_parser()
    args = parser.parse_args(argv)
    from .._x64 import float64_scope

    try:
        with float64_scope():  # the jobs compute their checks in float64; scoped, not global
            return int(args.func(args) or 0)
    except AttnflowError as err:
        print(f"attnflow {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
