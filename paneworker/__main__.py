"""A cold pane worker: ``python -m paneworker --boot-fd N`` (see :mod:`paneworker.loop.entry`)."""

import sys

from paneworker.loop.entry import main

if __name__ == "__main__":
    sys.exit(main())
