"""Overlap on notice, the agent's part: a replacement started while an earlier attempt of the
job is still under an interruption notice waits for that attempt's checkpoint; the attempt
under notice tells its cloud it may go (Azure) only once nothing more is wanted of it.

The controller launches the replacement during the notice (:mod:`provisioner.core.overlap`)
and says so in its spec (``handover_from``: the attempt it replaces, ``handover_until``: when
that one's capacity goes), so that its instance boots while the old one checkpoints. Its
agent must not resume from the checkpoint before that one, nor run the job beside it: it
waits until the old attempt's progress record says its checkpoint is in (``interrupted``,
``done`` or ``failed``), a later attempt reports, or the notice is over, then resumes from the
newest checkpoint.

The attempt under notice (:class:`Release`): Azure starts a ``Preempt`` event, evicting the
VM, when the VM approves it or when its ``NotBefore`` passes, whichever comes first. Approved
as soon as the checkpoint is in, the VM would go before the controller, which learns of the
notice from this agent's progress record, has launched the replacement that overlaps it. So
where the controller may overlap the notice (``AgentSpec.overlap_notice_s``), the event is
approved only once the replacement has taken over (a later attempt reports), and otherwise
``NotBefore`` runs out (the controller terminates the VM itself once the checkpoint is in);
where no overlap can come (a notice shorter than the replacement's boot, a gang), the
replacement is launched only once the VM is gone, so the event is approved as soon as the
checkpoint is in. docs/clouds.md, "Azure", says why from Microsoft's page.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from provisioner.core.timefmt import parse_time

if TYPE_CHECKING:
    from provisioner.agent.notices import Notice, NoticeReader

log = logging.getLogger("provisioner.agent")

#: How often the old attempt's progress record is read while waiting.
POLL_S = 0.2
#: Kept after the notice's deadline for the old agent's last upload.
MARGIN_S = 1.0
#: Agent states that say the checkpoint taken on the notice is in the checkpoint store.
LANDED = ("interrupted", "done", "failed")


def handed_over(doc: dict[str, Any], old: int) -> bool:
    """Whether progress record ``doc`` says attempt ``old``'s checkpoint is in (or a later
    attempt reports)."""
    attempt = int(doc.get("attempt") or 0)
    return attempt > old or (attempt == old and doc.get("state") in LANDED)


def await_handover(
    store: Any, old: int, until: str, stopping: Callable[[], bool], poll_s: float = POLL_S
) -> bool:
    """Wait until attempt ``old``'s checkpoint is in (:func:`handed_over`; ``store``: the
    job's checkpoint store) or its notice, ending at ``until``, is over. True: handed over."""
    end = parse_time(until) if until else None
    logged = False
    while not stopping():
        try:
            doc = store.read_json("progress.json") or {}
        except Exception:  # unreachable: the checkpoint fetch that follows says so
            return False
        if handed_over(doc, old):
            return True
        if end is None or datetime.now(UTC) >= end + timedelta(seconds=MARGIN_S):
            return False
        if not logged:
            log.info("attempt %d is under notice: waiting for its checkpoint", old)
            logged = True
        time.sleep(poll_s)
    return False


def taken_over(doc: dict[str, Any], attempt: int) -> bool:
    """Whether progress record ``doc`` is a later attempt's than ``attempt``: its replacement
    has resumed and taken over."""
    return int(doc.get("attempt") or 0) > attempt


class Release:
    """When the attempt under notice tells its cloud that its VM may go now (Azure: approve
    the event, :meth:`NoticeReader.acknowledge`; the other clouds have no such call): once its
    checkpoint is in and, where the controller may overlap a notice of ``notice``'s length
    (at least ``overlap_s``; 0: never), once a later attempt reports in ``store``'s progress
    record (read every ``poll_s``). :meth:`tick` is called on every turn of the agent's loop
    after the checkpoint is in."""

    def __init__(
        self, reader: NoticeReader, store: Any, attempt: int, overlap_s: float, poll_s: float
    ) -> None:
        self.reader, self.store, self.attempt = reader, store, attempt
        self.overlap_s, self.poll_s = overlap_s, poll_s
        self.done = False
        self._next_look = 0.0  # monotonic

    def overlapped(self, notice: Notice) -> bool:
        """Whether the controller may launch a replacement during ``notice``."""
        length = (notice.deadline - notice.seen_at).total_seconds()
        return self.overlap_s > 0 and length >= self.overlap_s

    def tick(self, notice: Notice) -> None:
        if self.done or not notice.event_id or self.reader.poll_spec.acknowledge is None:
            return
        why = "its checkpoint is in and no replacement overlaps the notice"
        if self.overlapped(notice):
            now = time.monotonic()
            if now < self._next_look:
                return
            self._next_look = now + self.poll_s
            try:
                doc = self.store.read_json("progress.json") or {}
            except Exception:  # unreachable for now: NotBefore runs out meanwhile
                return
            if not taken_over(doc, self.attempt):
                return
            why = f"attempt {doc.get('attempt')} has taken over"
        self.done = True
        log.info("approving the %s event (%s): the VM goes now", notice.cloud, why)
        if not self.reader.acknowledge(notice):  # it goes at its deadline instead
            log.warning("the %s event was not approved", notice.cloud)
