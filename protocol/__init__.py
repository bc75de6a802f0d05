"""Wire protocol between the panewarden supervisor and its pane workers.

This package imports nothing from ``supervisor`` or ``paneworker``: it holds the
message types, the framing, the error codes and the version both sides agree on.
"""

PROTOCOL_VERSION = 1
