"""Tencent Cloud: the spot termination time in the instance metadata, read by the agent.

``GET /latest/meta-data/spot/termination-time``: 404 = no notice, else ``2018-08-18 12:05:33``.
Tencent documents that time as the instance's OS time in UTC+8 (China Standard Time), with no
zone written ("Spot instance termination notice", product 213, document 32487): it is read in
UTC+8, and a time that carries its own zone is read in that zone.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from providers.notice import NoticePoll, Reading

NOTICE_PATH = "/latest/meta-data/spot/termination-time"

#: the zone of a termination time written without one (Tencent's metadata: UTC+8)
TERMINATION_ZONE = timezone(timedelta(hours=8), "UTC+8")


def parse_when(text: str) -> datetime | None:
    """A termination time as UTC: no zone written means UTC+8; None where unreadable."""
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=TERMINATION_ZONE)
    return value.astimezone(UTC)


def parse_termination_time(status: int, body: str) -> Reading | None:
    """404 or empty = no notice, else the deadline (UTC+8 where no zone is written)."""
    text = body.strip()
    if status != 200 or not text:
        return None
    return Reading(text, parse_when(text))


def format_when(when: datetime) -> str:
    """A time as Tencent's metadata writes it: ``2018-08-18 12:05:33`` in UTC+8."""
    return when.astimezone(TERMINATION_ZONE).strftime("%Y-%m-%d %H:%M:%S")


POLL = NoticePoll(
    path=NOTICE_PATH,
    parse=parse_termination_time,
    formats="404 = none; 2018-08-18 12:05:33 (UTC+8)",
)
