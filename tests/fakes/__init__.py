"""Local stand-ins for the clouds' APIs: real HTTP servers on 127.0.0.1 that speak each cloud's
wire format to its real SDK, keep state, record every request and inject errors on demand.

:class:`LocalHTTPServer` is the lifecycle they share: a threading HTTP server on a port the OS
picks, serving in a daemon thread, started by ``start()`` or a ``with`` block and stopped by
``stop()`` (``close()``) or the block's end. What each fake answers is its own."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar, Self


class LocalHTTPServer:
    """A fake cloud's HTTP server on 127.0.0.1.

    A subclass either implements ``_handle(request)`` and names the verbs it answers in
    ``verbs`` (each ``do_<VERB>`` of the handler calls it), or overrides ``_handler()`` to
    serve with a handler class of its own."""

    verbs: ClassVar[tuple[str, ...]] = ("GET", "POST")
    _httpd: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None

    def _handle(self, request: BaseHTTPRequestHandler) -> None:
        raise NotImplementedError(f"{type(self).__name__} answers no request")

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        def answer(request: BaseHTTPRequestHandler) -> None:
            server._handle(request)

        def quiet(request: BaseHTTPRequestHandler, format: str, *args: Any) -> None:
            pass

        members: dict[str, Any] = {
            "protocol_version": "HTTP/1.1",
            # headers and body leave at once (no 40 ms delayed ACK between the two writes)
            "disable_nagle_algorithm": True,
            "log_message": quiet,
        }
        members.update({f"do_{verb}": answer for verb in self.verbs})
        return type("Handler", (BaseHTTPRequestHandler,), members)

    def start(self) -> Self:
        """Serve (once: a started server stays as it is)."""
        if self._httpd is None:
            httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
            httpd.daemon_threads = True
            self._thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
            self._thread.start()
            self._httpd = httpd
        return self

    def stop(self) -> None:
        """Stop serving and free the port (a second call does nothing)."""
        httpd, self._httpd = self._httpd, None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
            if self._thread is not None:
                self._thread.join(timeout=5)

    def close(self) -> None:
        self.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._httpd is not None, "server not started"
        return int(self._httpd.server_address[1])
