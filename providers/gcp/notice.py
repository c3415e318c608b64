"""Google Cloud: the preemption flag in the instance metadata, read by the agent.

``GET /computeMetadata/v1/instance/preempted`` with ``Metadata-Flavor: Google``: ``FALSE`` =
no notice, ``TRUE`` = preempted (about 30 s left; the answer carries no deadline).
"""

from __future__ import annotations

from providers.notice import NoticePoll, Reading

NOTICE_PATH = "/computeMetadata/v1/instance/preempted"


def parse(status: int, body: str) -> Reading | None:
    text = body.strip()
    if status != 200 or text.upper() != "TRUE":
        return None
    return Reading(text, None)


POLL = NoticePoll(
    path=NOTICE_PATH,
    parse=parse,
    headers={"Metadata-Flavor": "Google"},
    formats="FALSE = none; TRUE = preempted (no deadline given)",
)
