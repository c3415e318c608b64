"""Notices before the job runs: the agent watches the metadata service from its start.

Preparing a job can take minutes (a large workdir fetched and unpacked, a setup that installs
packages, an image pulled) and the capacity may be taken back meanwhile. :class:`PrepareWatch`
polls for a notice on a thread of its own (the agent's main thread is busy preparing) from the
agent's start until the job starts, when the agent's own loop takes the polling over. On a
notice it calls the agent back once: the agent reports it in its progress record (the record
the controller reads, which writes the ``notice`` event) and stops preparing; there is no job
to checkpoint, so the attempt ends ``interrupted``.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import Protocol

from provisioner.agent.gang import Gang
from provisioner.agent.notices import Notice, NoticeReader

log = logging.getLogger("provisioner.agent")

#: after a notice, the agent's main thread gets this long to stop preparing (a step that
#: cannot be stopped, a fetch, runs on); then the agent ends (at most the notice, less 1 s)
STOP_PREPARING_S = 5.0


class PrepareWatch:
    """Polls ``reader`` (and a gang's peers) every ``poll_s`` until :meth:`stop` or the first
    notice, which goes to ``on_notice`` (on the watch's thread)."""

    def __init__(
        self,
        reader: NoticeReader,
        gang: Gang | None,
        cloud: str,
        poll_s: float,
        on_notice: Callable[[Notice], None],
    ) -> None:
        self.reader, self.gang, self.cloud, self.poll_s = reader, gang, cloud, poll_s
        self.on_notice = on_notice
        self.seen: Notice | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="prepare-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop polling (the job starts: the agent's loop polls from now on); returns once the
        thread is done, so the reader is the caller's again."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def wait_stopped(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for :meth:`stop`; whether it came."""
        return self._stop.wait(timeout)

    def _look(self) -> Notice | None:
        notice = self.reader.poll()
        if notice is None and self.gang is not None:
            try:
                notice = self.gang.notice(self.cloud)
            except Exception as exc:  # the store unreachable: the next look may do
                log.debug("cannot read the gang's notice: %s", exc)
        return notice

    def _run(self) -> None:
        while not self._stop.is_set():
            notice = self._look()
            if notice is not None:
                self.seen = notice
                try:
                    self.on_notice(notice)
                except Exception:  # the watch must not die silently
                    log.exception("cannot report the notice seen while preparing")
                return
            self._stop.wait(self.poll_s)


class PreparingAgent(Protocol):
    """What :func:`notice_before_job` reads and sets of the agent:
    :class:`provisioner.agent.runner.Agent` is one. The runner imports this module, so this
    module names the agent by its shape."""

    state: str
    notice: Notice | None
    note: str
    exit_code: int | None
    gang: Gang | None
    prewatch: PrepareWatch

    def write_progress(self) -> None: ...


def notice_before_job(agent: PreparingAgent, notice: Notice) -> None:
    """On the watch's thread: report the notice now (the controller reads it in the agent's
    record), tell the gang, and make the main thread stop preparing (``agent.notice`` set is
    what its steps look at); if it has not stopped within :data:`STOP_PREPARING_S`, the agent
    ends here."""
    left = notice.seconds_left()
    log.warning(
        "interruption notice (%s) while %s: %.1fs left; no job to checkpoint, stopping",
        notice.raw[:80],
        agent.state,
        left,
    )
    agent.notice = notice
    agent.note = f"interruption notice while {agent.state}: the job did not start"
    if agent.gang is not None and not notice.raw.startswith("gang: "):
        try:
            agent.gang.raise_notice(notice)
        except Exception as exc:
            log.warning("cannot tell the gang of the notice: %s", exc)
    agent.write_progress()
    if not agent.prewatch.wait_stopped(min(STOP_PREPARING_S, max(0.0, left - 1.0))):
        log.warning("still %s after the notice: the agent ends now", agent.state)
        agent.state, agent.exit_code = "interrupted", 0
        agent.write_progress()
        logging.shutdown()
        os._exit(0)
