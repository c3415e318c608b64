"""The job's road on the sim: from launch to the job's first step, with its code brought along.

For each workdir size (``--mb``, default 0 and 50: random bytes, which do not compress: the
worst case for packing and fetching) the benchmark submits a job whose code is only in that
workdir (``up``'s path: ``provisioner.submit``), lets its first attempt start, then takes that
"VM" away without a notice (``SimProvider.terminate``) so the controller launches a second
attempt on a new sandbox. The sim's sandboxes share the code cache, as VMs from one warm
machine image would: the second attempt must find the archive there and fetch nothing.

Printed per size and attempt, median and max over ``--runs``:

* pack + put (s): ``up``'s packing of the workdir and its upload to the checkpoint store;
* launch -> first step (s): from the attempt's launch (its row is written before the cloud
  call) to the job's first line of output, as the agent stamped it;
* code: how the agent got the code (``fetched``, ``cached``) and the bytes it fetched; the
  seconds its code step took.

    .venv/bin/python benchmarks/jobroad_bench.py [--mb 0 50] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

JOB = """
import os, time
print("step 1", flush=True)
if os.environ["PROVISIONER_ATTEMPT"] == "1":
    time.sleep(600)  # this VM is taken away by the benchmark
"""


def one_run(mb: int, root: Path) -> dict[str, Any]:
    from providers.sim import SimProvider
    from provisioner.agent.logship import LogCursor, read_new
    from provisioner.agent.store import CheckpointStore
    from provisioner.api import Job, submit
    from provisioner.control.store import Store
    from provisioner.core.timefmt import parse_time

    work = root / "code"
    work.mkdir()
    (work / "job.py").write_text(JOB)
    for i in range(mb):
        (work / f"data-{i:03d}.bin").write_bytes(os.urandom(1024 * 1024))
    policy = root / "policy.yaml"
    policy.write_text(
        "name: road\njob:\n  workdir: code\n  workdir_max_mb: 200\n"
        '  command: ["python", "job.py"]\n  compute_hours: 1\n  reference_gpu: A10G\n'
        "resources: {min_vram_gb: 16}\nmarket: spot\nresidency: {allow: [EEA]}\n"
        f"checkpoint: {{uri: 'file://{root / 'ck'}', interval: 1h}}\n"
        "restart: {zone_cooldown: 1s}\n"
    )
    options = {
        "state_dir": str(root / "sim"),
        "mimic": "all",
        "seconds_per_hour": 60,
        "mtbp_hours": None,
        "preempt_first_after_s": None,
        "idle_exit_s": 60,
    }
    store = Store(f"sqlite:///{root / 's.db'}")
    t0 = time.perf_counter()
    _, job_id = submit(
        policy, provider="sim", provider_defaults=False, provider_options=options, store=store
    )
    pack_s = time.perf_counter() - t0
    sim = SimProvider(**options)
    ckpt = CheckpointStore(f"file://{root / 'ck'}", job_id)
    cursor = LogCursor()
    firsts: dict[int, str] = {}
    codes: dict[int, dict[str, Any]] = {}

    def watch() -> None:  # take the first VM away once its job has stepped
        while True:
            for line in read_new(ckpt, cursor):
                firsts.setdefault(line.attempt, line.at)
            prog = ckpt.read_json("progress.json") or {}
            if prog.get("prepared") and prog.get("attempt"):
                codes.setdefault(int(prog["attempt"]), prog["prepared"].get("code") or {})
            if 1 in firsts and len(store.attempts(job_id)) == 1:
                a = store.attempts(job_id)[0]
                if a.instance_id:
                    sim.terminate([a.instance_id])
            if 2 in firsts and 2 in codes:
                return
            time.sleep(0.05)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    state = Job(store, job_id).wait(timeout=120, poll_s=0.2)
    t.join(timeout=10)
    sim.shutdown_server(terminate_all=True)
    out: dict[str, Any] = {"pack_s": pack_s, "state": state}
    for a in store.attempts(job_id):
        first = parse_time(firsts.get(a.attempt, ""))
        if first is None:
            continue
        launched = (
            a.created_at if a.created_at.tzinfo else a.created_at.replace(tzinfo=first.tzinfo)
        )
        out[a.attempt] = {
            "launch_to_first_s": (first - launched).total_seconds(),
            **codes.get(a.attempt, {}),
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, nargs="+", default=[0, 50])
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    print(
        f"{'workdir':>8} {'attempt':>7} {'pack+put s':>10} {'launch->1st step s':>18} "
        f"{'code':>8} {'fetched MB':>10} {'code step s':>11}"
    )
    for mb in args.mb:
        runs = []
        for _ in range(args.runs):
            with tempfile.TemporaryDirectory(prefix="jobroad-") as d:
                runs.append(one_run(mb, Path(d)))
        for attempt in (1, 2):
            rows = [r[attempt] for r in runs if attempt in r]
            if not rows:
                print(f"{mb:>6} MB {attempt:>7}  (no first step seen)")
                continue
            lat = [r["launch_to_first_s"] for r in rows]
            packs = [r["pack_s"] for r in runs]
            hows = sorted({str(r.get("how")) for r in rows})
            fetched = max(float(r.get("fetched_bytes") or 0) for r in rows) / 1e6
            code_s = statistics.median(float(r.get("seconds") or 0) for r in rows)
            pack = f"{statistics.median(packs):.2f}" if attempt == 1 else ""
            print(
                f"{mb:>6} MB {attempt:>7} {pack:>10} "
                f"{statistics.median(lat):>8.2f} (max {max(lat):.2f}) "
                f"{','.join(hows):>8} {fetched:>10.1f} {code_s:>11.2f}"
            )


if __name__ == "__main__":
    main()
