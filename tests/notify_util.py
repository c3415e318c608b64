"""Real receivers for the notification tests, on 127.0.0.1: an HTTP server that takes
Slack-format incoming webhooks (a JSON POST with ``text``) and an SMTP server (aiosmtpd).

The webhook receiver can answer 500 until told otherwise (``failing``), or hold each request
open until released (``hold``), and counts every request it saw. Apprise reaches it through its
JSON plug-in, mapped to Slack's body: ``json://HOST:PORT/services/T/B/TOKEN?:message=text&...``
(the path is a Slack webhook's, its last part the token).
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from email import message_from_bytes
from email.header import decode_header, make_header
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.waiting import until

TOKEN = "XoXbT0kenS3cret9f8e7d6c5b4a"  # a webhook token: must never be seen anywhere but here
MAIL_PASSWORD = "Sm7pPassw0rdQ9z8y7"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(what: Callable[[], Any], timeout: float, every: float = 0.05) -> bool:
    """Whether ``what()`` came true within ``timeout`` s (callers assert it with a story)."""
    return until(what, timeout, every)


@dataclass
class Received:
    """One message as a receiver got it: ``text`` is the event's own words; ``link`` and
    ``event_id`` are the lines the deliverer adds after them ("Job page: ...", "Event id:
    ..."); ``header`` is the ``X-Provisioner-Event`` header (webhooks only)."""

    title: str
    full: str
    at: float
    header: str | None = None
    seq: int = 0  # the order of arrival over every receiver in the test

    @property
    def text(self) -> str:
        return self.full.split("\n\nJob page: ")[0].split("\n\nEvent id: ")[0].rstrip()

    def _line(self, head: str) -> str | None:
        found = [ln[len(head) :].strip() for ln in self.full.splitlines() if ln.startswith(head)]
        return found[-1] if found else None

    @property
    def link(self) -> str | None:
        return self._line("Job page: ")

    @property
    def event_id(self) -> str | None:
        return self._line("Event id: ")


_arrivals = itertools.count(1)
_arrivals_lock = threading.Lock()


def arrival() -> int:
    """The next number in the order of arrival (shared by every receiver)."""
    with _arrivals_lock:
        return next(_arrivals)


@dataclass
class SlackReceiver:
    """Slack-format webhooks on 127.0.0.1."""

    failing: threading.Event = field(default_factory=threading.Event)
    holding: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    messages: list[Received] = field(default_factory=list)
    requests: int = 0
    failures: int = 0
    bad_paths: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n)
                receiver.requests += 1
                if self.path != f"/services/T000/B000/{TOKEN}":
                    receiver.bad_paths.append(self.path)
                    self._answer(404, b"no_service")
                    return
                if receiver.failing.is_set():
                    receiver.failures += 1
                    self._answer(500, b"internal_error")
                    return
                doc = json.loads(body)
                assert isinstance(doc.get("text"), str), doc  # Slack's format
                header = self.headers.get("X-Provisioner-Event")
                receiver.messages.append(
                    Received(doc.get("title", ""), doc["text"], time.time(), header, arrival())
                )
                if receiver.holding.is_set():  # seen, and not answered until released
                    receiver.release.wait(60)
                self._answer(200, b"ok")

            def _answer(self, code: int, body: bytes) -> None:
                try:
                    self.send_response(code)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:  # the sender is gone (killed while we held its request)
                    pass

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = int(self.server.server_address[1])
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return (
            f"json://127.0.0.1:{self.port}/services/T000/B000/{TOKEN}"
            "?:message=text&:version=&:attachments=&:type="
        )

    def titles(self) -> list[str]:
        return [m.title for m in self.messages]

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


class MailReceiver:
    """An SMTP server (aiosmtpd) that takes mail from one login, on 127.0.0.1."""

    def __init__(self) -> None:
        from aiosmtpd.controller import Controller
        from aiosmtpd.smtp import AuthResult, LoginPassword

        self.messages: list[Received] = []
        receiver = self

        class Handler:
            async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
                msg = message_from_bytes(envelope.content)
                subject = str(make_header(decode_header(msg.get("Subject", ""))))
                text = ""
                for part in msg.walk():
                    if part.get_content_type() == "text/plain":
                        payload = part.get_payload(decode=True)
                        text = payload.decode() if isinstance(payload, bytes) else str(payload)
                        break
                receiver.messages.append(
                    Received(subject, text.replace("\r\n", "\n"), time.time(), None, arrival())
                )
                return "250 OK"

        def auth(server: Any, session: Any, envelope: Any, mechanism: str, data: Any) -> Any:
            ok = isinstance(data, LoginPassword) and data.password == MAIL_PASSWORD.encode()
            return AuthResult(success=ok)

        self.port = free_port()
        self.controller = Controller(
            Handler(),
            hostname="127.0.0.1",
            port=self.port,
            authenticator=auth,
            auth_require_tls=False,
        )
        self.controller.start()

    @property
    def url(self) -> str:
        return (
            f"mailto://ops:{MAIL_PASSWORD}@127.0.0.1:{self.port}"
            "?from=provisioner@example.com&to=ops@example.com&mode=insecure"
        )

    def titles(self) -> list[str]:
        return [m.title for m in self.messages]

    def close(self) -> None:
        self.controller.stop()


def write_targets(path: Path, targets: dict[str, str]) -> Path:
    """A notify.yaml (mode 0600, as the daemon wants it)."""
    path.write_text("".join(f"{name}: {json.dumps(url)}\n" for name, url in targets.items()))
    os.chmod(path, 0o600)
    return path
