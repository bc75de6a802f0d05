"""``python -m supervisor`` runs the ``panewarden`` command line."""

import sys

from supervisor.cli.main import main

sys.exit(main())
