"""The panewarden supervisor: MCP front-end, launch policy, pane registry and worker manager.

It imports only ``protocol`` and third-party libraries, never a ``paneworker`` internal;
workers are started as separate processes.
"""
