"""The JSON log-line format both the supervisor and the workers write to stderr.

One JSON object per line with stable keys: ``ts``, ``level``, ``logger``, ``msg``,
plus any of ``pane``, ``worker_pid``, ``client``, ``tool``, ``code``, ``pid`` passed
through ``extra=``. Shared here because both processes must emit the same shape.
"""

from __future__ import annotations

import json
import logging
import sys
import time

STABLE_KEYS = ("pane", "worker_pid", "client", "tool", "code", "pid", "lease_id", "op")


class JsonLineFormatter(logging.Formatter):
    """Formats a record as one JSON line with the stable keys."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key in STABLE_KEYS:
            value = record.__dict__.get(key)
            if value is not None:
                line[key] = value
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=str)


def configure(level: str = "INFO") -> None:
    """Send every log record to stderr as JSON lines (never stdout: it may be MCP's)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLineFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
