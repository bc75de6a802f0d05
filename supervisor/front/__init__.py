"""What clients talk to: the MCP tools and their schemas, the stdio and HTTP transports,
and the runtime that wires the service together and stops it on signals."""
