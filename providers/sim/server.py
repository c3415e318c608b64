"""The sim cloud's server: a JSON API for the adapter and the instances' metadata endpoints.

``python -m providers.sim serve --state-dir DIR [--port 0] [--detach]`` runs it on 127.0.0.1.
It is its own process, like a real cloud's control plane: it outlives the controllers that
started it, and exits by itself once it has had no API call for ``idle_exit_s`` and no
instance has a live process (an instance whose job ended stays ``running``, as a VM does, but
does not keep the server up; a restarted server still knows it). With no API call for
``abandon_exit_s`` (an hour), or once its owner is gone (``--owner-pid``, from
``$PROVISIONER_SIM_OWNER_PID`` where the starting controller has it: the test suite), it
terminates every instance and exits. ``DIR/serve.lock`` (held while it runs) keeps a second
server off the same state; ``DIR/server.json`` says where it listens (pid, port, url, owner).

API (JSON bodies; errors are ``{"error": {"kind", "code", "message"}}`` with an HTTP status):

| method, path                     | what |
| -------------------------------- | ---- |
| GET  /v1/health                  | pid, live instances, options |
| POST /v1/config                  | set options (SimConfig fields) |
| POST /v1/clock ``{"now"}``       | move the virtual clock (epoch seconds; never back) and run the scheduler then |
| POST /v1/market ``{"zones"}``    | availability, trace price and surge factor per zone now |
| POST /v1/market/surge            | ``{"zone", "factor", "seconds"}``: the zone's spot price times factor a while |
| POST /v1/instances               | launch (idempotent on ``token``) |
| GET  /v1/reservations            | held capacity not ended, with what is free (held.py) |
| POST /v1/reservations            | ``{"reservations": [...]}``: replace the held capacity |
| GET  /v1/instances[?tag:K=V]     | list (a summary of each; tag filters as EC2's) |
| GET  /v1/instances/ID            | get (the full record) |
| POST /v1/terminate ``{"ids"}``   | terminate (unknown or gone ids are fine) |
| POST /v1/instances/ID/preempt    | serve the notice now (``notice_s``, ``outage_s``) |
| GET  /v1/instances/ID/billing    | billed seconds and cost |
| GET  /v1/interruptions?since=T   | notices and preemptions since epoch seconds T |
| POST /v1/inject                  | fail the next calls of an operation (tests) |
| GET  /v1/requests                | launch requests received (tests) |
| POST /v1/shutdown                | stop (``terminate_all``: kill every instance first) |

Metadata: ``/i/<instance-id>/...`` in the instance's cloud format (see metadata.py).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from providers.sim import held
from providers.sim.client import pid_alive
from providers.sim.cloud import SimCloud
from providers.sim.config import SimError
from providers.sim.groups import groups_api
from providers.sim.market import rebalance_real
from providers.sim.metadata import MetadataView

log = logging.getLogger("provisioner.sim.server")

TICK_S = 0.1


#: the owner (``serve --owner-pid``) is looked for this often (seconds)
OWNER_CHECK_S = 1.0


class SimHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    cloud: SimCloud
    stopping: threading.Event
    owner_pid: int | None = None


class Handler(BaseHTTPRequestHandler):
    server: SimHTTPServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def _reply(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, doc: Any) -> None:
        self._reply(status, {"Content-Type": "application/json"}, json.dumps(doc).encode())

    def _dispatch(self, method: str) -> None:
        url = urlsplit(self.path)
        query = dict(parse_qsl(url.query))
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        try:
            if url.path.startswith("/i/"):
                self._metadata(method, url.path, query, body)
            elif url.path.startswith("/v1/"):
                doc = json.loads(body) if body else {}
                status, out = self._api(method, url.path, query, doc)
                try:
                    self._json(status, out)
                finally:  # after the answer is out, or the caller gone (it waited too long)
                    if url.path == "/v1/shutdown" and status == 200:
                        self.server.stopping.set()
            else:
                self._json(
                    404, {"error": {"kind": "not-found", "code": "NotFound", "message": url.path}}
                )
        except SimError as err:
            self._json(err.status, err.as_dict())
        except (ValueError, TypeError, KeyError) as exc:
            self._json(
                400, {"error": {"kind": "invalid", "code": "InvalidParameter", "message": str(exc)}}
            )

    def _metadata(self, method: str, path: str, query: dict[str, str], body: bytes) -> None:
        cloud = self.server.cloud
        _, _, rest = path.partition("/i/")
        iid, _, sub = rest.partition("/")
        with cloud.lock:
            inst = cloud.instances.get(iid)
            if inst is None or inst["state"] != "running":
                self._reply(404, {"Content-Type": "text/plain"}, b"Not Found")
                return
            view = MetadataView(
                inst["id"],
                inst["zone"],
                inst["market"],
                inst["cloud"],
                inst["deadline_real"],
                inst["event_id"],
                rebalance_real(cloud, inst),
            )
        status, headers, out = cloud.metadata_service.handle(
            view, method, "/" + sub, query, dict(self.headers.items()), body
        )
        self._reply(status, headers, out)

    def _api(
        self, method: str, path: str, query: dict[str, str], doc: dict[str, Any]
    ) -> tuple[int, Any]:
        cloud = self.server.cloud
        parts = path.strip("/").split("/")[1:]  # after "v1"
        route = (method, *parts)
        if route == ("GET", "health"):
            return 200, {
                "ok": True,
                "pid": os.getpid(),
                "alive": cloud.alive(),
                "config": cloud.config.to_dict(),
            }
        if route == ("POST", "config"):
            return 200, cloud.configure(doc)
        if route == ("POST", "clock"):
            return 200, cloud.set_clock(float(doc["now"]))
        if route == ("POST", "market"):
            return 200, cloud.market_view([str(z) for z in doc.get("zones") or []])
        if route == ("POST", "market", "surge"):
            with cloud.lock:
                until = cloud.now() + float(doc["seconds"])
                cloud.surges.set(str(doc["zone"]), float(doc["factor"]), until)
            return 200, {"ok": True}
        if route == ("POST", "instances"):
            return 200, cloud.launch(doc)
        if route == ("GET", "reservations"):
            return 200, {"reservations": held.reservations(cloud)}
        if route == ("POST", "reservations"):
            return 200, {"reservations": held.hold(cloud, list(doc.get("reservations") or []))}
        if route == ("GET", "instances"):
            tags = {k[4:]: v for k, v in query.items() if k.startswith("tag:")}
            return 200, {"instances": cloud.list_all(tags)}
        if method == "GET" and len(parts) == 2 and parts[0] == "instances":
            return 200, cloud.get(parts[1])
        if (
            method == "GET"
            and len(parts) == 3
            and parts[0] == "instances"
            and parts[2] == "billing"
        ):
            return 200, cloud.billing(parts[1])
        if (
            method == "POST"
            and len(parts) == 3
            and parts[0] == "instances"
            and parts[2] == "preempt"
        ):
            notice = doc.get("notice_s")
            return 200, cloud.preempt(
                parts[1],
                None if notice is None else float(notice),
                float(doc.get("outage_s") or 0.0),
            )
        if route == ("POST", "terminate"):
            return 200, {"terminated": cloud.terminate([str(i) for i in doc.get("ids") or []])}
        if route == ("GET", "interruptions"):
            return 200, {"interruptions": cloud.interruptions(float(query.get("since") or 0.0))}
        if route == ("POST", "placement-groups"):
            return 200, groups_api(cloud, "ensure", doc)
        if route == ("GET", "placement-groups"):
            tags = {k[4:]: v for k, v in query.items() if k.startswith("tag:")}
            return 200, groups_api(cloud, "list", {"tags": tags})
        if method == "DELETE" and len(parts) == 2 and parts[0] == "placement-groups":
            return 200, groups_api(cloud, "delete", {"id": parts[1]})
        if route == ("POST", "inject"):
            cloud.inject(doc)
            return 200, {"ok": True}
        if route == ("GET", "requests"):
            with cloud.lock:
                return 200, {"launch": list(cloud.requests)}
        if route == ("POST", "shutdown"):
            cloud.shutdown(bool(doc.get("terminate_all")))
            return 200, {"ok": True}
        raise SimError(404, "not-found", "NotFound", f"{method} {path}")


def _scheduler(server: SimHTTPServer) -> None:
    cloud = server.cloud
    next_owner_check = 0.0
    while not server.stopping.is_set():
        try:
            cloud.tick()
        except Exception:  # the scheduler must not die
            log.exception("scheduler tick failed")
        idle = time.time() - cloud.last_activity
        abandon = cloud.config.abandon_exit_s
        if idle > cloud.config.idle_exit_s and cloud.busy() == 0:
            log.info("idle for %.0fs with no instance doing anything: exiting", idle)
            server.stopping.set()
        elif abandon is not None and idle > abandon:
            log.warning("no call for %.0fs: terminating every instance and exiting", idle)
            _end_all(server)
        elif server.owner_pid and time.monotonic() >= next_owner_check:
            next_owner_check = time.monotonic() + OWNER_CHECK_S
            if not pid_alive(server.owner_pid):
                log.info(
                    "owner %d is gone: terminating every instance and exiting", server.owner_pid
                )
                _end_all(server)
        server.stopping.wait(TICK_S)
    server.shutdown()


def _end_all(server: SimHTTPServer) -> None:
    try:
        server.cloud.shutdown(True)
    except Exception:
        log.exception("cannot terminate every instance")
    server.stopping.set()


def _bind(state_dir: Path, host: str, port: int) -> SimHTTPServer:
    """Listen on ``port``; with 0, on the port the last server of this state used if it is free
    (running agents hold metadata URLs with that port), else on any free port."""
    last = state_dir / "port"
    if port == 0:
        with contextlib.suppress(OSError, ValueError):
            wanted = int(last.read_text())
            try:
                server = SimHTTPServer((host, wanted), Handler)
            except OSError:
                log.warning("port %d is taken: running agents lose their metadata URL", wanted)
            else:
                return server
    server = SimHTTPServer((host, port), Handler)
    last.write_text(str(server.server_address[1]))
    return server


def serve(
    state_dir: Path, *, host: str = "127.0.0.1", port: int = 0, owner_pid: int | None = None
) -> int:
    """Run the server until it is told to stop, goes idle, or (``owner_pid``) that process is
    gone; 0 also when one already runs."""
    state_dir.mkdir(parents=True, exist_ok=True)
    lock_fh = open(state_dir / "serve.lock", "a+")  # noqa: SIM115 - held for our lifetime
    try:
        fcntl.flock(lock_fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        log.info("a sim server already serves %s", state_dir)
        return 0
    server = _bind(state_dir, host, port)
    server.stopping = threading.Event()
    server.owner_pid = owner_pid
    real_host, real_port = str(server.server_address[0]), int(server.server_address[1])
    url = f"http://{real_host}:{real_port}"
    server.cloud = SimCloud(state_dir, url)
    info = {
        "pid": os.getpid(),
        "host": real_host,
        "port": real_port,
        "url": url,
        "started_at": time.time(),
        "owner_pid": owner_pid,
    }
    tmp = state_dir / ".server.json.tmp"
    tmp.write_text(json.dumps(info))
    os.replace(tmp, state_dir / "server.json")
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: server.stopping.set())
    log.info("sim cloud serving %s on %s", state_dir, url)
    threading.Thread(target=_scheduler, args=(server,), name="scheduler", daemon=True).start()
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
        with contextlib.suppress(OSError, ValueError):
            current = json.loads((state_dir / "server.json").read_text())
            if current.get("pid") == os.getpid():
                (state_dir / "server.json").unlink()
        lock_fh.close()
    return 0


def detach(log_path: Path) -> bool:
    """Double-fork into the background; True in the daemon, False in the caller (which returns)."""
    if os.fork() > 0:
        return False
    os.setsid()
    if os.fork() > 0:
        os._exit(0)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    out = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.chdir(log_path.parent)
    sys.stdout = os.fdopen(1, "w", buffering=1)
    sys.stderr = os.fdopen(2, "w", buffering=1)
    return True
