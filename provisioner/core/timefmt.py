"""Times as the clouds, the store and the agent's files write them, read as aware UTC datetimes.

One reading for every layer: the adapters (cloud timestamps), the agent (notice deadlines and
a gang's rendezvous times in the checkpoint store), the probe's watch and the control loop (the
naive datetimes SQLite hands back). Pure: no clock here; the caller passes what it read.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import overload


@overload
def utc(value: datetime) -> datetime: ...
@overload
def utc(value: None) -> None: ...
def utc(value: datetime | None) -> datetime | None:
    """``value`` as an aware UTC datetime; a naive value is taken to be UTC already (the store
    writes UTC, and SQLite gives it back without a zone). None stays None."""
    if value is None:
        return None
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def parse_time(text: object) -> datetime | None:
    """An ISO 8601 time (``Z`` or an offset, a ``T`` or a space, minutes or seconds, up to 9
    fraction digits; no zone means UTC) or a datetime already, as an aware UTC datetime. None
    where empty, not text or unreadable: a caller that must refuse bad input says so itself."""
    if isinstance(text, datetime):
        return utc(text)
    if not isinstance(text, str):
        return None
    value = text.strip()
    if not value:
        return None
    try:  # Python 3.11's parser takes "Z", minutes-only times and 7-9 fraction digits (ARM's)
        return utc(datetime.fromisoformat(value))
    except ValueError:
        return None
