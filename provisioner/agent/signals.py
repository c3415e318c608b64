"""Early signals on the VM: AWS's rebalance recommendation, read and reported (not a notice).

A cloud that serves an early signal declares how to ask for it (``cloud_facts(cloud).early``,
a :class:`~providers.notice.NoticePoll`; AWS only: ``GET
/latest/meta-data/events/recommendations/rebalance``, 404 until AWS issues one, then
``{"noticeTime": ...}``). The agent looks every :data:`EVERY_S` seconds and reports what is
served now in its progress record (``rebalance``: ``{"seen_at", "at", "raw"}``, ``at`` being
AWS's ``noticeTime``; null when none), written at once when it appears or goes.

What the agent does on it: it logs a warning once, and nothing else. The job is not asked to
checkpoint: a recommendation is often not followed by an interruption, and should the daemon
replace the instance on it, the switch is made before break, so this instance checkpoints on
its way down as on any planned switch (docs/agent.md). The interruption notice, if one
follows, is handled as always.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from providers.facts import cloud_facts
from providers.notice import NoticePoll
from provisioner.agent.notices import Notice, NoticeReader

log = logging.getLogger("provisioner.agent.signals")

#: seconds between two looks (AWS suggests every 5 s for the recommendation)
EVERY_S = 5.0


@dataclass(frozen=True)
class EarlySignal:
    """A rebalance recommendation as the VM saw it."""

    seen_at: datetime
    at: datetime  # when the cloud issued it (AWS's noticeTime; else when first seen)
    raw: str

    def to_doc(self) -> dict[str, Any]:
        def iso(v: datetime) -> str:
            return v.isoformat(timespec="milliseconds").replace("+00:00", "Z")

        return {"seen_at": iso(self.seen_at), "at": iso(self.at), "raw": self.raw[:500]}


class EarlyReader(NoticeReader):
    """Polls the metadata service for the cloud's early signal (the notice's HTTP, token
    included; an unreachable service reads as "none")."""

    def __init__(self, cloud: str, base_url: str, poll: NoticePoll, timeout: float = 0.5) -> None:
        super().__init__(cloud, base_url, timeout=timeout)
        self.poll_spec = poll

    def _notice(self, raw: str, deadline: datetime | None, event_id: str = "") -> Notice:
        now = datetime.now(UTC)  # ``deadline`` here: when the signal was issued
        return Notice(self.cloud, now, deadline or now, raw, event_id)

    def read(self) -> EarlySignal | None:
        n = self.poll()
        return None if n is None else EarlySignal(n.seen_at, n.deadline, n.raw)


class EarlyWatch:
    """The agent's watch on the early signal: what is served now (:attr:`current`)."""

    def __init__(self, cloud: str, base_url: str, every_s: float = EVERY_S) -> None:
        poll = cloud_facts(cloud).early
        self.reader = None if poll is None else EarlyReader(cloud, base_url, poll)
        self.every_s = every_s
        self.current: EarlySignal | None = None
        self._next = 0.0
        self._warned = False

    def look(self, now: float | None = None) -> bool:
        """One look when due; True when what is served changed (the record goes out now)."""
        now = time.monotonic() if now is None else now
        if self.reader is None or now < self._next:
            return False
        self._next = now + self.every_s
        got = self.reader.read()
        if (got is None) == (self.current is None):
            return False
        if got is not None and not self._warned:
            self._warned = True
            log.warning(
                "rebalance recommendation (issued %s): the instance is at an elevated risk of "
                "interruption; the job goes on (the daemon may replace it, made before break)",
                got.at.isoformat(),
            )
        elif got is None:
            log.info("the rebalance recommendation is no longer served")
        self.current = got
        return True

    def to_doc(self) -> dict[str, Any] | None:
        return None if self.current is None else self.current.to_doc()
