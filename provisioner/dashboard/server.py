"""The dashboard's HTTP server: the standard library's threaded server, GET only.

Access rules (safe by default):

- bound to 127.0.0.1 unless configured otherwise;
- bound beyond loopback, it will not start without a bearer token, and then every request
  needs it (``Authorization: Bearer <token>``; a browser opens ``/?token=<token>`` once and
  gets an HttpOnly, SameSite=Strict cookie instead, the token gone from the address bar);
- on loopback with no token, requests must name a loopback host (``Host: 127.0.0.1:...``),
  which stops a web page from reading the dashboard through DNS rebinding;
- there is no state-changing endpoint: anything but GET/HEAD is 405 (401 first without the
  token);
- strict Content-Security-Policy (own scripts and styles only), no caching of pages.

The same routes answer JSON when asked (``Accept: application/json`` or ``?format=json``).
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import socket
import threading
import time
from collections.abc import Callable
from datetime import UTC, date, datetime
from http import HTTPStatus
from http.cookies import SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from provisioner.control.store import Store

log = logging.getLogger("provisioner.dashboard")

DEFAULT_PORT = 8470
COOKIE = "provisioner_dashboard"
MIN_TOKEN_CHARS = 16
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
_TYPES = {
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
}


class DashboardError(ValueError):
    """The dashboard cannot be served as configured (says what to change)."""


def is_loopback(address: str) -> bool:
    if address in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:
        return False


def check_token(address: str, token: str | None) -> None:
    """Refuse a configuration that would expose the page: beyond loopback without a token,
    or with a token too short to resist guessing."""
    if token is not None and len(token) < MIN_TOKEN_CHARS:
        raise DashboardError(
            f"the dashboard token is {len(token)} characters; use at least {MIN_TOKEN_CHARS} "
            "(e.g. python3 -c 'import secrets; print(secrets.token_urlsafe(32))')"
        )
    if not is_loopback(address) and not token:
        raise DashboardError(
            f"the dashboard would listen on {address}, beyond loopback, without a token: set "
            "PROVISIONER_DASHBOARD_TOKEN (e.g. in the daemon's EnvironmentFile) or "
            "dashboard.token_file, or bind it to 127.0.0.1"
        )


def load_token(env: str | None, path: str | None) -> str | None:
    """The bearer token: from the file when one is named, else from the environment variable
    ``env`` (systemd: the daemon's EnvironmentFile). Never logged."""
    import os

    if path:
        try:
            text = open(path, encoding="utf-8").read().strip()  # noqa: SIM115 - read once
        except OSError as exc:
            raise DashboardError(
                f"dashboard token file {path}: {exc.strerror or exc}; create it (mode 0600) "
                "or remove dashboard.token_file"
            ) from None
        return text or None
    value = os.environ.get(env or "", "").strip() if env else ""
    return value or None


class Response:
    __slots__ = ("body", "headers", "status")

    def __init__(
        self,
        status: int,
        body: bytes | str = b"",
        content_type: str = "text/html; charset=utf-8",
        headers: dict[str, str] | None = None,
    ) -> None:
        self.status = status
        self.body = body.encode("utf-8") if isinstance(body, str) else body
        self.headers = {"Content-Type": content_type, **(headers or {})}


def _json_default(o: Any) -> Any:
    if isinstance(o, datetime | date):
        return o.isoformat()
    if isinstance(o, tuple | set | frozenset):
        return list(o)
    return str(o)


def to_json(doc: Any) -> bytes:
    return json.dumps(doc, default=_json_default, separators=(",", ":")).encode("utf-8")


class BadRequest(ValueError):
    pass


class Dashboard:
    """Routes to pages; no sockets here (the server below wraps it)."""

    def __init__(
        self,
        store: Store,
        *,
        token: str | None = None,
        page_size: int = 100,
        allowed_hosts: frozenset[str] = frozenset(),
        source: str = "",
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        from provisioner.dashboard.render import Renderer

        self.store = store
        self.token = token or None
        self.page_size = page_size
        self.allowed_hosts = allowed_hosts
        self.clock = clock or (lambda: datetime.now(UTC))
        self.renderer = Renderer(store_url=store.url, source=source)
        root = resources.files("provisioner.dashboard").joinpath("static")
        self.static = {
            p.name: p.read_bytes()
            for p in root.iterdir()
            if p.is_file() and p.name.rsplit(".", 1)[-1] in ("css", "js", "svg", "png")
        }

    # -- access ---------------------------------------------------------------------------------

    def _token_ok(self, presented: str | None) -> bool:
        if self.token is None or presented is None:
            return False
        return hmac.compare_digest(presented.encode("utf-8"), self.token.encode("utf-8"))

    def authorized(self, headers: Any, query: dict[str, list[str]]) -> tuple[bool, bool]:
        """(allowed, came with ?token=) for a request."""
        if self.token is None:
            return True, False
        auth = headers.get("Authorization") or ""
        if auth[:7].lower() == "bearer " and self._token_ok(auth[7:].strip()):
            return True, False
        cookie = SimpleCookie()
        try:
            cookie.load(headers.get("Cookie") or "")
        except Exception:
            cookie = SimpleCookie()
        if COOKIE in cookie and self._token_ok(cookie[COOKIE].value):
            return True, False
        presented = query.get("token") or []
        if presented and self._token_ok(presented[0]):
            return True, True
        return False, False

    def host_ok(self, headers: Any) -> bool:
        """With no token (loopback only), the Host must be a loopback name: a page on another
        site that rebinds its DNS name to 127.0.0.1 cannot read this one."""
        if self.token is not None:
            return True
        host = (headers.get("Host") or "").strip().lower()
        if host.startswith("["):
            name = host[: host.find("]") + 1]
        else:
            name = host.rsplit(":", 1)[0] if ":" in host else host
        return name in self.allowed_hosts or is_loopback(name)

    # -- dispatch -------------------------------------------------------------------------------

    def handle(self, method: str, target: str, headers: Any) -> Response:
        parts = urlsplit(target)
        path = parts.path or "/"
        query = parse_qs(parts.query, keep_blank_values=True)
        wants_json = (query.get("format") or [""])[0] == "json" or (
            "application/json" in (headers.get("Accept") or "")
            and "text/html" not in (headers.get("Accept") or "")
        )
        if path == "/healthz":
            return Response(200, "ok\n", "text/plain; charset=utf-8")
        if not self.host_ok(headers):
            return self._error(
                403,
                "This address is not served here: open the dashboard at 127.0.0.1 or localhost.",
                wants_json,
            )
        ok, via_query = self.authorized(headers, query)
        if not ok:
            return self._unauthorized(wants_json)
        if method not in ("GET", "HEAD"):
            return self._error(
                405,
                "The dashboard is read-only: it answers GET only.",
                wants_json,
                {"Allow": "GET, HEAD"},
            )
        if via_query and not wants_json:
            rest = {k: v for k, v in query.items() if k != "token"}
            location = path + ("?" + urlencode(rest, doseq=True) if rest else "")
            secure = "; Secure" if headers.get("X-Forwarded-Proto") == "https" else ""
            return Response(
                303,
                b"",
                headers={
                    "Location": location,
                    "Set-Cookie": f"{COOKIE}={self.token}; HttpOnly; SameSite=Strict; Path=/{secure}",
                },
            )
        try:
            return self.route(path, query, wants_json)
        except BadRequest as exc:
            return self._error(400, str(exc), wants_json)
        except Exception:
            log.exception("dashboard: %s failed", path)
            return self._error(
                500, "The page failed to render; the daemon's log says why.", wants_json
            )

    def route(self, path: str, query: dict[str, list[str]], wants_json: bool) -> Response:
        from provisioner.dashboard import queries, savings

        now = self.clock()
        if path.startswith("/static/"):
            return self._static(path[len("/static/") :])
        if path == "/favicon.ico":
            return Response(301, b"", headers={"Location": "/static/icon.svg"})
        t0 = time.perf_counter()
        page = _int(query, "page", 1)
        per_page = _int(query, "per_page", self.page_size)
        if path in ("/", "/jobs"):
            state = _str(query, "state")
            if state and state not in queries.STATES:
                raise BadRequest(f"state {state!r}: expected one of {', '.join(queries.STATES)}")
            doc = queries.job_page(
                self.store, now, page=page, per_page=per_page, state=state, q=_str(query, "q")
            )
            doc["savings"] = savings.store_savings(self.store, now)
            template = "jobs.html"
        elif path.startswith("/jobs/"):
            job_id = path[len("/jobs/") :].strip("/")
            found = queries.job_detail(self.store, job_id, now) if job_id else None
            if found is None:
                return self._error(404, f"No job {job_id!r} in the store.", wants_json)
            row = self.store.job(job_id)
            if row is not None:
                from provisioner.dashboard.output import output_tail

                found["output"] = output_tail(row)
            found["ledger"] = savings.job_ledger(self.store, found["job"]["id"], now)
            doc, template = found, "job.html"
        elif path == "/fleet":
            doc = queries.fleet(self.store, now, page=page, per_page=per_page)
            template = "fleet.html"
        elif path == "/prices":
            doc = queries.prices(
                self.store, provider=_str(query, "provider"), page=page, per_page=per_page
            )
            template = "prices.html"
        else:
            return self._error(404, f"Nothing at {path}.", wants_json)
        if wants_json:
            return Response(200, to_json(doc), "application/json", _NO_STORE)
        html = self.renderer.page(template, doc, now=now, path=path, query=query, t0=t0)
        return Response(200, html, headers=_NO_STORE)

    def _static(self, name: str) -> Response:
        body = self.static.get(name)
        if body is None:
            return Response(404, "not found\n", "text/plain; charset=utf-8")
        ctype = _TYPES.get("." + name.rsplit(".", 1)[-1], "application/octet-stream")
        return Response(200, body, ctype, {"Cache-Control": "public, max-age=3600"})

    def _unauthorized(self, wants_json: bool) -> Response:
        msg = (
            "This dashboard needs its token: send `Authorization: Bearer <token>`, or open "
            "/?token=<token> once in the browser (the token is in the daemon's EnvironmentFile "
            "as PROVISIONER_DASHBOARD_TOKEN)."
        )
        r = self._error(401, msg, wants_json)
        r.headers["WWW-Authenticate"] = 'Bearer realm="provisioner"'
        return r

    def _error(
        self, status: int, message: str, wants_json: bool, headers: dict[str, str] | None = None
    ) -> Response:
        if wants_json:
            body = to_json({"error": message, "status": status})
            return Response(status, body, "application/json", {**_NO_STORE, **(headers or {})})
        html = self.renderer.error(status, HTTPStatus(status).phrase, message)
        return Response(status, html, headers={**_NO_STORE, **(headers or {})})


_NO_STORE = {"Cache-Control": "no-store"}


def _int(query: dict[str, list[str]], name: str, default: int) -> int:
    raw = (query.get(name) or [""])[0]
    if raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadRequest(f"{name}={raw!r}: expected a whole number") from None
    if value < 1:
        raise BadRequest(f"{name}={raw!r}: expected 1 or more")
    return value


def _str(query: dict[str, list[str]], name: str) -> str | None:
    raw = (query.get(name) or [""])[0].strip()
    return raw or None


class _Handler(BaseHTTPRequestHandler):
    server_version = "provisioner-dashboard"
    sys_version = ""
    protocol_version = "HTTP/1.1"
    timeout = 60  # an idle or slow connection lets its thread go after this
    app: Dashboard

    def _serve(self, method: str) -> None:
        r = self.app.handle(method, self.path, self.headers)
        self.send_response(r.status)
        headers = {
            "Content-Security-Policy": CSP,
            "X-Content-Type-Options": "nosniff",
            "X-Frame-Options": "DENY",
            "Referrer-Policy": "no-referrer",
            **r.headers,
            "Content-Length": str(len(r.body)),
        }
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        if method != "HEAD":
            self.wfile.write(r.body)

    def do_GET(self) -> None:
        self._serve("GET")

    def do_HEAD(self) -> None:
        self._serve("HEAD")

    def do_POST(self) -> None:
        self._drain()
        self._serve("POST")

    def do_PUT(self) -> None:
        self._drain()
        self._serve("PUT")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    def do_PATCH(self) -> None:
        self._drain()
        self._serve("PATCH")

    def _drain(self) -> None:
        try:
            n = min(int(self.headers.get("Content-Length") or 0), 1 << 20)
        except ValueError:
            n = 0
        if n:
            self.rfile.read(n)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # requests are logged in log_request, without their query (it may hold a token)

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        log.debug("%s %s %s", self.command, urlsplit(self.path).path, code)


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
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def bind(self) -> int:
        handler = type("Handler", (_Handler,), {"app": self.app})

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            allow_reuse_address = True
            address_family = socket.AF_INET6 if ":" in self.address else socket.AF_INET

        try:
            self._httpd = Server((self.address.strip("[]"), self.port), handler)
        except OSError as exc:
            raise DashboardError(
                f"cannot listen on {self.address}:{self.port}: {exc.strerror or exc}; "
                "choose another dashboard port (0: any free one)"
            ) from None
        self.port = int(self._httpd.server_address[1])
        return self.port

    def start(self) -> int:
        """Listen and serve in a background thread; the port."""
        port = self.bind()
        assert self._httpd is not None
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name="dashboard", daemon=True
        )
        self._thread.start()
        return port

    def serve_forever(self) -> None:
        if self._httpd is None:
            self.bind()
        assert self._httpd is not None
        self._httpd.serve_forever()

    @property
    def url(self) -> str:
        host = self.address
        if host in ("0.0.0.0", "::", ""):
            host = socket.gethostname()
        elif ":" in host and not host.startswith("["):
            host = f"[{host}]"
        return f"http://{host}:{self.port}/"

    def close(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
