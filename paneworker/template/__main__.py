"""The worker template, ``python -m paneworker.template``: :mod:`paneworker.template.process`."""

import sys

from paneworker.template.process import main

if __name__ == "__main__":
    sys.exit(main())
