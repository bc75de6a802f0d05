"""A confined pane's network: the egress proxy the worker runs for the destinations its
profile allows, and the forwarder that carries them from inside the sandbox."""
