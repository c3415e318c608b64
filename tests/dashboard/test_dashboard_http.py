"""The dashboard's HTTP handling over raw sockets, against a real served dashboard: what an
outside probe broke on the standard library's server (issue 43), each as a case here.

- a request's body is never read as another request: a GET or DELETE whose body holds a
  second request gets one answer; a POST over the body limit is refused (413) and the
  connection closed before its body is read;
- a ``Content-Length`` that is negative or garbage is answered 400 and the connection
  closed, not held open; a malformed request is a 400 with the security headers and no log
  line (the client's fault, answered);
- every method but GET and HEAD (OPTIONS, TRACE, PROPFIND, CONNECT, anything) is 401 without
  the token, then 405 with it, both with the security headers;
- a client that resets its connection before or during the answer leaves no traceback in
  the logs or on stderr;
- no answer carries a ``Location`` a browser would read as another host (``/\\evil.com/``,
  ``//evil.com/``, their encoded forms), the token's redirect included.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

import pytest

from provisioner.control.store import Store
from provisioner.dashboard import DashboardServer
from tests.dashboard_store import sample_store

TOKEN = "probe-token-0123456789abcdefghij"
#: what every answer carries, errors included
SECURITY = {
    "content-security-policy": "default-src 'none'",
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
}
#: a socket that neither answers nor closes fails the test after this (a bound on failure)
WAIT_S = 10.0


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    db = tmp_path_factory.mktemp("probe") / "sample.db"
    sample_store(tmp_path_factory, db)
    st = Store(f"sqlite:///{db}")
    yield st
    st.close()


@pytest.fixture(scope="module")
def open_server(store: Store) -> Iterator[DashboardServer]:
    """On loopback without a token (the default)."""
    srv = DashboardServer(store, port=0)
    srv.start()
    yield srv
    srv.close()


@pytest.fixture(scope="module")
def token_server(store: Store) -> Iterator[DashboardServer]:
    """On loopback with a token: every request needs it."""
    srv = DashboardServer(store, port=0, token=TOKEN)
    srv.start()
    yield srv
    srv.close()


# -- raw HTTP/1.1 ---------------------------------------------------------------------------------


@dataclass
class Answer:
    status: int
    headers: dict[str, str]  # lower-case names
    body: bytes


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=WAIT_S)


def _read_to_end(s: socket.socket) -> bytes:
    """Everything the server sends until it closes (a reset after its answer counts as a
    close); a server that holds the connection open past WAIT_S fails the test."""
    out = b""
    while True:
        try:
            chunk = s.recv(65536)
        except ConnectionResetError:
            return out
        except TimeoutError:
            raise AssertionError(
                f"the server held the connection open {WAIT_S:g} s without closing it; "
                f"it had sent {len(out)} bytes: {out[:300]!r}"
            ) from None
        if not chunk:
            return out
        out += chunk


def _answers(data: bytes, heads: int = 0) -> list[Answer]:
    """The answers in ``data``, in order; the first ``heads`` answer HEAD requests (no body)."""
    out: list[Answer] = []
    while data:
        head, sep, rest = data.partition(b"\r\n\r\n")
        assert sep, f"an incomplete answer: {data[:300]!r}"
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if len(out) < heads:
            body, data = b"", rest
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            body = b""
            while True:
                size_line, _, rest = rest.partition(b"\r\n")
                size = int(size_line.split(b";")[0], 16)
                body, rest = body + rest[:size], rest[size + 2 :]
                if size == 0:
                    rest = rest.partition(b"\r\n")[2] if rest.startswith(b"\r\n") else rest
                    break
            data = rest
        elif "content-length" in headers:
            n = int(headers["content-length"])
            body, data = rest[:n], rest[n:]
        else:  # delimited by the connection's end
            body, data = rest, b""
        out.append(Answer(status, headers, body))
    return out


def _exchange(port: int, raw: bytes, heads: int = 0) -> list[Answer]:
    with _connect(port) as s:
        s.sendall(raw)
        return _answers(_read_to_end(s), heads)


def _host(srv: DashboardServer) -> bytes:
    return f"Host: 127.0.0.1:{srv.port}\r\n".encode()


def _auth() -> bytes:
    return f"Authorization: Bearer {TOKEN}\r\n".encode()


def _closing(srv: DashboardServer, extra: bytes = b"") -> bytes:
    """A last, plain request that asks the server to close after its answer."""
    return b"GET /healthz HTTP/1.1\r\n" + _host(srv) + extra + b"Connection: close\r\n\r\n"


def _secured(a: Answer) -> None:
    for name, value in SECURITY.items():
        assert value in a.headers.get(name, ""), (a.status, name, a.headers)
    assert "no-store" in a.headers.get("cache-control", ""), a.headers


SMUGGLED = b"GET /secret HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


# -- bodies are never requests ---------------------------------------------------------------------


def test_a_get_whose_body_holds_a_second_request_gets_one_answer(
    open_server: DashboardServer,
) -> None:
    raw = (
        b"GET /jobs HTTP/1.1\r\n"
        + _host(open_server)
        + f"Content-Length: {len(SMUGGLED)}\r\n\r\n".encode()
        + SMUGGLED
        + _closing(open_server)
    )
    got = _exchange(open_server.port, raw)
    assert [a.status for a in got] == [200, 200], [(a.status, a.body[:80]) for a in got]
    assert b"llama-7b-lora" in got[0].body and got[1].body == b"ok\n"
    assert not any(b"secret" in a.body for a in got)


@pytest.mark.parametrize("with_token", [False, True], ids=["no-token", "token"])
def test_a_delete_whose_body_holds_a_second_request_gets_one_answer(
    token_server: DashboardServer, with_token: bool
) -> None:
    auth = _auth() if with_token else b""
    raw = (
        b"DELETE /jobs/x HTTP/1.1\r\n"
        + _host(token_server)
        + auth
        + f"Content-Length: {len(SMUGGLED)}\r\n\r\n".encode()
        + SMUGGLED
        + _closing(token_server, auth)
    )
    got = _exchange(token_server.port, raw)
    expected = [405, 200] if with_token else [401, 200]
    assert [a.status for a in got] == expected, [(a.status, a.body[:80]) for a in got]
    _secured(got[0])
    if with_token:
        assert got[0].headers["allow"] == "GET, HEAD"


def test_a_post_over_the_body_limit_is_refused_before_its_body(
    open_server: DashboardServer,
) -> None:
    """A body past 1 MiB whose tail is a request: refused (413) on its headers, the
    connection closed; the tail is never answered."""
    body = b"x" * (1 << 20) + SMUGGLED
    head = (
        b"POST / HTTP/1.1\r\n"
        + _host(open_server)
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
    )
    with _connect(open_server.port) as s:
        s.sendall(head)
        s.settimeout(3.0)  # the refusal comes on the headers alone; past this, send the body
        try:
            early = s.recv(65536)
        except TimeoutError:
            early = b""
        s.settimeout(WAIT_S)

        def send_body() -> None:
            with contextlib.suppress(OSError):  # refused and closed: the server reads none of it
                s.sendall(body)

        sender = threading.Thread(target=send_body, daemon=True)
        sender.start()
        data = early + _read_to_end(s)
        sender.join(WAIT_S)
    got = _answers(data)
    assert [a.status for a in got] == [413], [(a.status, a.body[:80]) for a in got]
    _secured(got[0])
    assert got[0].headers.get("connection", "").lower() == "close"


def test_a_chunked_body_over_the_limit_is_refused(open_server: DashboardServer) -> None:
    chunk = b"y" * 65536
    body = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(20)) + b"0\r\n\r\n"
    head = b"POST / HTTP/1.1\r\n" + _host(open_server) + b"Transfer-Encoding: chunked\r\n\r\n"
    with _connect(open_server.port) as s:

        def send_body() -> None:
            with contextlib.suppress(OSError):
                s.sendall(head + body + SMUGGLED)

        sender = threading.Thread(target=send_body, daemon=True)
        sender.start()
        data = _read_to_end(s)
        sender.join(WAIT_S)
    got = _answers(data)
    assert [a.status for a in got] == [413], [(a.status, a.body[:80]) for a in got]
    _secured(got[0])


@pytest.mark.parametrize("length", [b"-1", b"abc", b"1, 2", b"99999999999999999999999"])
@pytest.mark.parametrize("method", [b"GET", b"POST"])
def test_a_bad_content_length_is_a_400_and_the_connection_closes(
    open_server: DashboardServer, method: bytes, length: bytes
) -> None:
    raw = method + b" / HTTP/1.1\r\n" + _host(open_server) + b"Content-Length: " + length
    with _connect(open_server.port) as s:
        s.sendall(raw + b"\r\n\r\nGET /secret HTTP/1.1\r\n\r\n")
        data = _read_to_end(s)  # answered and closed, or the test fails after WAIT_S
    got = _answers(data)
    assert [a.status for a in got] in ([400], [413]), [(a.status, a.body[:80]) for a in got]
    _secured(got[0])


@pytest.mark.parametrize(
    "raw",
    [b"GARBAGE\r\n\r\n", b"GET /\xff HTTP/1.1\r\n\r\n", b"GET / HTTP/1.1\r\nBad Header\r\n\r\n"],
    ids=["request-line", "non-ascii-target", "header"],
)
def test_a_malformed_request_is_a_400_with_the_headers_and_no_log_line(
    open_server: DashboardServer, raw: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    got = _exchange(open_server.port, raw)
    assert [a.status for a in got] == [400], [(a.status, a.body[:80]) for a in got]
    _secured(got[0])
    # the client's fault, answered: nothing for the journal
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text


def test_an_upgrade_header_is_answered_as_a_page_without_a_log_line(
    open_server: DashboardServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    raw = (
        b"GET /healthz HTTP/1.1\r\n" + _host(open_server)
        + b"Upgrade: websocket\r\nConnection: Upgrade, close\r\n\r\n"
    )  # fmt: skip
    got = _exchange(open_server.port, raw)
    assert [(a.status, a.body) for a in got] == [(200, b"ok\n")]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text


def test_head_answers_without_a_body_and_the_next_request_still_parses(
    open_server: DashboardServer,
) -> None:
    raw = b"HEAD /fleet HTTP/1.1\r\n" + _host(open_server) + b"\r\n" + _closing(open_server)
    got = _exchange(open_server.port, raw, heads=1)
    assert [a.status for a in got] == [200, 200]
    assert int(got[0].headers["content-length"]) > 0 and got[0].body == b""
    _secured(got[0])
    assert got[1].body == b"ok\n"


# -- every other method: 401, then 405 --------------------------------------------------------------


@pytest.mark.parametrize(
    "method, target",
    [
        (b"OPTIONS", b"/"),
        (b"OPTIONS", b"*"),
        (b"TRACE", b"/"),
        (b"PROPFIND", b"/jobs"),
        (b"CONNECT", b"127.0.0.1:443"),
        (b"BREW", b"/pot"),
        (b"POST", b"/"),
        (b"PUT", b"/jobs/x"),
        (b"PATCH", b"/jobs/x"),
    ],
)
def test_every_other_method_is_401_then_405_with_the_headers(
    token_server: DashboardServer, method: bytes, target: bytes
) -> None:
    start = method + b" " + target + b" HTTP/1.1\r\n" + _host(token_server)
    close = b"Content-Length: 0\r\nConnection: close\r\n\r\n"
    without = _exchange(token_server.port, start + close)
    assert [a.status for a in without] == [401], [(a.status, a.body[:80]) for a in without]
    assert without[0].headers["www-authenticate"].startswith("Bearer")
    _secured(without[0])
    assert b"llama" not in without[0].body
    with_token = _exchange(token_server.port, start + _auth() + close)
    assert [a.status for a in with_token] == [405], [(a.status, a.body[:80]) for a in with_token]
    assert with_token[0].headers["allow"] == "GET, HEAD"
    _secured(with_token[0])


def test_every_other_method_on_loopback_without_a_token_is_405(
    open_server: DashboardServer,
) -> None:
    for method in (b"OPTIONS", b"TRACE", b"PROPFIND", b"DELETE"):
        raw = method + b" / HTTP/1.1\r\n" + _host(open_server) + b"Connection: close\r\n\r\n"
        got = _exchange(open_server.port, raw)
        assert [a.status for a in got] == [405], (method, [(a.status, a.body[:80]) for a in got])
        _secured(got[0])


# -- resets ---------------------------------------------------------------------------------------


def _reset(s: socket.socket) -> None:
    """Close with RST (SO_LINGER 0), not FIN: a client that goes away abruptly."""
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()


def test_a_client_that_resets_the_connection_leaves_no_traceback(
    open_server: DashboardServer,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.DEBUG)
    pages = [b"/", b"/prices?per_page=1000", b"/jobs?per_page=1000", b"/fleet"]
    for path in pages:  # reset before the answer: the server writes to a reset socket
        s = _connect(open_server.port)
        s.sendall(b"GET " + path + b" HTTP/1.1\r\n" + _host(open_server) + b"\r\n")
        _reset(s)
    for path in pages:  # reset in the middle of the answer
        s = _connect(open_server.port)
        s.sendall(b"GET " + path + b" HTTP/1.1\r\n" + _host(open_server) + b"\r\n")
        assert s.recv(64).startswith(b"HTTP/1.1 200")
        _reset(s)
    for path in pages:  # reset halfway through a body it promised
        s = _connect(open_server.port)
        s.sendall(b"POST " + path + b" HTTP/1.1\r\n" + _host(open_server))
        s.sendall(b"Content-Length: 1000\r\n\r\n" + b"z" * 10)
        _reset(s)
    # the same pages again, to the end: the server is still well, and by the time each is
    # answered the reset one before it was handled
    for path in pages:
        got = _exchange(
            open_server.port,
            b"GET " + path + b" HTTP/1.1\r\n" + _host(open_server) + b"Connection: close\r\n\r\n",
        )
        assert [a.status for a in got] == [200]
    out, err = capfd.readouterr()
    logged = caplog.text + "".join(
        logging.Formatter().formatException(r.exc_info) for r in caplog.records if r.exc_info
    )
    for text in (out, err, logged):
        assert "Traceback" not in text, text[-3000:]
        assert "ConnectionResetError" not in text and "BrokenPipeError" not in text, text[-3000:]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text[-3000:]


# -- redirects stay on this host -----------------------------------------------------------------


OFF_HOST = [
    b"/\\evil.com/",
    b"//evil.com/",
    b"///evil.com/",
    b"/\\/evil.com/",
    b"/%5Cevil.com/",
    b"/%2F%2Fevil.com/",
    b"/%2Fevil.com/",
    b"/%09/evil.com/",
    b"/.//evil.com/",
]


def _stays_here(location: str, port: int) -> bool:
    """Whether a browser reads ``location`` as a place on this host: backslashes count as
    slashes, tabs and newlines are dropped (the URL standard's rules for http)."""
    base = f"http://127.0.0.1:{port}/jobs/x"
    clean = location.replace("\\", "/").replace("\t", "").replace("\n", "").replace("\r", "")
    return urlsplit(urljoin(base, clean)).netloc == f"127.0.0.1:{port}"


@pytest.mark.parametrize("target", OFF_HOST)
def test_no_redirect_points_off_this_host(
    open_server: DashboardServer, token_server: DashboardServer, target: bytes
) -> None:
    cases = [
        (open_server, target, b""),
        (open_server, target + b"?format=json", b""),
        (token_server, target + b"?token=" + TOKEN.encode(), b""),
        (token_server, target + b"?q=a&token=" + TOKEN.encode(), b""),
        (token_server, target, _auth()),
    ]
    for srv, path, extra in cases:
        raw = b"GET " + path + b" HTTP/1.1\r\n" + _host(srv) + extra + b"Connection: close\r\n\r\n"
        got = _exchange(srv.port, raw)
        assert len(got) == 1, (path, [(a.status, a.body[:80]) for a in got])
        location = got[0].headers.get("location")
        assert location is None or _stays_here(location, srv.port), (path, got[0].status, location)
        _secured(got[0])
        if location is not None:  # the token's redirect: the token gone, a cookie set
            assert TOKEN not in location and "HttpOnly" in got[0].headers["set-cookie"]


def test_the_token_redirect_keeps_the_page_and_its_query(token_server: DashboardServer) -> None:
    raw = (
        b"GET /prices?provider=gcp&token=" + TOKEN.encode() + b" HTTP/1.1\r\n"
        + _host(token_server) + b"Connection: close\r\n\r\n"
    )  # fmt: skip
    got = _exchange(token_server.port, raw)
    assert [a.status for a in got] == [303]
    assert got[0].headers["location"] == "/prices?provider=gcp"
    cookie = got[0].headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and TOKEN in cookie
    _secured(got[0])
