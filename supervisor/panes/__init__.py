"""Panes as the supervisor sees them: worker processes, the registry and status cursors,
starting, driving and removing panes, re-adoption after a restart, leftovers, watchdog."""
