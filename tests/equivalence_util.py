"""One scenario, two drivers of decide(): the simulator's engine and the daemon's reconciler.

A :class:`Case` is a policy and a spot availability trace per zone, on a grid of ``step_s``.

* :func:`run_engine` replays it with :func:`provisioner.simulate.engine.run_window` (the
  ``provisioner simulate`` path), recording each action as it is carried out.
* :func:`run_daemon` runs the real thing on a virtual clock: the job is submitted to a SQLite
  store, the :class:`~provisioner.control.reconciler.Reconciler` makes one pass per step, and
  the ``sim`` provider's server (its own process) follows the same trace on its virtual clock
  (``POST /v1/clock``) with the case's interruption notice (none by default: the engine
  preempts at the step boundary) and no agent process (``run_agent=False``). The test plays the job: before each pass it
  writes ``progress.json`` to the checkpoint store as the agent would, with the engine's model
  of work (no progress during the changeover, checkpoints continuous), and the notice served
  on the instance, as the agent reports it (the sim's API, like AWS's, reports none).

Both are reduced to the same :class:`Run`: the effects (launches that went through with their
market and zone, terminations, failure) step by step, how it ended, and what it cost. The
daemon's run also says what the cloud billed (the sim's invoice per instance).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from policies import parse_policy
from providers.facts import billing_for
from providers.sim import SimProvider
from provisioner.core.catalog import Catalog
from provisioner.core.decide import Action, Fail, Launch, Terminate
from provisioner.core.models import TAG_JOB, Instance, Offer, Reservation, ReservationKind
from provisioner.core.rebalance import RebalanceModel
from provisioner.simulate.engine import World, run_window
from provisioner.simulate.replay import total_steps
from provisioner.simulate.scenario import P3_2XLARGE_ON_DEMAND, P3_2XLARGE_SPOT, Scenario

START = datetime(2026, 1, 1, tzinfo=UTC)  # the engine's epoch; midnight, for the windows
STEP_S = 360.0  # one pass: longer than the daemon's memory of a capacity error (5 min)
INSTANCE = ("p3.2xlarge", "V100", 1, 8, 61)
_ORDER = {"terminate": 0, "launch": 1, "fail": 2}


def changeover_h() -> float:
    """The changeover the scenarios' world has: the one both drivers tell decide()."""
    from provisioner.core.views import CHANGEOVER_H

    return CHANGEOVER_H


def availability(spec: str, steps: int) -> list[int]:
    """``"U8 D12 U"``: up 8 steps, down 12, then up to the end (a run without a count fills)."""
    out: list[int] = []
    runs = spec.split()
    for i, run in enumerate(runs):
        value = {"U": 1, "D": 0}[run[0]]
        if len(run) == 1:
            if i != len(runs) - 1:
                raise ValueError(f"only the last run may go without a count: {spec!r}")
            out += [value] * max(0, steps - len(out))
        else:
            out += [value] * int(run[1:])
    if len(out) < steps:
        out += [out[-1] if out else 0] * (steps - len(out))
    return out[:steps]


@dataclass(frozen=True)
class Case:
    name: str
    policy: str  # YAML, without checkpoint (the harness adds a continuous one)
    zones: dict[str, str]  # zone -> availability (see :func:`availability`), ranked in order
    step_s: float = STEP_S
    notice_s: float = 0.0  # the interruption notice (0: capacity goes at the step boundary)
    #: steps before whose pass the daemon's process is replaced by a new one (kill -9 between
    #: passes: nothing kept but the store and the cloud)
    crashes: tuple[int, ...] = ()
    #: early signals: the rebalance recommendation's model, the engine's and the sim's
    rebalance: RebalanceModel | None = None
    #: (step, failpoint): before the step's pass, a daemon process runs that pass and dies at
    #: the failpoint (exit 137, as kill -9 leaves it: :mod:`tests.overlap_pass`); a new one
    #: then runs the pass again from the store and the cloud
    kills: tuple[tuple[int, str], ...] = ()
    #: a gang of this many instances (the policy says so too: ``resources.nodes``)
    nodes: int = 1
    #: capacity blocks the account holds: (id, zone, hours from the start to its end)
    blocks: tuple[tuple[str, str, float], ...] = ()

    def reservations(self) -> tuple[Reservation, ...]:
        """The blocks as the engine's world holds them (the sim lists the same)."""
        it = INSTANCE[0]
        return tuple(
            Reservation(
                "aws",
                rid,
                zone[:-1],
                zone,
                it,
                ReservationKind.CAPACITY_BLOCK,
                total=1,
                free=1,
                ends_at=START + timedelta(hours=h),
                held_usd_per_hour=P3_2XLARGE_ON_DEMAND,
            )
            for rid, zone, h in self.blocks
        )

    def sim_reservations(self) -> list[dict[str, Any]]:
        return [
            {
                "id": r.id,
                "zone": r.zone,
                "instance_type": r.instance_type,
                "kind": r.kind.value,
                "total": r.total,
                "ends_at": r.ends_at.timestamp() if r.ends_at else None,
                "held_usd_per_hour": r.held_usd_per_hour,
                "cloud": "aws",
            }
            for r in self.reservations()
        ]

    def scenario(self) -> Scenario:
        pol = parse_policy(self.policy)
        assert pol.job.compute_hours is not None and isinstance(pol.deadline, timedelta)
        return Scenario(
            work_s=pol.job.compute_hours * 3600.0,
            deadline_s=pol.deadline.total_seconds(),
            overhead_s=changeover_h() * 3600.0,
            step_s=self.step_s,
            price_on_demand=P3_2XLARGE_ON_DEMAND,
            price_spot=P3_2XLARGE_SPOT,
            checkpoint_s=0.0,
            notice_s=self.notice_s,
            rebalance=self.rebalance,
            launch_calls_per_hour=pol.restart.launch_calls_per_hour,
            billing=billing_for("sim"),  # the sim bills as AWS: what a look costs there
            nodes=self.nodes,
        )

    def steps(self) -> int:
        return total_steps(self.scenario())

    def avail(self) -> np.ndarray:
        n = self.steps()
        cols = [availability(spec, n) for spec in self.zones.values()]
        return np.asarray(cols, dtype=bool).T  # (steps, zones)

    def offers(self) -> list[Offer]:
        """The world's offers, the same for both: each zone on spot and on-demand."""
        return offers_for(list(self.zones))


def offers_for(zones: list[str]) -> list[Offer]:
    it, gpu, n, cpu, mem = INSTANCE
    return [
        Offer("aws", z[:-1], z, it, gpu, n, cpu, mem, P3_2XLARGE_ON_DEMAND, P3_2XLARGE_SPOT)
        for z in zones
    ]


def catalog_for(zones: list[str]) -> Catalog:
    return Catalog.from_offers(offers_for(zones), "equivalence")


@dataclass(frozen=True, order=True)
class Effect:
    step: int
    order: int
    kind: str  # launch, terminate, fail
    market: str = ""
    zone: str = ""

    def __repr__(self) -> str:
        where = f" {self.market} {self.zone}" if self.market else ""
        return f"{self.step}:{self.kind}{where}"


def effect(step: int, kind: str, market: str = "", zone: str = "") -> Effect:
    return Effect(step, _ORDER[kind], kind, market, zone)


@dataclass
class Run:
    effects: list[Effect]
    outcome: tuple[str, int | None]  # (succeeded | failed | unfinished, step it ended at)
    cost: float
    prices: list[float]  # USD/h of each instance that ran
    cloud_bill: float | None = None  # the sim's invoice (daemon runs)
    refused: list[Effect] = field(default_factory=list)  # launches refused for capacity
    notes: list[str] = field(default_factory=list)
    live: list[int] = field(default_factory=list)  # the job's live instances after each pass
    #: each launch the daemon sent: attempt, market, the agent's spec (daemon runs)
    sent: list[tuple[int, str, dict[str, Any]]] = field(default_factory=list)
    left: int = 0  # live instances of the job once it ended (orphans)
    #: each daemon killed in a pass: (step, failpoint, the job's live instances just after)
    killed: list[tuple[int, str, int]] = field(default_factory=list)
    #: every instance the cloud ran for the job, and the attempts' instance ids (orphans)
    ran: set[str] = field(default_factory=set)
    recorded: set[str] = field(default_factory=set)

    def granularity(self, cloud: str = "aws") -> float:
        """What billing granularity can account for (USD): one billing unit (the cloud's
        minimum or increment, whichever is longer) per instance, at its price."""
        from providers.facts import billing_for

        rule = billing_for(cloud)
        unit_h = max(rule.minimum_s, rule.increment_s) / 3600.0
        return sum(p * unit_h for p in self.prices) + 1e-6


def _step(at: datetime, step_s: float) -> int:
    at = at if at.tzinfo else at.replace(tzinfo=UTC)
    return round((at - START).total_seconds() / step_s)


def _settled(effects: list[Effect], outcome: tuple[str, int | None]) -> list[Effect]:
    """In order, without the termination that finishing a job is (the engine stops billing
    when the work is done; the daemon stops the instance at the pass that sees it done)."""
    done = outcome[1] if outcome[0] == "succeeded" else None
    return sorted(e for e in effects if not (e.kind == "terminate" and e.step == done))


# -- the simulator ---------------------------------------------------------------------------


def run_engine(case: Case, *, observed: bool = True) -> Run:
    """The simulator's run (``observed=False``: the oracle simulator instead)."""
    policy = parse_policy(case.policy)
    sc = case.scenario()
    done: list[tuple[datetime, Action]] = []
    world = World(zones=list(case.zones), reservations=case.reservations())
    row = run_window(policy, case.avail(), sc, world, start=START, actions=done, observed=observed)
    placed: dict[str, tuple[str, str]] = {}
    effects: list[Effect] = []
    prices: list[float] = []
    for at, action in done:
        k = _step(at, case.step_s)
        if isinstance(action, Launch):
            p = action.placement
            prices.append(p.price_per_hour * p.nodes)
            placed[f"i-{action.attempt}"] = (p.market.value, p.offer.zone)
            effects.append(effect(k, "launch", *placed[f"i-{action.attempt}"]))
        elif isinstance(action, Terminate):
            effects.append(effect(k, "terminate", *placed.get(action.instance_id, ("", ""))))
        elif isinstance(action, Fail):
            effects.append(effect(k, "fail"))
    if row["failed"]:
        fails = [e.step for e in effects if e.kind == "fail"]
        outcome: tuple[str, int | None] = ("failed", fails[-1] if fails else None)
    elif np.isfinite(row["finish_hours"]):
        outcome = ("succeeded", round(row["finish_hours"] * 3600.0 / case.step_s))
    else:
        outcome = ("unfinished", None)
    return Run(_settled(effects, outcome), outcome, float(row["cost"]), prices)


# -- the daemon ------------------------------------------------------------------------------


class Agent:
    """Plays the job for the daemon: its progress per step, written to the checkpoint store as
    the node agent writes it (``progress.json``), on the engine's model of work: a new instance
    makes no progress during the changeover; checkpoints are continuous."""

    def __init__(
        self, uri: str, job_id: str, work_s: float, changeover_s: float, sim: SimProvider
    ) -> None:
        from provisioner.agent.store import CheckpointStore

        self.store = CheckpointStore(uri, job_id)
        self.job_id, self.work_s, self.changeover_s = job_id, work_s, changeover_s
        self.sim = sim
        self.done_s = 0.0
        self.instance: Instance | None = None  # the one that ran the step just gone

    def notice(self) -> dict[str, Any] | None:
        """The notice served on the instance's metadata endpoint, as the agent reports it (the
        sim's API reports none for AWS, as AWS's does not: the agent's record carries it)."""
        inst = self.instance
        if inst is None:
            return None
        rec = self.sim.sandbox(inst.id)
        if not rec.get("notice_at"):
            return None
        raw = "aws: spot/instance-action terminate"
        return {"seen_at": rec["notice_at"], "deadline": rec["deadline"], "raw": raw}

    def rebalance(self) -> dict[str, Any] | None:
        """The rebalance recommendation the sim serves on the instance's metadata endpoint,
        read over HTTP as the node agent reads it, and reported as it reports it."""
        from providers.facts import cloud_facts
        from provisioner.agent.signals import EarlyReader

        inst, early = self.instance, cloud_facts("aws").early
        if inst is None or early is None:
            return None
        url = self.sim.sandbox(inst.id)["metadata_url"]
        got = EarlyReader("aws", url, early, timeout=5.0).read()
        return None if got is None else got.to_doc()

    def ran(self, since: datetime, step_s: float) -> None:
        """Credit the step from ``since`` to the instance that ran it (if any)."""
        inst = self.instance
        if inst is None or inst.launched_at is None:
            return
        pending = max(0.0, self.changeover_s - (since - inst.launched_at).total_seconds())
        self.done_s = min(self.work_s, self.done_s + max(0.0, step_s - pending))

    def report(self, now: datetime) -> None:
        inst = self.instance
        if inst is None and self.done_s <= 0:
            return  # nothing ran yet: no progress file (as before the first agent starts)
        done = self.done_s >= self.work_s - 1e-9
        steps = round(self.done_s)
        ckpt = f"ckpt-{steps:08d}"
        at = now.isoformat()
        self.store.write_text(
            "progress.json",
            json.dumps(
                {
                    "job_id": self.job_id,
                    "attempt": None if inst is None else inst.attempt,
                    "instance_id": None if inst is None else inst.id,
                    "state": "done" if done else "running",
                    "step": steps,
                    "total_steps": round(self.work_s),
                    "last_checkpoint": ckpt,
                    "last_checkpoint_step": steps,
                    "last_checkpoint_at": at,
                    "updated_at": at,
                    "notice": self.notice(),
                    "rebalance": self.rebalance(),
                }
            ),
        )


class _Sim(SimProvider):
    """The sim provider, keeping what each launch asked for (attempt, market, the agent's spec)."""

    sent: ClassVar[list[tuple[int, str, dict[str, Any]]]] = []

    def launch(self, request: Any) -> Instance:
        _Sim.sent.append((request.attempt, request.market.value, dict(request.job_spec or {})))
        return super().launch(request)


def reconciler_for(store: Any, clock: list[datetime], catalog: Catalog, step_s: float) -> Any:
    from provisioner.control.reconciler import Reconciler

    def factory(name: str, options: dict[str, Any]) -> SimProvider:
        assert name == "sim"
        return _Sim(catalog=catalog, **options)

    return Reconciler(
        store,
        provider_factory=factory,
        clock=lambda: clock[0],
        owner="equivalence",
        pass_interval_s=step_s,  # the real interval between passes: decide()'s step
    )


def _rebalance_options(model: RebalanceModel | None) -> dict[str, Any]:
    """The sim's options for the case's rebalance model (none: no recommendation served)."""
    if model is None:
        return {"rebalance_lead_s": 0.0}
    return {
        "rebalance_lead_s": model.lead_s,
        "rebalance_precede_p": model.precede_p,
        "rebalance_false_per_day": model.false_per_day,
        "seed": model.seed,
    }


def run_daemon(case: Case, tmp: Path) -> Run:
    from provisioner.api import submit
    from provisioner.control.store import FINAL_STATES, Store

    sc = case.scenario()
    n = case.steps()
    avail = case.avail()
    traces = tmp / "traces"
    traces.mkdir(parents=True)
    files = {}
    for z, zone in enumerate(case.zones):
        path = traces / f"{zone}.json"
        doc = {"metadata": {"gap_seconds": case.step_s}, "data": [int(v) for v in avail[:, z]]}
        path.write_text(json.dumps(doc))
        files[zone] = str(path)
    options: dict[str, Any] = {
        "state_dir": str(tmp / "sim"),
        "mimic": "aws",
        "zones": list(case.zones),
        "seconds_per_hour": 3600.0,  # the virtual clock runs in simulated seconds
        "trace": files,
        "mtbp_hours": None,
        "market_notice_s": case.notice_s,  # as the engine: none, or one served at the step
        "notice_floor_s": 0.0,
        "run_agent": False,
        **_rebalance_options(case.rebalance),
        "idle_exit_s": 120.0,
    }
    if case.blocks:
        options["reservations"] = case.sim_reservations()
    catalog = catalog_for(list(case.zones))
    sim = SimProvider(catalog=catalog, **options)
    _Sim.sent = []
    ck = tmp / "ck"
    policy_path = tmp / "policy.yaml"
    policy_path.write_text(case.policy + f"\ncheckpoint:\n  uri: file://{ck}\n")
    store = Store(f"sqlite:///{tmp / 'store.db'}")
    notes: list[str] = []
    try:
        sim.set_clock(START)
        _, job_id = submit(
            policy_path,
            provider="sim",
            provider_defaults=False,
            provider_options=options,
            store=store,
            now=START,
        )
        clock = [START]
        rec = reconciler_for(store, clock, catalog, case.step_s)
        agent = Agent(f"file://{ck}", job_id, sc.work_s, sc.overhead_s, sim)
        try:
            live_n: list[int] = []
            killed: list[tuple[int, str, int]] = []  # (step, point, live after the kill)
            for k in range(n):
                now = START + timedelta(seconds=k * case.step_s)
                agent.ran(now - timedelta(seconds=case.step_s), case.step_s)
                sim.set_clock(now)  # the market moves: preemptions at the boundary
                agent.report(now)
                clock[0] = now
                for point in [p for at, p in case.kills if at == k]:
                    notes += _killed_pass(store, case, now, point, tmp)
                    alive = [i for i in sim.list({TAG_JOB: job_id}) if i.state.alive]
                    killed.append((k, point, len(alive)))
                if k in case.crashes or any(at == k for at, _ in case.kills):
                    rec.close()  # a new process: the store and the cloud, nothing else
                    rec = reconciler_for(store, clock, catalog, case.step_s)
                report = rec.run_pass()
                if report.errors:
                    notes.append(f"pass {k}: {report.errors} error(s)")
                job = store.job(job_id)
                assert job is not None
                if job.state in FINAL_STATES:
                    break
                live = [i for i in sim.list({TAG_JOB: job_id}) if i.state.alive]
                live_n.append(len(live))
                # the oldest works: a replacement launched during a notice, or a switch made
                # before break, waits for it (it stays until the new one has taken over)
                # (a gang's rank 0 reports for it)
                agent.instance = min(live, key=lambda i: (i.attempt or 0, i.node)) if live else None
        finally:
            rec.close()
        run = _daemon_run(store, sim, job_id, case.step_s, notes)
        run.live = live_n
        run.killed = killed
        run.sent = list(_Sim.sent)
        run.left = sum(1 for i in sim.list({TAG_JOB: job_id}) if i.state.alive)
        run.ran = {i.id for i in sim.list({TAG_JOB: job_id})}
        run.recorded = {a.instance_id for a in store.attempts(job_id) if a.instance_id}
        return run
    finally:
        sim.shutdown_server(terminate_all=True)


def _killed_pass(store: Any, case: Case, now: datetime, point: str, tmp: Path) -> list[str]:
    """The pass at ``now`` in a daemon process that dies at ``point`` (a note if it did not)."""
    import os
    import subprocess
    import sys

    args = {"store": store.url, "now": now.isoformat(), "zones": list(case.zones)}
    args["step_s"] = case.step_s
    repo = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "PROVISIONER_CRASH_AT": point}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (repo, env.get("PYTHONPATH")) if p)
    cmd = [sys.executable, "-m", "tests.overlap_pass", json.dumps(args)]
    done = subprocess.run(cmd, env=env, cwd=repo, capture_output=True, timeout=120, check=False)
    if done.returncode == 137:
        return []
    return [
        f"the pass at {now} did not die at {point}: exit {done.returncode} {done.stderr[-400:]!r}"
    ]


_TERMINATED = re.compile(r"terminated (\S+):")


def _daemon_run(store: Any, sim: SimProvider, job_id: str, step_s: float, notes: list[str]) -> Run:
    job = store.job(job_id)
    attempts = store.attempts(job_id)
    # every node of an attempt (a gang's: one terminate event each, one effect for the gang)
    ran = sim.list({TAG_JOB: job_id})
    by_number = {a.attempt: a for a in attempts}
    by_instance = {i.id: by_number.get(i.attempt or 0) for i in ran}
    by_instance.update({a.instance_id: a for a in attempts if a.instance_id})
    stopped: set[tuple[int, int]] = set()  # (step, attempt) of the terminations seen
    effects: list[Effect] = []
    refused: list[Effect] = []
    for a in attempts:
        e = effect(_step(a.created_at, step_s), "launch", a.market, a.zone)
        (refused if a.state == "failed" else effects).append(e)
    outcome: tuple[str, int | None] = ("unfinished", None)
    for ev in store.events(job_id):
        k = _step(ev.at, step_s)
        if ev.kind == "terminate":
            m = _TERMINATED.match(ev.message)
            a = by_instance.get(m.group(1) if m else "")
            if a is not None and (k, a.attempt) in stopped:
                continue  # another node of the same gang
            if a is not None:
                stopped.add((k, a.attempt))
            effects.append(effect(k, "terminate", a.market if a else "", a.zone if a else ""))
        elif ev.kind == "failed":
            effects.append(effect(k, "fail"))
            outcome = ("failed", k)
        elif ev.kind in ("succeeded", "finished"):
            outcome = ("succeeded", k)
        elif ev.kind in ("error", "guard", "provider-error"):
            notes.append(f"step {k}: {ev.kind}: {ev.message}")
    bill = sum(sim.billing(i.id).cost for i in ran)
    prices = [a.price_per_hour * (a.nodes or 1) for a in attempts if a.instance_id]
    return Run(
        _settled(effects, outcome), outcome, float(job.spent_usd), prices, bill, refused, notes
    )


def explain(engine: Run, daemon: Run) -> str:
    """Both runs side by side (the assertion message)."""
    return (
        f"\n  engine: {engine.outcome} ${engine.cost:.4f} {engine.effects}"
        f"\n  daemon: {daemon.outcome} ${daemon.cost:.4f} (cloud billed "
        f"${daemon.cloud_bill or 0:.4f}) {daemon.effects}"
        f"\n  daemon launches refused for capacity: {daemon.refused}"
        + "".join(f"\n  daemon: {n}" for n in daemon.notes)
    )
