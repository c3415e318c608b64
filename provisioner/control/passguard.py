"""What one job's trouble does to a reconcile pass: it stays that job's.

A job whose stored policy no longer parses (a hand edit, or a stricter loader after an
upgrade) is failed with the loader's located message; a provider that cannot be set up or
refuses our credentials blocks its jobs with the reason (they stay active and are retried
each pass, and the reason is cleared once the provider answers); a store that is locked or
full makes the pass skip its writes, never the daemon stop. Each state change is one row
update and one event, written only when the reason changes, so a provider down for a day does
not write an event per pass.
"""

from __future__ import annotations

import logging
import sqlite3
from datetime import datetime
from typing import Any

log = logging.getLogger("provisioner.control.reconciler")

#: Reasons starting with this are set (and cleared) here; ``status`` shows them.
BLOCKED = "blocked: "


def is_store_error(exc: BaseException) -> bool:
    """A database that cannot be written or read now (locked, full, gone), not a bug."""
    from sqlalchemy.exc import DBAPIError, OperationalError

    return isinstance(exc, OperationalError | DBAPIError | sqlite3.OperationalError)


def describe(exc: BaseException) -> str:
    """One line for an exception, without credentials, SQL or tracebacks."""
    from providers.base import redact

    if is_store_error(exc):
        orig = getattr(exc, "orig", None)
        text = str(orig if orig is not None else exc)
    else:
        text = str(exc) or type(exc).__name__
    return redact(text.splitlines()[0] if text else type(exc).__name__)[:300]


def fail_unparseable(store: Any, job: Any, exc: Any, now: datetime, notify: Any = None) -> None:
    """The job's policy does not parse any more: fail it, saying where the policy is wrong.
    Its instances then belong to no active job and are reaped (checkpoints stay). Told to the
    daemon's default targets (``notify``, a router; the policy's own cannot be read)."""
    first = str(exc.issues[0]) if getattr(exc, "issues", None) else describe(exc)
    more = len(exc.issues) - 1 if getattr(exc, "issues", None) else 0
    reason = f"policy no longer parses: {first}" + (f" (and {more} more)" if more > 0 else "")
    log.error("job %s: %s", job.id, reason)
    from provisioner.core.states import Cause, JobState, job_after

    step = job_after(JobState(job.state), final=Cause.POLICY_ERROR)  # the transition table's
    store.update_job(
        job.id, at=now, state=step.after.value, cause=step.cause.value, reason=reason[:1000]
    )
    text = reason[:1000] + "; fix the policy and submit the job again"
    notice = None if notify is None else notify.notice(job.id, job.name, None, "policy-error", text)
    store.add_event(
        job.id,
        "policy-error",
        text,
        at=now,
        notify=notice,
        issues=[str(i) for i in getattr(exc, "issues", [])][:20],
    )


def block(
    store: Any,
    job: Any,
    reason: str,
    now: datetime,
    kind: str = "provider-error",
    *,
    same: str | None = None,
) -> None:
    """Mark an active job blocked (its state is kept) with ``reason``, once per reason: a
    job already blocked with a reason starting with ``same`` (default: the whole reason; a
    stable part such as the error's kind and code, where messages carry request ids) is left
    as it is."""
    text = (BLOCKED + reason)[:1000]
    if (job.reason or "").startswith((BLOCKED + (same if same is not None else reason))[:1000]):
        return
    log.warning("job %s: %s", job.id, text)
    store.update_job(job.id, at=now, reason=text)
    store.add_event(job.id, kind, text + "; retried every pass", at=now)


def unblock(store: Any, job: Any, now: datetime) -> None:
    """The provider answers again: clear a reason :func:`block` set."""
    if (job.reason or "").startswith(BLOCKED):
        store.update_job(job.id, at=now, reason="")
        store.add_event(job.id, "unblocked", "the provider answers again", at=now)
