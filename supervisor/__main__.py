"""``python -m supervisor`` runs the ``panewarden`` command line."""

import sys

from supervisor.cli import main

sys.exit(main())
