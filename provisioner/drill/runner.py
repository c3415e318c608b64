"""The drill itself: submit the job, supervise it here, interrupt it once, watch every step.

The controller is the project's own (:class:`~provisioner.control.reconciler.Reconciler`,
as ``provisioner up`` runs it); the drill only watches what it records (attempts, events,
the agent's progress, the checkpoint store) and marks each step when it is seen. A step not
seen by the drill's time limit, a job that ends otherwise than succeeded, an error or Ctrl-C
stops the drill; whatever happened, :func:`provisioner.drill.cleanup.clean` runs last.
"""

from __future__ import annotations

import contextlib
import secrets
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from provisioner.drill.cleanup import clean
from provisioner.drill.interrupters import Interrupter, SubstituteNotice, interrupter_for
from provisioner.drill.job import expected_result
from provisioner.drill.ledger import Ledger
from provisioner.drill.steps import DrillReport, StepName
from provisioner.drill.target import DrillTarget, policy_doc, sim_options
from provisioner.errors import DrillError

Say = Callable[[str], None]
ProviderFactory = Callable[[str, dict[str, Any]], Any]


class DrillStopped(DrillError):
    """The drill cannot go on (the job ended early, a step failed, the time limit passed)."""


@dataclass
class Watch:
    """What the drill has seen so far of its job."""

    old: Any = None  # attempt 1
    interrupted_at: float | None = None
    notice_event: Any = None
    checkpoint: str | None = None
    wire: dict[str, Any] = field(default_factory=dict)


@contextlib.contextmanager
def _stoppable(stop: threading.Event) -> Iterator[None]:
    """Ctrl-C and SIGTERM stop the drill: the handler sets ``stop`` and raises
    KeyboardInterrupt. The event is what the drill's loop checks too: a KeyboardInterrupt
    raised where Python cannot pass it on (a finalizer or a callback run by the garbage
    collector, which only prints "Exception ignored") would otherwise be lost and the drill
    would run to its end. Main thread only, where signal handlers can be set."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(_sig: int, _frame: Any) -> None:
        stop.set()
        raise KeyboardInterrupt

    old = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, previous in old.items():
            signal.signal(sig, previous)


@contextlib.contextmanager
def _shielded() -> Iterator[None]:
    """Ctrl-C and SIGTERM are ignored while the cleanup runs (a second Ctrl-C must not leave
    half of it undone); in the main thread only, where signal handlers can be set."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def new_drill_id() -> str:
    return f"drill-{secrets.token_hex(4)}"


def prepare(target: DrillTarget, drill_id: str | None = None) -> Ledger:
    """The drill's directory, job id and ledger, written before anything exists anywhere."""
    drill_id = drill_id or new_drill_id()
    directory = target.state_dir / "drills" / drill_id
    directory.mkdir(parents=True, exist_ok=True)
    uri = target.checkpoint_uri or f"file://{directory / 'checkpoints'}"
    options = dict(target.provider_options)
    if target.provider == "sim":
        options = sim_options(target, directory)
    elif target.region:
        _set_region(options, target.provider, target.region)
    return Ledger.create(
        target.state_dir,
        drill_id=drill_id,
        provider=target.provider,
        region=target.region or str(options.get("region") or ""),
        job_id=drill_id,
        checkpoint_uri=uri,
        store_url=f"sqlite:///{directory / 'store.db'}",
        provider_options=options,
    )


#: the options naming where a provider works: GCP and Azure take ``regions`` (or zones,
#: ``location``), not ``region``
_WHERE = ("region", "regions", "zones", "location", "locations")


def _set_region(options: dict[str, Any], provider: str, region: str) -> None:
    """``--region`` as the provider's own option, unless the user's options already say where."""
    if any(options.get(k) for k in _WHERE):
        return
    if provider in ("gcp", "azure"):
        options["regions"] = [region]
    else:
        options["region"] = region


def write_policy(target: DrillTarget, ledger: Ledger) -> Path:
    user = None
    if target.policy_path:
        user = yaml.safe_load(Path(target.policy_path).read_text(encoding="utf-8")) or {}
    doc = policy_doc(target, ledger.checkpoint_uri, user)
    path = ledger.directory / "policy.yaml"
    head = ""
    if target.cpu:
        head = (
            "# --gpu none: the drill places this job on its own CPU offers\n"
            "# (provisioner/drill/cpu.py), not on `resources` below\n"
        )
    path.write_text(head + yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


class Drill:
    """One drill run: ``run()`` returns the report (cleanup done, leftovers listed)."""

    def __init__(
        self,
        target: DrillTarget,
        ledger: Ledger,
        *,
        provider_factory: ProviderFactory | None = None,
        catalog: Any = None,
        say: Say = lambda _m: None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        interrupter: Interrupter | None = None,
        pass_interval_s: float = 0.5,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        from provisioner.control.cancel import default_provider_factory

        self.target, self.ledger, self.say = target, ledger, say
        self.factory: ProviderFactory = provider_factory or default_provider_factory
        self.catalog, self.clock, self.sleep, self.now = catalog, clock, sleep, now
        self._interrupter = interrupter
        self.pass_interval_s = pass_interval_s
        self.report = DrillReport(ledger.drill_id, target.provider, ledger.region, ledger.job_id)
        #: set by Ctrl-C or SIGTERM (see _stoppable)
        self.stop_requested = threading.Event()
        self.started = clock()
        self.seen = Watch()
        self.provider: Any = None
        self.interrupter: Interrupter | None = None
        self.refused = False  # nothing eligible under the drill's cap, or the cloud unusable

    def at(self) -> float:
        return self.clock() - self.started

    def _has(self, name: StepName) -> bool:
        """Whether ``name`` has been marked (held or failed) so far."""
        return self.report.step(name).at_s is not None

    def mark(self, name: StepName, ok: bool, detail: str = "", substitute: bool = False) -> None:
        step = self.report.mark(name, ok, self.at(), detail, substitute=substitute)
        took = f"{step.took_s:6.1f} s" if step.took_s is not None else ""
        self.say(f"{'ok  ' if ok else 'FAIL'} {name.value:<12} {took}  {detail}")
        if not ok:
            raise DrillStopped(f"{name.value}: {detail}")

    # -- the run ---------------------------------------------------------------------------

    def run(self) -> DrillReport:
        from provisioner.control.store import Store
        from provisioner.preflight import Refused

        store: Any = None
        try:
            with _stoppable(self.stop_requested):
                store = Store(self.ledger.store_url)
                self._submit(store)
                self._supervise(store)
        except DrillStopped as exc:
            self.report.stopped = str(exc)
        except Refused as exc:
            self.refused = True
            self.report.stopped = (
                f"refused: {exc} (the drill's price cap: ${self.target.bid_cap():g}/h per "
                f"instance from --max-cost {self.target.max_cost:g}; raise --max-cost, or "
                "widen --region/--gpu/--policy)"
            )
            self.say(self.report.stopped)
        except KeyboardInterrupt:
            self.report.stopped = "interrupted (Ctrl-C): everything the drill made is deleted"
            self.say(self.report.stopped)
        except Exception as exc:
            self.report.stopped = f"error: {type(exc).__name__}: {exc}"
            self.say(self.report.stopped)
        finally:
            with contextlib.suppress(Exception):  # the cost so far, where the store answers
                job = store.job(self.ledger.job_id) if store is not None else None
                self.report.cost_usd = float(job.spent_usd) if job else 0.0
            with _shielded():
                self._clean(store)
        return self.report

    def _clean(self, store: Any) -> None:
        self.say(
            "cleaning up: instances, interruption resources, the drill's objects "
            "(Ctrl-C waits until it is done)"
        )
        left = clean(self.ledger, self.factory, interrupter=self.interrupter)
        self.report.leftovers = left
        if left:
            self.report.mark(StepName.CLEANUP, False, self.at(), "left behind: " + "; ".join(left))
            self.say(f"FAIL cleanup: could not delete: {'; '.join(left)}")
        else:
            self.report.mark(StepName.CLEANUP, True, self.at(), "nothing left")
            self.say(f"ok   cleanup      {self.report.step(StepName.CLEANUP).took_s:6.1f} s")
        if store is not None and hasattr(store, "close"):
            with contextlib.suppress(Exception):
                store.close()

    def _submit(self, store: Any) -> None:
        from provisioner.api import submit

        policy = write_policy(self.target, self.ledger)
        if self.target.cpu:
            self._cpu_offers_or_refuse()
        self.say(
            f"drill {self.ledger.drill_id}: job {self.ledger.job_id} on {self.target.provider}"
        )
        submit(
            str(policy),
            provider=self.target.provider,
            provider_options=self.ledger.provider_options,
            provider_defaults=self.target.provider != "sim",
            store=store,
            job_id=self.ledger.job_id,
            check=self.catalog is None and not self.target.cpu,
        )
        row = store.job(self.ledger.job_id)
        if row is not None and row.provider_options:
            self.ledger.provider_options = dict(row.provider_options)
            self.ledger.save()

    def _cpu_offers_or_refuse(self) -> list[Any]:
        """``--gpu none``: the drill's CPU offers; NothingEligible when none fits the cap."""
        from provisioner.drill.cpu import cpu_offers, cpu_plan
        from provisioner.preflight import NothingEligible

        t = self.target
        offers = cpu_offers(t.cloud, t.region)
        plan = cpu_plan(None, offers, t.bid_cap(), frozenset())
        if not plan.placements:
            why = "; ".join(x for r in plan.rejections.values() for x in r.examples)
            raise NothingEligible(f"nothing eligible: no CPU spot offer under the cap: {why}", plan)
        return offers

    def _supervise(self, store: Any) -> None:
        from provisioner.control.reconciler import Reconciler

        kw: dict[str, Any] = {"provider_factory": self.factory}
        if self.catalog is not None:
            kw["catalog"] = self.catalog
        if self.target.cpu:
            from provisioner.drill.cpu import CpuDrillReconciler

            kw |= {"cpu_offers": self._cpu_offers_or_refuse(), "cap": self.target.bid_cap()}
            make: Any = CpuDrillReconciler
        else:
            make = Reconciler
        rec = make(
            store,
            job_ids=[self.ledger.job_id],
            pass_interval_s=self.pass_interval_s,
            **kw,
        )
        limit = self.target.limit_s()
        try:
            while True:
                if self.stop_requested.is_set():  # its KeyboardInterrupt was swallowed
                    raise KeyboardInterrupt
                rec.run_pass()
                if self._observe(store):
                    return
                if self.at() > limit:
                    pending = next(s for s in self.report.steps if s.at_s is None)
                    raise DrillStopped(
                        f"{pending.name.value}: not seen within the drill's {limit:.0f} s"
                    )
                self.sleep(self.pass_interval_s)
        finally:
            store.release_jobs(rec.owner)
            rec.close()

    # -- what the store says -----------------------------------------------------------------

    def _observe(self, store: Any) -> bool:
        """Mark what is newly seen; True once the result is in."""
        job_id = self.ledger.job_id
        job = store.job(job_id)
        atts = [a for a in store.attempts(job_id) if a.state != "failed" or a.instance_id]
        events = store.events(job_id)
        r, seen = self.report, self.seen
        first = atts[0] if atts else None
        if not self._has(StepName.LAUNCH) and first is not None and first.instance_id:
            seen.old = first
            self.mark(
                StepName.LAUNCH,
                True,
                f"{first.instance_id}: {first.zone} {first.instance_type} ({first.gpu or 'CPU'}) "
                f"spot ${first.price_per_hour:.4f}/h",
            )
            self.provider = self.factory(self.target.provider, dict(self.ledger.provider_options))
            self.interrupter = self._interrupter or interrupter_for(
                self.target.provider,
                self.target.cloud,
                self.provider,
                self.ledger,
                self.target.notice_s,
            )
            if isinstance(self.interrupter, SubstituteNotice):  # the notice names its reader
                self.interrupter.attempt = first.attempt
        if not self._has(StepName.AGENT_UP) and self._has(StepName.LAUNCH):
            n = seen.old.attempt  # the first attempt launched (launches refused count too)
            up = [e for e in events if e.kind == "first-progress" and e.data.get("attempt") == n]
            if up:
                self.mark(StepName.AGENT_UP, True, up[0].message)
        if (
            not self._has(StepName.INTERRUPT)
            and self._has(StepName.AGENT_UP)
            and job is not None
            and (job.progress or {}).get("attempt") == seen.old.attempt
            and ((job.progress or {}).get("job") or {}).get("step", 0) >= self.target.steps // 4
        ):
            assert self.interrupter is not None
            try:
                seen.wire = self.interrupter.interrupt(seen.old.instance_id, seen.old.zone)
            except Exception as exc:  # refused (permissions), or the cloud said no
                self.mark(StepName.INTERRUPT, False, f"{self.interrupter.api}: {exc}")
            seen.interrupted_at = self.at()
            r.wire.append(seen.wire)
            self.mark(
                StepName.INTERRUPT,
                True,
                self.interrupter.api,
                substitute=self.interrupter.substitute,
            )
        if self._has(StepName.INTERRUPT):
            assert self.interrupter is not None
            self._after_interrupt(store, job, atts, events)
        if job is not None and job.state in ("failed", "cancelled", "stopped"):
            raise DrillStopped(f"the job {job.state}: {job.reason}")
        marked = {s.name for s in r.steps if s.at_s is not None}
        if job is not None and job.state == "succeeded" and StepName.RESULT not in marked:
            missing = next(s.name.value for s in r.steps if s.at_s is None)
            raise DrillStopped(f"{missing}: not seen before the job finished")
        return StepName.RESULT in marked

    def _after_interrupt(self, store: Any, job: Any, atts: list[Any], events: list[Any]) -> None:
        from provisioner.agent.store import CheckpointStore

        seen, itr = self.seen, self.interrupter
        assert itr is not None
        old = seen.old.instance_id
        sub = itr.substitute
        if not self._has(StepName.NOTICE):
            notices = [e for e in events if e.kind == "notice" and e.data.get("instance") == old]
            if notices:
                ev = seen.notice_event = notices[0]
                deadline = ev.data.get("deadline")
                after = self.at() - (seen.interrupted_at or 0.0)
                left, ok = "", True
                if deadline:
                    d = datetime.fromisoformat(str(deadline))
                    at = ev.at if ev.at.tzinfo else ev.at.replace(tzinfo=UTC)
                    secs = (d - at).total_seconds()
                    ok = secs >= 0
                    left = f", {secs:.0f} s before its deadline"
                self.mark(
                    StepName.NOTICE,
                    ok,
                    f"read {after:.1f} s after the interruption{left} "
                    f"({self.target.cloud} gives {self.target.notice_s:.0f} s"
                    f"{'; the sim shortens it' if self.target.provider == 'sim' else ''})",
                    substitute=sub,
                )
        ckpt_in = False
        if self._has(StepName.NOTICE):
            if not self._has(StepName.CHECKPOINT):
                cks = [
                    e
                    for e in events
                    if e.kind == "checkpoint"
                    and e.data.get("attempt") == seen.old.attempt
                    and seen.notice_event is not None
                    and e.id > seen.notice_event.id
                ]
                if cks:
                    name = str(cks[0].data.get("checkpoint"))
                    present = (
                        name
                        in CheckpointStore(
                            self.ledger.checkpoint_uri, self.ledger.job_id
                        ).checkpoints()
                    )
                    seen.checkpoint = name
                    self.mark(
                        StepName.CHECKPOINT,
                        present,
                        f"{name} in {self.ledger.checkpoint_uri}"
                        if present
                        else f"{name} not found in the store",
                    )
            ckpt_in = seen.checkpoint is not None
        itr.due(old, ckpt_in, self.now())
        second = atts[1] if len(atts) > 1 else None
        if (
            not self._has(StepName.REPLACEMENT)
            and self._has(StepName.CHECKPOINT)
            and second
            and second.launched_at
        ):
            first = next(
                (a for a in store.attempts(self.ledger.job_id) if a.attempt == seen.old.attempt),
                seen.old,
            )
            boot = float(getattr(self.provider, "boot_seconds", 60.0))
            overlap = first.ended_at is None or second.launched_at <= first.ended_at
            may = self.target.notice_s >= boot and not sub
            how = "before the old instance went" if overlap else "after the old instance went"
            ok = overlap or not may
            if may:
                note = ""
            elif sub:
                note = " (a substitute notice: the drill terminates the old instance itself)"
            else:
                note = f" (the {self.target.notice_s:.0f} s notice is shorter than a {boot:.0f} s boot)"
            self.mark(
                StepName.REPLACEMENT, ok, f"{second.instance_id} in {second.zone}, {how}{note}"
            )
        if (
            not self._has(StepName.RESUMED)
            and self._has(StepName.REPLACEMENT)
            and second is not None
        ):
            up = [
                e
                for e in events
                if e.kind == "first-progress" and e.data.get("attempt") == second.attempt
            ]
            if up:
                got = up[0].data.get("resumed_from")
                self.mark(
                    StepName.RESUMED,
                    got == seen.checkpoint,
                    f"from {got}" + ("" if got == seen.checkpoint else f", not {seen.checkpoint}"),
                )
        if (
            not self._has(StepName.RESULT)
            and self._has(StepName.RESUMED)
            and job is not None
            and job.state == "succeeded"
        ):
            want = expected_result(self.target.steps)
            got = dict(job.result or {})
            same = {k: got.get(k) for k in want} == want
            self.mark(
                StepName.RESULT,
                same,
                f"digest {str(got.get('digest'))[:16]}... {'=' if same else '!='} the known {str(want['digest'])[:16]}...",
            )
