"""The ``demitasse`` command line: thin wrappers over the library."""

from demitasse.cli.main import main, run

__all__ = ["main", "run"]
