"""The operator socket's wire contract, shared by the service and ``panewarden watch``.

An AF_UNIX stream socket (mode 0600) named ``OPERATOR_SOCKET_NAME`` beside the ctl
socket in the runtime directory; its path is recorded in ``$STATE/run/operator``. The
client sends one request line, a JSON object ``{"op": "watch", "pane": NAME}`` (``pane``
null or absent: every pane's status), within ``REQUEST_READ_TIMEOUT_S``; the service then
writes one JSON line per event, ``{"event": NAME, "data": {...}}`` (the events of
:mod:`supervisor.front.feed.events`; ``keepalive`` with ``{}`` after
``KEEPALIVE_S`` of silence), until the client hangs up, the pane is removed or the
service stops. A refusal is one ``error`` event, then the connection closes. Kept free
of the service's imports, so the client starts fast.
"""

from __future__ import annotations

OPERATOR_SOCKET_NAME = "operator.sock"
# Where the socket's path is recorded, under $STATE/run.
OPERATOR_RECORD = "operator"
MAX_REQUEST_BYTES = 4096
REQUEST_READ_TIMEOUT_S = 10.0
# An event line is at most one frame's worth (a frame is below 1 MiB).
MAX_EVENT_BYTES = 2 * 1024 * 1024
# A silent feed sends a keepalive this often (a gone peer is noticed on the write).
KEEPALIVE_S = 15.0
