"""A recording reverse proxy in front of moto's server, for AWS's JSON protocol (Secrets Manager,
SSM): what boto3 put on the wire, and AWS errors on demand.

boto3 sends ``POST /`` with ``X-Amz-Target: secretsmanager.GetSecretValue`` (or
``AmazonSSM.GetParameter``), a JSON body (``application/x-amz-json-1.1``) and a SigV4
``Authorization`` whose credential scope names the region and service. The proxy records the
target, the decoded body and the credential scope (never the signature), then forwards the
request to moto unchanged, or answers it with an AWS JSON error (``{"__type": CODE,
"message": ...}`` with the HTTP status AWS uses) queued by ``fail_next``.
https://docs.aws.amazon.com/secretsmanager/latest/apireference/CommonErrors.html
"""

from __future__ import annotations

import http.client
import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import urlsplit

from tests.fakes import LocalHTTPServer

_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}


@dataclass(slots=True)
class Recorded:
    target: str
    body: dict[str, Any]
    scope: str  # "AKID/DATE/REGION/SERVICE/aws4_request"


class AwsRecorder(LocalHTTPServer):
    """Forwards to ``upstream`` (moto's URL); ``endpoint`` is for ``AWS_ENDPOINT_URL_*``."""

    verbs = ("POST",)

    def __init__(self, upstream: str) -> None:
        self.upstream = urlsplit(upstream)
        self.requests: list[Recorded] = []
        self._failures: list[tuple[int, str]] = []
        self._lock = threading.Lock()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def fail_next(self, code: str, status: int = 400) -> None:
        with self._lock:
            self._failures.append((status, code))

    def reset(self) -> None:
        with self._lock:
            self.requests.clear()
            self._failures.clear()

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length) if length else b""
        auth = h.headers.get("Authorization", "")
        scope = auth.partition("Credential=")[2].partition(",")[0]
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            body = {"_raw": raw.decode("utf-8", "replace")}
        with self._lock:
            self.requests.append(Recorded(h.headers.get("X-Amz-Target", ""), body, scope))
            failure = self._failures.pop(0) if self._failures else None
        if failure is not None:
            status, code = failure
            data = json.dumps({"__type": code, "message": f"{code} (injected)"}).encode()
            self._reply(h, status, {"Content-Type": "application/x-amz-json-1.1"}, data)
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
