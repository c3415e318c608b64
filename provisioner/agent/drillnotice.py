"""A notice the agent serves itself, for ``provisioner drill`` on a cloud with no interruption
API (Alibaba, Tencent).

Where the job's environment has ``SPOT_DRILL_NOTICE=store`` (only the drill's own
policy sets it), the agent also looks for ``drill/notice`` in the job's directory of the
checkpoint store on each poll (``drill/notice-a<attempt>``: its own attempt's only). Its text is what the cloud's metadata service would serve at
``spot/termination-time`` (Alibaba's ISO time, Tencent's ``YYYY-MM-DD HH:MM:SS``), and it is
read with that cloud's own parser, so everything after it (checkpoint, report, handover) is the
code path a real notice takes. The drill then terminates the instance through the API, as the
cloud would at the deadline. A real notice from the metadata service still comes first.
"""

from __future__ import annotations

import logging

from provisioner.agent.notices import Notice, NoticeReader

log = logging.getLogger("provisioner.agent.drillnotice")

#: the job's environment variable that turns it on, and the value that does
ENV_DRILL_NOTICE = "SPOT_DRILL_NOTICE"  # job.env keeps PROVISIONER_* for the agent
FROM_STORE = "store"
#: below the job's directory in the checkpoint store; one per attempt (the replacement, which
#: shares the job's directory, must not read its predecessor's notice)
SUBSTITUTE_NOTICE = "drill/notice-a{attempt}"


class StoreNoticeReader(NoticeReader):
    """A :class:`NoticeReader` that also serves the drill's substitute notice from the store."""

    def __init__(self, cloud: str, base_url: str, store: object, attempt: int, **kw: float) -> None:
        super().__init__(cloud, base_url, **kw)
        self.store = store
        self.path = SUBSTITUTE_NOTICE.format(attempt=attempt)

    def _poll(self) -> Notice | None:
        real = super()._poll()
        if real is not None:
            return real
        text = self.store.read_text(self.path)  # type: ignore[attr-defined]
        if not text:
            return None
        reading = self.poll_spec.parse(200, text)
        if reading is None:
            log.warning("the drill's notice %r is not a %s notice", text, self.cloud)
            return None
        return self._notice(reading.raw, reading.deadline, reading.event_id)
