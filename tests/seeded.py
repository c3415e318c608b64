"""The seeded whole-system run: random jobs on a random market, with faults, every promise
checked after every pass, any failure replayed from its seed.

One seed draws everything (:func:`draw`):

* the market: 2-4 of the clouds the sim mimics, one or two regions each (the built-in
  catalog's T4 offers there), each zone's spot capacity from a seeded outage model (mean time
  between losses 0.3-12 h), each cloud's own notice (format and length: AWS 120 s, GCP and
  Azure 30 s, ...), launches refused for capacity (a whole region out for a while, or
  injected refusals), quota refusals and throttling;
* N jobs: exit 0, 1 or 137 (part way), setup failures on some attempts, saves slower than the
  notice, budgets with and without ``compute_hours`` (stop or pause), deadlines, time windows,
  gangs of two, spot / on-demand / spot-then-on-demand, code from a workdir or a git
  repository, submitted at different times;
* faults: a daemon killed (as ``kill -9``) at a named failpoint or between passes and replaced
  by a new one, the store locked for a pass, the checkpoint store unreachable for a few passes,
  the sim server restarted (down for a pass, then its state read back from disk).

It runs in one process on a virtual clock: the real
:class:`~provisioner.control.reconciler.Reconciler` (one or two, as daemon replicas sharing
the jobs by lease) on a SQLite store, the sim cloud's own :class:`~providers.sim.cloud.SimCloud`
behind the real :class:`~providers.sim.SimProvider` (its HTTP calls answered in-process by the
server's own routes, so no server process is started and the clock is ours), and the node
agent played from the seed: its progress record is the agent's own
(:func:`provisioner.agent.report.progress_record`, :class:`provisioner.agent.protocol.AgentNotice`),
written to the checkpoint store with the agent's :class:`~provisioner.agent.store.CheckpointStore`.

After every daemon pass the invariants (:mod:`provisioner.control.invariants`, all of them,
with the cloud's list) are checked. ``python benchmarks/seeded_run.py --seed N -v`` replays a
seed; ``tests/e2e/test_seeded_run.py`` runs 20 in the slow tier.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import shutil
import sqlite3
import subprocess
import tempfile
import time
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from providers.base import CLOUDS, ErrorKind, ProviderError, RetryPolicy
from providers.sim import SimProvider
from provisioner.control import invariants as inv
from provisioner.control.failpoints import CRASH_POINTS, Failpoints
from provisioner.control.store import FINAL_STATES, Store
from provisioner.core.catalog import Catalog
from provisioner.core.models import TAG_MANAGED, Instance, Offer
from provisioner.core.states import ACTIVE_JOB_STATES

START = datetime(2026, 1, 5, tzinfo=UTC)  # a Monday, midnight: the windows' crons
STEP_S = 60.0  # virtual seconds between passes
MAX_PASSES = 180  # three virtual hours at most
#: a run ends once nothing has run for this many passes (jobs paused or waiting: a window
#: opens within the hour)
IDLE_PASSES = 45
REPLAY = "python benchmarks/seeded_run.py --seed {seed} -v"

#: failpoints a pass can meet (the notification ones are the daemon's delivery, not a pass's)
PASS_POINTS = tuple(p for p in CRASH_POINTS if not p.startswith("after-notify"))


class Killed(BaseException):
    """The daemon's process dies here (kill -9): nothing after it runs, open transactions are
    rolled back, the process's memory is gone (its Reconciler is dropped)."""


class ArmedFailpoints(Failpoints):
    """Dies at ``point`` the first time the pass meets it."""

    def __init__(self) -> None:
        self.point: str | None = None
        self.fired = False

    def hit(self, name: str) -> None:
        if self.point is not None and name == self.point:
            self.point, self.fired = None, True
            raise Killed(name)


# -- the draw -------------------------------------------------------------------------------


@dataclass
class JobPlan:
    name: str
    policy: str  # YAML (the harness adds the checkpoint store)
    work_s: float  # virtual seconds of work an uninterrupted run does
    exit_code: int = 0  # how the command ends (0: it finishes)
    exit_at: float = 1.0  # ... after this share of the work
    setup_fails: frozenset[int] = frozenset()  # attempts whose setup fails
    save_s: float = 5.0  # how long a checkpoint save takes (slower than a notice: lost)
    ckpt_every_s: float = 300.0  # work seconds between periodic checkpoints
    submit_pass: int = 0
    code: str = "none"  # none | workdir | git
    nodes: int = 1

    @property
    def expected(self) -> dict[str, Any]:
        return {"steps": round(self.work_s), "digest": digest(self.name, round(self.work_s))}


@dataclass
class Fault:
    at: int  # the pass (index) it happens before or in
    kind: str  # kill | crash | lock | ckpt-away | sim-restart
    arg: str = ""
    passes: int = 1


@dataclass
class Draw:
    seed: int
    offers: list[Offer]
    mtbp_hours: float
    outage_hours: float
    jobs: list[JobPlan]
    faults: list[Fault]
    daemons: int
    #: (pass, kind, code, times): launch refusals injected before that pass
    refusals: list[tuple[int, str, int]] = field(default_factory=list)
    #: (pass, region, passes): a whole region without spot capacity for a while
    region_outages: list[tuple[int, str, int]] = field(default_factory=list)
    #: (pass, pick, factor, passes): a zone's spot price times factor for a while; the zone is
    #: that of live spot instance ``pick`` (modulo how many run then), else of offer ``pick``
    surges: list[tuple[int, str, float, int]] = field(default_factory=list)
    #: the capacity the sim account holds (providers/sim/held.py's definitions): reservations
    #: and capacity blocks, some ending mid-run
    reservations: list[dict[str, Any]] = field(default_factory=list)

    def summary(self) -> str:
        clouds = sorted({o.provider for o in self.offers})
        faults = [f"{f.at}:{f.kind}" + (f":{f.arg}" if f.arg else "") for f in self.faults]
        return (
            f"seed {self.seed}: {len(self.jobs)} jobs, {self.daemons} daemon(s), clouds "
            f"{','.join(clouds)}, {len({o.zone for o in self.offers})} zones, mtbp "
            f"{self.mtbp_hours:.1f} h, faults {faults}"
            + (f", price surges {[(a, f) for a, _, f, _ in self.surges]}" if self.surges else "")
            + (
                f", held {[(r['id'], r['kind'], r['total']) for r in self.reservations]}"
                if self.reservations
                else ""
            )
        )


def digest(name: str, steps: int) -> str:
    return hashlib.sha256(f"{name}:{steps}".encode()).hexdigest()[:16]


_T4: dict[str, list[Offer]] | None = None


def _t4_offers() -> dict[str, list[Offer]]:
    global _T4
    if _T4 is None:
        from provisioner.catalog_files import builtin_catalog

        cat = builtin_catalog()
        _T4 = {
            c: [
                o
                for o in cat.filter(provider=c)
                if o.gpu == "T4" and o.gpu_count == 1 and o.spot_price and o.price
            ]
            for c in CLOUDS
        }
    return _T4


def draw(seed: int) -> Draw:
    rng = random.Random(seed)
    t4 = _t4_offers()
    clouds = rng.sample(list(CLOUDS), rng.randint(2, 4))
    offers: list[Offer] = []
    for c in clouds:
        regions = sorted({o.region for o in t4[c]})
        for region in rng.sample(regions, min(len(regions), rng.randint(1, 2))):
            rows = sorted((o for o in t4[c] if o.region == region), key=lambda o: o.spot_price or 0)
            cheapest = rows[0].instance_type
            offers += [o for o in rows if o.instance_type == cheapest][:3]
    # bid caps and price surges come from their own generator: every seed's other draws stay
    # what they were before they existed (the regression seeds replay the same run)
    prices = random.Random(f"prices-{seed}")
    jobs = [_job(rng, k, prices) for k in range(rng.randint(3, 7))]
    faults: list[Fault] = []
    for _ in range(rng.randint(0, 4)):
        kind = rng.choice(["kill", "kill", "crash", "lock", "ckpt-away", "sim-restart"])
        at = rng.randint(1, 60)
        if kind == "kill":
            faults.append(Fault(at, kind, rng.choice(PASS_POINTS)))
        elif kind == "ckpt-away":
            faults.append(Fault(at, kind, passes=rng.randint(1, 4)))
        elif kind == "lock":
            faults.append(Fault(at, kind, str(rng.randint(0, 30))))
        else:
            faults.append(Fault(at, kind))
    refusals = []
    for _ in range(rng.randint(0, 3)):
        kind = rng.choice(["capacity", "quota", "throttled"])
        refusals.append((rng.randint(0, 40), kind, rng.randint(1, 3)))
    outages = []
    regions = sorted({o.region for o in offers})
    for _ in range(rng.randint(0, 2)):
        outages.append((rng.randint(0, 40), rng.choice(regions), rng.randint(2, 15)))
    surges = []
    for _ in range(prices.choice([0, 1, 1, 2])):
        at, pick = prices.randint(2, 50), prices.randint(0, 99)
        surges.append((at, pick, prices.choice([1.5, 3.0, 10.0]), prices.randint(3, 40)))
    # held capacity: its own generator too (older seeds' draws unchanged); a seed that holds
    # some turns some of its jobs' markets into reserved-then-... ones
    reservations = _held(random.Random(f"reserved-{seed}"), offers, jobs, seed)
    return Draw(
        seed=seed,
        offers=offers,
        mtbp_hours=rng.choice([0.3, 0.7, 1.5, 4.0, 12.0]),
        outage_hours=rng.choice([0.1, 0.3, 1.0]),
        jobs=jobs,
        faults=sorted(faults, key=lambda f: f.at),
        daemons=rng.choice([1, 1, 2]),
        refusals=refusals,
        region_outages=outages,
        surges=surges,
        reservations=reservations,
    )


#: the seeds whose run once found a defect (``REGRESSIONS`` in tests/e2e/test_seeded_run.py): each
#: replays the run that found it, so no held capacity is drawn for them
REPLAYED = frozenset({63, 75, 136, 143, 212, 228, 338, 473, 515, 542, 632, 633, 875, 951})


def _held(
    rng: random.Random, offers: list[Offer], jobs: list[JobPlan], seed: int = -1
) -> list[dict[str, Any]]:
    """The reservations and capacity blocks a seed's account holds (none for most seeds), and
    the jobs made to use them: a block ends mid-run (its notice and end inside the run), an
    open reservation does not; a few jobs name one the account does not hold."""
    if rng.random() >= 0.4 or seed in REPLAYED:
        return []
    out: list[dict[str, Any]] = []
    for n in range(rng.randint(1, 2)):
        o = rng.choice(offers)
        block = rng.random() < 0.7
        start = START + timedelta(seconds=rng.choice([0, 0, rng.randint(1, 40)]) * STEP_S)
        out.append(
            {
                "id": f"{'cb' if block else 'cr'}-{n}",
                "zone": o.zone,
                "instance_type": o.instance_type,
                "kind": "capacity-block" if block else "on-demand",
                "total": rng.choice([1, 1, 2]),
                "starts_at": start.timestamp() if start > START else None,
                # a block: long enough to be launched into (its notice an hour or so on), and
                # ending within the run
                "ends_at": (start + timedelta(minutes=rng.randint(53, 90))).timestamp()
                if block
                else None,
                "held_usd_per_hour": o.price,
                "cloud": o.provider,
            }
        )
    ids = [r["id"] for r in out]
    for job in jobs:
        if rng.random() >= 0.6 or job.nodes > 1:
            continue
        for market in ("spot-then-on-demand", "on-demand", "spot"):
            line = f"market: {market}\n"
            if line in job.policy:
                job.policy = job.policy.replace(line, f"market: reserved-then-{market}\n")
                break
        pick = rng.random()
        if pick < 0.2:
            job.policy += "reservations: [cr-none]\n"  # one the account does not hold
        elif pick < 0.5:
            job.policy += f"reservations: [{rng.choice(ids)}]\n"
    return out


def _job(rng: random.Random, k: int, prices: random.Random | None = None) -> JobPlan:
    name = f"j{k}"
    work_s = rng.choice([600.0, 1200.0, 1800.0, 3600.0])
    market = rng.choice(["spot", "spot", "on-demand", "spot-then-on-demand"])
    nodes = 2 if rng.random() < 0.15 else 1
    lines = [
        f"name: {name}",
        "resources: {gpus: [T4]" + (f", nodes: {nodes}" if nodes > 1 else "") + "}",
        f"market: {market}",
    ]
    with_hours = rng.random() < 0.7
    job = ['  command: ["python", "-c", "pass"]']
    if with_hours:
        job.append(f"  compute_hours: {work_s / 3600.0:.4f}")
        job.append("  reference_gpu: T4")
    code = rng.choice(["none", "none", "workdir", "git"])
    if code == "workdir":
        job.append("  workdir: code")
    elif code == "git":
        job.append("  git: {url: GITREPO}")
    lines += ["job:", *job]
    r = rng.random()
    if r < 0.35:  # a budget: from far too small to plenty
        total = rng.choice([0.004, 0.02, 0.05, 0.2, 1.0])
        lines.append(
            f"budget: {{max_total: {total}, on_exhausted: {rng.choice(['stop', 'stop', 'pause'])}}}"
        )
    elif r < 0.45:
        lines.append(f"budget: {{max_price_per_hour: {rng.choice([0.3, 0.6, 2.0])}}}")
    if prices is not None and prices.random() < 0.4:  # a bid cap, held by the cloud or the daemon
        cap = prices.choice(
            [
                "max_spot_price_per_hour: 0.15",
                "max_spot_price_per_hour: 0.3",
                "max_spot_price_per_gpu_hour: 0.6",
                "max_fraction_of_on_demand: 0.5",
                "max_spot_price_per_hour: 0.3, max_fraction_of_on_demand: 0.7",
            ]
        )
        how = prices.choice(["", ", enforce: daemon", ", enforce: cloud"])
        lines.append(f"bid_cap: {{{cap}{how}}}")
    if rng.random() < 0.3:
        lines.append(f"deadline: {rng.choice(['30m', '1h', '2h', '6h'])}")
    if rng.random() < 0.15:
        lines.append('windows: [{cron: "0 * * * *", duration: ' + rng.choice(["20m", "40m"]) + "}]")
    lines.append("restart: {max_restarts: " + str(rng.choice([2, 5, 20])) + ", zone_cooldown: 10m}")
    exit_code, exit_at = 0, 1.0
    r = rng.random()
    if r < 0.15:
        exit_code, exit_at = 1, rng.uniform(0.05, 0.9)
    elif r < 0.25:
        exit_code, exit_at = 137, rng.uniform(0.05, 0.9)
    setup_fails = frozenset(a for a in (1, 2) if rng.random() < 0.1)
    return JobPlan(
        name=name,
        policy="\n".join(lines) + "\n",
        work_s=work_s,
        exit_code=exit_code,
        exit_at=exit_at,
        setup_fails=setup_fails,
        save_s=rng.choice([2.0, 5.0, 20.0, 200.0]),  # 200 s: slower than every notice
        ckpt_every_s=rng.choice([120.0, 300.0, 900.0]),
        submit_pass=rng.choice([0, 0, 0, rng.randint(1, 30)]),
        code=code,
        nodes=nodes,
    )


# -- the sim cloud, in this process -----------------------------------------------------------


class CloudBox:
    """The sim cloud of one run: its state directory and the live :class:`SimCloud` (None
    while its server is down: calls fail as a dead server's do)."""

    def __init__(self, state_dir: Path) -> None:
        self.dir = state_dir
        self.cloud: Any = None
        self.start()

    def start(self) -> None:
        from providers.sim import cloud as cloud_mod
        from providers.sim import sandbox

        keep = sandbox.set_subreaper
        sandbox.set_subreaper = lambda: None  # this process is no VM's parent
        try:
            self.cloud = cloud_mod.SimCloud(self.dir, "http://127.0.0.1:9")
        finally:
            sandbox.set_subreaper = keep

    def stop(self) -> None:
        self.cloud = None

    def call(self, method: str, path: str, doc: Any) -> Any:
        from providers.sim.client import SimUnreachable
        from providers.sim.config import SimError
        from providers.sim.server import Handler

        if self.cloud is None:
            raise SimUnreachable("the sim server is down (restarting)")
        url = urlsplit(path)
        query = dict(parse_qsl(url.query))
        body = json.loads(json.dumps(doc)) if doc is not None else {}
        me = types.SimpleNamespace(server=types.SimpleNamespace(cloud=self.cloud))
        try:
            status, out = Handler._api(me, method, url.path, query, body)  # type: ignore[arg-type]
        except SimError as err:
            raise ProviderError(
                ErrorKind(err.kind), err.code, err.message, provider="sim"
            ) from None
        except (ValueError, TypeError, KeyError) as exc:
            raise ProviderError(
                ErrorKind.INVALID, "InvalidParameter", str(exc), provider="sim"
            ) from None
        if status != 200:
            raise ProviderError(ErrorKind.TRANSIENT, f"HTTP{status}", str(out), provider="sim")
        return json.loads(json.dumps(out))


class InProcessSim(SimProvider):
    """The sim provider, its server's routes answered in this process (same requests, same
    answers, same errors; no server process, no sockets)."""

    box: CloudBox

    @property
    def url(self) -> str:
        if self._url is None:
            self.box.call("POST", "/v1/config", self.options)
            self._url = "inprocess:"
        return self._url

    def _call(self, what: str, method: str, path: str, doc: Any = None) -> Any:
        from providers.base import call_with_retries
        from providers.sim.client import SimUnreachable

        def once() -> Any:
            try:
                self.url  # noqa: B018  (configures the server on first use)
                return self.box.call(method, path, doc)
            except SimUnreachable as exc:
                self._url = None
                raise ProviderError(
                    ErrorKind.TRANSIENT, "SimServerDown", str(exc), provider="sim"
                ) from None

        return call_with_retries(once, lambda _e: None, policy=self.retry, what=f"sim {what}")

    def shutdown_server(self, *, terminate_all: bool = True) -> None:
        self._url = None


# -- the agent, played ----------------------------------------------------------------------


@dataclass
class Played:
    """One attempt's agent: what it has done so far (virtual seconds of work)."""

    attempt: int
    instance_id: str
    cloud: str
    started: datetime
    resumed_from: str | None
    done_s: float
    state: str = "starting"
    exit_code: int | None = None
    setup_error: dict[str, Any] | None = None
    note: str | None = None
    notice: Any = None  # AgentNotice
    uploaded: str | None = None
    uploaded_at: datetime | None = None
    history: list[tuple[str, datetime]] = field(default_factory=list)
    boot_s: float = 20.0


class AgentPlayer:
    """Plays every job's node agent from its plan: before each pass, each live attempt
    works one step and writes its record as the agent does."""

    def __init__(self, ck_root: Path, tmp: Path) -> None:
        self.ck_root = ck_root
        self.tmp = tmp
        self.played: dict[tuple[str, int], Played] = {}
        self.reachable = True

    def store(self, job_id: str) -> Any:
        from provisioner.agent.store import CheckpointStore

        return CheckpointStore(f"file://{self.ck_root}", job_id)

    def step(
        self, job_id: str, plan: JobPlan, live: list[Instance], now: datetime, box: CloudBox
    ) -> None:
        if not live or not self.reachable:
            return
        by_attempt: dict[int, list[Instance]] = {}
        for i in live:
            by_attempt.setdefault(i.attempt or 0, []).append(i)
        store = self.store(job_id)
        # the oldest live attempt works; a replacement waits for it to go (the handover)
        for attempt in sorted(by_attempt)[:1]:
            nodes = sorted(by_attempt[attempt], key=lambda i: i.node)
            lead = nodes[0]
            p = self.played.get((job_id, attempt))
            if p is None:
                latest = store.latest()
                from provisioner.agent.store import step_of

                p = Played(
                    attempt=attempt,
                    instance_id=lead.id,
                    cloud="",
                    started=lead.launched_at or now,
                    resumed_from=latest,
                    done_s=float(step_of(latest) or 0),
                )
                self.played[(job_id, attempt)] = p
                if attempt in plan.setup_fails:
                    p.state, p.exit_code = "setup-failed", 3
                    p.note = "setup failed: pip install exited 1"
                    p.setup_error = {
                        "stage": "setup",
                        "message": "pip install -r requirements.txt exited 1",
                        "command": "pip install -r requirements.txt",
                        "exit_code": 1,
                        "tail": ["ERROR: No matching distribution found for torch==9.9"],
                        "fingerprint": "seeded-setup",
                    }
            if p.state in ("running", "starting", "checkpointing"):
                self._work(p, plan, store, lead, now, box)
            self._write(store, job_id, p, now)

    def _work(
        self, p: Played, plan: JobPlan, store: Any, lead: Instance, now: datetime, box: CloudBox
    ) -> None:
        from provisioner.agent.protocol import AgentNotice

        rec = None
        with contextlib.suppress(ProviderError, Exception):
            rec = box.call("GET", f"/v1/instances/{lead.id}", None) if box.cloud else None
        if rec and not p.cloud:
            p.cloud = str(rec.get("cloud") or "")
        since = max(p.started + timedelta(seconds=p.boot_s), now - timedelta(seconds=STEP_S))
        ran = max(0.0, (now - since).total_seconds())
        if ran <= 0 and p.state == "starting":
            return
        p.state = "running"
        before = p.done_s
        p.done_s = min(plan.work_s, p.done_s + ran)
        stop_at = plan.work_s * plan.exit_at if plan.exit_code else plan.work_s
        if before < stop_at <= p.done_s:
            p.done_s = stop_at
            if plan.exit_code:
                p.state, p.exit_code = "failed", plan.exit_code
                p.note = f"job exited with {plan.exit_code}"
                return
        # periodic checkpoints
        every = plan.ckpt_every_s
        if int(p.done_s // every) > int(before // every) or (p.done_s >= plan.work_s):
            self._checkpoint(
                store,
                p,
                int(p.done_s // every * every) if p.done_s < plan.work_s else int(plan.work_s),
                now,
            )
        if p.done_s >= plan.work_s:
            store.write_text("output/result.json", json.dumps(plan.expected))
            p.state, p.exit_code = "done", 0
            return
        if rec and rec.get("notice_at") and p.notice is None:
            seen = datetime.fromisoformat(str(rec["notice_at"]))
            deadline = datetime.fromisoformat(str(rec["deadline"])) if rec.get("deadline") else None
            raw = f"{p.cloud or 'sim'}: interruption notice"
            p.notice = AgentNotice(seen, deadline, raw, "metadata")
            left = (deadline - now).total_seconds() if deadline else 0.0
            if plan.save_s <= left:  # the save beats the notice: the work so far is kept
                self._checkpoint(store, p, int(p.done_s), now)
            p.state = "checkpointing"

    def _checkpoint(self, store: Any, p: Played, step: int, now: datetime) -> None:
        name = f"ckpt-{step:08d}"
        from provisioner.agent.store import step_of

        cur = step_of(store.latest())
        if cur is None or cur < step:  # ``latest`` never goes back
            store.write_text("latest", name + "\n")
        p.uploaded, p.uploaded_at = name, now
        p.history.append((name, now))

    def _write(self, store: Any, job_id: str, p: Played, now: datetime) -> None:
        """The agent's own record (provisioner.agent.report.progress_record) of this attempt."""
        from provisioner.agent.report import iso, progress_record

        job_file = self.tmp / f"{job_id}-{p.attempt}.json"
        job_file.write_text(json.dumps({"step": round(p.done_s), "total_steps": None}))
        syncer = types.SimpleNamespace(
            uploaded=p.uploaded, uploaded_at=p.uploaded_at, history=list(p.history[-5:]), error=None
        )
        agent = types.SimpleNamespace(
            spec=types.SimpleNamespace(
                job_id=job_id, attempt=p.attempt, instance_id=p.instance_id, cloud=p.cloud
            ),
            job_progress_file=job_file,
            syncer=syncer if p.uploaded else None,
            resumed_from=p.resumed_from,
            state=p.state,
            notice=p.notice,
            stop_reason=None,
            early=types.SimpleNamespace(to_doc=lambda: None),
            exit_code=p.exit_code,
            note=p.note,
            gpu=None,
            idle=None,
            probe=None,
            prepared=None,
            setup_error=p.setup_error,
            job_log=None,
            started_at=p.started,
        )
        doc = progress_record(agent)  # type: ignore[arg-type]
        doc["updated_at"] = iso(now)  # the agent's clock is the run's (virtual) one
        store.write_progress(doc)


# -- the run -------------------------------------------------------------------------------


class LockableStore(Store):
    """The daemons' store: while ``locked`` (a count of sessions let through first), each
    session fails as SQLite's does when another writer holds the lock past the timeout."""

    locked: int | None = None

    @contextlib.contextmanager
    def session(self) -> Iterator[Any]:
        if self.locked is not None:
            if self.locked <= 0:
                raise sqlite3.OperationalError("database is locked")
            self.locked -= 1
        with super().session() as s:
            yield s


@dataclass
class Result:
    seed: int
    violations: list[tuple[int, inv.Violation]]  # (pass, violation), first seen
    jobs: int
    passes: int
    seconds: float
    outcomes: dict[str, str]
    notes: list[str] = field(default_factory=list)
    summary: str = ""

    @property
    def ok(self) -> bool:
        return not self.violations

    def report(self) -> str:
        lines = [
            f"{self.summary}: {self.jobs} jobs, {self.passes} passes, {self.seconds:.1f} s, "
            f"{len(self.violations)} violation(s)"
        ]
        for k, v in self.violations:
            lines.append(f"  pass {k}: {v}")
        if self.violations:
            lines.append(f"  replay: {REPLAY.format(seed=self.seed)}")
        return "\n".join(lines)


_GIT: Path | None = None


def _git_repo() -> Path:
    """A local repository with one commit (the git-code jobs' code)."""
    global _GIT
    if _GIT is None or not (_GIT / ".git").exists():
        root = Path(tempfile.mkdtemp(prefix="seeded-git-"))
        (root / "train.py").write_text("print('hello')\n")
        env = {
            **os.environ,
            "GIT_AUTHOR_NAME": "s",
            "GIT_AUTHOR_EMAIL": "s@x",
            "GIT_COMMITTER_NAME": "s",
            "GIT_COMMITTER_EMAIL": "s@x",
        }
        for cmd in (["git", "init", "-q"], ["git", "add", "."], ["git", "commit", "-qm", "code"]):
            subprocess.run(cmd, cwd=root, env=env, check=True, capture_output=True)
        _GIT = root
    return _GIT


_SCHEMA: Path | None = None


def _store_away(ck: Path, aside: Path) -> None:
    """The checkpoint store unreachable: its directory moved aside and a plain file in its
    place, so that every read and write under it fails (as a bucket that does not answer),
    and nothing can create it anew meanwhile."""
    ck.rename(aside)
    ck.write_text("unreachable\n")


def _store_back(ck: Path, aside: Path) -> None:
    """The checkpoint store reachable again, as it was."""
    ck.unlink()
    aside.rename(ck)


def _fresh_store(path: Path) -> None:
    """An empty store at the newest schema at ``path``: a copy of one migrated once per
    process (the migrations run once, not once per seed)."""
    global _SCHEMA
    if _SCHEMA is None or not _SCHEMA.exists():
        import atexit

        root = Path(tempfile.mkdtemp(prefix="seeded-schema-"))
        atexit.register(shutil.rmtree, root, True)
        Store(f"sqlite:///{root / 'store.db'}").close()  # the last close folds the WAL in
        _SCHEMA = root / "store.db"
    shutil.copyfile(_SCHEMA, path)


def run_seed(
    seed: int, tmp: Path, *, verbose: bool = False, max_passes: int = MAX_PASSES
) -> Result:
    """Run one seed in ``tmp`` (emptied first); the invariants after every pass."""
    import logging

    from provisioner.api import submit
    from provisioner.control.reconciler import Reconciler

    t0 = time.perf_counter()
    d = draw(seed)
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    logging.getLogger("provisioner").setLevel(logging.INFO if verbose else logging.CRITICAL)
    ck = tmp / "ck"
    ck.mkdir()
    (tmp / "code").mkdir()
    (tmp / "code" / "train.py").write_text("print('hi')\n")
    box = CloudBox(tmp / "sim")
    catalog = Catalog.from_offers(d.offers, "seeded")
    options: dict[str, Any] = {
        "state_dir": str(tmp / "sim"),
        "mimic": "all",
        "seconds_per_hour": 3600.0,
        "seed": seed,
        "mtbp_hours": d.mtbp_hours,
        "outage_hours": d.outage_hours,
        "notice_floor_s": 0.0,
        "run_agent": False,
        "idle_exit_s": 3600.0,
        "rebalance_lead_s": 0.0,
    }
    if d.reservations:
        options["reservations"] = d.reservations
    retry = RetryPolicy(attempts=3, base_delay=0.0, max_delay=0.0)

    def factory(name: str, opts: dict[str, Any]) -> SimProvider:
        assert name == "sim", name
        prov = InProcessSim(catalog=catalog, retry=retry, **opts)
        prov.box = box
        return prov

    url = f"sqlite:///{tmp / 'store.db'}"
    _fresh_store(tmp / "store.db")
    store = LockableStore(url, migrate=False)
    checker = Store(url, migrate=False)
    clock = [START]
    points = [ArmedFailpoints() for _ in range(d.daemons)]

    def daemon(k: int) -> Reconciler:
        rec = Reconciler(
            store,
            provider_factory=factory,
            clock=lambda: clock[0],
            owner=f"seeded-{k}-{time.monotonic_ns()}",
            pass_interval_s=STEP_S,
            failpoints=points[k],
            share=d.daemons > 1,
        )
        rec.check_invariants = False  # the harness runs every check itself
        return rec

    daemons = [daemon(k) for k in range(d.daemons)]
    sim = factory("sim", dict(options))
    sim.set_clock(START)
    player = AgentPlayer(ck, tmp)
    plans: dict[str, JobPlan] = {}
    expected: dict[str, dict[str, Any]] = {}
    notes: list[str] = []
    found: dict[tuple[inv.Invariant, str], tuple[int, inv.Violation]] = {}
    feed = inv.EventFeed()  # the events the checks have read so far (only new ones are read)
    watch = inv.OverCapWatch()  # live instances with no bid above their cap, since when
    seen: list[Any] = [None]  # the job rows of the latest check of this pass (None: none ran)
    passes = 0
    away: int = 0  # passes left with the checkpoint store unreachable
    pending = list(d.jobs)
    idle = 0  # passes in a row with nothing of ours running

    def catalogs() -> dict[str, Catalog]:
        """Each active job's offers as the daemon has them (plan and the daemon agree)."""
        rec = daemons[0]
        rows = checker.jobs([s.value for s in ACTIVE_JOB_STATES])
        return {j.id: rec.catalog_for(j) for j in rows}

    def over_cap() -> list[str]:
        """Live spot instances launched with no bid whose price at the sim is above the cap
        their launch was held to (the sim's own records: what the cloud bills)."""
        cloud = box.cloud
        out = []
        for i in cloud.instances.values():
            cap = i.get("price_ceiling")
            if i["state"] != "running" or i["market"] != "spot" or i.get("bid_cap") is not None:
                continue
            price = cloud.spot_price(i["zone"], cloud.now(), i.get("spot_base"))
            if cap is not None and price is not None and price > float(cap) + 1e-9:
                out.append(i["id"])
        return out

    def check(k: int) -> None:
        snap = inv.snapshot(
            checker,
            [sim],
            clock[0],
            expected_results=expected,
            feed=feed,
            catalogs=catalogs(),
            interval_s=STEP_S,
            over_cap_since=watch.update(clock[0], over_cap()),
        )
        seen[0] = snap.jobs
        for v in inv.run_checks(snap, inv.FULL):
            key = (v.invariant, v.job_id)
            if key not in found:
                found[key] = (k, v)
                if verbose:
                    print(f"  pass {k}: VIOLATION {v}")

    k = 0
    for k in range(max_passes):
        now = START + timedelta(seconds=k * STEP_S)
        clock[0] = now
        # submissions due
        for plan in [p for p in pending if p.submit_pass <= k]:
            pending.remove(plan)
            text = (
                plan.policy.replace("GITREPO", str(_git_repo()))
                if plan.code == "git"
                else plan.policy
            )
            path = tmp / f"{plan.name}.yaml"
            path.write_text(text + f"checkpoint:\n  uri: file://{ck}\n")
            try:
                _, jid = submit(
                    path,
                    provider="sim",
                    provider_defaults=False,
                    provider_options=dict(options),
                    store=checker,
                    now=now,
                )
            except Exception as exc:  # refused at submission (nothing eligible, a bad policy)
                notes.append(
                    f"{plan.name} refused at submit: {type(exc).__name__}: {str(exc)[:160]}"
                )
                continue
            plans[jid] = plan
            if plan.exit_code == 0 and not plan.setup_fails:
                expected[jid] = plan.expected
        # the market moves; injected refusals and outages due now
        for at, kind, times in d.refusals:
            if at == k and box.cloud is not None:
                code = {
                    "capacity": "InsufficientInstanceCapacity",
                    "quota": "VcpuLimitExceeded",
                    "throttled": "RequestLimitExceeded",
                }[kind]
                box.cloud.inject(
                    {
                        "operation": "launch",
                        "kind": kind,
                        "code": code,
                        "times": times,
                        "status": 409 if kind == "capacity" else 400,
                    }
                )
        for at, pick, factor, n in d.surges:
            if at == k and box.cloud is not None:
                running = sorted(
                    {i["zone"] for i in box.cloud.instances.values() if i["state"] == "running"}
                    & {o.zone for o in d.offers}
                )
                zones = running or sorted({o.zone for o in d.offers})
                until = (now + timedelta(seconds=n * STEP_S)).timestamp()
                box.cloud.surges.set(zones[pick % len(zones)], factor, until)
        for at, region, n in d.region_outages:
            if at == k and box.cloud is not None:
                until = (now + timedelta(seconds=n * STEP_S)).timestamp()
                for o in d.offers:
                    if o.region == region:
                        box.cloud.outages[o.zone] = until
        with contextlib.suppress(ProviderError):
            sim.set_clock(now)
        # the agents work and report
        try:
            listed = sim.list({TAG_MANAGED: "true"}) if box.cloud is not None else []
        except ProviderError:
            listed = []
        for jid, plan in plans.items():
            live = [i for i in listed if i.job_id == jid and i.state.alive]
            player.step(jid, plan, live, now, box)
        # faults due before this pass
        lock_after: int | None = None
        for f in [f for f in d.faults if f.at == k]:
            if f.kind == "crash":  # kill -9 between passes: a new process
                victim = k % len(daemons)
                daemons[victim] = daemon(victim)
            elif f.kind == "kill":
                points[k % len(daemons)].point = f.arg
            elif f.kind == "lock":
                lock_after = int(f.arg)
            elif f.kind == "ckpt-away" and away == 0:
                away = f.passes
                _store_away(ck, tmp / "ck-away")
                player.reachable = False
            elif f.kind == "sim-restart":
                box.stop()
        # the passes
        seen[0] = None
        for idx in range(len(daemons)):
            store.locked = lock_after if idx == 0 else None
            try:
                daemons[idx].run_pass()
            except Killed as exc:
                notes.append(f"pass {k}: daemon {idx} killed at {exc}")
                daemons[idx] = daemon(idx)
                store.locked = None
                daemons[idx].run_pass()  # the replacement's pass (the same moment)
            except Exception as exc:  # a pass that raised: the daemon's loop logs and goes on
                notes.append(f"pass {k}: daemon {idx}: {type(exc).__name__}: {str(exc)[:200]}")
            finally:
                store.locked = None
            passes += 1
            if box.cloud is not None:
                check(k)
        if box.cloud is None:  # the restarted server reads its state back
            box.start()
        if away > 0:
            away -= 1
            if away == 0:
                _store_back(ck, tmp / "ck-away")
                player.reachable = True
        busy = any(i.job_id in plans and i.state.alive for i in listed)
        idle = 0 if busy or pending or any(f.at > k for f in d.faults) else idle + 1
        if (
            not pending
            and plans
            and (
                idle >= IDLE_PASSES
                or all(
                    (j.state in FINAL_STATES)
                    for j in (
                        [j for j in seen[0] if j.id in plans]
                        if seen[0] is not None
                        else checker.jobs_by_id(list(plans))
                    )
                )
            )
        ):
            # one more pass for the reaper and the checks after the last end
            clock[0] = now + timedelta(seconds=STEP_S)
            for rec in daemons:
                rec.run_pass()
                passes += 1
            check(k + 1)
            break
    if away > 0:
        _store_back(ck, tmp / "ck-away")
    outcomes = {
        plans[j.id].name: f"{j.state} ({j.reason[:80]})" if j.reason else j.state
        for j in checker.jobs_by_id(list(plans))
    }
    for rec in daemons:
        rec.close()
    return Result(
        seed=seed,
        violations=sorted(found.values(), key=lambda kv: (kv[0], kv[1])),
        jobs=len(plans),
        passes=passes,
        seconds=time.perf_counter() - t0,
        outcomes=outcomes,
        notes=notes,
        summary=d.summary(),
    )
