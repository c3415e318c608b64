"""A small GCP Secret Manager (REST, v1) on 127.0.0.1, with the OAuth token endpoint in front.

The real SDK (google-cloud-secret-manager, ``transport="rest"``) sends
``GET /v1/projects/P/secrets/S/versions/V:access`` with ``Authorization: Bearer TOKEN``; the
answer is ``{"name": "projects/P/secrets/S/versions/N", "payload": {"data": base64,
"dataCrc32c": "int64 as a string"}}`` and an error is ``{"error": {"code", "message",
"status"}}`` with the HTTP status (404 ``NOT_FOUND``, 403 ``PERMISSION_DENIED``, 400
``FAILED_PRECONDITION`` for a disabled version, ...).
https://cloud.google.com/secret-manager/docs/reference/rest/v1/projects.secrets.versions/access

Credentials come the way ``google.auth.default()`` finds them: :meth:`service_account_file`
writes a service-account key (a fresh RSA key, its public half trusted here) whose
``token_uri`` is this server's ``/token``. The GAPIC client sends a self-signed JWT as the
bearer (``always_use_jwt_access``); other google-auth paths exchange a signed JWT at ``/token``
(RFC 7523 ``jwt-bearer`` grant) for :data:`TOKEN`. Either is accepted only when its RS256
signature verifies with a trusted key and it has not expired; anything else is 401
``UNAUTHENTICATED``.

The server keeps versions per (project, secret) (``latest`` is the one created last),
records every request (method, path, params, headers of interest) and can answer the next
calls with an error (``fail_next``) or with a wrong checksum (``corrupt_checksum``).
"""

from __future__ import annotations

import base64
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from tests.fakes import LocalHTTPServer

TOKEN = "ya29.fake-gcp-access-token"
JWT_GRANT = "urn:ietf:params:oauth:grant-type:jwt-bearer"


def crc32c(data: bytes) -> int:
    """CRC-32C bit by bit (independent of the reader's table-driven one)."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 & -(crc & 1))
    return crc ^ 0xFFFFFFFF


@dataclass(slots=True)
class Recorded:
    method: str
    path: str
    params: dict[str, str]
    headers: dict[str, str]
    body: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class _Version:
    number: int
    data: bytes
    state: str = "ENABLED"


def _b64url(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


class GcpSecretsFake(LocalHTTPServer):
    """Secret Manager on ``endpoint`` (what ``ClientOptions(api_endpoint=...)`` takes)."""

    def __init__(self) -> None:
        self._keys: dict[str, Any] = {}  # key id -> RSA public key
        #: the claims of every JWT accepted (who called, with which scope or audience)
        self.jwt_claims: list[dict[str, Any]] = []
        self.requests: list[Recorded] = []
        self._secrets: dict[tuple[str, str], list[_Version]] = {}
        self._failures: list[tuple[int, str, str]] = []
        self.corrupt_checksum = False
        self._lock = threading.Lock()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def token_uri(self) -> str:
        return f"{self.endpoint}/token"

    # -- test controls ------------------------------------------------------------------

    def add(self, project: str, secret: str, value: str | bytes, *, state: str = "ENABLED") -> int:
        """A new version of ``projects/project/secrets/secret``; its number."""
        data = value.encode() if isinstance(value, str) else value
        with self._lock:
            versions = self._secrets.setdefault((project, secret), [])
            versions.append(_Version(len(versions) + 1, data, state))
            return len(versions)

    def service_account_file(self, path: Path, *, project: str) -> Path:
        """A service-account key file whose ``token_uri`` is this server's, its key trusted."""
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa

        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        key_id = f"key-{len(self._keys) + 1}"
        self._keys[key_id] = key.public_key()
        pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ).decode()
        info = {
            "type": "service_account",
            "project_id": project,
            "private_key_id": key_id,
            "private_key": pem,
            "client_email": f"agent@{project}.iam.gserviceaccount.com",
            "client_id": "1234567890",
            "token_uri": self.token_uri,
        }
        path.write_text(json.dumps(info), encoding="utf-8")
        return path

    def fail_next(self, http_status: int, status: str, message: str = "injected") -> None:
        with self._lock:
            self._failures.append((http_status, status, message))

    def reset(self) -> None:
        with self._lock:
            self._secrets.clear()
            self._failures.clear()
            self.requests.clear()
            self.corrupt_checksum = False

    def calls(self, path_suffix: str = ":access") -> list[Recorded]:
        with self._lock:
            return [r for r in self.requests if r.path.endswith(path_suffix)]

    # -- HTTP --------------------------------------------------------------------------

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        url = urlsplit(h.path)
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length) if length else b""
        body = dict(parse_qsl(raw.decode())) if raw else {}
        headers = {
            k.lower(): v
            for k, v in h.headers.items()
            if k.lower() in ("authorization", "x-goog-api-client", "content-type")
        }
        path = unquote(url.path)
        with self._lock:
            self.requests.append(
                Recorded(h.command, path, dict(parse_qsl(url.query)), headers, body)
            )
        if h.command == "POST" and path == "/token":
            self._token(h, body)
        elif h.command == "GET" and path.startswith("/v1/") and path.endswith(":access"):
            self._access(h, path[len("/v1/") : -len(":access")])
        else:
            self._error(h, 404, "NOT_FOUND", f"{h.command} {path} is not served here")

    def _verified(self, jwt: str) -> bool:
        """An RS256 JWT signed by a trusted key, not expired; its claims are recorded."""
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding

        try:
            head, body, signature = jwt.split(".")
            header, claims = json.loads(_b64url(head)), json.loads(_b64url(body))
            key = self._keys[header["kid"]]
            key.verify(
                _b64url(signature), f"{head}.{body}".encode(), padding.PKCS1v15(), hashes.SHA256()
            )
        except (ValueError, KeyError, InvalidSignature):
            return False
        if header.get("alg") != "RS256" or claims.get("exp", 0) < time.time():
            return False
        with self._lock:
            self.jwt_claims.append(claims)
        return True

    def _token(self, h: BaseHTTPRequestHandler, form: dict[str, str]) -> None:
        if form.get("grant_type") != JWT_GRANT or not self._verified(form.get("assertion", "")):
            self._send(h, 400, {"error": "invalid_grant", "error_description": "bad assertion"})
            return
        self._send(h, 200, {"access_token": TOKEN, "expires_in": 3600, "token_type": "Bearer"})

    def _access(self, h: BaseHTTPRequestHandler, name: str) -> None:
        with self._lock:
            failure = self._failures.pop(0) if self._failures else None
        if failure is not None:
            self._error(h, *failure)
            return
        bearer = (h.headers.get("Authorization") or "").removeprefix("Bearer ")
        if bearer != TOKEN and not self._verified(bearer):
            self._error(
                h, 401, "UNAUTHENTICATED", "Request had invalid authentication credentials."
            )
            return
        parts = name.split("/")
        if (
            len(parts) != 6
            or parts[0] != "projects"
            or parts[2] != "secrets"
            or parts[4] != "versions"
        ):
            self._error(h, 400, "INVALID_ARGUMENT", f"Invalid resource name [{name}].")
            return
        project, secret, wanted = parts[1], parts[3], parts[5]
        with self._lock:
            versions = list(self._secrets.get((project, secret), ()))
        if wanted == "latest":  # the version created last, whatever its state
            version = versions[-1] if versions else None
        else:
            version = next((v for v in versions if str(v.number) == wanted), None)
        if version is None:
            self._error(h, 404, "NOT_FOUND", f"Secret Version [{name}] not found.")
            return
        if version.state != "ENABLED":
            self._error(
                h,
                400,
                "FAILED_PRECONDITION",
                f"Secret Version [{name}] is in {version.state} state.",
            )
            return
        crc = crc32c(version.data) ^ (1 if self.corrupt_checksum else 0)
        self._send(
            h,
            200,
            {
                "name": f"projects/{project}/secrets/{secret}/versions/{version.number}",
                "payload": {
                    "data": base64.b64encode(version.data).decode(),
                    "dataCrc32c": str(crc),
                },
            },
        )

    def _error(self, h: BaseHTTPRequestHandler, code: int, status: str, message: str) -> None:
        self._send(h, code, {"error": {"code": code, "message": message, "status": status}})

    @staticmethod
    def _send(h: BaseHTTPRequestHandler, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json; charset=UTF-8")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)
