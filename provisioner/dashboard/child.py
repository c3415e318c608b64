"""The daemon's dashboard in a child process it supervises (issue 43).

Served in a thread of the daemon, the page shared the reconciler's interpreter lock: twenty
clients on it delayed a preemption's replacement from about a second to 10-20 s. So the
daemon serves it from a child process by default:

- the daemon binds the port itself (a taken port is logged naming it, and the daemon runs on)
  and hands the listening socket to the child, so the address never changes, not across a
  restart of the child, and a connection made while the child restarts waits in the
  socket's backlog instead of being refused;
- the child is ``python -m provisioner.dashboard.child`` with no secret on its command line
  (``ps`` shows it): the store's URL and the token come in its environment, which is built
  from an allow-list (:data:`PASSED`: the locale, paths, the store's PostgreSQL settings),
  never the daemon's whole environment with its cloud credentials; the child drops both from
  its environment once read;
- the child runs at a lower priority (niceness +10): the page shares the CPUs with the
  passes, and they come first;
- a child that exits is started again after 1 s, doubling to a minute while it keeps dying
  (back to 1 s once one has lived a minute); its failure never stops the daemon;
- the daemon's exit (SIGTERM, or any end, ``kill -9`` included) ends the child: it is sent
  SIGTERM on a clean stop, and it watches its stdin, a pipe from the daemon, whose end
  means the daemon is gone.

``dashboard.in_process: true`` serves the page in a thread of the daemon instead (the old
way: no second process, but the page's load slows the passes).
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from typing import Any

from provisioner.dashboard.access import DashboardError, check_token, load_token

log = logging.getLogger("provisioner.control.daemon")

#: the child's environment: these names and prefixes of the daemon's, nothing else
PASSED = frozenset(
    {
        "PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "PYTHONPATH",
        "VIRTUAL_ENV", "SSL_CERT_FILE", "SSL_CERT_DIR", "XDG_STATE_HOME", "XDG_CONFIG_HOME",
        "XDG_CACHE_HOME", "XDG_DATA_HOME", "PROVISIONER_LOG_FORMAT", "PROVISIONER_LOG_LIBRARIES",
    }
)  # fmt: skip
#: ``LC_*`` (the locale) and ``PG*`` (libpq's settings for a PostgreSQL store: host, password
#: file, TLS, service)
PASSED_PREFIXES = ("LC_", "PG")
STORE_ENV = "PROVISIONER_DASHBOARD_STORE"
TOKEN_ENV = "PROVISIONER_DASHBOARD_TOKEN"
FIRST_RETRY_S = 1.0
MAX_RETRY_S = 60.0
#: a child that lived this long starts its next restart's wait from FIRST_RETRY_S again
HEALTHY_S = 60.0
#: the child's niceness above the daemon's: on a busy machine the passes get the CPU first
#: (the page waits a little; a replacement after a notice does not)
NICE = 10


def child_env(
    store_url: str, token: str | None, environ: dict[str, str] | None = None
) -> dict[str, str]:
    """The child's environment: the allow-listed part of ``environ`` (default: this
    process's), the store's URL and the token."""
    source = os.environ if environ is None else environ
    env = {k: v for k, v in source.items() if k in PASSED or k.startswith(PASSED_PREFIXES)}
    env[STORE_ENV] = store_url
    if token:
        env[TOKEN_ENV] = token
    return env


class DashboardProcess:
    """The dashboard served by a supervised child on a socket this process listens on."""

    def __init__(
        self,
        store_url: str,
        *,
        address: str,
        port: int,
        token: str | None,
        page_size: int,
        source: str,
        first_retry_s: float = FIRST_RETRY_S,
        max_retry_s: float = MAX_RETRY_S,
    ) -> None:
        from provisioner.dashboard.server import listen

        check_token(address, token)
        self.address = address
        self.sock = listen(address, port)
        self.port = int(self.sock.getsockname()[1])
        self.args = [
            sys.executable, "-m", "provisioner.dashboard.child",
            "--fd", str(self.sock.fileno()), "--address", address,
            "--page-size", str(page_size), "--source", source,
        ]  # fmt: skip
        self.env = child_env(store_url, token)
        self.first_retry_s, self.max_retry_s = first_retry_s, max_retry_s
        self.proc: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def start(self) -> DashboardProcess:
        self.proc = self._spawn()
        self._thread = threading.Thread(
            target=self._supervise, name="dashboard-supervisor", daemon=True
        )
        self._thread.start()
        return self

    def _spawn(self) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            self.args,
            env=self.env,
            stdin=subprocess.PIPE,  # its end tells the child that this process is gone
            pass_fds=(self.sock.fileno(),),
            # its own process group: a terminal's Ctrl-C reaches the daemon, which stops it
            start_new_session=True,
        )

    def _supervise(self) -> None:
        wait = self.first_retry_s
        while True:
            proc, started = self.proc, time.monotonic()
            code = proc.wait() if proc is not None else None
            if self._stop.is_set():
                return
            if proc is not None and proc.stdin is not None:
                proc.stdin.close()
            lived = time.monotonic() - started
            if lived >= HEALTHY_S:
                wait = self.first_retry_s
            if proc is not None:
                log.warning(
                    "dashboard process %d ended (exit status %s) after %.0f s; starting it "
                    "again in %.0f s (%s answers once it runs)",
                    proc.pid, code, lived, wait, self.url,
                )  # fmt: skip
            if self._stop.wait(wait):
                return
            wait = min(wait * 2, self.max_retry_s)
            with self._lock:
                if self._stop.is_set():
                    return
                try:
                    self.proc = self._spawn()
                    self.restarts += 1
                except OSError as exc:  # could not even start: wait longer and try again
                    log.error("dashboard process could not start: %s", exc)
                    self.proc = None

    @property
    def url(self) -> str:
        from provisioner.dashboard.server import url_of

        return url_of(self.address, self.port)

    def close(self) -> None:
        """Stop the child (SIGTERM, then SIGKILL after 5 s) and stop listening."""
        self._stop.set()
        with self._lock:
            proc = self.proc
        if proc is not None and proc.stdin is not None:
            proc.stdin.close()
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.sock.close()


def start_beside_daemon(store: Any, config: Any, port: int, source: str) -> Any:
    """The daemon's dashboard (``DashboardStarter``, passed to the daemon by the CLI): a
    supervised child process (:class:`DashboardProcess`), or with ``in_process`` a thread of
    the daemon; None, logged, when it cannot start (port taken, a non-loopback address without
    a token): the jobs come first."""
    try:
        token = load_token(config.token_env, config.token_file)
        if getattr(config, "in_process", False):
            from provisioner.dashboard.server import DashboardServer

            server = DashboardServer(
                store,
                address=config.address,
                port=port,
                token=token,
                page_size=config.page_size,
                source=source,
            )
            server.start()
            return server
        return DashboardProcess(
            store.url,
            address=config.address,
            port=port,
            token=token,
            page_size=config.page_size,
            source=source,
        ).start()
    except DashboardError as exc:
        log.error("dashboard not served: %s", exc)
        return None


# -- the child ------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """The child: serve the dashboard on the inherited socket until SIGTERM or the parent's
    end."""
    ap = argparse.ArgumentParser(prog="python -m provisioner.dashboard.child")
    ap.add_argument("--fd", type=int, required=True, help="the listening socket, inherited")
    ap.add_argument("--address", required=True)
    ap.add_argument("--page-size", type=int, default=100)
    ap.add_argument("--source", default="")
    args = ap.parse_args(argv)
    os.nice(NICE)
    from provisioner.logs import setup_logging

    setup_logging(1, json_lines=True)
    store_url = os.environ.pop(STORE_ENV, "")
    token = os.environ.pop(TOKEN_ENV, "") or None
    if not store_url:
        log.error("dashboard process: no store (%s is not set)", STORE_ENV)
        return 2
    from provisioner.control.store import Store
    from provisioner.dashboard.server import DashboardServer

    server = DashboardServer(
        Store(store_url),
        address=args.address,
        port=0,
        token=token,
        page_size=args.page_size,
        source=args.source,
    )
    server.adopt(socket.socket(fileno=args.fd))

    def parent_gone() -> None:
        try:
            while sys.stdin.buffer.read(4096):
                pass
        except (OSError, ValueError):
            pass
        log.info("dashboard process: the daemon stopped it or is gone; stopping")
        server.stop()

    threading.Thread(target=parent_gone, name="parent-watch", daemon=True).start()
    try:
        server.serve_forever()
    except KeyboardInterrupt:  # SIGINT sent to it alone: stopped, as asked
        return 130
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
