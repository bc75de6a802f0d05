"""Launch policy: the profiles file, its load-time refusals, and launch specs."""
