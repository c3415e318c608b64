"""Logging set-up: human lines on a terminal, JSON lines for journald; secrets always scrubbed.

What the libraries log (alembic's migrations, APScheduler's every run, the SDKs' requests) is
kept to warnings and errors, whatever the verbosity: a daemon's journal holds our lines, not a
few hundred of theirs a minute. ``-vvv`` (or ``PROVISIONER_LOG_LIBRARIES=1``) lets theirs
through at the same level as ours."""

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


#: the loggers that are ours; any other name is a library's
OURS = frozenset({"provisioner", "providers", "policies", "__main__"})


class LibraryFilter(logging.Filter):
    """Drops a library's records below WARNING (ours pass at the handler's level)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or record.name.split(".")[0] in OURS


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
    if verbose < 3 and os.environ.get("PROVISIONER_LOG_LIBRARIES", "") in ("", "0"):
        handler.addFilter(LibraryFilter())
    root.addHandler(handler)
    root.setLevel(level)
