"""How an agent asks a cloud's metadata service for a spot interruption notice (pure).

Each cloud declares one :class:`NoticePoll` in ``providers/<cloud>/notice.py`` and puts it in
its :class:`~providers.facts.CloudFacts` (``notice``); the node agent
(:mod:`provisioner.agent.notices`) does the HTTP and reads the answer with the cloud's
``parse``. A poll is: an optional token step (``PUT`` for a session token, sent on the ``GET``),
one ``GET`` of ``path`` with ``headers``, and ``parse(status, body)``, a pure function that
says whether the answer is a notice. Azure also lets the VM approve the event early
(``acknowledge``). Nothing here does I/O or reads a clock.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

from provisioner.core.timefmt import parse_time


@dataclass(frozen=True, slots=True)
class Reading:
    """A notice as the metadata service served it: the raw text, the deadline when the answer
    carries one (None: "now + the cloud's usual notice"), Azure's event id."""

    raw: str
    deadline: datetime | None
    event_id: str = ""


@dataclass(frozen=True, slots=True)
class TokenStep:
    """``PUT path`` with ``ttl_header: ttl_s`` gives a session token, sent as ``header``.

    ``optional``: a 404/405 on the ``PUT`` means the service runs without tokens (Alibaba's
    normal mode), else no token means no notice. A ``GET`` answered with one of ``expired``
    drops the token (a new one is asked for on the next poll)."""

    path: str
    ttl_header: str
    header: str
    optional: bool = False
    expired: tuple[int, ...] = (401,)
    ttl_s: int = 21600


@dataclass(frozen=True, slots=True)
class Request:
    """One HTTP request below the metadata base URL."""

    method: str
    path: str
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes | None = None


@dataclass(frozen=True, slots=True)
class NoticePoll:
    """One cloud's notice request and how to read its answer."""

    path: str
    parse: Callable[[int, str], Reading | None]  # (HTTP status, body) -> the notice or None
    headers: Mapping[str, str] = field(default_factory=dict)
    token: TokenStep | None = None
    acknowledge: Callable[[str], Request] | None = None  # event id -> "ready to go" request
    formats: str = ""  # what "no notice" and "notice" look like (for docs and errors)


def parse_rfc1123(text: object) -> datetime | None:
    """``Mon, 19 Sep 2016 18:29:47 GMT``."""
    if not isinstance(text, str) or not text.strip():
        return None
    try:
        value = parsedate_to_datetime(text.strip())
    except (TypeError, ValueError):
        return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def parse_termination_time(status: int, body: str) -> Reading | None:
    """A ``termination-time`` document (Alibaba, Tencent): 404 or empty = no notice, else the
    deadline as text."""
    text = body.strip()
    if status != 200 or not text:
        return None
    return Reading(text, parse_time(text))
