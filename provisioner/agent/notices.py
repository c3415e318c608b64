"""Reading a spot interruption notice from the instance metadata service, in each cloud's format.

What to ask and how to read the answer is the cloud's fact: ``cloud_facts(cloud).notice``, a
:class:`~providers.notice.NoticePoll` declared in ``providers/<cloud>/notice.py`` (path,
headers, token step, a pure ``parse``). This module does the HTTP: the token step, the ``GET``,
the parse, and Azure's approval of the event.

An unreachable metadata service, a timeout or a 5xx reads as "no notice" (the job keeps
running; the failure is logged once per streak). A deadline that cannot be read, or that lies
more than 15 minutes ahead, is replaced by "now + the cloud's usual notice"
(``cloud_facts(cloud).notice_s``).

``provisioner drill`` on a cloud with no interruption API (Alibaba, Tencent) has the agent
serve itself a notice from the checkpoint store (:class:`StoreNoticeReader`, at the end).
"""

from __future__ import annotations

import logging
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from providers.facts import cloud_facts
from providers.notice import TokenStep

log = logging.getLogger("provisioner.agent.notices")

MAX_AHEAD = timedelta(minutes=15)


@dataclass(frozen=True)
class Notice:
    """An interruption notice as the VM saw it."""

    cloud: str
    seen_at: datetime
    deadline: datetime  # when the capacity goes away (best known)
    raw: str
    event_id: str = ""  # Azure's EventId (to approve the event early)

    def seconds_left(self, now: datetime | None = None) -> float:
        return (self.deadline - (now or datetime.now(UTC))).total_seconds()


class _Response:
    def __init__(self, status: int, body: str) -> None:
        self.status = status
        self.body = body


class NoticeReader:
    """Polls one cloud's metadata service for a spot interruption notice."""

    def __init__(self, cloud: str, base_url: str, *, timeout: float = 0.5) -> None:
        facts = cloud_facts(cloud)  # ValueError for an unknown cloud
        self.cloud = cloud
        self.poll_spec = facts.notice
        self.notice_s = facts.notice_s
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self._token: str | None = None
        self._token_supported = True
        self._failing = False
        self._first_seen: datetime | None = None
        #: a capacity block's end as the launch told it (the job spec's ``block_notice_at``,
        #: ``block_end``): from the first, a notice whose deadline is the second, whatever the
        #: metadata says (on AWS a block's instance gets no spot notice there)
        self.block: tuple[datetime, datetime] | None = None
        # metadata never goes through a proxy
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    # -- HTTP ------------------------------------------------------------------------------

    def _request(
        self, method: str, path: str, headers: dict[str, str], body: bytes | None = None
    ) -> _Response | None:
        req = urllib.request.Request(
            self.base_url + path, data=body, method=method, headers=headers
        )
        try:
            with self._opener.open(req, timeout=self.timeout) as resp:
                out = _Response(resp.status, resp.read().decode("utf-8", "replace"))
        except urllib.error.HTTPError as err:
            out = _Response(err.code, err.read().decode("utf-8", "replace"))
        except (OSError, ValueError) as exc:  # unreachable, refused, timeout
            if not self._failing:
                log.warning("metadata service %s unreachable (%s): no notice", self.base_url, exc)
            self._failing = True
            return None
        if self._failing:
            log.info("metadata service %s reachable again", self.base_url)
        self._failing = False
        return out

    def _get_token(self, step: TokenStep) -> str | None:
        if self._token is None and self._token_supported:
            resp = self._request("PUT", step.path, {step.ttl_header: str(step.ttl_s)}, b"")
            if resp is None:
                return None
            if resp.status == 200:
                self._token = resp.body.strip()
            elif resp.status in (404, 405) and step.optional:
                self._token_supported = False  # no token service: none needed
        return self._token

    # -- polling ---------------------------------------------------------------------------

    def poll(self) -> Notice | None:
        """One look at the metadata service: the notice if one is served, else None; a
        capacity block's end, known from the launch, is one from its notice time on."""
        try:
            got = self._poll()
        except Exception as exc:  # a malformed answer must never stop the agent
            log.warning("cannot read %s notice: %s", self.cloud, exc)
            got = None
        if got is None and self.block is not None:
            now = datetime.now(UTC)
            due, end = self.block
            if now >= due:
                return Notice(self.cloud, now, max(end, now), f"capacity block ends at {end}")
        return got

    def _poll(self) -> Notice | None:
        spec = self.poll_spec
        headers = dict(spec.headers)
        step = spec.token
        if step is not None:
            token = self._get_token(step)
            if token is not None:
                headers[step.header] = token
            elif self._token_supported:
                return None  # token service unreachable (or refusing): no notice
        resp = self._request("GET", spec.path, headers)
        if resp is None:
            return None
        if step is not None and resp.status in step.expired:
            self._token = None  # expired: a new one on the next poll
            return None
        reading = spec.parse(resp.status, resp.body)
        if reading is None:
            return None
        return self._notice(reading.raw, reading.deadline, reading.event_id)

    def _notice(self, raw: str, deadline: datetime | None, event_id: str = "") -> Notice:
        now = datetime.now(UTC)
        if self._first_seen is None:
            self._first_seen = now
        default = self._first_seen + timedelta(seconds=self.notice_s)
        if deadline is None or deadline > now + MAX_AHEAD:
            deadline = default
        return Notice(self.cloud, now, max(deadline, now), raw, event_id)

    def acknowledge(self, notice: Notice) -> bool:
        """Tell the cloud the VM is ready to go (Azure: approve the event); others: no-op."""
        if self.poll_spec.acknowledge is None or not notice.event_id:
            return False
        req = self.poll_spec.acknowledge(notice.event_id)
        resp = self._request(req.method, req.path, dict(req.headers), req.body)
        return resp is not None and resp.status == 200


# -- the drill's substitute notice ------------------------------------------------------------
# ``provisioner drill`` on a cloud with no interruption API (Alibaba, Tencent): where the job's
# environment has SPOT_DRILL_NOTICE=store (only the drill's own policy sets it), the agent also
# looks for ``drill/notice-a<attempt>`` (its own attempt's only: the replacement shares the
# job's directory) in the checkpoint store on each poll. Its text is what the cloud's metadata
# service would serve at ``spot/termination-time`` (Alibaba's ISO time, Tencent's
# ``YYYY-MM-DD HH:MM:SS``) and is read with that cloud's own parser, so everything after it
# (checkpoint, report, handover) is the code path a real notice takes; the drill then
# terminates the instance through the API, as the cloud would at the deadline. A real notice
# from the metadata service still comes first.

ENV_DRILL_NOTICE = "SPOT_DRILL_NOTICE"  # job.env keeps PROVISIONER_* for the agent
FROM_STORE = "store"
SUBSTITUTE_NOTICE = "drill/notice-a{attempt}"


class StoreNoticeReader(NoticeReader):
    """A :class:`NoticeReader` that also serves the drill's substitute notice from the store."""

    def __init__(self, cloud: str, base_url: str, store: Any, attempt: int) -> None:
        super().__init__(cloud, base_url)
        self.store = store
        self.path = SUBSTITUTE_NOTICE.format(attempt=attempt)

    def _poll(self) -> Notice | None:
        real = super()._poll()
        if real is not None:
            return real
        text = self.store.read_text(self.path)
        if not text:
            return None
        reading = self.poll_spec.parse(200, text)
        if reading is None:
            log.warning("the drill's notice %r is not a %s notice", text, self.cloud)
            return None
        return self._notice(reading.raw, reading.deadline, reading.event_id)


def reader_for(spec: Any, store: Any) -> NoticeReader:
    """The agent's reader for ``spec`` (an AgentSpec): its cloud's metadata service, and the
    drill's substitute notice from ``store`` too where the job's environment asks for it."""
    reader: NoticeReader
    if spec.env.get(ENV_DRILL_NOTICE) == FROM_STORE:
        reader = StoreNoticeReader(spec.cloud, spec.base_metadata_url, store, spec.attempt)
    else:
        reader = NoticeReader(spec.cloud, spec.base_metadata_url)
    if spec.block_notice_at and spec.block_end:
        reader.block = (
            datetime.fromisoformat(spec.block_notice_at),
            datetime.fromisoformat(spec.block_end),
        )
    return reader
