"""EC2's ``GetSpotPlacementScores`` on 127.0.0.1, in front of moto's server (moto 5.2 has none).

boto3 speaks EC2's query protocol: ``POST /`` with a form body (``Action``, ``Version``, and
the request's members flattened: ``InstanceType.1``, ``RegionName.1``, ``TargetCapacity``,
``TargetCapacityUnitType``, ``SingleAvailabilityZone``, ``MaxResults``, ``NextToken``). This
server records every request's action and form (never its signature), answers
``GetSpotPlacementScores`` itself from :attr:`AwsSpotScores.scores` in the EC2 response shape
(``GetSpotPlacementScoresResponse`` with ``spotPlacementScoreSet`` items of ``region``,
``availabilityZoneId`` and ``score``, and ``nextToken`` while more remain;
https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_GetSpotPlacementScores.html) and
forwards any other action to moto unchanged (``DescribeAvailabilityZones``,
``DescribeSpotPriceHistory``, ...). A request without the members EC2 requires is answered
with EC2's XML error (``MissingParameter``), as EC2 does.
"""

from __future__ import annotations

import http.client
import threading
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qsl, urlsplit
from xml.sax.saxutils import escape

from tests.fakes import LocalHTTPServer

_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}
_NS = "http://ec2.amazonaws.com/doc/2016-11-15/"


@dataclass(slots=True)
class Recorded:
    action: str
    form: dict[str, str]


class AwsSpotScores(LocalHTTPServer):
    """Answers GetSpotPlacementScores; forwards the rest to ``upstream`` (moto's URL)."""

    verbs = ("POST",)

    def __init__(self, upstream: str, page_size: int = 2) -> None:
        self.upstream = urlsplit(upstream)
        #: (region, availability zone id, instance type) -> score (1-10)
        self.scores: dict[tuple[str, str, str], int] = {}
        #: the most items one answer holds before ``nextToken`` (small: the pages are walked)
        self.page_size = page_size
        self.requests: list[Recorded] = []
        self._lock = threading.Lock()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def asked(self, action: str) -> list[dict[str, str]]:
        with self._lock:
            return [r.form for r in self.requests if r.action == action]

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length) if length else b""
        form = dict(parse_qsl(raw.decode("utf-8"), keep_blank_values=True))
        action = form.get("Action", "")
        with self._lock:
            self.requests.append(Recorded(action, form))
        if action == "GetSpotPlacementScores":
            status, data = self._scores(form)
            self._reply(h, status, {"Content-Type": "text/xml;charset=UTF-8"}, data)
            return
        upstream = http.client.HTTPConnection(self.upstream.netloc, timeout=30)
        try:
            headers = {k: v for k, v in h.headers.items() if k.lower() not in _HOP}
            upstream.request("POST", h.path, body=raw, headers=headers)
            answer = upstream.getresponse()
            data = answer.read()
            kept = {k: v for k, v in answer.getheaders() if k.lower() not in _HOP}
            self._reply(h, answer.status, kept, data)
        finally:
            upstream.close()

    def _scores(self, form: dict[str, str]) -> tuple[int, bytes]:
        types = [v for k, v in sorted(form.items()) if k.startswith("InstanceType.")]
        regions = [v for k, v in sorted(form.items()) if k.startswith("RegionName.")]
        if "TargetCapacity" not in form:
            return _error(
                "MissingParameter", "The request must contain the parameter TargetCapacity"
            )
        if not types:
            return _error("MissingParameter", "InstanceTypes or InstanceRequirements is required")
        with self._lock:
            rows = [
                (
                    region,
                    zone_id,
                    max(
                        s
                        for (r, z, t), s in self.scores.items()
                        if (r, z) == (region, zone_id) and t in types
                    ),
                )
                for region, zone_id in dict.fromkeys(
                    (r, z)
                    for (r, z, t) in self.scores
                    if t in types and (not regions or r in regions)
                )
            ]
        start = int(form.get("NextToken") or 0)
        size = min(int(form.get("MaxResults") or self.page_size), self.page_size)
        page, more = rows[start : start + size], start + size < len(rows)
        items = "".join(
            f"<item><region>{escape(r)}</region><availabilityZoneId>{escape(z)}</availabilityZoneId>"
            f"<score>{s}</score></item>"
            for r, z, s in page
        )
        token = f"<nextToken>{start + size}</nextToken>" if more else ""
        body = (
            f'<?xml version="1.0" encoding="UTF-8"?>\n<GetSpotPlacementScoresResponse xmlns="{_NS}">'
            f"<requestId>{uuid.uuid4()}</requestId><spotPlacementScoreSet>{items}"
            f"</spotPlacementScoreSet>{token}</GetSpotPlacementScoresResponse>"
        )
        return 200, body.encode()

    @staticmethod
    def _reply(
        h: BaseHTTPRequestHandler, status: int, headers: dict[str, str], data: bytes
    ) -> None:
        h.send_response(status)
        for key, value in headers.items():
            h.send_header(key, value)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)


def _error(code: str, message: str) -> tuple[int, bytes]:
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Response><Errors><Error><Code>{escape(code)}</Code>"
        f"<Message>{escape(message)}</Message></Error></Errors>"
        f"<RequestID>{uuid.uuid4()}</RequestID></Response>"
    )
    return 400, body.encode()
