"""Server-side rendering time of the dashboard over a store of 10,000 jobs.

Writes a SQLite store with the sample jobs (tools/dashboard_sample.py: every state, the
preempted-and-restarted job) plus 10,000 more, each with an attempt (half of them running, with
a live instance), and a day of price refreshes. Then times the dashboard's own request handling
(query, view, template, SVG; no socket) for each page, warm, and prints the median and the
slowest of ``--repeat`` runs, with the first (cold) request apart; then the same pages once
over HTTP through the real server (uvicorn).

    .venv/bin/python benchmarks/dashboard_render.py [--jobs 10000] [--repeat 20] [--store URL]

``--store postgresql+psycopg://...`` runs it against PostgreSQL (an empty database).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from provisioner.control.store import Store  # noqa: E402
from provisioner.dashboard import DashboardServer  # noqa: E402
from provisioner.dashboard.server import Dashboard  # noqa: E402
from tools import dashboard_sample  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--store", default=None, help="Store URL (default: a fresh SQLite file).")
    args = ap.parse_args()
    tmp = tempfile.TemporaryDirectory()
    url = args.store or f"sqlite:///{tmp.name}/bench.db"
    store = Store(url)
    t0 = time.perf_counter()
    ids = dashboard_sample.build(store)
    dashboard_sample.bulk(store, args.jobs)
    total = len(ids) + args.jobs
    print(
        f"store: {total:,} jobs written in {time.perf_counter() - t0:.1f} s ({url.split(':')[0]})"
    )

    app = Dashboard(store, page_size=100)
    host = {"Host": "127.0.0.1"}
    pages = {
        "jobs, page 1 (100 per page)": "/",
        "jobs, page 50": "/?page=50",
        "jobs, last page": "/?page=10000",
        "jobs, 1,000 per page": "/?per_page=1000",
        "jobs, state=running": "/?state=running",
        "jobs, search by name": "/?q=sweep-0999",
        "jobs as JSON, page 1": "/?format=json",
        "job: preempted and restarted": f"/jobs/{ids['llama-7b-lora']}",
        "job: pending (re-planned)": f"/jobs/{ids['bert-eval']}",
        "fleet (live instances)": "/fleet",
        "prices": "/prices",
    }
    print(f"\n{'page':<32} {'cold ms':>8} {'median ms':>10} {'max ms':>8} {'KB':>6}")
    worst = 0.0
    for name, path in pages.items():
        t = time.perf_counter()
        r = app.handle("GET", path, host)
        cold = (time.perf_counter() - t) * 1000
        assert r.status == 200, (path, r.status, r.body[:300])
        times = []
        for _ in range(args.repeat):
            t = time.perf_counter()
            r = app.handle("GET", path, host)
            times.append((time.perf_counter() - t) * 1000)
        worst = max(worst, max(times))
        print(
            f"{name:<32} {cold:>8.1f} {statistics.median(times):>10.1f} {max(times):>8.1f}"
            f" {len(r.body) / 1024:>6.0f}"
        )
    print(f"\nslowest warm page: {worst:.0f} ms (the goal: under 1,000 ms with {total:,} jobs)")

    server = DashboardServer(store, port=0)
    server.start()
    try:
        print(f"\nover HTTP ({server.url}), one request each:")
        for name, path in list(pages.items())[:3] + list(pages.items())[7:8]:
            t = time.perf_counter()
            with urllib.request.urlopen(server.url.rstrip("/") + path, timeout=30) as resp:
                body = resp.read()
            print(f"  {name:<32} {(time.perf_counter() - t) * 1000:>7.1f} ms  {len(body):>8,} B")
    finally:
        server.close()
        store.close()
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
