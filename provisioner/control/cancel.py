"""Stopping a job from outside a pass (``provisioner down``, ``Job.cancel()``), and how the
control loop makes its providers."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from providers.base import Provider
from provisioner.control.records import attempt_cost
from provisioner.control.store import FINAL_STATES, Store
from provisioner.core.models import TAG_JOB
from provisioner.core.states import Cause, JobState, job_after

ProviderFactory = Callable[[str, dict[str, Any]], Provider]


def utcnow() -> datetime:
    """The real clock: read only where a command or the daemon starts (the store never
    reads one; every time it writes comes from its caller)."""
    return datetime.now(UTC)


def default_provider_factory(name: str, options: dict[str, Any]) -> Provider:
    from providers.base import get

    return get(name, **options)


def cancel_job(
    store: Store,
    job_id: str,
    *,
    now: datetime,
    provider_factory: ProviderFactory = default_provider_factory,
) -> list[str]:
    """Stop a job now: terminate its instances (checkpoints stay), mark it cancelled. A job
    that has already ended and has nothing running is left as it is (no second event). A
    provider that cannot be reached (its SDK missing, its credentials gone) does not keep the
    job alive: the job is cancelled all the same and the event says which instances may still
    run, for the user to check in the cloud's console."""
    job = store.job(job_id)
    if job is None:
        return []
    open_attempts = [a for a in store.attempts(job.id) if a.state in ("launching", "running")]
    if job.state in FINAL_STATES and not open_attempts:
        return []
    store.request_cancel(job.id, now)
    live: list[str] = []
    unreached = ""
    try:
        prov = provider_factory(job.provider, dict(job.provider_options))
    except Exception as exc:  # an SDK not installed, options no longer valid
        prov, unreached = None, f"{type(exc).__name__}: {exc}"
    if prov is not None:
        try:
            live = [i.id for i in prov.list({TAG_JOB: job.id}) if i.state.alive]
            if live:
                prov.terminate(live)
                store.end_instances(prov.name, live, now, "cancelled by the user", job.id)
        except Exception as exc:  # the cloud refused or was unreachable
            unreached = f"{type(exc).__name__}: {exc}"
        finally:
            try:
                prov.close()
            except Exception as exc:  # a provider half set up: the job ends all the same
                unreached = unreached or f"{type(exc).__name__}: {exc}"
    for a in open_attempts:
        store.update_attempt(
            job.id,
            a.attempt,
            state="ended",
            ended_at=now,
            end_reason="cancelled",
            end_cause=Cause.CANCELLED.value,
            cost_usd=attempt_cost(a, now, job.provider_options),
        )
    spent = sum(a.cost_usd for a in store.attempts(job.id))
    step = job_after(JobState(job.state), final=Cause.CANCELLED)  # the transition table's
    if step.changed:
        store.update_job(
            job.id,
            at=now,
            state=step.after.value,
            cause=step.cause.value,
            reason="cancelled by the user",
            spent_usd=spent,
        )
    if unreached:
        maybe = ", ".join(a.instance_id or "?" for a in open_attempts) or "none recorded"
        message = (
            f"cancelled; {job.provider} could not be reached ({unreached[:200]}): instances "
            f"that may still run: {maybe}; check the cloud's console. Checkpoints kept"
        )
    else:
        message = f"cancelled; terminated {len(live)} instance(s); checkpoints kept"
    store.add_event(job.id, "cancelled", message, at=now)
    return live
