"""The supervisor's process machinery: pane workers (spawn, handshake, RPC, heartbeat,
death), the worker template, the worker environment, leftovers of dead panes, and
short-lived helpers (git, bwrap). The pane model that uses them is ``panes``."""
