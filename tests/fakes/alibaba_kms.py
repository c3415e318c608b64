"""A small Alibaba Cloud KMS (secrets, API 2016-01-20) on 127.0.0.1, for the real SDK.

The official SDK (alibabacloud-kms20160120 over tea-openapi and its POP gateway, signature
ACS3-HMAC-SHA256) sends ``POST /`` with the action's parameters in the query string (form
fields in the body, where an action has any), the action in ``x-acs-action`` and the version in
``x-acs-version``. It reads a JSON body; an error is HTTP 4xx/5xx with ``{"Code", "Message",
"RequestId"}`` (a missing secret: 404 ``Forbidden.ResourceNotFound``).
https://www.alibabacloud.com/help/en/kms/key-management-service/developer-reference/api-kms-2016-01-20-getsecretvalue

``GetSecretValue`` answers ``SecretName``, ``VersionId``, ``VersionStages``, ``SecretData``,
``SecretDataType`` (``text``, or ``binary`` with base64 data), ``SecretType`` and
``CreateTime``. Without ``VersionId`` or ``VersionStage`` the ``ACSCurrent`` version is read.
The server keeps versions per secret, records every request (action, parameters, headers
without the signature) and can answer the next calls with a configured error code.
Signatures are not verified; their presence and the credential's key id are.
"""

from __future__ import annotations

import base64
import json
import threading
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from tests.fakes import LocalHTTPServer

VERSION = "2016-01-20"
#: the HTTP status KMS answers each code with (400 where not listed)
STATUS = {
    "Forbidden.ResourceNotFound": 404,
    "Forbidden.RAM": 403,
    "Forbidden.NoPermission": 403,
    "InvalidAccessKeyId.NotFound": 404,
    "Rejected.Throttling": 400,
    "InternalFailure": 500,
}
_SECRET_HEADER_WORDS = ("authorization", "signature", "security-token")


@dataclass(slots=True)
class Recorded:
    action: str
    params: dict[str, str]
    headers: dict[str, str]


@dataclass(slots=True)
class _Version:
    version_id: str
    data: str
    data_type: str
    stages: list[str] = field(default_factory=list)


class ApiError(Exception):
    def __init__(self, code: str, message: str = "") -> None:
        super().__init__(code)
        self.code = code
        self.message = message or code
        self.status = STATUS.get(code, 400)


class AlibabaKmsFake(LocalHTTPServer):
    """KMS on ``endpoint`` (``127.0.0.1:PORT``, what ``Config(endpoint=...)`` takes)."""

    def __init__(self, *, access_key_id: str | None = None) -> None:
        self.access_key_id = access_key_id  # when set, any other key id is refused
        self.requests: list[Recorded] = []
        self._secrets: dict[str, list[_Version]] = {}
        self._failures: list[str] = []
        self._lock = threading.Lock()

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def add(self, name: str, value: str | bytes, *, version_id: str | None = None) -> str:
        """A new version of ``name``, now ``ACSCurrent`` (the old one ``ACSPrevious``)."""
        if isinstance(value, bytes):
            data, data_type = base64.b64encode(value).decode(), "binary"
        else:
            data, data_type = value, "text"
        version_id = version_id or uuid.uuid4().hex
        with self._lock:
            versions = self._secrets.setdefault(name, [])
            for old in versions:
                old.stages = ["ACSPrevious"] if "ACSCurrent" in old.stages else []
            versions.append(_Version(version_id, data, data_type, ["ACSCurrent"]))
        return version_id

    def fail_next(self, code: str) -> None:
        with self._lock:
            self._failures.append(code)

    def reset(self) -> None:
        with self._lock:
            self._secrets.clear()
            self._failures.clear()
            self.requests.clear()

    def calls(self, action: str) -> list[Recorded]:
        with self._lock:
            return [r for r in self.requests if r.action == action]

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        url = urlsplit(h.path)
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length) if length else b""
        params = dict(parse_qsl(url.query, keep_blank_values=True))
        if raw and "form" in (h.headers.get("Content-Type") or ""):
            params.update(parse_qsl(raw.decode(), keep_blank_values=True))
        action = h.headers.get("x-acs-action", "")
        headers = {
            k.lower(): v
            for k, v in h.headers.items()
            if not any(w in k.lower() for w in _SECRET_HEADER_WORDS)
        }
        with self._lock:
            self.requests.append(Recorded(action, params, headers))
            failure = self._failures.pop(0) if self._failures else None
        request_id = str(uuid.uuid4()).upper()
        try:
            auth = h.headers.get("Authorization", "")
            if h.command != "POST" or url.path != "/":
                raise ApiError("UnsupportedHTTPMethod", f"{h.command} {url.path}")
            if not auth.startswith("ACS3-HMAC-SHA256 ") or "Signature=" not in auth:
                raise ApiError("IncompleteSignature", "The request signature is missing.")
            key_id = auth.partition("Credential=")[2].partition(",")[0]
            if self.access_key_id is not None and key_id != self.access_key_id:
                raise ApiError("InvalidAccessKeyId.NotFound", "Specified access key is not found.")
            if h.headers.get("x-acs-version") != VERSION:
                raise ApiError(
                    "InvalidVersion", f"Version {h.headers.get('x-acs-version')} is not valid."
                )
            if failure is not None:
                raise ApiError(failure, f"{failure} (injected)")
            handler = getattr(self, f"_do_{action}", None)
            if handler is None:
                raise ApiError("InvalidAction.NotFound", f"Specified api {action} is not found.")
            with self._lock:
                payload = handler(params)
            payload["RequestId"] = request_id
            self._send(h, 200, payload)
        except ApiError as err:
            self._send(
                h,
                err.status,
                {
                    "Code": err.code,
                    "Message": err.message,
                    "RequestId": request_id,
                    "HostId": self.endpoint,
                },
            )

    @staticmethod
    def _send(h: BaseHTTPRequestHandler, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json;charset=utf-8")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def _do_GetSecretValue(self, params: dict[str, str]) -> dict[str, Any]:
        name = params.get("SecretName", "")
        if not name:
            raise ApiError("MissingParameter", "The parameter SecretName is missing.")
        short = name.rpartition(":secret/")[2] if name.startswith("acs:kms:") else name
        versions = self._secrets.get(short)
        if not versions:
            raise ApiError("Forbidden.ResourceNotFound", "The resource is not found.")
        version_id, stage = params.get("VersionId"), params.get("VersionStage")
        found = [
            v
            for v in versions
            if (not version_id or v.version_id == version_id)
            and (v.stages and stage in v.stages if stage else True)
        ]
        if not version_id and not stage:
            found = [v for v in versions if "ACSCurrent" in v.stages]
        if not found:
            raise ApiError("Forbidden.ResourceNotFound", "The resource is not found.")
        version = found[-1]
        return {
            "SecretName": short,
            "VersionId": version.version_id,
            "VersionStages": {"VersionStage": list(version.stages)},
            "SecretData": version.data,
            "SecretDataType": version.data_type,
            "SecretType": "Generic",
            "CreateTime": "2026-01-05T08:22:03Z",
        }
