"""Exit statuses of every ``panewarden`` command (one place, docs/design.md §10)."""

EXIT_OK = 0
EXIT_FAILED = 1  # the operation failed
EXIT_USAGE = 2  # usage or configuration error
