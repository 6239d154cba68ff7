"""The ``demitasse`` command line: thin wrappers over the library."""

from demitasse.cli.main import main

__all__ = ["main"]
