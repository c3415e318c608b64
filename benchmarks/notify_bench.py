"""Notifications off the pass's path: the reconcile pass with and without a dead receiver.

The daemon's reconciler (``reconciler_for``, its default settings) runs passes over N jobs on
the sim (``benchmarks/daemon_scale.py``'s steady state: one placeholder instance per job, a
stand-in agent rewriting each job's progress), one pass every ``--interval`` seconds, while
in the same process, as in the daemon, the outbox's delivery ticks on its own thread every
``--tick`` seconds (the daemon's 2 s; :class:`provisioner.control.notify.outbox.Deliverer`,
its default retry schedule) and a writer adds ``--rate``
notifying events a second, each with its outbox row (``Store.add_event(..., notify=...)``, as
the pass writes them). The receiver is a separate process on 127.0.0.1 taking Slack-format
webhooks. Four runs, the same passes each:

* ``no delivery``: the outbox fills, nobody delivers (the baseline);
* ``live``: the receiver answers 200;
* ``dead (500)``: it answers 500 to everything (retried on the schedule: 10 s, 20 s, ...;
  one failed send a tick, the target's other queues left for the next);
* ``dead (silent)``: it takes the connection and never answers (each send waits out apprise's
  4 s read timeout).

Printed per run: the pass's wall time (median, p90, max) and CPU, and what was delivered.

    .venv/bin/python benchmarks/notify_bench.py [--jobs 200] [--passes 20] [--interval 1]
        [--rate 5] [--tick 2] [--retry-first 10]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

TOKEN = "B3nchT0kenXYZ123456"


def receiver(mode: str, port: int) -> None:
    """The receiver process: ``live`` (200), ``500`` or ``silent`` (never answers)."""
    hold = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if mode == "silent":
                hold.wait(600)
                return
            code = 200 if mode == "live" else 500
            self.send_response(code)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *a: Any) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    srv.daemon_threads = True
    srv.serve_forever()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run(url: str, mode: str | None, args: argparse.Namespace) -> dict[str, Any]:
    from provisioner.control.daemon.config import DaemonConfig
    from provisioner.control.daemon.service import reconciler_for
    from provisioner.control.notify.outbox import Deliverer, Delivery
    from provisioner.control.notify.route import Router
    from provisioner.control.notify.targets import TargetBook
    from provisioner.control.store import Store

    store = Store(url)
    with store.session() as s:  # each run starts with an empty outbox
        from sqlalchemy import delete

        from provisioner.control.store import NotificationRow

        s.execute(delete(NotificationRow))
    proc = None
    port = _free_port()
    if mode is not None:
        proc = subprocess.Popen(
            [sys.executable, __file__, "--receiver", mode, "--port", str(port)],
            stdout=subprocess.DEVNULL,
        )
    webhook = f"json://127.0.0.1:{port}/services/T/B/{TOKEN}?:message=text&:version=&:type="
    book = TargetBook({"team": webhook}, {}, {})
    # the daemon's defaults (notify.interval 2 s, retries 10 s doubling), but for the rate
    # limit, raised so that every message is sent
    delivery = Delivery(
        tries=1000,
        rate_messages=1000,
        first_retry=timedelta(seconds=args.retry_first),
        max_retry=timedelta(
            seconds=max(args.retry_first, 600.0 if args.retry_first >= 10 else 2.0)
        ),
    )
    deliverer = Deliverer(store, book, "bench", delivery)
    halt = threading.Event()
    sent = {"messages": 0, "rows": 0, "retried": 0}

    def deliver() -> None:
        while not halt.wait(args.tick):
            rep = deliverer.tick()
            sent["messages"] += rep.sent
            sent["rows"] += rep.rows
            sent["retried"] += rep.retried

    router = Router.of(["team"])
    jobs = [j.id for j in store.jobs(limit=50)]

    def write_events() -> None:
        i = 0
        while not halt.wait(1.0 / args.rate):
            jid = jobs[i % len(jobs)]
            text = f"bench event {i}"
            store.add_event(
                jid,
                "restarted",
                text,
                at=datetime.now(UTC),  # the bench's own clock: a real-time load
                notify=router.notice(jid, "b", None, "restarted", text, {"restart": i}),
            )
            i += 1

    threads = [threading.Thread(target=write_events, daemon=True)]
    if mode is not None:
        time.sleep(0.3)  # the receiver process binds its port
        threads.append(threading.Thread(target=deliver, daemon=True))
    config = DaemonConfig(reconcile_interval=timedelta(seconds=args.interval))
    rec = reconciler_for(store, config, "bench")
    rec.run_pass()  # the cold pass, not measured
    for t in threads:
        t.start()
    walls, cpus = [], []
    for _ in range(args.passes):
        t0, c0 = time.perf_counter(), time.thread_time()
        rec.run_pass()
        walls.append(time.perf_counter() - t0)
        cpus.append(time.thread_time() - c0)
        time.sleep(max(0.0, args.interval - walls[-1]))
    halt.set()
    for t in threads:
        t.join(10)
    rec.close()
    pending = store.outbox_pending()
    store.close()
    if proc is not None:
        proc.kill()
        proc.wait()
    walls.sort()
    return {
        "median": statistics.median(walls),
        "p90": walls[int(0.9 * (len(walls) - 1))],
        "max": walls[-1],
        "cpu": statistics.median(cpus),
        **sent,
        "pending": pending,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--passes", type=int, default=20)
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--rate", type=float, default=5.0, help="notifying events a second")
    ap.add_argument("--tick", type=float, default=2.0, help="between looks at the outbox")
    ap.add_argument(
        "--retry-first", type=float, default=10.0, help="first retry wait (under 10: at most 2 s)"
    )
    ap.add_argument("--receiver", choices=["live", "500", "silent"], help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.receiver:
        receiver(args.receiver, args.port)
        return
    import daemon_scale

    work = Path(tempfile.mkdtemp(prefix="notify-bench-"))
    url = f"sqlite:///{work / 'store.db'}"
    print(f"{args.jobs} jobs on the sim, {args.passes} passes every {args.interval:g} s, "
          f"{args.rate:g} notifying events a second", flush=True)  # fmt: skip
    daemon_scale.setup(args.jobs, work, url)
    agents = daemon_scale.Agents(work / "ckpt", args.jobs)
    agents.start()
    rows = []
    try:
        for label, mode in (
            ("no delivery", None),
            ("live", "live"),
            ("dead (500)", "500"),
            ("dead (silent)", "silent"),
        ):
            res = run(url, mode, args)
            rows.append((label, res))
            print(f"  {label}: done", flush=True)
    finally:
        agents.halt.set()
        daemon_scale._stop_sim(work)
    print()
    print(
        "| receiver | pass median | p90 | max | pass CPU | messages sent | retries | left in the outbox |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for label, r in rows:
        print(
            f"| {label} | {r['median'] * 1000:.1f} ms | {r['p90'] * 1000:.1f} ms | "
            f"{r['max'] * 1000:.1f} ms | {r['cpu'] * 1000:.1f} ms | {r['messages']} | "
            f"{r['retried']} | {r['pending']} |"
        )
    print(f"\n(run at {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; store {work})")


if __name__ == "__main__":
    main()
