"""Reaction to a notice with the daemon's own dashboard idle and under load (issue 43).

A busy dashboard served in a thread of the daemon shared the reconciler's interpreter lock:
twenty clients on it delayed a preemption's replacement from about a second to 10-20 s. The
daemon now serves it from a child process; this prints whether its load still reaches the
reaction. Each mode runs :func:`benchmarks.reaction_bench.measure` (a real ``provisioner
daemon``, one long job on the sim in real time, ``--count`` notices of ``--notice`` seconds)
with the daemon's dashboard served on a free port:

* ``idle``: nobody asks for the page;
* ``loaded``: ``--clients`` clients (20), each making ``--requests`` requests (500) in turn
  over one keep-alive connection, from a separate process started before the first notice:
  the jobs page, the job's page, the fleet, the prices and the jobs as JSON, round robin;
* ``loaded, in process`` (``--in-process``): the same load on ``dashboard.in_process: true``,
  the page in a thread of the daemon, for contrast;
* ``loaded, baseline`` (``--baseline DIR``): the same load on a daemon run from another
  checkout, e.g. main before this change (``git archive d8de8d4 | tar -x -C /tmp/base``: the
  standard library's server in a thread of the daemon).

Printed per mode, median and max over the notices (seconds): notice -> replacement launched
(from the notice's start to the replacement's launch: the capacity goes at ``--notice``),
and the downtime (the notice's checkpoint in -> the job's first progress on the new
instance); then the load: requests answered, errors, its rate, latency median and p99, and
how many rounds of it ran (a round that ends before the last notice is followed by another:
every notice is under load).

    .venv/bin/python benchmarks/dashboard_load.py [--count 5] [--notice 5] [--clients 20]
        [--requests 500] [--in-process] [--baseline DIR] [--modes idle loaded]

Measured (docs/daemon.md has the table), one run on the 2-core machine shared with other
people's work (load average 5 to 12), 5 notices of 5 s per mode, 20 x 500 requests;
notice -> replacement launched, median (max): idle 1.29 (1.87) s; loaded, the page from the
daemon's child 1.27 (2.21) s; loaded, the page in the daemon's thread 2.34 (3.34) s; loaded,
main before the child (``http.server`` in the daemon's thread) 1.74 (3.36) s.
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.reaction_bench import Reaction, measure  # noqa: E402

MODES = {
    "idle": ({"port": 0}, False),
    "loaded": ({"port": 0}, True),
    "loaded, in process": ({"port": 0, "in_process": True}, True),
}


# -- the clients (a process of their own) ---------------------------------------------------------


def clients(url: str, job_id: str, n: int, each: int) -> dict[str, Any]:
    """``n`` threads, each making ``each`` requests in turn on one keep-alive connection
    (opened again after an error); what came back."""
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    paths = ["/", f"/jobs/{job_id}", "/fleet", "/prices", "/?format=json"]
    statuses: Counter[int] = Counter()
    errors: Counter[str] = Counter()
    latencies: list[float] = []
    lock = threading.Lock()

    def one(k: int) -> None:
        conn: http.client.HTTPConnection | None = None
        for i in range(each):
            path = paths[(k + i) % len(paths)]
            t0 = time.perf_counter()
            try:
                if conn is None:
                    conn = http.client.HTTPConnection(host, port, timeout=120)
                conn.request("GET", path, headers={"Host": f"127.0.0.1:{port}"})
                r = conn.getresponse()
                r.read()
                status = r.status
            except (OSError, http.client.HTTPException) as exc:
                with lock:
                    errors[type(exc).__name__] += 1
                if conn is not None:
                    conn.close()
                conn = None
                continue
            with lock:
                statuses[status] += 1
                latencies.append(time.perf_counter() - t0)
        if conn is not None:
            conn.close()

    started = time.time()
    threads = [threading.Thread(target=one, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {
        "statuses": {str(k): v for k, v in sorted(statuses.items())},
        "errors": dict(errors),
        "started": started,
        "ended": time.time(),
        "latencies_ms": [round(1000 * x, 2) for x in latencies],
    }


# -- the modes ------------------------------------------------------------------------------------


class Load:
    """The clients' process against the daemon's dashboard, from the first notice on; a
    round ending before the last notice is followed by another, so that every notice is
    under load (the last round runs to its end)."""

    def __init__(self, n: int, each: int) -> None:
        self.n, self.each = n, each
        self.rounds: list[dict[str, Any]] = []
        self.done = threading.Event()
        self.thread: threading.Thread | None = None

    def __call__(self, store: Any, job_id: str) -> Any:
        from datetime import UTC, datetime

        from provisioner.dashboard.history import dashboard_url

        url = None
        end = time.monotonic() + 120
        while url is None and time.monotonic() < end:
            url = dashboard_url(store, datetime.now(UTC))
            if url is None:
                time.sleep(0.2)
        if url is None:
            raise SystemExit("the daemon recorded no dashboard address in 2 minutes")
        argv = [sys.executable, __file__, "--client", url, "--job", job_id]
        argv += ["--clients", str(self.n), "--requests", str(self.each)]
        self.thread = threading.Thread(target=self._keep_up, args=(argv,), daemon=True)
        self.thread.start()
        return self.finish

    def _keep_up(self, argv: list[str]) -> None:
        while not self.done.is_set():
            out = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, check=True)
            self.rounds.append(json.loads(out.stdout.strip().splitlines()[-1]))

    def finish(self) -> None:
        self.done.set()
        assert self.thread is not None
        self.thread.join()


def _fmt(values: list[float | None]) -> str:
    got = [v for v in values if v is not None]
    if not got:
        return "-"
    miss = f" ({len(values) - len(got)} not seen)" if len(got) < len(values) else ""
    return f"{statistics.median(got):6.2f} {max(got):6.2f}{miss}"


def _load_line(load: Load) -> str:
    rounds = load.rounds
    statuses: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    latencies: list[float] = []
    for r in rounds:
        statuses.update(r["statuses"])
        errors.update(r["errors"])
        latencies.extend(r["latencies_ms"])
    latencies.sort()
    answered = sum(statuses.values())
    seconds = rounds[-1]["ended"] - rounds[0]["started"]
    p99 = latencies[int(0.99 * (len(latencies) - 1))] if latencies else float("nan")
    median = statistics.median(latencies) if latencies else float("nan")
    return (
        f"{len(rounds)} round(s): {answered} answered {dict(statuses)}, "
        f"{sum(errors.values())} errors{' ' + str(dict(errors)) if errors else ''}, "
        f"{answered / seconds:.0f}/s over {seconds:.0f} s, median {median:.0f} ms, "
        f"p99 {p99:.0f} ms"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=5, help="notices per mode")
    ap.add_argument("--notice", type=float, default=5.0, help="seconds")
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--requests", type=int, default=500, help="per client")
    ap.add_argument("--in-process", action="store_true", help="also the page in a thread")
    ap.add_argument("--modes", nargs="+", choices=list(MODES), help="default: idle loaded")
    ap.add_argument(
        "--baseline",
        type=Path,
        help="also the load on a daemon run from this checkout (its default dashboard)",
    )
    ap.add_argument("--client", help=argparse.SUPPRESS)  # the clients' process: the URL
    ap.add_argument("--job", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.client:
        print(json.dumps(clients(args.client, args.job, args.clients, args.requests)))
        return
    modes = args.modes or ["idle", "loaded"] + (["loaded, in process"] if args.in_process else [])
    print(
        f"{args.count} notice(s) of {args.notice:g} s per mode; load: {args.clients} clients x "
        f"{args.requests} requests; seconds, median max",
        flush=True,
    )
    print(f"{'mode':<20} {'notice->launch':>16} {'downtime':>16}  load", flush=True)
    runs = [(mode, *MODES[mode], REPO) for mode in modes]
    if args.baseline:
        runs.append(("loaded, baseline", {"port": 0}, True, args.baseline.resolve()))
    for mode, dashboard, loaded, tree in runs:
        load = Load(args.clients, args.requests) if loaded else None
        got: list[Reaction] = measure(
            args.notice, args.count, tree, "aws", dashboard=dashboard, during=load
        )
        launch = [
            None if r.launched_after_preempt_s is None else r.launched_after_preempt_s + args.notice
            for r in got
        ]
        line = f"{mode:<20} {_fmt(launch):>16} {_fmt([r.resumed_s for r in got]):>16}  "
        print(line + (_load_line(load) if load is not None else "-"), flush=True)


if __name__ == "__main__":
    main()
