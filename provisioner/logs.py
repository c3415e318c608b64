"""Logging set-up: human lines on a terminal, JSON lines for journald; secrets always scrubbed."""

from __future__ import annotations

import json
import logging
import os
import sys
from datetime import UTC, datetime


class JSONFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key in ("job", "attempt", "instance", "provider", "zone", "event"):
            value = getattr(record, key, None)
            if value is not None:
                doc[key] = value
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        from providers.base import redact

        return redact(json.dumps(doc, default=str))


def setup_logging(verbose: int = 0, *, json_lines: bool | None = None) -> None:
    from providers.base import RedactingFilter

    level = logging.WARNING - 10 * min(verbose, 2)
    root = logging.getLogger()
    for h in list(root.handlers):
        if getattr(h, "_provisioner", False):
            root.removeHandler(h)
    handler = logging.StreamHandler(sys.stdout if json_lines else sys.stderr)
    handler._provisioner = True  # type: ignore[attr-defined]
    if json_lines is None:
        json_lines = os.environ.get("PROVISIONER_LOG_FORMAT", "") == "json"
    if json_lines:
        handler.setFormatter(JSONFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    handler.addFilter(RedactingFilter())
    root.addHandler(handler)
    root.setLevel(level)
