"""Helpers for the daemon tests: real ``provisioner daemon`` subprocesses, short jobs, a watch
on the cloud that records every job's live instances, and a fault-injecting HTTP proxy.

Nothing here stands in for our own code: the daemons are the real CLI in subprocesses, the
clouds are the sim server and moto's server; the proxy only passes requests on (or answers
with the cloud's own error document at a set rate) and counts them.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from provisioner.control.store import Store
from provisioner.core.models import TAG_ATTEMPT, TAG_JOB, Instance
from tests.waiting import until

REPO = Path(__file__).resolve().parents[1]


# -- daemons -----------------------------------------------------------------------------------


def write_config(path: Path, store_url: str, **overrides: Any) -> Path:
    """A daemon configuration for tests: fast passes, a short lease, no metrics port."""
    doc: dict[str, Any] = {
        "store": store_url,
        "reconcile_interval": "0.5s",
        "interruption_poll_interval": "1s",
        "lease": "2s",
        "progress_interval": "1s",
        "decide_interval": "30s",
        "metrics": {"enabled": False},
        "dashboard": {"enabled": False},
    }
    doc.update(overrides)
    path.write_text(json.dumps(doc))  # JSON is YAML
    return path


class DaemonProc:
    """One ``provisioner daemon`` subprocess; its JSON log goes to a file."""

    def __init__(self, config: Path, log: Path, env: dict[str, str] | None = None) -> None:
        self.config, self.log = config, log
        full = dict(os.environ)
        full.pop("NOTIFY_SOCKET", None)
        full.pop("PROVISIONER_CRASH_AT", None)
        full["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), full.get("PYTHONPATH")) if p)
        full.update(env or {})
        self.env = full
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> DaemonProc:
        out = open(self.log, "ab")  # noqa: SIM115 - the child keeps it
        # with crash points asked for, through the test entry that installs them
        entry = "tests.crash_daemon" if "PROVISIONER_CRASH_AT" in self.env else "provisioner"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", entry, "daemon", "--config", str(self.config)],
            env=self.env,
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        out.close()
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def owner_suffix(self) -> str:
        return f":{self.pid}"

    def ready(self, store: Store, timeout: float = 60) -> bool:
        """Wait until this daemon has recorded its heartbeat (it is up and reconciling)."""
        from datetime import UTC, datetime

        from provisioner.control.store import live_replicas

        suffix = self.owner_suffix
        up = wait_for(
            lambda: (
                self.alive()
                and any(o.endswith(suffix) for o in live_replicas(store, datetime.now(UTC)))
            ),
            timeout,
        )
        if not up:  # what it said, in the failing test's captured output
            tail = self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""
            status = "running" if self.alive() else f"exited {self.proc and self.proc.poll()}"
            print(f"daemon {self.pid} not ready after {timeout:g}s ({status}); its log:\n{tail}")
        return up

    def wait_once_up(self, store: Store, timeout: float, up_within: float = 60) -> int | None:
        """Like :meth:`wait`, with ``timeout`` counted from when the daemon is up (its
        heartbeat recorded) or has exited: a crash test's window for reaching a failpoint
        does not shrink on a loaded machine, where starting the daemon takes seconds."""
        from datetime import UTC, datetime

        from provisioner.control.store import live_replicas

        suffix = self.owner_suffix
        wait_for(
            lambda: (
                not self.alive()
                or any(o.endswith(suffix) for o in live_replicas(store, datetime.now(UTC)))
            ),
            up_within,
        )
        return self.wait(timeout)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> int:
        """SIGKILL (if still running); the exit status."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        return self.proc.wait(timeout=30)

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM and wait: the daemon finishes its pass and exits 0."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise

    def wait(self, timeout: float) -> int | None:
        """The exit status, or None if it is still running after ``timeout`` seconds."""
        assert self.proc is not None
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None


# -- the sim ---------------------------------------------------------------------------------


def sim_options(state_dir: Path, **overrides: Any) -> dict[str, Any]:
    """A sim provider's options for the daemon tests: AWS's rules, real time, no random
    preemptions (the test serves its own), a server that outlives a slow test."""
    return {
        "state_dir": str(state_dir),
        "mimic": "aws",
        "seconds_per_hour": 3600,
        "mtbp_hours": None,
        "idle_exit_s": 300,
        "terminate_grace_s": 1.0,
        **overrides,
    }


# -- jobs ------------------------------------------------------------------------------------


def write_policy(
    path: Path,
    *,
    ckpt: Path,
    steps: int,
    step_seconds: float = 0.05,
    checkpoint_every: int = 25,
    extra: str = "",
    market: str = "spot",
    cooldown: str = "3s",
) -> Path:
    """A short run of the example job under a permissive policy (any cloud, spot)."""
    path.write_text(f"""
name: chaos
job:
  command: ["{sys.executable}", "-m", "examples.train", "--steps", "{steps}",
            "--step-seconds", "{step_seconds}", "--checkpoint-every", "{checkpoint_every}"]
  compute_hours: 1
  reference_gpu: A10G
resources:
  gpu_count: 1
market: {market}
bid_cap:
  max_spot_price_per_gpu_hour: 3.0
budget:
  max_price_per_hour: 10
checkpoint:
  uri: file://{ckpt}
  shared: true  # the fake clouds' "VMs" run on this machine
  interval: 30m
  grace: 10s
restart:
  max_restarts: 100
  zone_cooldown: {cooldown}
{extra}
""")
    return path


def submit(
    store: Store,
    policy: Path,
    n: int,
    provider: str,
    options: dict[str, Any],
    *,
    check: bool = True,
) -> list[str]:
    """``n`` jobs recorded as ``up`` records them (``check=False``: without the checks ``up``
    makes first, for a job recorded by an install that had what this one lacks)."""
    from provisioner.api import submit as submit_job

    return [
        submit_job(
            policy,
            provider=provider,
            provider_defaults=False,
            provider_options=options,
            store=store,
            check=check,
        )[1]
        for _ in range(n)
    ]


def wait_for(what: Callable[[], Any], timeout: float, every: float = 0.2) -> bool:
    """Whether ``what()`` came true within ``timeout`` s (callers assert it with a story)."""
    return until(what, timeout, every)


# -- watching the cloud --------------------------------------------------------------------------


class Watch(threading.Thread):
    """Lists the cloud's managed instances every ``every`` seconds and keeps what it saw:
    each job's live instances at every look, and every instance ever seen with its tags."""

    def __init__(
        self,
        list_instances: Callable[[], Iterable[Instance]],
        every: float = 0.2,
        allowed: int = 1,
    ):
        super().__init__(daemon=True)
        self.list_instances, self.every = list_instances, every
        self.allowed = allowed  # live instances a job may have at once (2: overlap on notice)
        self.looks = 0
        self.errors = 0
        self.violations: list[tuple[float, str, list[str]]] = []  # (time, job, live ids)
        self.instances: dict[str, Instance] = {}
        self.most_live: Counter[str] = Counter()
        self._halt = threading.Event()

    def look(self) -> list[Instance]:
        found = list(self.list_instances())
        live: dict[str, list[str]] = defaultdict(list)
        for inst in found:
            self.instances[inst.id] = inst
            if inst.state.alive and inst.job_id:
                live[inst.job_id].append(inst.id)
        for job, ids in live.items():
            self.most_live[job] = max(self.most_live[job], len(ids))
            if len(ids) > self.allowed:
                self.violations.append((time.time(), job, sorted(ids)))
        self.looks += 1
        return found

    def run(self) -> None:
        while not self._halt.wait(self.every):
            try:
                self.look()
            except Exception:
                self.errors += 1

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=10)

    def tokens(self) -> Counter[tuple[str, str]]:
        """How many instances carried each (job, attempt) tag pair."""
        return Counter(
            (i.tags.get(TAG_JOB, ""), i.tags.get(TAG_ATTEMPT, ""))
            for i in self.instances.values()
            if i.tags.get(TAG_JOB)
        )


def check_books(store: Store, instances: Iterable[Instance], job_ids: Iterable[str]) -> None:
    """Every instance the cloud ever had for these jobs is an attempt the store knows, and no
    (job, attempt) pair ever had two instances."""
    mine = set(job_ids)
    seen = [i for i in instances if i.job_id in mine]
    pairs = Counter((i.job_id, i.attempt) for i in seen)
    dupes = {k: n for k, n in pairs.items() if n > 1}
    assert not dupes, f"an attempt launched twice: {dupes}"
    for inst in seen:
        assert inst.job_id is not None
        atts = {a.attempt: a for a in store.attempts(inst.job_id)}
        a = atts.get(inst.attempt or -1)
        assert a is not None, f"instance {inst.id} has no attempt row ({inst.tags})"
        assert a.instance_id == inst.id, (
            f"attempt {inst.job_id}#{inst.attempt} records {a.instance_id}, the cloud {inst.id}"
        )


# -- a fault-injecting proxy -------------------------------------------------------------------

Classifier = Callable[[str, str, bytes], str]  # (method, path, body) -> operation
ErrorDoc = Callable[[str, str], tuple[int, dict[str, str], bytes]]  # (operation, kind)


class FaultProxy:
    """An HTTP proxy in front of a cloud API that answers a set share of the requests of the
    given operations with an error in that cloud's own format, and counts every request.

    ``faults``: ``{operation: [kinds]}``; a faulted request gets one of the kinds at random.
    ``rate``: the share of requests faulted, one figure or ``{operation: share}``. Each
    operation draws from its own generator seeded by ``(seed, operation)``, so the n-th
    request of an operation meets the same fault in every run, whatever the order in which
    a daemon's threads send their requests."""

    def __init__(
        self,
        upstream: str,
        classify: Classifier,
        error_doc: ErrorDoc,
        *,
        rate: float | dict[str, float],
        faults: dict[str, list[str]],
        seed: int = 0,
    ) -> None:
        self.upstream = upstream.rstrip("/")
        self.classify, self.error_doc = classify, error_doc
        self.rate, self.faults, self.seed = rate, faults, seed
        self.rngs: dict[str, random.Random] = {}
        self.lock = threading.Lock()
        self.requests: Counter[str] = Counter()
        self.injected: Counter[tuple[str, str]] = Counter()
        self.enabled = True
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_: Any) -> None:
                pass

            def _do(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                status, headers, out = proxy.handle(
                    self.command, self.path, dict(self.headers.items()), body
                )
                self.send_response(status)
                for k, v in headers.items():
                    if k.lower() not in ("content-length", "transfer-encoding", "connection"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            do_GET = do_POST = do_PUT = do_DELETE = _do

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def handle(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, dict[str, str], bytes]:
        op = self.classify(method, path, body)
        with self.lock:
            self.requests[op] += 1
            kinds = self.faults.get(op) if self.enabled else None
            rng = self.rngs.setdefault(op, random.Random(f"{self.seed}:{op}"))
            rate = self.rate if isinstance(self.rate, float) else self.rate.get(op, 0.0)
            kind = rng.choice(kinds) if kinds and rng.random() < rate else None
            if kind:
                self.injected[(op, kind)] += 1
        if kind:
            return self.error_doc(op, kind)
        fwd = {
            k: v
            for k, v in headers.items()
            if k.lower() not in ("host", "content-length", "connection", "accept-encoding")
        }
        req = urllib.request.Request(
            self.upstream + path, data=body if body else None, method=method, headers=fwd
        )
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(req, timeout=60) as resp:
                return resp.status, dict(resp.headers.items()), resp.read()
        except urllib.error.HTTPError as err:
            return err.code, dict(err.headers.items()), err.read()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def sim_operation(method: str, path: str, _body: bytes) -> str:
    p = urlsplit(path).path.rstrip("/")
    if p == "/v1/instances":
        return "launch" if method == "POST" else "list"
    if p.startswith("/v1/instances/") and method == "GET" and p.count("/") == 3:
        return "get"
    if p == "/v1/terminate":
        return "terminate"
    if p == "/v1/interruptions":
        return "interruptions"
    return p.removeprefix("/v1/") or "other"


SIM_ERRORS = {  # kind -> (HTTP status, ErrorKind value, code)
    "throttled": (429, "throttled", "RequestLimitExceeded"),
    "5xx": (503, "transient", "ServiceUnavailable"),
    "capacity": (409, "capacity", "InsufficientInstanceCapacity"),
    "quota": (409, "quota", "VcpuLimitExceeded"),
}


def sim_error(_op: str, kind: str) -> tuple[int, dict[str, str], bytes]:
    status, error_kind, code = SIM_ERRORS[kind]
    doc = {"error": {"kind": error_kind, "code": code, "message": f"injected {kind}"}}
    return status, {"Content-Type": "application/json"}, json.dumps(doc).encode()


def ec2_operation(_method: str, _path: str, body: bytes) -> str:
    return dict(parse_qsl(body.decode() if body else "")).get("Action", "other")


EC2_ERRORS = {  # kind -> code (the harness knows each code's HTTP status)
    "throttled": "RequestLimitExceeded",
    "5xx": "InternalError",
    "capacity": "InsufficientInstanceCapacity",
    "quota": "VcpuLimitExceeded",
}


def ec2_error(_op: str, kind: str) -> tuple[int, dict[str, str], bytes]:
    sys.path.insert(0, str(REPO / "tests" / "contract"))
    from harness_aws import error_response

    return error_response(EC2_ERRORS[kind], f"injected {kind}")
