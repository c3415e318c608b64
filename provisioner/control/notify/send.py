"""One message to one URL through apprise (the optional ``notify`` extra, imported lazily).

Errors are apprise's own words (its log of the attempt: "HTTP 500", "connection refused"),
scrubbed of every registered secret, so a target's token never reaches a log, an event or the
outbox's error column.

Sends to different URLs run at once (the daemon's workers, one per target): nothing here is
held across a send but that URL's own lock, so a target that apprise throttles (email: one
message per 5.5 s) delays only itself. Apprise's log lines are kept per send, in a context
variable (apprise carries it into the thread it sends from), not by a process-wide capture.
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Mapping
from typing import Any

from provisioner.errors import NotifyError

INSTALL = "pip install 'provisioner[notify]'"


class NoApprise(NotifyError, RuntimeError):
    """apprise is not installed (the ``notify`` extra)."""

    def __init__(self) -> None:
        super().__init__(f"notifications need apprise, which is not installed: {INSTALL}")


class SendError(NotifyError, RuntimeError):
    """A message that was not delivered (the reason, redacted)."""


def have_apprise() -> bool:
    try:
        import apprise  # noqa: F401
    except ImportError:
        return False
    return True


#: The records apprise logs during the current send (None: not sending; they go on as usual).
_captured: contextvars.ContextVar[list[logging.LogRecord] | None] = contextvars.ContextVar(
    "provisioner_apprise_capture", default=None
)


class _Capture(logging.Filter):
    """On apprise's logger: a record made during one of our sends is kept for that send
    (its words become the :class:`SendError`) and goes no further."""

    def filter(self, record: logging.LogRecord) -> bool:
        kept = _captured.get()
        if kept is None:
            return True
        if record.levelno >= logging.WARNING:
            kept.append(record)
        return False


def _install_capture() -> None:
    logger = logging.getLogger("apprise")
    if not any(isinstance(f, _Capture) for f in logger.filters):
        logger.addFilter(_Capture())
    if logger.getEffectiveLevel() > logging.WARNING:  # its warnings are the reasons we give
        logger.setLevel(logging.WARNING)


#: A header that carries a message's event id, on the targets that take headers (apprise's
#: ``json://``, ``form://`` and ``xml://`` webhooks).
EVENT_HEADER = "X-Provisioner-Event"


def _format_of(obj: Any) -> Any:
    """Our words are plain text: said so to a target that sends HTML (email), so that apprise
    keeps their lines (as ``<br>``, and in the mail's plain part); None elsewhere (Slack's
    markdown, a webhook's text: as they are, not escaped)."""
    import apprise

    def formats(p: Any) -> tuple[Any, ...]:  # one format, or (apprise 2) the ones it sends
        f = getattr(p, "notify_format", None)
        return tuple(f) if isinstance(f, (tuple, list, set, frozenset)) else (f,)

    html = apprise.NotifyFormat.HTML
    return apprise.NotifyFormat.TEXT if any(html in formats(p) for p in obj) else None


class Sender:
    """Sends through apprise, one ``Apprise`` object per URL (kept: building one parses the
    URL and loads its plug-in), one send at a time per URL (its lock), any number at once
    across URLs."""

    def __init__(self) -> None:
        self._objects: dict[str, Any] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()  # guards the two dicts, never held across a send

    def _object(self, url: str) -> Any:
        """Called with ``url``'s lock held (building the object is that URL's business)."""
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
            with self._lock:
                self._objects[url] = obj
        return obj

    def _url_lock(self, url: str) -> threading.Lock:
        with self._lock:
            return self._locks.setdefault(url, threading.Lock())

    def send(
        self, url: str, title: str, body: str, headers: Mapping[str, str] | None = None
    ) -> None:
        """Deliver one message; :class:`SendError` (or :class:`NoApprise`) when it was not.
        ``headers`` go with it where the target takes headers (webhooks), for this message
        only."""
        from providers.base import redact

        with self._url_lock(url):
            obj = self._object(url)
            _install_capture()
            kept: list[logging.LogRecord] = []
            token = _captured.set(kept)  # apprise's words come back in our own line, not twice
            plugins = [p for p in obj if isinstance(getattr(p, "headers", None), dict)]
            before = [dict(p.headers) for p in plugins]
            try:
                for p in plugins:
                    p.headers.update(headers or {})
                ok = bool(obj.notify(body=body, title=title, body_format=_format_of(obj)))
            except Exception as exc:  # a plug-in that raises instead of answering False
                raise SendError(redact(f"{type(exc).__name__}: {exc}")[:300]) from None
            finally:
                _captured.reset(token)
                for p, h in zip(plugins, before, strict=True):
                    p.headers.clear()
                    p.headers.update(h)
        if not ok:
            lines = [r.getMessage() for r in kept if r.getMessage().strip()]
            why = lines[-1].splitlines()[0] if lines else "not delivered"
            raise SendError(redact(why)[:300])
