"""Command-line interface: ``attnflow <command> --help``. A thin layer over the library."""
from .main import main

__all__ = ["main"]
