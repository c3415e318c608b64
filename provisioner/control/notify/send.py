"""One message to one URL through apprise (the optional ``notify`` extra, imported lazily).

Errors are apprise's own words (its log of the attempt: "HTTP 500", "connection refused"),
scrubbed of every registered secret, so a target's token never reaches a log, an event or the
outbox's error column.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

INSTALL = "pip install 'provisioner[notify]'"


class NoApprise(RuntimeError):
    """apprise is not installed (the ``notify`` extra)."""

    def __init__(self) -> None:
        super().__init__(f"notifications need apprise, which is not installed: {INSTALL}")


class SendError(RuntimeError):
    """A message that was not delivered (the reason, redacted)."""


def have_apprise() -> bool:
    try:
        import apprise  # noqa: F401
    except ImportError:
        return False
    return True


class Sender:
    """Sends through apprise, one ``Apprise`` object per URL (kept: building one parses the
    URL and loads its plug-in)."""

    def __init__(self) -> None:
        self._objects: dict[str, Any] = {}
        self._lock = threading.Lock()  # apprise's log capture is process-wide

    def _object(self, url: str) -> Any:
        try:
            import apprise
        except ImportError:
            raise NoApprise() from None
        obj = self._objects.get(url)
        if obj is None:
            obj = apprise.Apprise()
            if not obj.add(url):
                scheme = url.split("://", 1)[0][:20] if "://" in url else "?"
                raise SendError(f"apprise does not accept this URL (scheme {scheme!r})")
            self._objects[url] = obj
        return obj

    def send(self, url: str, title: str, body: str) -> None:
        """Deliver one message; :class:`SendError` (or :class:`NoApprise`) when it was not."""
        from providers.base import redact

        obj = self._object(url)
        import apprise

        quiet = logging.getLogger("apprise")
        with self._lock, apprise.LogCapture(level=logging.WARNING) as logs:
            # apprise's words come back in our own line (the caller's), not twice
            propagate, quiet.propagate = quiet.propagate, False
            try:
                ok = bool(obj.notify(body=body, title=title))
            except Exception as exc:  # a plug-in that raises instead of answering False
                raise SendError(redact(f"{type(exc).__name__}: {exc}")[:300]) from None
            finally:
                quiet.propagate = propagate
        if not ok:
            lines = [ln for ln in logs.getvalue().splitlines() if ln.strip()]
            why = lines[-1].split(" - ", 2)[-1] if lines else "not delivered"
            raise SendError(redact(why)[:300])
