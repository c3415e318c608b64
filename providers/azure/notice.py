"""Azure: the Preempt event in Scheduled Events, read (and approved) by the agent.

``GET /metadata/scheduledevents?api-version=2020-07-01`` with ``Metadata: true``: a document
``{"Events": [...]}``; an event with ``EventType: Preempt`` is the notice, ``NotBefore``
(RFC 1123) its deadline. ``POST`` the same path with ``{"StartRequests": [{"EventId": id}]}``
approves it (the VM is ready to go): the event starts then, or at ``NotBefore`` if never
approved, and a started ``Preempt`` is the eviction. When the agent approves it:
:class:`provisioner.agent.handover.Release`.
"""

from __future__ import annotations

import json

from providers.notice import NoticePoll, Reading, Request, parse_rfc1123

EVENTS_PATH = "/metadata/scheduledevents?api-version=2020-07-01"
HEADERS = {"Metadata": "true"}


def parse(status: int, body: str) -> Reading | None:
    if status != 200:
        return None
    doc = json.loads(body)
    for event in (doc.get("Events") if isinstance(doc, dict) else None) or []:
        if isinstance(event, dict) and event.get("EventType") == "Preempt":
            return Reading(
                json.dumps(event, sort_keys=True),
                parse_rfc1123(event.get("NotBefore")),
                str(event.get("EventId", "")),
            )
    return None


def acknowledge(event_id: str) -> Request:
    body = json.dumps({"StartRequests": [{"EventId": event_id}]}).encode()
    return Request("POST", EVENTS_PATH, {**HEADERS, "Content-Type": "application/json"}, body)


POLL = NoticePoll(
    path=EVENTS_PATH,
    parse=parse,
    headers=HEADERS,
    acknowledge=acknowledge,
    formats="no Preempt event = none; Events[] with EventType Preempt, NotBefore (RFC 1123)",
)
