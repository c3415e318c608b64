"""Daemon scale: reconcile passes over 1,000 and 10,000 jobs on the sim provider.

For each size N this sets up a steady state, then measures the daemon's reconcile pass:

* a SQLite store (or ``--store URL``, e.g. a PostgreSQL database) with N jobs under ten
  policies (the jobs are inserted directly, with a running attempt each);
* one sim server with N running instances, one per job, tagged with its (job, attempt) and
  launched without a job spec, so each is a placeholder ``sleep`` process (docs/agent.md):
  no agent and no job run, the pass sees what it would see of N busy VMs;
* a ``progress.json`` per job in a ``file://`` checkpoint store (state ``running``),
  rewritten every 5 s per job during the measurement as the agents would (``--no-agents``:
  left alone), so the daemon finds new progress whenever it reads.

The passes run in a fresh interpreter (the daemon's view: its own memory only), with the
daemon's reconciler and its default settings (``provisioner.control.daemon.service.reconciler_for``;
``--decide-interval``/``--progress-interval`` change two of them), a pass every
``--interval`` seconds as the daemon schedules them: one cold pass (policies parsed, plans
computed, every job decided, instances recorded), then ``--passes`` warm ones, in which each
job is decided again once per ``decide_interval`` and its progress read once per
``progress_interval``, at moments spread over the passes. Printed per size: seconds per
pass (cold; warm median and max; how much of it was spent waiting for the sim server's
answers), HTTP requests to the sim server per pass (counted on the wire, in the sim client)
next to the reconciler's own count, decide() calls and progress reads per pass, and the
measuring process's peak RSS (``ru_maxrss``).

    .venv/bin/python benchmarks/daemon_scale.py [--jobs 1000 10000] [--passes 20]
        [--interval 5] [--decide-interval 120] [--progress-interval 10]
        [--store postgresql+psycopg://...] [--baseline /tmp/old-checkout]

``--baseline DIR`` measures another checkout (``git worktree add /tmp/old-checkout <commit>``)
in the same run, before this tree at each size, with that checkout's own copy of this script
(its code alone on the path: printed once), and ends with both warm-pass medians side by side.

``DAEMON_SCALE_PROFILE=FILE`` dumps a cProfile of the warm passes to FILE (``pstats``).
``DAEMON_SCALE_SAMPLE=FILE`` samples the warm passes' CPU time instead (a stack every
millisecond of CPU, ``ITIMER_PROF``: no per-call overhead, so numpy and pure Python are seen
in proportion) and writes the stacks to FILE in the collapsed format flame graphs read.

Before and after the lean warm pass (issue 17), one run with ``--baseline`` (b2cbc13), 12
warm passes, 2 cores shared with two test suites (load 5-7; CPU is the steadier figure):
1,000 jobs 0.224 s (0.139 s CPU) before, 0.158 s (0.107 s CPU) after; 10,000 jobs 11.7 s
(2.72 s CPU) before, 5.44 s (1.48 s CPU) after.

Before and after issue 43's cuts (the collector paced by the passes, the invariants' sweep
spread over the minute, first-progress events in the pass's batch, Core writes), one run of
``--jobs 10000 --passes 8 --baseline /tmp/old-checkout`` (a worktree of 6062259) on 2 cores
shared with other work (10^7 Python additions in 0.48 s; load average 0.9 at the start,
1.7-4.1 during the run, this benchmark's sim server and progress writers included): warm pass
2.270 s wall / 0.813 s CPU before, 1.645 s / 0.705 s after; cold pass 6.5 s before, 2.5 s
after; peak RSS 264 MB and 278 MB (an earlier run at load 2-5: 2.040 s / 0.887 s before,
0.961 s / 0.655 s after, cold 13.4 s and 2.3 s). docs/daemon.md has the table. At 10,000
sandboxes the sim's shutdown call outlasts its timeout; the sim server of each tree measured
is waited for (and stopped) before the next measurement: an older checkout's, left running,
scanned /proc at a third of a core beside the next one.

The aims (issue #5): <= 1 s per pass and <= 300 MB at 10,000 jobs; provider calls per pass
growing with regions, not with jobs. Launching 10,000 sandboxes takes about half a minute
and 2 GB of memory for the ``sleep`` processes; the sim server then spends a good part of a
core watching them, on the same machine as the measured process.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

POLICY = """\
name: scale-{i}
job:
  command: ["python", "-m", "examples.train", "--steps", "100000"]
  compute_hours: 200
  reference_gpu: A10G
resources:
  gpu_count: 1
market: spot-then-on-demand
bid_cap:
  max_spot_price_per_gpu_hour: {cap}
deadline: 30d
checkpoint:
  uri: {uri}
  interval: 10m
restart:
  max_restarts: 50
  zone_cooldown: 10m
"""

SIM_OPTIONS: dict[str, Any] = {
    "mimic": "aws",
    "seconds_per_hour": 3600.0,  # real time: nothing moves during the measurement
    "mtbp_hours": None,  # no preemptions
    "idle_exit_s": 3600.0,
    "terminate_grace_s": 0.5,
}


def setup(n: int, work: Path, store_url: str) -> None:
    """N jobs, each with a running attempt and its placeholder instance at the sim."""
    from policies.loader import parse_policy
    from providers.sim import SimProvider
    from provisioner.control.inputs import plan_candidates
    from provisioner.control.reconciler import Reconciler, attempt_row
    from provisioner.control.store import Store
    from provisioner.control.store.schema import AttemptRow, JobRow
    from provisioner.core.models import LaunchRequest, Market

    ckpt = work / "ckpt"
    ckpt.mkdir(parents=True, exist_ok=True)
    uri = f"file://{ckpt}"
    store = Store(store_url)
    options = {**SIM_OPTIONS, "state_dir": str(work / "sim")}
    rec = Reconciler(store)
    now = datetime.now(UTC)
    texts = [POLICY.format(i=i, cap=2.0 + 0.1 * i, uri=uri) for i in range(10)]
    probe = JobRow(id="probe", provider="sim", provider_options=options, policy_yaml=texts[0])
    placements = [
        plan_candidates(parse_policy(t, "p.yaml"), rec.catalog_for(probe), frozenset(), now)
        for t in texts
    ]
    placements = [[p for p in ps if p.market is Market.SPOT][:8] for ps in placements]
    sim: SimProvider = rec.provider_for(probe)  # type: ignore[assignment]

    def launch(i: int) -> tuple[int, Any]:
        job_id = f"scale-{i:05d}"
        p = placements[i % 10][i % len(placements[i % 10])]
        req = LaunchRequest(
            job_id=job_id,
            attempt=1,
            offer=p.offer,
            market=p.market,
            bid_cap_per_hour=p.bid_cap_per_hour,
            job_spec=None,
        )
        return i, (p, sim.launch(req))

    t0 = time.perf_counter()
    with ThreadPoolExecutor(8) as pool:
        launched = dict(pool.map(launch, range(n)))
    print(f"  setup: {n} sim instances in {time.perf_counter() - t0:.1f} s", flush=True)
    jobs, attempts = [], []
    for i in range(n):
        job_id = f"scale-{i:05d}"
        p, inst = launched[i]
        jobs.append(
            JobRow(
                id=job_id,
                name=f"scale-{i % 10}",
                policy_yaml=texts[i % 10],
                policy_path=None,
                workdir=str(work),
                provider="sim",
                provider_options=options,
                state="running",
                submitted_at=now,
                updated_at=now,
                deadline=now + timedelta(days=30),
                attempt=1,
                restarts=0,
                spent_usd=0.0,
                work_total_h=200.0,
                work_done_h=0.0,
                progress={},
                result={},
                reason="",
                cancel_requested=False,
                owner=None,
                lease_until=None,
                version=0,
            )
        )
        a: AttemptRow = attempt_row(jobs[-1], 1, p, now, "benchmark")
        a.instance_id, a.state, a.launched_at = inst.id, "running", inst.launched_at
        attempts.append(a)
        d = ckpt / job_id
        d.mkdir(exist_ok=True)
        (d / "progress.json").write_text(
            json.dumps(
                {
                    "job_id": job_id,
                    "attempt": 1,
                    "instance_id": inst.id,
                    "state": "running",
                    "step": 10,
                    "total_steps": 100000,
                    "last_checkpoint": None,
                }
            )
        )
    with store.session() as s:
        s.add_all(jobs)
    with store.session() as s:
        s.add_all(attempts)
    rec.close()
    store.close()


class Agents(threading.Thread):
    """Stand-ins for the agents' progress writes: each job's ``progress.json`` is rewritten
    (step + 1, atomically, as an agent does) once every ``every`` seconds, the jobs' writes
    spread over the period, so the daemon finds changed progress at every read."""

    def __init__(self, ckpt: Path, n: int, every: float = 5.0) -> None:
        super().__init__(daemon=True)
        self.ckpt, self.n, self.every = ckpt, n, every
        self.halt = threading.Event()

    def run(self) -> None:
        step = 10
        while not self.halt.is_set():
            t0 = time.monotonic()
            step += 1
            for i in range(self.n):
                job_id = f"scale-{i:05d}"
                d = self.ckpt / job_id
                doc = {
                    "job_id": job_id,
                    "attempt": 1,
                    "state": "running",
                    "step": step,
                    "total_steps": 100000,
                    "last_checkpoint": None,
                }
                tmp = d / "progress.json.tmp"
                tmp.write_text(json.dumps(doc))
                os.replace(tmp, d / "progress.json")
                if i % 100 == 99:
                    lag = t0 + self.every * (i + 1) / self.n - time.monotonic()
                    if lag > 0 and self.halt.wait(lag):
                        return
            self.halt.wait(max(0.0, t0 + self.every - time.monotonic()))


class CpuSampler:
    """The stacks the process is in, one per millisecond of its CPU time (SIGPROF), while
    enabled; ``dump_stats`` writes them collapsed (``frame;frame;frame count`` per line)."""

    def __init__(self, every_s: float = 0.001) -> None:
        from collections import Counter

        self.every_s = every_s
        self.stacks: Counter[str] = Counter()
        signal.signal(signal.SIGPROF, self._tick)

    def _tick(self, signum: int, frame: Any) -> None:
        names = []
        while frame is not None:
            code = frame.f_code
            names.append(f"{code.co_name} ({Path(code.co_filename).name}:{code.co_firstlineno})")
            frame = frame.f_back
        self.stacks[";".join(reversed(names))] += 1

    def enable(self) -> None:
        signal.setitimer(signal.ITIMER_PROF, self.every_s, self.every_s)

    def disable(self) -> None:
        signal.setitimer(signal.ITIMER_PROF, 0, 0)

    def dump_stats(self, path: str) -> None:
        with open(path, "w") as out:
            for stack, n in self.stacks.most_common():
                out.write(f"{stack} {n}\n")


def measure(
    store_url: str, passes: int, interval: float, knobs: dict[str, float]
) -> dict[str, Any]:
    """Run in a fresh interpreter: the daemon's reconciler over the store, pass after pass."""
    import resource

    import providers.sim.client as sim_client
    from provisioner.control.daemon.config import DaemonConfig
    from provisioner.control.daemon.service import reconciler_for
    from provisioner.control.store import Store

    calls: dict[str, float] = {"n": 0, "s": 0.0}
    real_request = sim_client.request

    def counting(url: str, *args: Any, **kw: Any) -> Any:
        calls["n"] += 1
        t0 = time.perf_counter()
        try:
            return real_request(url, *args, **kw)
        finally:
            calls["s"] += time.perf_counter() - t0

    sim_client.request = counting
    import providers.sim.adapter as sim_adapter

    sim_adapter.request = counting

    store = Store(store_url)
    config = DaemonConfig(
        reconcile_interval=timedelta(seconds=interval),
        **{k: timedelta(seconds=v) for k, v in knobs.items()},
    )
    rec = reconciler_for(store, config, "bench")  # the daemon's reconciler, its defaults
    rows: list[dict[str, Any]] = []
    prof: Any = None
    if os.environ.get("DAEMON_SCALE_PROFILE"):
        import cProfile

        prof = cProfile.Profile()
    elif os.environ.get("DAEMON_SCALE_SAMPLE"):
        prof = CpuSampler()
    for i in range(passes + 1):
        if i > 1:
            time.sleep(max(0.0, interval - rows[-1]["seconds"]))  # the daemon's cadence
        before, waited = calls["n"], calls["s"]
        t0, c0 = time.perf_counter(), time.process_time()
        if prof is not None and i > 0:
            prof.enable()
        report = rec.run_pass()
        if prof is not None and i > 0:
            prof.disable()
        took, cpu = time.perf_counter() - t0, time.process_time() - c0
        rows.append(
            {
                "seconds": took,
                "jobs": report.jobs,
                "http": calls["n"] - before,
                "sim_s": calls["s"] - waited,
                "cpu_s": cpu,
                "counted": report.provider_calls,
                "launches": report.launches,
                "decisions": report.decisions,
                "reads": report.progress_reads,
                "errors": report.errors,
            }
        )
    rec.close()
    store.close()
    if prof is not None:
        prof.dump_stats(os.environ.get("DAEMON_SCALE_PROFILE") or os.environ["DAEMON_SCALE_SAMPLE"])
    return {
        "passes": rows,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--passes", type=int, default=20)
    ap.add_argument(
        "--interval", type=float, default=5.0, help="seconds between pass starts (daemon: 5)"
    )
    ap.add_argument("--decide-interval", type=float, default=None, help="s (daemon: 120)")
    ap.add_argument("--progress-interval", type=float, default=None, help="s (daemon: 10)")
    ap.add_argument(
        "--no-agents",
        dest="agents",
        action="store_false",
        help="leave progress.json unchanged (default: rewritten every 5 s per job)",
    )
    ap.add_argument("--store", default=None, help="store URL (default: SQLite in a temp dir)")
    ap.add_argument(
        "--baseline",
        default=None,
        help="another checkout (a git worktree of an older commit) measured in the same run, "
        "with its own benchmarks/daemon_scale.py",
    )
    ap.add_argument("--measure", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:
        knobs = {
            k: v
            for k, v in (
                ("decide_interval", args.decide_interval),
                ("progress_interval", args.progress_interval),
            )
            if v is not None
        }
        print(json.dumps(measure(args.measure, args.passes, args.interval, knobs)))
        return
    # SIGTERM (timeout, CI) unwinds like Ctrl-C, so the sim's sandboxes are always stopped
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    summary: list[tuple[int, str, dict[str, float]]] = []
    for n in args.jobs:
        if args.baseline:
            summary.append((n, "baseline", _baseline(Path(args.baseline).resolve(), n, args)))
        with tempfile.TemporaryDirectory(prefix="daemon-scale-") as tmp:
            work = Path(tmp)
            url = args.store or f"sqlite:///{work / 'store.db'}"
            if args.store:
                _reset(url)
            print(f"{n} jobs:", flush=True)
            agents = Agents(work / "ckpt", n)
            try:
                setup(n, work, url)
                env = dict(os.environ, PYTHONPATH=str(REPO), XDG_STATE_HOME=str(work / "state"))
                argv = [sys.executable, __file__, "--measure", url, "--passes", str(args.passes)]
                argv += ["--interval", str(args.interval)]
                for flag, value in (
                    ("--decide-interval", args.decide_interval),
                    ("--progress-interval", args.progress_interval),
                ):
                    if value is not None:
                        argv += [flag, str(value)]
                if args.agents:
                    agents.start()
                out = subprocess.run(
                    argv, env=env, cwd=work, capture_output=True, text=True, check=False
                )
            finally:
                agents.halt.set()
                _stop_sim(work)
            if out.returncode != 0:
                print(out.stderr[-4000:])
                raise SystemExit(out.returncode)
            res = json.loads(out.stdout.strip().splitlines()[-1])
            _print(n, res)
            warm = res["passes"][1:] or res["passes"]
            summary.append(
                (
                    n,
                    "this tree",
                    {
                        "wall": statistics.median(r["seconds"] for r in warm),
                        "cpu": statistics.median(r["cpu_s"] for r in warm),
                    },
                )
            )
    if args.baseline:
        print("warm pass, median of the warm passes (wall / CPU of the measuring process):")
        for n, tree, fig in summary:
            print(f"  {n:>6} jobs  {tree:<10} {fig['wall']:.3f} s / {fig['cpu']:.3f} s CPU")


#: Printed by an older checkout's daemon_scale.py: the warm pass's median wall and CPU time.
_WARM = re.compile(r"warm pass\s+median ([0-9.]+) s")
_CPU = re.compile(r"CPU time of the pass\s+median ([0-9.]+) s")


def _baseline(tree: Path, n: int, args: argparse.Namespace) -> dict[str, float]:
    """Run another checkout's own benchmark for N jobs, its code alone on the path: cwd and
    PYTHONPATH point at that tree (ahead of this tree's editable install); its measuring
    process inherits both, and its sim client starts the sim server with its own root first
    on PYTHONPATH. The module files it imports are printed once, as evidence."""
    env = {k: v for k, v in os.environ.items() if k != "DAEMON_SCALE_PROFILE"}
    env["PYTHONPATH"] = str(tree)
    check = (
        "import importlib.util as u;"
        "print('  baseline imports', *(u.find_spec(m).origin for m in "
        "('provisioner', 'providers.sim.client', 'providers.sim')))"
    )
    subprocess.run([sys.executable, "-c", check], env=env, cwd=tree, check=True)
    argv = [sys.executable, str(tree / "benchmarks" / "daemon_scale.py"), "--jobs", str(n)]
    argv += ["--passes", str(args.passes), "--interval", str(args.interval)]
    for flag, value in (
        ("--decide-interval", args.decide_interval),
        ("--progress-interval", args.progress_interval),
    ):
        if value is not None:
            argv += [flag, str(value)]
    if not args.agents:
        argv.append("--no-agents")
    if args.store:
        argv += ["--store", args.store]
    print(f"baseline ({tree}):", flush=True)
    with tempfile.TemporaryDirectory(prefix="daemon-scale-baseline-") as tmp:
        env["TMPDIR"] = tmp  # its work directories, so that its sim server can be found
        try:
            out = subprocess.run(
                argv, env=env, cwd=tree, capture_output=True, text=True, check=False
            )
        finally:
            _wait_gone(_servers_under(Path(tmp)), within_s=60.0)
    print(out.stdout, end="", flush=True)
    if out.returncode != 0:
        print(out.stderr[-4000:])
        raise SystemExit(out.returncode)
    wall, cpu = _WARM.search(out.stdout), _CPU.search(out.stdout)
    if wall is None or cpu is None:
        raise SystemExit("the baseline printed no warm-pass figures")
    return {"wall": float(wall.group(1)), "cpu": float(cpu.group(1))}


def _reset(url: str) -> None:
    from provisioner.control.store import Store
    from provisioner.control.store.schema import Base

    s = Store(url)
    Base.metadata.drop_all(s.engine)
    with s.engine.begin() as conn:
        from sqlalchemy import text

        conn.execute(text("DROP TABLE IF EXISTS alembic_version"))
    s.close()


def _stop_sim(work: Path) -> None:
    """Stop the sim server and its sandboxes, and wait until it is gone: a server left
    behind (10,000 sandboxes take longer to stop than the shutdown call waits) would spend
    CPU beside the next measurement."""
    from providers.sim import SimProvider

    pid = _server_pid(work / "sim")
    SimProvider(work / "sim").shutdown_server(terminate_all=True)
    if pid is not None:
        _wait_gone([pid])


def _server_pid(state_dir: Path) -> int | None:
    try:
        return int(json.loads((state_dir / "server.json").read_text())["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _wait_gone(pids: list[int], within_s: float = 120.0) -> None:
    """Wait for these processes to exit (SIGTERM after ``within_s``, SIGKILL 10 s later)."""
    deadline = time.monotonic() + within_s
    for sig in (None, signal.SIGTERM, signal.SIGKILL):
        if sig is not None:
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, sig)
        while time.monotonic() < deadline:
            pids = [p for p in pids if _alive(p)]
            if not pids:
                return
            time.sleep(0.2)
        deadline = time.monotonic() + 10.0


def _alive(pid: int) -> bool:
    try:  # a zombie (an exited child not yet reaped) counts as gone
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


def _servers_under(root: Path) -> list[int]:
    """The sim servers serving a state directory under ``root`` (the baseline's, whose own
    script may leave them running): their pids, from /proc."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                argv = fh.read().split(b"\0")
        except OSError:
            continue
        if b"providers.sim" in argv and any(a.startswith(str(root).encode()) for a in argv):
            found.append(int(entry))
    return found


def _print(n: int, res: dict[str, Any]) -> None:
    rows = res["passes"]
    cold, warm = rows[0], rows[1:]
    ws = [r["seconds"] for r in warm] or [cold["seconds"]]
    print(f"  jobs per pass            {cold['jobs']} (cold) / {warm[-1]['jobs'] if warm else '-'}")
    print(f"  cold pass                {cold['seconds']:.3f} s")
    print(f"  warm pass                median {statistics.median(ws):.3f} s, max {max(ws):.3f} s")
    cpu = [r["cpu_s"] for r in warm] or [cold["cpu_s"]]
    print(f"    CPU time of the pass        median {statistics.median(cpu):.3f} s")
    sim = [r["sim_s"] for r in warm] or [cold["sim_s"]]
    print(
        f"    of which the sim's answers  median {statistics.median(sim):.3f} s "
        "(listing every instance, interruptions)"
    )
    print(
        "  sim HTTP calls per pass  "
        + ", ".join(str(r["http"]) for r in rows)
        + f"  (reconciler's count: {', '.join(str(r['counted']) for r in rows)})"
    )
    print(
        f"  launches / errors        {sum(r['launches'] for r in rows)} / {sum(r['errors'] for r in rows)}"
    )
    dec = [r["decisions"] for r in warm] or [0]
    reads = [r["reads"] for r in warm] or [0]
    print(
        f"  decide() per warm pass   median {statistics.median(dec):.0f}, max {max(dec)}; "
        f"progress reads median {statistics.median(reads):.0f}, max {max(reads)}"
    )
    print(f"  peak RSS                 {res['peak_rss_mb']:.0f} MB")
    print(flush=True)


if __name__ == "__main__":
    main()
