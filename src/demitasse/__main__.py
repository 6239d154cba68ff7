"""``python -m demitasse`` runs the command line."""

import sys

from demitasse.cli import run

sys.exit(run())
