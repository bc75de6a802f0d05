"""The MCP tool groups: each group's tools and its argument and result schemas, and the
plumbing every tool shares (``tooling``, ``arguments``)."""
