"""A small Tencent Cloud SSM (Secrets Manager, API 2019-09-23) on 127.0.0.1, for the real SDK.

The official SDK (tencentcloud-sdk-python-ssm, TC3-HMAC-SHA256) sends ``POST /`` with a JSON
body, the action in ``X-TC-Action``, the version, region and timestamp in ``X-TC-*`` headers
and the signature in ``Authorization``. Every answer is HTTP 200 with ``{"Response": {...}}``;
an error is ``{"Response": {"Error": {"Code", "Message"}, "RequestId"}}`` and the SDK notices
it only when the Content-Type is exactly ``application/json`` (what the cloud sends, and this
server unless ``content_type`` is changed to show the trap).

- ``GetSecretValue``: ``SecretName`` and ``VersionId`` (both required) -> ``SecretName``,
  ``VersionId``, ``SecretString`` or ``SecretBinary`` (base64; the other one empty).
  https://www.tencentcloud.com/document/api/1078/38649
- ``ListSecretVersionIds``: ``SecretName`` -> ``Versions: [{VersionId, CreateTime}]``.
  https://www.tencentcloud.com/document/api/1078/38647
- A missing secret or version is ``ResourceNotFound``; a disabled secret
  ``ResourceUnavailable.ResourceDisabled``.

The server keeps versions per secret (with a creation time the test sets or that increases),
records every request (action, decoded body, headers without the signature) and can answer the
next calls of an action with an error code. Signatures are not verified; their presence and
the SecretId are.
"""

from __future__ import annotations

import base64
import json
import threading
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.fakes import LocalHTTPServer

VERSION = "2019-09-23"
JSON = "application/json"
_SECRET_HEADER_WORDS = ("authorization", "signature", "token", "secret")


@dataclass(slots=True)
class Recorded:
    action: str
    params: dict[str, Any]
    headers: dict[str, str]


@dataclass(slots=True)
class _Secret:
    enabled: bool = True
    versions: dict[str, tuple[int, str, str]] = field(default_factory=dict)  # id -> (t, s, b64)


class ApiError(Exception):
    def __init__(self, code: str, message: str = "") -> None:
        super().__init__(code)
        self.code = code
        self.message = message or code


class TencentSsmFake(LocalHTTPServer):
    """SSM on ``endpoint`` (``127.0.0.1:PORT``, what ``HttpProfile(endpoint=...)`` takes)."""

    def __init__(self, *, region: str = "ap-guangzhou", secret_ids: set[str] | None = None) -> None:
        self.region = region
        self.secret_ids = secret_ids  # when set, any other SecretId is refused
        self.content_type = JSON
        self.requests: list[Recorded] = []
        self._secrets: dict[str, _Secret] = {}
        self._failures: dict[str, list[str]] = {}
        self._clock = 1_700_000_000
        self._lock = threading.Lock()

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def add(
        self, name: str, version_id: str, value: str | bytes, *, created: int | None = None
    ) -> None:
        """A version of ``name``; ``created`` (epoch seconds) defaults to after every other."""
        with self._lock:
            self._clock += 1
            text, binary = (
                (value, "") if isinstance(value, str) else ("", base64.b64encode(value).decode())
            )
            secret = self._secrets.setdefault(name, _Secret())
            secret.versions[version_id] = (created or self._clock, text, binary)

    def disable(self, name: str) -> None:
        with self._lock:
            self._secrets[name].enabled = False

    def fail_next(self, action: str, code: str) -> None:
        with self._lock:
            self._failures.setdefault(action, []).append(code)

    def reset(self) -> None:
        with self._lock:
            self._secrets.clear()
            self._failures.clear()
            self.requests.clear()
            self.content_type = JSON

    def calls(self, action: str) -> list[Recorded]:
        with self._lock:
            return [r for r in self.requests if r.action == action]

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length) if length else b""
        action = h.headers.get("X-TC-Action", "")
        headers = {
            k.lower(): v
            for k, v in h.headers.items()
            if not any(w in k.lower() for w in _SECRET_HEADER_WORDS)
        }
        try:
            params = json.loads(raw) if raw else {}
        except ValueError:
            params = {"_raw": raw.decode("utf-8", "replace")}
        with self._lock:
            self.requests.append(Recorded(action, params, headers))
            queue = self._failures.get(action) or []
            failure = queue.pop(0) if queue else None
        request_id = str(uuid.uuid4())
        try:
            if h.command != "POST" or h.path != "/":
                raise ApiError("UnsupportedProtocol", f"{h.command} {h.path}")
            auth = h.headers.get("Authorization", "")
            if not auth.startswith("TC3-HMAC-SHA256 ") or "Signature=" not in auth:
                raise ApiError("AuthFailure.SignatureFailure", "The request has no signature.")
            secret_id = auth.partition("Credential=")[2].partition("/")[0]
            if self.secret_ids is not None and secret_id not in self.secret_ids:
                raise ApiError("AuthFailure.SecretIdNotFound", "The SecretId is not found.")
            if h.headers.get("X-TC-Version") != VERSION:
                raise ApiError(
                    "NoSuchVersion", f"Version {h.headers.get('X-TC-Version')} does not exist."
                )
            if h.headers.get("X-TC-Region") != self.region:
                raise ApiError(
                    "UnsupportedRegion", f"{h.headers.get('X-TC-Region')} is not supported."
                )
            if failure is not None:
                raise ApiError(failure, f"{failure} (injected)")
            handler = getattr(self, f"_do_{action}", None)
            if handler is None:
                raise ApiError("InvalidAction", f"The action {action} does not exist.")
            if not isinstance(params, dict):
                raise ApiError("InvalidParameter", "The body is not a JSON object.")
            with self._lock:
                payload = handler(params)
            payload["RequestId"] = request_id
            self._send(h, {"Response": payload})
        except ApiError as err:
            self._send(
                h,
                {
                    "Response": {
                        "Error": {"Code": err.code, "Message": err.message},
                        "RequestId": request_id,
                    }
                },
            )

    def _send(self, h: BaseHTTPRequestHandler, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        h.send_response(200)
        h.send_header("Content-Type", self.content_type)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def _secret(self, params: dict[str, Any]) -> tuple[str, _Secret]:
        name = params.get("SecretName")
        if not name:
            raise ApiError("MissingParameter", "The parameter SecretName is missing.")
        secret = self._secrets.get(str(name))
        if secret is None:
            raise ApiError("ResourceNotFound", f"The secret {name} does not exist.")
        return str(name), secret

    def _do_GetSecretValue(self, params: dict[str, Any]) -> dict[str, Any]:
        name, secret = self._secret(params)
        version_id = params.get("VersionId")
        if not version_id:
            raise ApiError("MissingParameter", "The parameter VersionId is missing.")
        if not secret.enabled:
            raise ApiError(
                "ResourceUnavailable.ResourceDisabled", f"The secret {name} is disabled."
            )
        if version_id not in secret.versions:
            raise ApiError(
                "ResourceNotFound", f"The version {version_id} of {name} does not exist."
            )
        _, text, binary = secret.versions[version_id]
        return {
            "SecretName": name,
            "VersionId": version_id,
            "SecretString": text,
            "SecretBinary": binary,
        }

    def _do_ListSecretVersionIds(self, params: dict[str, Any]) -> dict[str, Any]:
        name, secret = self._secret(params)
        rows = [{"VersionId": v, "CreateTime": t} for v, (t, _, _) in secret.versions.items()]
        return {"SecretName": name, "Versions": rows}
