"""Tests of the coordination authority's pieces that run outside MCP: ``panewarden ctl``."""
