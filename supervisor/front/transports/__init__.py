"""How clients reach the tools: stdio (with its stdin relay and session dirs), streamable
HTTP, and the stdio proxy in front of a running HTTP service."""
