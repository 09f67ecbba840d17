"""Command-line interface: ``attnflow <command> --help``. A thin layer over the library."""
from .main import main, run

__all__ = ["main", "run"]
