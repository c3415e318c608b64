"""AWS: the spot interruption notice in the instance metadata (IMDSv2), read by the agent.

``PUT /latest/api/token`` (``X-aws-ec2-metadata-token-ttl-seconds``) gives a token, sent as
``X-aws-ec2-metadata-token`` on ``GET /latest/meta-data/spot/instance-action``: 404 = no
notice, else ``{"action": "terminate", "time": "2017-09-18T08:22:00Z"}``; 401: the token
expired.

The rebalance recommendation, an early signal (not a notice: nothing is asked of the job):
``GET /latest/meta-data/events/recommendations/rebalance`` with the same token: 404 = none,
else ``{"noticeTime": "2020-11-05T08:22:00Z"}`` (when AWS issued it).
"""

from __future__ import annotations

import json

from providers.notice import NoticePoll, Reading, TokenStep
from provisioner.core.timefmt import parse_time

NOTICE_PATH = "/latest/meta-data/spot/instance-action"
ACTIONS = ("terminate", "stop", "hibernate")


def parse(status: int, body: str) -> Reading | None:
    if status != 200:
        return None
    doc = json.loads(body)
    if not isinstance(doc, dict) or doc.get("action") not in ACTIONS:
        return None
    return Reading(body, parse_time(doc.get("time")))


POLL = NoticePoll(
    path=NOTICE_PATH,
    parse=parse,
    token=TokenStep(
        path="/latest/api/token",
        ttl_header="X-aws-ec2-metadata-token-ttl-seconds",
        header="X-aws-ec2-metadata-token",
    ),
    formats='404 = none; {"action": "terminate", "time": "2017-09-18T08:22:00Z"}',
)


REBALANCE_PATH = "/latest/meta-data/events/recommendations/rebalance"


def parse_rebalance(status: int, body: str) -> Reading | None:
    """A rebalance recommendation: its ``noticeTime`` as the reading's time (``deadline``
    here means when it was issued: it says nothing of when the capacity goes)."""
    if status != 200:
        return None
    doc = json.loads(body)
    if not isinstance(doc, dict) or "noticeTime" not in doc:
        return None
    return Reading(body, parse_time(doc.get("noticeTime")))


REBALANCE = NoticePoll(
    path=REBALANCE_PATH,
    parse=parse_rebalance,
    token=POLL.token,
    formats='404 = none; {"noticeTime": "2020-11-05T08:22:00Z"}',
)
