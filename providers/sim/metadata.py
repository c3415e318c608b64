"""Per-instance metadata endpoints in the exact format of the cloud each instance mimics.

Served below ``http://127.0.0.1:<port>/i/<instance-id>``, so an agent's code path is the one
it has in the cloud, with only the base URL changed:

- aws: ``PUT /latest/api/token`` (header ``X-aws-ec2-metadata-token-ttl-seconds``, 1-21600)
  gives a token; every ``GET`` needs ``X-aws-ec2-metadata-token`` (IMDSv2 required: 401
  without it). ``/latest/meta-data/spot/instance-action``: 404 until the notice, then
  ``{"action": "terminate", "time": "2017-09-18T08:22:00Z"}``.
  ``/latest/meta-data/events/recommendations/rebalance``: 404, then ``{"noticeTime": ...}``
  while the market's model serves a rebalance recommendation (``providers.sim.market``).
- gcp: ``Metadata-Flavor: Google`` is required (403 without it); answers carry it too.
  ``/computeMetadata/v1/instance/preempted``: ``FALSE``, then ``TRUE``.
- azure: ``Metadata: true`` and ``api-version`` are required (400 without).
  ``GET /metadata/scheduledevents``: ``{"DocumentIncarnation": n, "Events": [...]}`` with a
  ``Preempt`` event (``NotBefore`` in RFC 1123) once the notice is served; ``POST`` with
  ``{"StartRequests": [{"EventId": ...}]}`` approves it: the VM goes at once.
- alibaba: the hardened mode: ``PUT /latest/api/token`` (``X-aliyun-ecs-metadata-token-ttl-seconds``),
  ``GET`` with ``X-aliyun-ecs-metadata-token``. ``/latest/meta-data/instance/spot/termination-time``:
  404, then ``2015-01-05T18:02:00Z``.
- tencent: ``/latest/meta-data/spot/termination-time``: 404, then ``2018-08-18 12:05:33`` (UTC+8,
  as Tencent writes it).

Each also answers ``instance-id`` (and the zone) at the cloud's usual path.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import format_datetime
from typing import Any

from providers.tencent.notice import format_when

Reply = tuple[int, dict[str, str], bytes]


@dataclass(frozen=True)
class MetadataRequest:
    """One request to an instance's metadata endpoint (header names lower-cased)."""

    method: str
    path: str
    query: Mapping[str, str]
    headers: Mapping[str, str]
    body: bytes


@dataclass
class MetadataView:
    """What the metadata service knows of one instance."""

    id: str
    zone: str
    market: str
    cloud: str
    deadline: float | None  # real epoch seconds of the kill, once the notice is served
    event_id: str
    rebalance: float | None = None  # AWS: when the rebalance recommendation served now was issued


def _text(status: int, body: str, headers: dict[str, str] | None = None) -> Reply:
    h = {"Content-Type": "text/plain"}
    h.update(headers or {})
    return status, h, body.encode()


def _json(status: int, doc: Any, headers: dict[str, str] | None = None) -> Reply:
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    return status, h, json.dumps(doc).encode()


NOT_FOUND_HTML = (
    '<?xml version="1.0" encoding="iso-8859-1"?>\n<html><head><title>404 - Not Found</title>'
    "</head><body><h1>404 - Not Found</h1></body></html>\n"
)


def _iso_z(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class MetadataService:
    """Answers metadata requests; ``approve`` is called when an Azure VM approves its event."""

    def __init__(self, approve: Callable[[str], None]) -> None:
        self._tokens: dict[str, tuple[str, float]] = {}  # token -> (instance id, expiry)
        self._approve = approve

    def handle(
        self,
        inst: MetadataView,
        method: str,
        path: str,
        query: Mapping[str, str],
        headers: Mapping[str, str],
        body: bytes,
    ) -> Reply:
        req = MetadataRequest(method, path, query, {k.lower(): v for k, v in headers.items()}, body)
        handler: Callable[[MetadataView, MetadataRequest], Reply] = getattr(self, f"_{inst.cloud}")
        return handler(inst, req)

    def _token_gate(
        self, inst: MetadataView, req: MetadataRequest, prefix: str, denied: Reply
    ) -> Reply | None:
        """The hardened mode AWS (IMDSv2) and Alibaba share: ``PUT /latest/api/token`` with
        ``<prefix>-ttl-seconds`` (1-21600) hands out a token, echoing the TTL header; any other
        request without a live ``<prefix>`` header of this instance gets ``denied``. ``None``:
        the request may go on."""
        ttl_header = f"{prefix}-ttl-seconds"
        if req.path == "/latest/api/token":
            if req.method != "PUT":
                return _text(405, "Method Not Allowed")
            try:
                seconds = int(req.headers.get(ttl_header.lower()) or "")
            except ValueError:
                return _text(400, "Bad Request")
            if not 1 <= seconds <= 21600:
                return _text(400, "Bad Request")
            token = secrets.token_urlsafe(32)
            self._tokens[token] = (inst.id, time.time() + seconds)
            return _text(200, token, {ttl_header: str(seconds)})
        entry = self._tokens.get(req.headers.get(prefix.lower()) or "")
        if entry is None or entry[0] != inst.id or entry[1] <= time.time():
            return denied
        return None

    # -- the five formats ------------------------------------------------------------------

    def _aws(self, inst: MetadataView, req: MetadataRequest) -> Reply:
        gate = self._token_gate(inst, req, "X-aws-ec2-metadata-token", _text(401, "Unauthorized"))
        if gate is not None:
            return gate
        if req.path == "/latest/meta-data/spot/instance-action":
            if inst.deadline is None:
                return _text(404, NOT_FOUND_HTML, {"Content-Type": "text/html"})
            return _json(200, {"action": "terminate", "time": _iso_z(inst.deadline)})
        if req.path == "/latest/meta-data/events/recommendations/rebalance":
            if inst.rebalance is None:
                return _text(404, NOT_FOUND_HTML, {"Content-Type": "text/html"})
            return _json(200, {"noticeTime": _iso_z(inst.rebalance)})
        simple = {
            "/latest/meta-data/instance-id": inst.id,
            "/latest/meta-data/placement/availability-zone": inst.zone,
            "/latest/meta-data/instance-life-cycle": "spot"
            if inst.market == "spot"
            else "on-demand",
        }
        if req.path in simple:
            return _text(200, simple[req.path])
        return _text(404, NOT_FOUND_HTML, {"Content-Type": "text/html"})

    def _gcp(self, inst: MetadataView, req: MetadataRequest) -> Reply:
        flavor = {"Metadata-Flavor": "Google"}
        if req.headers.get("metadata-flavor") != "Google":
            return _text(403, "Missing Metadata-Flavor:Google header.", flavor)
        values = {
            "/computeMetadata/v1/instance/preempted": "TRUE" if inst.deadline else "FALSE",
            "/computeMetadata/v1/instance/id": inst.id,
            "/computeMetadata/v1/instance/zone": f"projects/0/zones/{inst.zone}",
            "/computeMetadata/v1/instance/scheduling/provisioning-model": "SPOT"
            if inst.market == "spot"
            else "STANDARD",
        }
        if req.path in values:
            return _text(200, values[req.path], flavor)
        return _text(404, "Not Found", flavor)

    def _azure(self, inst: MetadataView, req: MetadataRequest) -> Reply:
        if req.headers.get("metadata", "").lower() != "true":
            return _json(400, {"error": "Bad request. Required metadata header not specified"})
        if not req.query.get("api-version"):
            return _json(400, {"error": "Bad request. api-version was not specified"})
        if req.path == "/metadata/scheduledevents":
            if req.method == "POST":
                try:
                    doc = json.loads(req.body or b"{}")
                    ids = [r.get("EventId") for r in doc.get("StartRequests", [])]
                except (ValueError, AttributeError):
                    return _json(400, {"error": "Bad request. Malformed body"})
                if inst.deadline is not None and inst.event_id in ids:
                    self._approve(inst.id)
                return _text(200, "")
            events = []
            if inst.deadline is not None:
                events.append(
                    {
                        "EventId": inst.event_id,
                        "EventType": "Preempt",
                        "ResourceType": "VirtualMachine",
                        "Resources": [inst.id],
                        "EventStatus": "Scheduled",
                        "NotBefore": format_datetime(
                            datetime.fromtimestamp(inst.deadline, UTC), usegmt=True
                        ),
                        "Description": "",
                        "EventSource": "Platform",
                        "DurationInSeconds": -1,
                    }
                )
            return _json(200, {"DocumentIncarnation": 1 if events else 0, "Events": events})
        if req.path == "/metadata/instance/compute/vmId":
            return _text(200, inst.id)
        return _json(404, {"error": "Not found"})

    def _alibaba(self, inst: MetadataView, req: MetadataRequest) -> Reply:
        gate = self._token_gate(inst, req, "X-aliyun-ecs-metadata-token", _text(403, "Forbidden"))
        if gate is not None:
            return gate
        if req.path == "/latest/meta-data/instance/spot/termination-time":
            if inst.deadline is None:
                return _text(404, "Not Found")
            return _text(200, _iso_z(inst.deadline))
        simple = {
            "/latest/meta-data/instance-id": inst.id,
            "/latest/meta-data/zone-id": inst.zone,
        }
        if req.path in simple:
            return _text(200, simple[req.path])
        return _text(404, "Not Found")

    def _tencent(self, inst: MetadataView, req: MetadataRequest) -> Reply:
        if req.path == "/latest/meta-data/spot/termination-time":
            if inst.deadline is None:
                return _text(404, "Not Found")
            # Tencent writes the time in UTC+8, with no zone
            return _text(200, format_when(datetime.fromtimestamp(inst.deadline, UTC)))
        simple = {
            "/latest/meta-data/instance-id": inst.id,
            "/latest/meta-data/placement/zone": inst.zone,
        }
        if req.path in simple:
            return _text(200, simple[req.path])
        return _text(404, "Not Found")
