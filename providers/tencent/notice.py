"""Tencent Cloud: the spot termination time in the instance metadata, read by the agent.

``GET /latest/meta-data/spot/termination-time``: 404 = no notice, else ``2018-08-18 12:05:33``
(no time zone given; read as UTC, and a deadline too far ahead is replaced by the usual notice).
"""

from __future__ import annotations

from providers.notice import NoticePoll, parse_termination_time

NOTICE_PATH = "/latest/meta-data/spot/termination-time"

POLL = NoticePoll(
    path=NOTICE_PATH,
    parse=parse_termination_time,
    formats="404 = none; 2018-08-18 12:05:33",
)
