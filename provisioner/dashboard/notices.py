"""A job's notifications on its dashboard page: each outbox row (one message to one target
about one event, :mod:`provisioner.control.store.outbox`) with its delivery state, tries,
last error and the event id the message carries. Target names only: the URLs (tokens) are
the daemon's and never in the store."""

from __future__ import annotations

from typing import Any

from provisioner.control.store import NotificationRow, Store
from provisioner.core.timefmt import utc

#: the newest this many rows are shown (a job told of thousands of restarts has its summary)
LIMIT = 200

#: what each delivery state means, in the page's words
STATES = {
    "pending": "waiting to be sent (or to be tried again)",
    "sent": "accepted by the target",
    "failed": "given up (tries spent, or no such target)",
    "expired": "too old to be sent",
}


def _row(r: NotificationRow) -> dict[str, Any]:
    from providers.base import redact
    from provisioner.control.notify.outbox import event_key

    state = r.state
    if state == "sent" and r.folded_into is not None:
        how = f"sent in message {r.folded_into}'s summary (the rate limit)"
    else:
        how = STATES.get(state, state)
    return {
        "id": r.id,
        "event_id": event_key(r),
        "event": r.event,
        "target": r.target,
        "title": redact(r.title),
        "state": state,
        "state_note": how,
        "tries": r.tries,
        "created_at": utc(r.created_at),
        "sent_at": utc(r.sent_at),
        "next_try_at": utc(r.next_try_at) if state == "pending" and r.tries else None,
        "folded_into": r.folded_into,
        "error": redact(r.error or ""),
    }


def job_notifications(store: Store, job_id: str, limit: int = LIMIT) -> dict[str, Any]:
    """The job's notifications, oldest first (the newest ``limit``), and a count per state."""
    rows = store.notifications(job_id)
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.state] = counts.get(r.state, 0) + 1
    shown = rows[-limit:]
    return {
        "rows": [_row(r) for r in shown],
        "counts": counts,
        "hidden": len(rows) - len(shown),
    }
