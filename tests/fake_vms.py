"""VMs for the end-to-end tests on a cloud's fake (moto for EC2, the Azure HTTP fake).

Those fakes keep instance records but run nothing. :class:`Hypervisor` boots each instance the
fake holds the way a real VM would: it reads the instance's user data (our bootstrap script),
takes the job spec out of it and starts the real node agent with it, pointed at
:class:`MetadataServer`, an instance metadata endpoint in the cloud's own format (the sim's
metadata service) where a test serves an interruption notice. An instance the fake no longer
shows as running is powered off (its agent killed, as the VM going takes it).
:class:`Evictions` is Azure's side of a Spot VM's ``Preempt`` event: the VM goes when its
agent approves the event, or at ``NotBefore`` if it never does.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from providers.bootstrap import spec_from_script
from providers.sim.metadata import MetadataService, MetadataView
from provisioner.agent.spec import AgentSpec
from tests.e2e_util import REPO


class MetadataServer:
    """Every fake VM's metadata endpoint at ``/i/<instance id>/...``, in ``cloud``'s format;
    ``deadlines`` (instance id -> epoch seconds) serves a notice, ``approve`` is called when
    the agent approves an event (Azure's Scheduled Events)."""

    def __init__(self, cloud: str, approve: Callable[[str], Any] | None = None) -> None:
        self.deadlines: dict[str, float] = {}
        self.zones: dict[str, str] = {}
        self.approve: Callable[[str], Any] = approve or (lambda _id: None)
        self.service = MetadataService(lambda iid: self.approve(iid))
        meta = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_: Any) -> None:
                pass

            def _do(self) -> None:
                url = urlsplit(self.path)
                _, _, rest = url.path.partition("/i/")
                iid, _, sub = rest.partition("/")
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                view = MetadataView(
                    iid,
                    meta.zones.get(iid, ""),
                    "spot",
                    cloud,
                    meta.deadlines.get(iid),
                    "ev-" + iid,
                )
                query, headers = dict(parse_qsl(url.query)), dict(self.headers.items())
                status, out_headers, out = meta.service.handle(
                    view, self.command, "/" + sub, query, headers, body
                )
                self.send_response(status)
                for k, v in out_headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            do_GET = do_PUT = do_POST = _do

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


class Hypervisor:
    """Boots what the fake runs. ``running()``: the fake's running instances (id -> zone);
    ``script(id)``: an instance's user data, decoded (the bootstrap script)."""

    def __init__(
        self,
        running: Callable[[], dict[str, str]],
        script: Callable[[str], str],
        meta: MetadataServer,
        root: Path,
    ) -> None:
        self.running, self.script, self.meta, self.root = running, script, meta, root
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.specs: dict[str, dict[str, Any]] = {}  # each instance's spec, from its user data
        self.booted: dict[str, float] = {}  # instance -> when its agent started (epoch s)
        self.gone: dict[str, float] = {}  # instance -> when it was powered off (epoch s)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def boot(self, iid: str, zone: str) -> None:
        script = self.script(iid)
        assert script.startswith("#!"), "the user data is the bootstrap script"
        spec_doc = spec_from_script(script)
        self.specs[iid] = spec_doc
        work = self.root / iid
        work.mkdir(parents=True)
        spec = dataclasses.replace(
            AgentSpec.from_dict(spec_doc),
            metadata_url=f"{self.meta.url}/i/{iid}",
            workdir=str(work),
            instance_id=iid,
        )
        spec.save(work / "spec.json")
        self.meta.zones[iid] = zone
        self.booted[iid] = time.time()
        log = open(work / "agent.log", "wb")  # noqa: SIM115 - the child keeps it
        self.procs[iid] = subprocess.Popen(
            [sys.executable, "-m", "provisioner.agent", "--spec", str(work / "spec.json")],
            cwd=work,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(os.environ, PYTHONPATH=str(REPO)),
            start_new_session=True,
        )
        log.close()

    def power_off(self, iid: str) -> None:
        proc = self.procs.get(iid)
        if proc and proc.poll() is None:
            self.gone.setdefault(iid, time.time())
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def run(self) -> None:
        while not self.stop.wait(0.3):
            try:
                live = self.running()
            except Exception:
                continue
            for iid, zone in live.items():
                if iid not in self.procs:
                    self.boot(iid, zone)
            for iid in list(self.procs):
                if iid not in live:
                    self.power_off(iid)  # gone from the fake: the VM is gone

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)
        for iid in list(self.procs):
            self.power_off(iid)


class Evictions:
    """Azure's side of a Spot VM's ``Preempt`` scheduled event, as Microsoft's Scheduled Events
    page has it: the event starts (the VM is evicted) when the VM approves it (a ``POST`` of
    ``StartRequests``; :meth:`approve` is the :class:`MetadataServer`'s ``approve``) or when
    its ``NotBefore`` passes, whichever comes first. ``evict(id)`` takes the VM away (the
    fake's eviction and the VM's power); ``started``: id -> when and why its event started.
    It takes the approvals ``meta``'s VMs send."""

    def __init__(self, meta: MetadataServer, evict: Callable[[str], Any]) -> None:
        self.meta, self.evict = meta, evict
        self.started: dict[str, tuple[float, str]] = {}
        self._lock = threading.Lock()
        meta.approve = self.approve

    def serve(self, iid: str, not_before: float) -> None:
        """Serve a ``Preempt`` event to ``iid`` with ``NotBefore`` at ``not_before`` (epoch s)."""
        self.meta.deadlines[iid] = not_before
        timer = threading.Timer(max(0.0, not_before - time.time()), self._start, (iid, "NotBefore"))
        timer.daemon = True
        timer.start()

    def approve(self, iid: str) -> None:
        """The VM approved its event: Azure starts it now (the metadata answer goes first)."""
        threading.Thread(target=self._start, args=(iid, "approved"), daemon=True).start()

    def _start(self, iid: str, why: str) -> None:
        with self._lock:
            if iid in self.started:
                return
            self.started[iid] = (time.time(), why)
        self.evict(iid)
