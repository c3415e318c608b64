"""Which of a job's events are told to whom, and in what words.

Two sets of targets hear about a job: the daemon's defaults (``notify.targets`` in its
configuration, with ``notify.events``), for every job, and the policy's own (``notify:``).
A target named in both hears each event once. The pass asks :meth:`Router.notice` as it writes
an event, and the store writes the outbox rows in that event's transaction.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from policies.notify import DEFAULT, EVENTS, Notify
from provisioner.control.store import Notice

#: The store's event kinds that are told, and the notification event each one is.
EVENT_OF_KIND: dict[str, str] = {
    "preempted": "preempted",
    "restarted": "restarted",
    "failed": "failed",
    "policy-error": "failed",
    "succeeded": "succeeded",
    "finished": "succeeded",  # the same event in stores written before it was renamed
    "budget": "budget",
    "deadline-risk": "deadline",
    "no-capacity": "capacity",
    "price-cap": "price",
}


def _headline(event: str, data: Mapping[str, Any]) -> str:
    if event == "restarted":
        return f"restarted (restart {data.get('restart', '?')})"
    if event == "budget":
        return f"at {data.get('level', '?'):g}% of its budget"
    return {
        "preempted": "preempted",
        "failed": "failed",
        "succeeded": "succeeded",
        "deadline": "may miss its deadline",
        "capacity": "no capacity anywhere it may run",
        "price": "every offer is above its price caps",
    }.get(event, event)


@dataclass
class Router:
    """The daemon's default targets and events; a policy's ``notify:`` adds its own."""

    targets: tuple[str, ...] = ()
    events: frozenset[str] = field(default_factory=lambda: frozenset(EVENTS))

    @classmethod
    def of(cls, targets: Iterable[str] = (), events: Iterable[str] = EVENTS) -> Router:
        return cls(tuple(dict.fromkeys(targets)), frozenset(events))

    def targets_for(self, event: str, policy_notify: Notify | None) -> tuple[str, ...]:
        out = list(self.targets) if event in self.events else []
        if policy_notify is not None and event in policy_notify.events:
            out += policy_notify.targets
        return tuple(dict.fromkeys(out))

    def notice(
        self,
        job_id: str,
        job_name: str,
        policy_notify: Notify | None,
        kind: str,
        message: str,
        data: Mapping[str, Any] | None = None,
    ) -> Notice | None:
        """The notice an event of ``kind`` sends, or None (not an event that is told, or
        nobody to tell)."""
        event = EVENT_OF_KIND.get(kind)
        if event is None:
            return None
        targets = self.targets_for(event, policy_notify)
        if not targets:
            return None
        title = f"provisioner: job {job_name} ({job_id}) {_headline(event, data or {})}"
        return Notice(event, targets, title, message)


def settings(policy_notify: Notify | None) -> Notify:
    """The budget levels and deadline threshold that apply (the defaults without ``notify:``)."""
    return policy_notify or DEFAULT
