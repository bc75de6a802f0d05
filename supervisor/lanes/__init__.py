"""Lanes: the workflows that create and close pane leases — reviewer lanes, adopted
panes, writer lanes in Git worktrees — and sandboxed verification."""
