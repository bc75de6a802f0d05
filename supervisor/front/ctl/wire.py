"""The ctl socket's wire contract, shared by the service and ``panewarden ctl``.

One connection, one exchange: the client sends one request line (a JSON object
``{"op": <command>, "args": {...}}``) and reads one response line (``{"ok": true,
"result": {...}}`` or ``{"ok": false, "error": {"code": ..., "message": ...}}``). The
bounds below hold on both sides. Kept free of the service's imports, so the client
starts fast inside a pane.
"""

from __future__ import annotations

CTL_SOCKET_NAME = "ctl.sock"
# Every pane program finds the socket here (the client's first choice too).
CTL_SOCKET_VARIABLE = "PANEWARDEN_CTL_SOCKET"
MAX_REQUEST_BYTES = 1024 * 1024
# Handoff results carry screen captures (up to 8 panes of output): bounded too.
MAX_RESPONSE_BYTES = 16 * 1024 * 1024
# A client must send its request this soon after connecting.
REQUEST_READ_TIMEOUT_S = 10.0
