"""What benchmark scripts share: experiment grids from TOML.

It sits above the library (it may import data, encoders, compress and evaluation); nothing
in the library imports it except the command line.
"""

from demitasse.experiments.grids import load_grid

__all__ = ["load_grid"]
