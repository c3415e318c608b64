"""Reading a spot interruption notice from the instance metadata service, in five formats.

| cloud   | request (below the metadata base URL)                                  | no notice | notice                                   |
| ------- | ---------------------------------------------------------------------- | --------- | ---------------------------------------- |
| aws     | ``PUT /latest/api/token`` (IMDSv2), ``GET /latest/meta-data/spot/instance-action`` with the token | 404 | ``{"action": "terminate", "time": "2017-09-18T08:22:00Z"}`` |
| gcp     | ``GET /computeMetadata/v1/instance/preempted``, ``Metadata-Flavor: Google`` | ``FALSE`` | ``TRUE`` (about 30 s left)             |
| azure   | ``GET /metadata/scheduledevents?api-version=2020-07-01``, ``Metadata: true`` | no Preempt event | ``Events[]`` with ``EventType: Preempt``, ``NotBefore`` (RFC 1123) |
| alibaba | ``PUT /latest/api/token`` (hardened mode), ``GET /latest/meta-data/instance/spot/termination-time`` | 404 | ``2015-01-05T18:02:00Z``       |
| tencent | ``GET /latest/meta-data/spot/termination-time``                         | 404       | ``2018-08-18 12:05:33``                  |

An unreachable metadata service, a timeout or a 5xx reads as "no notice" (the job keeps
running; the failure is logged once per streak). A deadline that cannot be read, or that lies
more than 15 minutes ahead (Tencent gives no time zone; the sim serves UTC), is replaced by
"now + the cloud's usual notice" (:data:`NOTICE_SECONDS`).
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime

log = logging.getLogger("provisioner.agent.notices")

#: The notice each cloud usually gives before it takes spot capacity back, in seconds.
NOTICE_SECONDS = {"aws": 120.0, "gcp": 30.0, "azure": 30.0, "alibaba": 120.0, "tencent": 120.0}
MAX_AHEAD = timedelta(minutes=15)
TOKEN_TTL_S = 21600

AWS_TOKEN_PATH = "/latest/api/token"
AWS_NOTICE_PATH = "/latest/meta-data/spot/instance-action"
GCP_NOTICE_PATH = "/computeMetadata/v1/instance/preempted"
AZURE_EVENTS_PATH = "/metadata/scheduledevents?api-version=2020-07-01"
ALIBABA_TOKEN_PATH = "/latest/api/token"
ALIBABA_NOTICE_PATH = "/latest/meta-data/instance/spot/termination-time"
TENCENT_NOTICE_PATH = "/latest/meta-data/spot/termination-time"


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
        if cloud not in NOTICE_SECONDS:
            raise ValueError(f"unknown cloud {cloud!r}")
        self.cloud = cloud
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self._token: str | None = None
        self._token_supported = True
        self._failing = False
        self._first_seen: datetime | None = None
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

    def _get_token(self, ttl_header: str) -> str | None:
        if self._token is None and self._token_supported:
            resp = self._request("PUT", AWS_TOKEN_PATH, {ttl_header: str(TOKEN_TTL_S)}, b"")
            if resp is None:
                return None
            if resp.status == 200:
                self._token = resp.body.strip()
            elif resp.status in (404, 405) and self.cloud == "alibaba":
                self._token_supported = False  # normal mode: no token needed
        return self._token

    # -- polling ---------------------------------------------------------------------------

    def poll(self) -> Notice | None:
        """One look at the metadata service: the notice if one is served, else None."""
        try:
            poll: Callable[[], Notice | None] = getattr(self, f"_poll_{self.cloud}")
            return poll()
        except Exception as exc:  # a malformed answer must never stop the agent
            log.warning("cannot read %s notice: %s", self.cloud, exc)
            return None

    def _poll_aws(self) -> Notice | None:
        token = self._get_token("X-aws-ec2-metadata-token-ttl-seconds")
        if token is None:
            return None
        resp = self._request("GET", AWS_NOTICE_PATH, {"X-aws-ec2-metadata-token": token})
        if resp is None or resp.status == 404:
            return None
        if resp.status == 401:  # token expired
            self._token = None
            return None
        if resp.status != 200:
            return None
        doc = json.loads(resp.body)
        if doc.get("action") not in ("terminate", "stop", "hibernate"):
            return None
        return self._notice(resp.body, _parse_iso(doc.get("time")))

    def _poll_gcp(self) -> Notice | None:
        resp = self._request("GET", GCP_NOTICE_PATH, {"Metadata-Flavor": "Google"})
        if resp is None or resp.status != 200 or resp.body.strip().upper() != "TRUE":
            return None
        return self._notice(resp.body.strip(), None)

    def _poll_azure(self) -> Notice | None:
        resp = self._request("GET", AZURE_EVENTS_PATH, {"Metadata": "true"})
        if resp is None or resp.status != 200:
            return None
        doc = json.loads(resp.body)
        for event in doc.get("Events") or []:
            if event.get("EventType") == "Preempt":
                deadline = _parse_rfc1123(event.get("NotBefore"))
                return self._notice(
                    json.dumps(event, sort_keys=True), deadline, str(event.get("EventId", ""))
                )
        return None

    def _poll_alibaba(self) -> Notice | None:
        headers: dict[str, str] = {}
        token = self._get_token("X-aliyun-ecs-metadata-token-ttl-seconds")
        if token is not None:
            headers["X-aliyun-ecs-metadata-token"] = token
        elif self._token_supported:
            return None  # token service unreachable
        resp = self._request("GET", ALIBABA_NOTICE_PATH, headers)
        if resp is None or resp.status == 404:
            return None
        if resp.status in (401, 403):
            self._token = None
            return None
        if resp.status != 200 or not resp.body.strip():
            return None
        return self._notice(resp.body.strip(), _parse_iso(resp.body.strip()))

    def _poll_tencent(self) -> Notice | None:
        resp = self._request("GET", TENCENT_NOTICE_PATH, {})
        if resp is None or resp.status != 200 or not resp.body.strip():
            return None
        return self._notice(resp.body.strip(), _parse_iso(resp.body.strip()))

    def _notice(self, raw: str, deadline: datetime | None, event_id: str = "") -> Notice:
        now = datetime.now(UTC)
        if self._first_seen is None:
            self._first_seen = now
        default = self._first_seen + timedelta(seconds=NOTICE_SECONDS[self.cloud])
        if deadline is None or deadline > now + MAX_AHEAD:
            deadline = default
        return Notice(self.cloud, now, max(deadline, now), raw, event_id)

    def acknowledge(self, notice: Notice) -> bool:
        """Tell the cloud the VM is ready to go (Azure: approve the event); others: no-op."""
        if self.cloud != "azure" or not notice.event_id:
            return False
        body = json.dumps({"StartRequests": [{"EventId": notice.event_id}]}).encode()
        resp = self._request(
            "POST",
            AZURE_EVENTS_PATH,
            {"Metadata": "true", "Content-Type": "application/json"},
            body,
        )
        return resp is not None and resp.status == 200


def _parse_iso(text: object) -> datetime | None:
    """``2017-09-18T08:22:00Z`` or ``2018-08-18 12:05:33`` (no zone: taken as UTC)."""
    if not isinstance(text, str) or not text.strip():
        return None
    try:
        value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _parse_rfc1123(text: object) -> datetime | None:
    """``Mon, 19 Sep 2016 18:29:47 GMT``."""
    if not isinstance(text, str) or not text.strip():
        return None
    try:
        value = parsedate_to_datetime(text.strip())
    except (TypeError, ValueError):
        return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)
