"""``python -m demitasse`` runs the command line."""

import sys

from demitasse.cli import main

sys.exit(main())
