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

ProviderFactory = Callable[[str, dict[str, Any]], Provider]


def utcnow() -> datetime:
    return datetime.now(UTC)


def default_provider_factory(name: str, options: dict[str, Any]) -> Provider:
    from providers.base import get

    return get(name, **options)


def cancel_job(
    store: Store, job_id: str, *, provider_factory: ProviderFactory = default_provider_factory
) -> list[str]:
    """Stop a job now: terminate its instances (checkpoints stay), mark it cancelled."""
    job = store.job(job_id)
    if job is None:
        return []
    store.request_cancel(job.id)
    prov = provider_factory(job.provider, dict(job.provider_options))
    try:
        live = [i for i in prov.list({TAG_JOB: job.id}) if i.state.alive]
        if live:
            prov.terminate([i.id for i in live])
        now = utcnow()
        for a in store.attempts(job.id):
            if a.state in ("launching", "running"):
                store.update_attempt(
                    job.id,
                    a.attempt,
                    state="ended",
                    ended_at=now,
                    end_reason="cancelled",
                    cost_usd=attempt_cost(a, now),
                )
        spent = sum(a.cost_usd for a in store.attempts(job.id))
        if job.state not in FINAL_STATES:
            store.update_job(
                job.id, state="cancelled", reason="cancelled by the user", spent_usd=spent
            )
        store.add_event(
            job.id, "cancelled", f"cancelled; terminated {len(live)} instance(s); checkpoints kept"
        )
        return [i.id for i in live]
    finally:
        prov.close()
