"""The placement-group sweep (issue 10): a gang's group goes once its gang is gone.

A gang attempt's group is made before its first node (provisioner.control.jobpass.launch) and is
named after the attempt, so a crash and a second launch find the same one. Nothing else
deletes it when the gang ends normally, is preempted, or is torn down part-way while its
nodes are still shutting down (a cloud refuses to delete a group in use): this sweep does,
at most every :data:`SWEEP_EVERY_S` per provider, after the pass's reaping.

A group is deleted when no live instance carries its (job, attempt) *and* that attempt is
over: its job is finished or unknown to the store, or the attempt's row is in a final state.
The attempt a pass is launching (row ``launching``) or running keeps its group, whichever
replica holds the job; a group whose tags name no attempt is left alone (not ours to judge).
A refusal (still in use while the nodes shut down) is logged and tried again at the next
sweep; a crash between the delete and its record leaves a row naming a gone group, which the
next sweep clears (a delete of an unknown group is not an error).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime

from providers.base import Provider, ProviderError
from providers.capabilities import PlacementGroup, PlacementGroups
from provisioner.control.failpoints import Failpoints
from provisioner.control.records import PassReport
from provisioner.control.store import FINAL_STATES, Store
from provisioner.core.models import TAG_ATTEMPT, TAG_JOB, TAG_MANAGED, Instance
from provisioner.core.states import LIVE_ATTEMPT_STATES

log = logging.getLogger("provisioner.reconciler")

#: how often (seconds of the reconciler's clock) each provider's groups are swept
SWEEP_EVERY_S = 30.0
#: attempt states that still need their group


def _key(group: PlacementGroup) -> tuple[str, int] | None:
    job, attempt = group.tags.get(TAG_JOB), group.tags.get(TAG_ATTEMPT)
    if not job or not attempt or not attempt.isdigit():
        return None
    return job, int(attempt)


def sweep_groups(
    store: Store,
    prov: Provider,
    seen: list[Instance],
    now: datetime,
    report: PassReport,
    failpoints: Failpoints,
    job_id: str | None = None,
) -> int:
    """Delete the groups at ``prov`` whose gang is gone (only ``job_id``'s where given);
    returns how many went."""
    if not isinstance(prov, PlacementGroups):
        return 0
    wanted = {TAG_MANAGED: "true"} if job_id is None else {TAG_MANAGED: "true", TAG_JOB: job_id}
    groups = prov.list_placement_groups(wanted)
    report.provider_calls += 1
    keyed = [(g, k) for g in groups if (k := _key(g)) is not None]
    if not keyed:
        return 0
    in_use = {(i.job_id, i.attempt) for i in seen if i.state.alive and i.job_id}
    jobs = sorted({job for _, (job, _) in keyed})
    states = store.job_states(jobs)
    active = [j for j in jobs if j in states and states[j] not in FINAL_STATES]
    rows = store.attempts_for(active)
    deleted = 0
    for group, (job, attempt) in keyed:
        if (job, attempt) in in_use:
            continue
        if job in states and states[job] not in FINAL_STATES:
            row = next((a for a in rows.get(job, []) if a.attempt == attempt), None)
            if row is not None and row.state in LIVE_ATTEMPT_STATES:
                continue
        try:
            prov.delete_placement_group(group.id)
        except ProviderError as exc:  # in use while its nodes shut down: the next sweep
            report.provider_calls += 1
            log.info("placement group %s of job %s kept for now: %s", group.id, job, exc)
            continue
        report.provider_calls += 1
        failpoints.hit("after-group-delete")
        deleted += 1
        if job in states:
            store.update_attempt(job, attempt, placement_group=None)
            store.add_event(
                job,
                "group-deleted",
                f"placement group {group.name} of attempt {attempt} deleted: its gang is gone",
                at=now,
                group=group.id,
                attempt=attempt,
            )
    return deleted


def sweep_job_groups(
    store: Store,
    prov: Provider,
    job_id: str,
    now: Callable[[], datetime],
    failpoints: Failpoints,
    *,
    within_s: float = 120.0,
    poll_s: float = 2.0,
) -> list[str]:
    """At the end of a job supervised in-process (``provisioner up``, :meth:`Job.wait`): delete
    its groups as soon as the cloud lets (its nodes shut down first), for at most
    ``within_s``; returns the ids of the groups still there (the daemon's sweep gets them)."""
    if not isinstance(prov, PlacementGroups):
        return []
    give_up = time.monotonic() + within_s
    while True:
        left = prov.list_placement_groups({TAG_MANAGED: "true", TAG_JOB: job_id})
        if not left:
            return []
        seen = prov.list({TAG_MANAGED: "true", TAG_JOB: job_id})
        sweep_groups(store, prov, seen, now(), PassReport(), failpoints, job_id=job_id)
        if time.monotonic() >= give_up:
            return [g.id for g in prov.list_placement_groups({TAG_JOB: job_id})]
        time.sleep(poll_s)
