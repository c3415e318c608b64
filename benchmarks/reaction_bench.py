"""Reaction to an interruption notice: a real daemon, a real job, real notices on the sim.

For each cloud the sim mimics (``--clouds``; its metadata format, its API as it really is: no
cloud's API reports a notice here, so the notice reaches the daemon through the agent's
progress record) and each notice length (``--notices``; default: that cloud's usual notice,
``CloudFacts.notice_s``), a ``provisioner daemon`` subprocess (its default intervals: a pass
every 5 s, the interruption poll every 0.5 s, a running job's progress re-read every 10 s) manages one long job
(``examples/train.py``, a checkpoint every 5 s of work) on the ``sim`` provider (real time). ``--count`` times, once the job has run undisturbed for a
few seconds, the benchmark serves a notice of that length on the job's instance
(``SimProvider.preempt``) and watches, twenty times a second, the job's progress record (the
agent's ``progress.json``) and its own progress file on each instance (``job-progress.json``,
written every 10 steps of 20 ms), and the sim's instances. Printed per notice length, median
and max over the notices (seconds):

* notice -> job signalled: until the agent has sent the job its checkpoint signal (its
  progress record says ``checkpointing``);
* preempted -> replacement launched: from the moment the capacity goes (the notice's end) to
  the replacement's launch; negative: launched during the notice (overlap);
* progress gap: from the job's last progress on the old instance to its first on the new one
  (the old job computes on after its notice checkpoint: that work is not kept);
* downtime: from the notice's checkpoint landing in the checkpoint store (the one the new
  attempt resumed from: the last progress kept) to the job's first progress on the new
  instance.

``--looks``: a switch made before break instead of a notice. One job with no deadline on
the sim (real time) in two zones without spot at its start goes to on-demand; once spot has
been up, as far as the daemon knows (since its refusals), for the break-even time, it looks at
spot in both zones: a zone with no spot all along refuses (the *refused look*: printed, the
spot launches refused while on-demand worked, the job's step just before and 3 s after, the
longest stall of its steps around the refusal, and the restores from a checkpoint: none
expected), the other, whose spot came back 5 minutes in, accepts (the *accepted look*: when,
how long the old instance worked beside the new one, through the changeover, and the
downtime: the job's last step on the old instance to its first on the new one).
``--looks-refused``: no spot anywhere, the run ends after the first refused look. Each takes
the break-even time (about half an hour at the sim's prices) plus, accepted, the changeover
(12 minutes).

``--tree DIR`` runs the daemon (and the agents, through it) from another checkout, e.g. main
before overlap on notice (``git archive main | tar -x -C /tmp/base``); the sim server and
the job are this tree's either way.

    .venv/bin/python benchmarks/reaction_bench.py [--clouds aws gcp] [--notices 30 120]
        [--count 3] [--tree DIR]
    .venv/bin/python benchmarks/reaction_bench.py --quick   # one 30 s notice, AWS
    .venv/bin/python benchmarks/reaction_bench.py --looks [--looks-refused]

Measured (docs/daemon.md has the table), one notice per cloud at its own length, the notice
reaching the daemon through the agent's progress record (the sim's store is local: the
daemon's interruption poll watches it): the replacement launched about a second into the
notice on every cloud; downtime (the notice's checkpoint in -> resumed) 1.2 to 1.4 s, mostly
the sim's boot.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

STEP_S = 0.02  # the job's step: its progress file moves every 10 steps (0.2 s)


@dataclass
class Reaction:
    signalled_s: float | None
    launched_after_preempt_s: float | None
    downtime_s: float | None
    resumed_s: float | None  # the notice's checkpoint in -> first progress after


def _read(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


class Job:
    """What the benchmark watches of the job: its instances and progress."""

    def __init__(self, sim: Any, ckpt: Path, job_id: str) -> None:
        self.sim, self.job_id = sim, job_id
        self.progress = ckpt / job_id / "progress.json"
        self.work: dict[str, Path] = {}

    def live(self) -> list[Any]:
        return [i for i in self.sim.list({}) if i.state.alive and i.job_id == self.job_id]

    def step_on(self, iid: str) -> int | None:
        path = self.work.get(iid)
        if path is None:
            path = self.work[iid] = Path(self.sim.sandbox(iid)["sandbox"]) / "work"
        step = _read(path / "job-progress.json").get("step")
        return step if isinstance(step, int) else None


def _running_steadily(job: Job, for_s: float = 3.0, timeout: float = 120.0) -> Any:
    """The one live instance once its job has made progress for ``for_s`` seconds."""
    end = time.monotonic() + timeout
    first: tuple[str, int, float] | None = None
    while time.monotonic() < end:
        live = job.live()
        if len(live) == 1:
            step = job.step_on(live[0].id)
            if step is not None:
                if first is None or first[0] != live[0].id:
                    first = (live[0].id, step, time.monotonic())
                elif step > first[1] and time.monotonic() - first[2] >= for_s:
                    return live[0]
        time.sleep(0.1)
    raise SystemExit("the job did not settle on one instance in time")


def _one_notice(job: Job, notice_s: float) -> Reaction:
    old = _running_steadily(job)
    last_step, last_at = job.step_on(old.id), time.time()
    t0 = time.time()
    job.sim.preempt(old.id, notice_s=notice_s)
    gone_at = t0 + notice_s
    signalled = launched = first_new = landed = None
    new_id: str | None = None
    new_step: int | None = None
    end = time.monotonic() + notice_s + 120
    while time.monotonic() < end:
        now = time.time()
        doc = _read(job.progress)
        state = doc.get("state") if doc.get("attempt") == old.attempt else None
        if signalled is None and state in ("checkpointing", "interrupted"):
            signalled = now
        step = job.step_on(old.id)
        if step is not None and last_step is not None and step > last_step:
            last_step, last_at = step, now
        for inst in job.live():
            if inst.id != old.id and new_id is None:
                new_id = inst.id
                launched = inst.launched_at.timestamp() if inst.launched_at else now
        if new_id is not None:
            step = job.step_on(new_id)
            if step is not None:
                if new_step is None:
                    new_step = step  # the first write after the resume
                elif step > new_step:
                    first_new = now
                    break
        time.sleep(0.05)
    name = _read(job.progress).get("resumed_from")
    if name:  # the notice's checkpoint: in the store since its file was written
        path = job.progress.parent / "checkpoints" / str(name)
        landed = path.stat().st_mtime if path.exists() else None
    return Reaction(
        None if signalled is None else signalled - t0,
        None if launched is None else launched - gone_at,
        None if first_new is None else first_new - last_at,
        None if first_new is None or landed is None else first_new - landed,
    )


def _policy(path: Path, ckpt: Path, market: str = "spot", extra: str = "") -> Path:
    sys.path.insert(0, str(REPO))
    from tests.daemon_util import write_policy

    return write_policy(
        path,
        ckpt=ckpt,
        steps=10_000_000,
        step_seconds=STEP_S,
        checkpoint_every=250,
        cooldown="10m",
        market=market,
        extra=extra,
    )


def measure(
    notice_s: float,
    count: int,
    tree: Path,
    cloud: str = "aws",
    *,
    dashboard: dict[str, Any] | None = None,
    during: Callable[[Any, str], Any] | None = None,
) -> list[Reaction]:
    """``count`` notices of ``notice_s`` on one job under a fresh daemon. ``dashboard``: the
    daemon's ``dashboard:`` section (default: not served). ``during(store, job_id)``: called
    once the daemon runs, before the first notice; what it returns, if anything, is called
    (with no argument) after the last one, before the daemon stops (a load on the dashboard
    starts and ends so)."""
    from providers.sim import SimProvider
    from provisioner.api import submit
    from provisioner.control.store import Store

    tmp = Path(tempfile.mkdtemp(prefix="reaction-"))
    options = {
        "state_dir": str(tmp / "sim"),
        "mimic": cloud,
        "seconds_per_hour": 3600,  # real time: a 120 s notice lasts 120 s
        "mtbp_hours": None,
        "notice_floor_s": 1.0,
        "idle_exit_s": 600,
        "terminate_grace_s": 1.0,
    }
    sim = SimProvider(**options)  # type: ignore[arg-type]
    store_url = f"sqlite:///{tmp / 'store.db'}"
    store = Store(store_url)
    cfg = tmp / "daemon.yaml"
    cfg.write_text(
        json.dumps(
            {
                "store": store_url,
                "providers": {"sim": options},
                "metrics": {"enabled": False},
                "dashboard": dashboard or {"enabled": False},
            }
        )
    )
    ckpt = tmp / "ckpt"
    _, job_id = submit(
        _policy(tmp / "policy.yaml", ckpt),
        provider="sim",
        provider_defaults=False,
        provider_options=options,
        store=store,
    )
    env = dict(os.environ)
    env.pop("NOTIFY_SOCKET", None)
    env["PYTHONPATH"] = str(tree)
    log = open(tmp / "daemon.log", "ab")  # noqa: SIM115 - the child keeps it
    daemon = subprocess.Popen(
        [sys.executable, "-m", "provisioner", "daemon", "--config", str(cfg)],
        cwd=tree,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    log.close()
    job = Job(sim, ckpt, job_id)
    out = []
    try:
        after = during(store, job_id) if during is not None else None
        for _ in range(count):
            out.append(_one_notice(job, notice_s))
        if after is not None:
            after()
    finally:
        daemon.terminate()
        try:
            daemon.wait(timeout=60)
        except subprocess.TimeoutExpired:
            daemon.kill()
        sim.shutdown_server(terminate_all=True)
    return out


# -- looks: a switch from on-demand to spot made before break ---------------------------------

LOOK_ZONES = ("us-east-1a", "us-east-1b")


@dataclass
class Looks:
    refused_calls: int  # spot launches refused while on-demand worked (the refused look)
    refused_steps: tuple[int, int]  # the job's step on on-demand just before and 3 s after
    refused_stall_s: float  # longest time without a step on on-demand around the refusal
    refused_restores: int  # restores from a checkpoint during it (none expected)
    look_at_s: float | None  # from the daemon's start to the accepted look's launch
    overlap_s: float | None  # the old instance ran beside the new one this long
    downtime_s: float | None  # the job's last step on the old -> its first step on the new


def _refused_since(store: Any, job_id: str, since: float) -> list[Any]:
    """The job's spot launches refused after ``since`` (epoch seconds): looks from on-demand."""
    return [
        a for a in store.attempts(job_id)
        if a.state == "failed" and a.market == "spot" and a.created_at.timestamp() > since
    ]  # fmt: skip


def measure_looks(tree: Path, accept: bool = True) -> Looks:
    """One job on on-demand (spot refused in both zones at its start), a look at spot in
    both zones once the capacity errors are 5 minutes old: refused in ``LOOK_ZONES[0]`` (no
    spot there all along), accepted in ``LOOK_ZONES[1]`` (spot back since 5 minutes after
    the start), then the handover at the end of the changeover. ``accept=False``: no spot
    anywhere, the run ends 3 s after the first refused look."""
    from providers.sim import SimProvider
    from provisioner.api import submit
    from provisioner.control.store import Store

    tmp = Path(tempfile.mkdtemp(prefix="looks-"))
    traces = {}
    back = [0] * 5 + [1] * 115 if accept else [0] * 120
    for zone, data in zip(LOOK_ZONES, ([0] * 120, back), strict=True):
        traces[zone] = str(tmp / f"{zone}.json")
        doc = {"metadata": {"gap_seconds": 60}, "data": data}
        Path(traces[zone]).write_text(json.dumps(doc))
    options = {
        "state_dir": str(tmp / "sim"), "mimic": "aws", "seconds_per_hour": 3600,
        "mtbp_hours": None, "notice_floor_s": 1.0, "idle_exit_s": 1800,
        "terminate_grace_s": 1.0, "zones": list(LOOK_ZONES), "trace": traces,
    }  # fmt: skip
    sim = SimProvider(**options)  # type: ignore[arg-type]
    store_url = f"sqlite:///{tmp / 'store.db'}"
    store = Store(store_url)
    cfg = tmp / "daemon.yaml"
    off = {"enabled": False}
    cfg.write_text(
        json.dumps(
            {"store": store_url, "providers": {"sim": options}, "metrics": off, "dashboard": off}
        )
    )
    ckpt = tmp / "ckpt"
    # no deadline: spot where there is capacity, else on-demand, left for spot once capacity
    # has lasted the break-even time
    policy = _policy(tmp / "policy.yaml", ckpt, market="spot-then-on-demand")
    _, job_id = submit(
        policy, provider="sim", provider_defaults=False, provider_options=options, store=store
    )
    env = dict(os.environ)
    env.pop("NOTIFY_SOCKET", None)
    env["PYTHONPATH"] = str(tree)
    log = open(tmp / "daemon.log", "ab")  # noqa: SIM115 - the child keeps it
    started = time.time()
    daemon = subprocess.Popen(
        [sys.executable, "-m", "provisioner", "daemon", "--config", str(cfg)],
        cwd=tree, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    log.close()
    job = Job(sim, ckpt, job_id)
    try:
        old = _running_steadily(job, timeout=300)
        if old.market.value != "on-demand":
            raise SystemExit(f"the job started on {old.market.value}, not on-demand")
        seen: list[tuple[float, str, int]] = []  # (time, instance, step) at each change
        restores = {_read(job.progress).get("resumed_from")}
        new = None
        since = (old.launched_at.timestamp() if old.launched_at else started) + 1.0
        end, checked = time.monotonic() + 3000, 0.0
        while time.monotonic() < end:
            now = time.time()
            if not accept and now - checked >= 1.0:
                checked = now
                refused = _refused_since(store, job_id, since)
                last = max(((a.ended_at or a.created_at).timestamp() for a in refused), default=0)
                if refused and now > last + 3.0:
                    break
            live = job.live()
            for inst in live:
                step = job.step_on(inst.id)
                last = [x for x in seen if x[1] == inst.id][-1:]
                if step is not None and (not last or step > last[0][2]):
                    seen.append((now, inst.id, step))
            if new is None:
                new = next((i for i in live if i.id != old.id), None)
                restores.add(_read(job.progress).get("resumed_from"))
            if new is not None and all(i.id != old.id for i in live):
                mine = [x for x in seen if x[1] == new.id]
                if len(mine) >= 2:  # the new one has stepped since it resumed
                    break
            time.sleep(0.05)
        else:
            raise SystemExit("the look was not accepted and handed over in 50 minutes")
    finally:
        daemon.terminate()
        try:
            daemon.wait(timeout=60)
        except subprocess.TimeoutExpired:
            daemon.kill()
        sim.shutdown_server(terminate_all=True)
    refused = _refused_since(store, job_id, since)
    t0 = min(a.created_at.timestamp() for a in refused) if refused else started
    t1 = max((a.ended_at or a.created_at).timestamp() for a in refused) if refused else started
    on_old = [(t, step) for t, iid, step in seen if iid == old.id]
    before = max((s for t, s in on_old if t <= t0), default=0)
    after = max((s for t, s in on_old if t <= t1 + 3.0), default=0)
    around = [t for t, _ in on_old if t0 - 3.0 <= t <= t1 + 3.0]
    stall = max((b - a for a, b in itertools.pairwise(around)), default=0.0)
    head = Looks(len(refused), (before, after), stall, len(restores) - 1, None, None, None)
    if new is None:
        return head
    last_old = max(t for t, _ in on_old)
    first_new = [t for t, iid, _ in seen if iid == new.id][1]  # its first step after resuming
    launched = new.launched_at.timestamp() if new.launched_at else first_new
    return Looks(
        len(refused),
        (before, after),
        stall,
        len(restores) - 1,
        launched - started,
        last_old - launched,
        first_new - last_old,
    )


def _fmt(values: list[float | None]) -> str:
    got = [v for v in values if v is not None]
    if not got:
        return "      -"
    miss = f" ({len(values) - len(got)} not seen)" if len(got) < len(values) else ""
    return f"{statistics.median(got):7.2f} {max(got):7.2f}{miss}"


def main() -> None:
    from providers.facts import BUILTIN, cloud_facts

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clouds", nargs="+", default=["aws"], choices=BUILTIN, help="mimicked")
    ap.add_argument("--notices", type=float, nargs="+", help="seconds (default: the cloud's)")
    ap.add_argument("--count", type=int, default=3, help="notices per length")
    ap.add_argument("--tree", type=Path, default=REPO, help="checkout the daemon runs from")
    ap.add_argument("--quick", action="store_true", help="one 30 s notice")
    ap.add_argument("--looks", action="store_true", help="a refused and an accepted look")
    ap.add_argument("--looks-refused", action="store_true", help="a refused look only")
    args = ap.parse_args()
    if args.looks or args.looks_refused:
        got = measure_looks(args.tree.resolve(), accept=not args.looks_refused)
        print(
            f"refused look: {got.refused_calls} spot launch(es) refused while on-demand worked; "
            f"its steps {got.refused_steps[0]} -> {got.refused_steps[1]} (3 s later), longest "
            f"stall {got.refused_stall_s:.2f} s, {got.refused_restores} restore(s)"
        )
        if got.look_at_s is None or got.overlap_s is None:
            return
        down = "-" if got.downtime_s is None else f"{got.downtime_s:.2f} s"
        print(
            f"accepted look: launched {got.look_at_s:.0f} s after the start, the old instance "
            f"worked beside it {got.overlap_s:.0f} s; downtime (last step on the old -> first "
            f"on the new) {down}"
        )
        return
    notices, count = ([30.0], 1) if args.quick else (args.notices, args.count)
    if count < 1 or any(n <= 0 for n in notices or []):
        ap.error("--count and --notices must be positive")
    tree = args.tree.resolve()
    print(f"daemon from {tree}; {count} notice(s) per length; seconds, median max")
    print(
        f"{'cloud':>8} {'notice':>7}  {'notice->signalled':>17}  {'preempted->launch':>17}  "
        f"{'progress gap':>17}  {'downtime':>19}"
    )
    for cloud in args.clouds:
        for n in notices or [cloud_facts(cloud).notice_s]:
            got = measure(n, count, tree, cloud)
            print(
                f"{cloud:>8} {n:6.0f}s  {_fmt([r.signalled_s for r in got]):>17}  "
                f"{_fmt([r.launched_after_preempt_s for r in got]):>17}  "
                f"{_fmt([r.downtime_s for r in got]):>17}  {_fmt([r.resumed_s for r in got]):>19}",
                flush=True,
            )


if __name__ == "__main__":
    main()
