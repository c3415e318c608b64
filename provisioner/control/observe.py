"""What a pass observes across a provider's jobs: interruptions (polled once per provider
and pass, each notice recorded once as an event) and orphans (instances with our tag whose
job is finished or unknown, terminated)."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from providers.base import Provider, ProviderError
from provisioner.control.failpoints import Failpoints
from provisioner.control.records import PassReport
from provisioner.control.store import FINAL_STATES, Store
from provisioner.core.models import Instance

log = logging.getLogger("provisioner.control.reconciler")


class InterruptionFeed:
    """The providers' interruption events, polled from where the last poll left off."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.last: dict[str, datetime] = {}
        #: by provider key (each provider's jobs are observed apart, maybe at once)
        self.seen: dict[str, set[tuple[str, str]]] = {}
        #: notices by provider key and instance, kept while the instance is listed: a notice
        #: is served once, but decide() reads it on every pass until the capacity goes
        #: (overlap on notice keeps the instance under notice while its replacement starts)
        self.notices: dict[str, dict[str, Any]] = {}

    def collect(
        self,
        key: str,
        prov: Provider,
        by_job: dict[str, list[Instance]],
        now: datetime,
        report: PassReport,
    ) -> dict[str, list[Any]]:
        """Interruptions the provider reports for instances of our jobs (one call per provider
        and pass); each is recorded once as an event."""
        since = self.last.get(key, now - timedelta(minutes=15))
        try:
            items = prov.interruptions(since)
            report.provider_calls += 1
        except ProviderError as exc:
            log.warning("interruptions at %s failed: %s", key.split(":")[0], exc)
            return {}
        self.last[key] = now - timedelta(seconds=5)  # overlap: clocks, late events
        owner = {i.id: job_id for job_id, insts in by_job.items() for i in insts}
        seen = self.seen.setdefault(key, set())
        if len(seen) > 100_000:  # a daemon runs for months
            seen = self.seen[key] = {m for m in seen if m[0] in owner}
        notices = self.notices.setdefault(key, {})
        out: dict[str, list[Any]] = {}
        for it in items:
            job_id = owner.get(it.instance_id)
            if job_id is None:
                continue
            out.setdefault(job_id, []).append(it)
            if it.kind == "notice":
                notices[it.instance_id] = it
        alive = {i.id for insts in by_job.values() for i in insts if i.state.alive}
        for iid, it in list(notices.items()):
            job_id = owner.get(iid)
            if job_id is None or iid not in alive or it.at < now - timedelta(hours=1):
                del notices[iid]  # gone, or long over
                continue
            if it not in out.get(job_id, []):
                out.setdefault(job_id, []).append(it)
            mark = (it.instance_id, it.kind)
            if mark in seen:
                continue
            seen.add(mark)
            # once per notice, also across restarts (the memory above is this process's)
            if it.kind == "notice" and not self.store.has_event(job_id, "notice", it.instance_id):
                until = f"; capacity goes at {it.deadline:%H:%M:%S}" if it.deadline else ""
                self.store.add_event(
                    job_id,
                    "notice",
                    f"interruption notice for {it.instance_id} in {it.zone} ({it.raw}){until}; "
                    "the agent checkpoints",
                    at=it.at,
                    instance=it.instance_id,
                )
        return out


def reap(
    store: Store,
    prov: Provider,
    seen: list[Instance],
    owned: set[str],
    now: datetime,
    report: PassReport,
    failpoints: Failpoints,
) -> None:
    """Terminate instances with our tag whose job is finished or unknown to the store
    (an active job's instances are its runner's business, whichever replica holds it)."""
    candidates = [i for i in seen if i.state.alive and i.job_id and i.job_id not in owned]
    if not candidates:
        return
    states = store.job_states([i.job_id for i in candidates if i.job_id])
    orphans = [i for i in candidates if i.job_id not in states or states[i.job_id] in FINAL_STATES]
    if orphans:
        prov.terminate([i.id for i in orphans])
        failpoints.hit("after-reap")
        report.provider_calls += 1
        report.reaped += len(orphans)
        for i in orphans:
            store.end_instances(prov.name, [i.id], now, "reaped: its job is over", i.job_id)
            store.add_event(
                i.job_id, "reaped", f"terminated orphan instance {i.id} ({i.zone})", at=now
            )
