"""Confined panes, from inside: a probe program tries what the sandbox forbids."""
