"""Logging setup for the command line and the service.

Modules log through ``logging.getLogger(__name__)`` with ``key=value`` fragments in the message
(``"committed batch_id=%s rows=%s"``); this module only decides the format and the level.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Literal

LogFormat = Literal["text", "logfmt", "json"]


def _logfmt_value(value: str) -> str:
    if value and not any(c in value for c in ' "=\\\n'):
        return value
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


class _LogfmtFormatter(logging.Formatter):
    """``time=... level=info logger=runtime.pipeline msg="pipeline start dataflow=kv"``: one
    key=value line per record (logfmt), for log shippers that parse key=value."""

    def format(self, record: logging.LogRecord) -> str:
        fields = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            fields["exception"] = self.formatException(record.exc_info)
        return " ".join(f"{key}={_logfmt_value(value)}" for key, value in fields.items())


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def configure_logging(level: str = "INFO", fmt: LogFormat = "text") -> None:
    """Send log records to stderr at ``level`` in ``fmt``; safe to call more than once."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(_JsonFormatter())
    elif fmt == "logfmt":
        handler.setFormatter(_LogfmtFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
