"""The dashboard's HTTP server: an ASGI application built with Starlette's request and
response parts, served by uvicorn on its pure-Python h11 protocol.

Why these (issue 43): the standard library's ``http.server``, which served the dashboard
before, is documented as not for production, and a probe showed why: bodies it did not read
were parsed as the next request, a ``Content-Length: -1`` held a thread for a minute,
methods it did not know got its own page without the token check or the headers, and a
client that went away wrote a traceback. uvicorn is maintained and widely deployed; h11
frames every message by the HTTP/1.1 rules (a body is a body whether or not anyone reads it,
a malformed length is a 400 and a closed connection), it handles a client that goes away
without a word in the logs, and it serves on one event loop rather than a thread per
connection. Starlette is the small toolkit the same people maintain for ASGI (requests,
headers, responses). h11 rather than httptools: pure Python, nothing to compile, and the
dashboard's work is its queries, not parsing.

What this module adds to them (the access rules are :mod:`provisioner.dashboard.routes`'):

- the page is rendered in a bounded pool of worker threads (the store's calls block), off
  the event loop;
- nothing here takes a body: one announced over :data:`MAX_BODY` is refused with 413 and the
  connection closed before it is read; a smaller one is read and dropped, within
  :data:`BODY_WAIT_S` (else 408, closed);
- the headers of :data:`~provisioner.dashboard.routes.SECURITY_HEADERS` on every answer,
  uvicorn's own 400 for a request h11 cannot parse included;
- requests are logged (DEBUG) without their query, which may hold the token.

:class:`DashboardServer` binds the port itself (a taken port is a :class:`DashboardError`
naming it) and serves in a thread (:meth:`~DashboardServer.start`) or in the foreground
(:meth:`~DashboardServer.serve_forever`, ``provisioner dashboard`` and the daemon's child).
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Awaitable, Callable, MutableMapping
from datetime import datetime
from typing import Any

from provisioner.control.store import Store
from provisioner.dashboard.access import DashboardError, check_token, load_token
from provisioner.dashboard.routes import SECURITY_HEADERS, Dashboard, Response

__all__ = [
    "DEFAULT_PORT",
    "Dashboard",
    "DashboardApp",
    "DashboardError",
    "DashboardServer",
    "load_token",
]

log = logging.getLogger("provisioner.dashboard")

DEFAULT_PORT = 8470
#: the largest request body read (and dropped); one announced larger is refused unread
MAX_BODY = 64 * 1024
#: how long a body may take to arrive once its headers have
BODY_WAIT_S = 5.0
#: pages rendered at once (each holds a thread and a store connection while it queries)
RENDER_THREADS = 8
#: an idle keep-alive connection is closed after this
KEEP_ALIVE_S = 5

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_GONE = -1  # the client went away while its body was read


class DashboardApp:
    """The ASGI application: every HTTP request through :meth:`Dashboard.handle` in a worker
    thread, answered with the security headers."""

    def __init__(
        self,
        dashboard: Dashboard,
        *,
        max_body: int = MAX_BODY,
        body_wait_s: float = BODY_WAIT_S,
        threads: int = RENDER_THREADS,
    ) -> None:
        self.dashboard = dashboard
        self.max_body, self.body_wait_s, self.threads = max_body, body_wait_s, threads
        self._limiter: Any = None  # made on the event loop, at the first request

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # no lifespan, no websockets: nothing to do
            return
        from starlette.datastructures import Headers

        headers = Headers(scope=scope)
        method = str(scope["method"])
        raw_path = scope.get("raw_path") or scope["path"].encode("utf-8")
        query = scope.get("query_string") or b""
        target = raw_path.decode("latin-1") + ("?" + query.decode("latin-1") if query else "")
        refused = await self._body(headers, receive)
        if refused == _GONE:
            return
        try:
            if refused:
                r = await self._run(self.dashboard.refuse_body, target, headers, refused)
            else:
                r = await self._run(self.dashboard.handle, method, target, headers)
        except Exception:
            log.exception("dashboard: %s %s failed", method, scope["path"])
            r = Response(500, "the page failed; the log says why\n", "text/plain; charset=utf-8")
        await _answer(r, scope, receive, send)
        log.debug("%s %s %s", method, scope["path"], r.status)

    async def _run(self, fn: Callable[..., Response], *args: Any) -> Response:
        import anyio
        import anyio.to_thread

        if self._limiter is None:
            self._limiter = anyio.CapacityLimiter(self.threads)
        return await anyio.to_thread.run_sync(fn, *args, limiter=self._limiter)

    async def _body(self, headers: Any, receive: Receive) -> int:
        """0 when the request's body (if any) was read and dropped; 413 when it is over the
        limit (announced or read), 408 when it did not arrive in time; _GONE when the client
        went away."""
        import anyio

        length = headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body:
            return 413
        if (length is None or length == "0") and "transfer-encoding" not in headers:
            return 0
        got = 0
        with anyio.move_on_after(self.body_wait_s):
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return _GONE
                got += len(message.get("body", b""))
                if got > self.max_body:
                    return 413
                if not message.get("more_body", False):
                    return 0
        return 408


async def _answer(r: Response, scope: Scope, receive: Receive, send: Send) -> None:
    from starlette.responses import Response as Out

    out = Out(r.body, status_code=r.status, headers={**SECURITY_HEADERS, **r.headers})
    await out(scope, receive, send)  # a client gone by now: uvicorn drops it, silently


#: what uvicorn logs (WARNING) about a client's malformed or unsupported request: the client
#: got its 400, or a plain answer; the journal needs none of it, one line per probe
_CLIENTS_FAULT = ("Invalid HTTP request received.", "Unsupported upgrade request.", "No supported")


class _ClientFaults(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(_CLIENTS_FAULT)


def _quiet_client_faults() -> None:
    server_log = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, _ClientFaults) for f in server_log.filters):
        server_log.addFilter(_ClientFaults())


def _protocol() -> type:
    """uvicorn's h11 protocol, its own 400 (for a request h11 cannot parse: a negative or
    garbage Content-Length, a malformed request line) with the security headers and
    nothing else changed."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    extra = [(k.lower().encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]

    class Protocol(H11Protocol):
        def send_400_response(self, msg: str) -> None:
            body = msg.encode("ascii")
            headers = [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
                *extra,
            ]
            for event in (
                h11.Response(status_code=400, headers=headers, reason=b"Bad Request"),
                h11.Data(data=body),
                h11.EndOfMessage(),
            ):
                self.transport.write(self.conn.send(event) or b"")
            self.transport.close()

    return Protocol


class DashboardServer:
    """The dashboard on ``address:port`` (port 0: any free one), in a thread or the
    foreground."""

    def __init__(
        self,
        store: Store,
        *,
        address: str = "127.0.0.1",
        port: int = DEFAULT_PORT,
        token: str | None = None,
        page_size: int = 100,
        source: str = "",
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        check_token(address, token)
        if token:
            from providers.base import register_secret

            register_secret(token)  # scrubbed from any log line that might carry it
        self.address, self.port = address, port
        self.app = Dashboard(
            store,
            token=token,
            page_size=page_size,
            allowed_hosts=frozenset({address.lower(), "localhost"}),
            source=source,
            clock=clock,
        )
        self._sock: socket.socket | None = None
        self._server: Any = None
        self._stopping = False
        self._thread: threading.Thread | None = None

    def bind(self) -> int:
        """Listen on the address and port; the port (a free one for port 0)."""
        return self.adopt(listen(self.address, self.port))

    def adopt(self, sock: socket.socket) -> int:
        """Serve on a socket already listening (the daemon's child gets its parent's); the
        port."""
        self._sock = sock
        self.port = int(sock.getsockname()[1])
        return self.port

    def _uvicorn(self) -> Any:
        import uvicorn

        _quiet_client_faults()

        config = uvicorn.Config(
            DashboardApp(self.app),
            http=_protocol(),
            loop="asyncio",
            lifespan="off",
            ws="none",
            interface="asgi3",
            log_config=None,  # the process's logging stays as it is
            access_log=False,  # requests are logged without their query (DashboardApp)
            server_header=False,
            proxy_headers=False,
            timeout_keep_alive=KEEP_ALIVE_S,
            timeout_graceful_shutdown=3,
        )
        self._server = uvicorn.Server(config)
        self._server.should_exit = self._stopping
        return self._server

    def start(self) -> int:
        """Listen and serve in a background thread; the port."""
        if self._sock is None:
            self.bind()
        server, sock = self._uvicorn(), self._sock
        self._thread = threading.Thread(
            target=server.run, kwargs={"sockets": [sock]}, name="dashboard", daemon=True
        )
        self._thread.start()
        return self.port

    def serve_forever(self) -> None:
        """Serve in this thread until SIGINT or SIGTERM (then re-raised: Ctrl-C ends in
        KeyboardInterrupt) or :meth:`close` from another thread."""
        if self._sock is None:
            self.bind()
        self._uvicorn().run(sockets=[self._sock])
        if not self._stopping:  # a signal ended it: uvicorn re-raises it in some versions only
            raise KeyboardInterrupt

    @property
    def url(self) -> str:
        return url_of(self.address, self.port)

    def stop(self) -> None:
        """Ask the server to stop (it finishes the answers under way, 3 s at most); from any
        thread, before it started too."""
        self._stopping = True
        if self._server is not None:
            self._server.should_exit = True

    def close(self) -> None:
        self.stop()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        if self._sock is not None:
            self._sock.close()  # uvicorn closed it on its way out; never started: here
            self._sock = None
        self._server = None


def listen(address: str, port: int) -> socket.socket:
    """A socket listening on ``address:port`` (port 0: a free one); a port that cannot be had
    is a :class:`DashboardError` naming it."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((address.strip("[]"), port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise DashboardError(
            f"cannot listen on {address}:{port}: {exc.strerror or exc}; "
            "choose another dashboard port (0: any free one)"
        ) from None
    return sock


def url_of(address: str, port: int) -> str:
    """The page's address as a person types it (a wildcard bind: this host's name)."""
    host = address
    if host in ("0.0.0.0", "::", ""):
        host = socket.gethostname()
    elif ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port}/"
