"""``python -m demitasse`` runs the command line."""

import sys

from demitasse.launch import run

sys.exit(run())
