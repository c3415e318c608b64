"""The dashboard's routes and access rules, with no socket: a request (method, target,
headers) in, a :class:`Response` out. :mod:`provisioner.dashboard.server` serves it over HTTP.

Access rules (safe by default):

- with a token, every request needs it (``Authorization: Bearer <token>``; a browser opens
  ``/?token=<token>`` once and gets an HttpOnly, SameSite=Strict cookie instead, redirected to
  the same page without the token: a path on this host, never one a browser reads as another);
- with no token (loopback only), requests must name a loopback host (``Host: 127.0.0.1:...``),
  which stops a web page from reading the dashboard through DNS rebinding;
- there is no state-changing endpoint: anything but GET/HEAD is 405 (401 first without the
  token);
- strict Content-Security-Policy (own scripts and styles only), no caching of pages: the
  headers of :data:`SECURITY_HEADERS` go on every answer, errors included.

The same routes answer JSON when asked (``Accept: application/json`` or ``?format=json``).
"""

from __future__ import annotations

import hmac
import json
import logging
import time
from collections.abc import Callable
from datetime import UTC, date, datetime
from http import HTTPStatus
from http.cookies import SimpleCookie
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlencode

from provisioner.control.store import Store
from provisioner.dashboard.access import is_loopback
from provisioner.errors import InputError

log = logging.getLogger("provisioner.dashboard")

COOKIE = "provisioner_dashboard"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
#: on every answer, errors and redirects included (an answer's own headers may replace the
#: Cache-Control: the static files are cached an hour)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
_TYPES = {
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
}


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


class BadRequest(InputError, ValueError):
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
        """The answer to ``method target`` (the request line's target as sent: a path,
        percent-encoded, and its query; a target that is not a path, as CONNECT's or
        OPTIONS' ``*``, is not one of ours either)."""
        path, query, wants_json = _parse(target, headers)
        if path == "/healthz" and method in ("GET", "HEAD"):  # says "ok", nothing else
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
            location = same_host(path) + ("?" + urlencode(rest, doseq=True) if rest else "")
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
            from provisioner.dashboard.notices import job_notifications

            found["notifications"] = job_notifications(self.store, found["job"]["id"])
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

    def refuse_body(self, target: str, headers: Any, status: int) -> Response:
        """413 (a body over the limit) or 408 (a body that did not come in time): nothing
        here takes a body, and the connection closes after this answer."""
        _, _, wants_json = _parse(target, headers)
        message = (
            "The dashboard takes no request body; this one is too large."
            if status == 413
            else "The request's body did not arrive in time."
        )
        return self._error(status, message, wants_json, {"Connection": "close"})

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


def _parse(target: str, headers: Any) -> tuple[str, dict[str, list[str]], bool]:
    """(the decoded path, the query, whether JSON was asked for) of a request target. The
    target is split at its first ``?``, never parsed as a URL: ``//evil.com/`` is a path
    here, not a host."""
    raw_path, _, raw_query = target.partition("?")
    path = unquote(raw_path) or "/"
    query = parse_qs(raw_query, keep_blank_values=True)
    accept = headers.get("Accept") or ""
    wants_json = (query.get("format") or [""])[0] == "json" or (
        "application/json" in accept and "text/html" not in accept
    )
    return path, query, wants_json


def same_host(path: str) -> str:
    """``path`` as a ``Location`` every browser reads on this host: one leading slash (no
    ``//`` or ``/\\``, which browsers read as another host), and everything but a path's
    plain characters percent-encoded (backslashes, tabs and newlines included)."""
    return "/" + quote(path.lstrip("/\\"), safe="/-._~!$&'()*+,;=:@")
