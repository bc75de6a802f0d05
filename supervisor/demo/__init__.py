"""The bundled demo agent and the ``panewarden demo`` tour that drives it over MCP."""
