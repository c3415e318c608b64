"""Overlap on notice, the agent's part: a replacement started while an earlier attempt of the
job is still under an interruption notice waits for that attempt's checkpoint.

The controller launches the replacement during the notice (:mod:`provisioner.core.overlap`)
and says so in its spec (``handover_from``: the attempt it replaces, ``handover_until``: when
that one's capacity goes), so that its instance boots while the old one checkpoints. Its
agent must not resume from the checkpoint before that one, nor run the job beside it: it
waits until the old attempt's progress record says its checkpoint is in (``interrupted``,
``done`` or ``failed``), a later attempt reports, or the notice is over, then resumes from the
newest checkpoint.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from provisioner.core.timefmt import parse_time

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
