"""A small Azure Key Vault (secrets) on https://127.0.0.1, and the VM's IMDS token endpoint.

:class:`KeyVaultFake` speaks the Key Vault REST API the real SDK (azure-keyvault-secrets) uses:
``GET /secrets/{name}[/{version}]?api-version=...`` answered with ``{"value", "id",
"attributes"}``; errors are ``{"error": {"code", "message"}}`` (404 ``SecretNotFound``, 403
``Forbidden``, ...). A request without a bearer token gets Key Vault's challenge, a 401 with
``WWW-Authenticate: Bearer authorization="https://login.microsoftonline.com/TENANT",
resource="https://vault.azure.net"``; a token this IMDS did not issue gets a 401 too.
https://learn.microsoft.com/en-us/rest/api/keyvault/secrets/get-secret/get-secret
https://learn.microsoft.com/en-us/azure/key-vault/general/authentication-requests-and-responses

It serves TLS with a self-signed certificate (:func:`self_signed`, for 127.0.0.1 and
localhost): the SDK sends bearer tokens over https only, and the reader keeps it so. A test
trusts the certificate through ``REQUESTS_CA_BUNDLE``, which requests (under azure-core)
honours, so verification stays on.

:class:`ImdsFake` is the managed-identity token endpoint of a VM's Instance Metadata Service
(plain http, as on a VM): ``GET /metadata/identity/oauth2/token?api-version=2018-02-01
&resource=...`` with ``Metadata: true``. azure-identity reaches it at
``AZURE_POD_IDENTITY_AUTHORITY_HOST`` instead of 169.254.169.254.
https://learn.microsoft.com/en-us/entra/identity/managed-identities-azure-resources/how-to-use-vm-token

Both record every request and can answer the next ones with a configured error.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import ssl
import threading
import time
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self
from urllib.parse import parse_qsl, unquote, urlsplit

from tests.fakes import LocalHTTPServer

TENANT = "72f988bf-86f1-41af-91ab-2d7cd011db47"
RESOURCE = "https://vault.azure.net"
_INTERESTING = ("authorization", "metadata", "content-length", "user-agent")


@dataclass(slots=True)
class Recorded:
    method: str
    path: str
    params: dict[str, str]
    headers: dict[str, str]


def self_signed(directory: Path) -> tuple[Path, Path]:
    """(certificate, key) PEM files of a fresh self-signed CA certificate for 127.0.0.1."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fake key vault")])
    now = dt.datetime.now(dt.UTC)
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(ski, critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False
        )
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "vault-cert.pem", directory / "vault-key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


class _Recording(LocalHTTPServer):
    verbs = ("GET", "POST", "PUT", "DELETE")

    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self._failures: list[tuple[int, str]] = []
        self._lock = threading.Lock()

    def fail_next(self, status: int, code: str) -> None:
        """The next request is answered with ``status`` and ``{"error": {"code": code}}``."""
        with self._lock:
            self._failures.append((status, code))

    def _record(self, h: BaseHTTPRequestHandler) -> tuple[str, dict[str, str]]:
        url = urlsplit(h.path)
        path, params = unquote(url.path), dict(parse_qsl(url.query))
        headers = {k.lower(): v for k, v in h.headers.items() if k.lower() in _INTERESTING}
        length = int(h.headers.get("Content-Length") or 0)
        if length:
            h.rfile.read(length)
        with self._lock:
            self.requests.append(Recorded(h.command, path, params, headers))
        return path, params

    def _failure(self) -> tuple[int, str] | None:
        with self._lock:
            return self._failures.pop(0) if self._failures else None

    @staticmethod
    def _send(
        h: BaseHTTPRequestHandler,
        status: int,
        payload: dict[str, Any],
        headers: dict[str, str] | None = None,
    ) -> None:
        data = json.dumps(payload).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json; charset=utf-8")
        h.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            h.send_header(key, value)
        h.end_headers()
        h.wfile.write(data)


class ImdsFake(_Recording):
    """The managed identity's token endpoint (``authority``: AZURE_POD_IDENTITY_AUTHORITY_HOST)."""

    def __init__(self) -> None:
        super().__init__()
        self.token = f"fake-mi-token-{uuid.uuid4().hex}"

    @property
    def authority(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        path, params = self._record(h)
        failure = self._failure()
        if failure is not None:
            self._send(h, failure[0], {"error": failure[1], "error_description": "injected"})
        elif path != "/metadata/identity/oauth2/token" or h.command != "GET":
            self._send(h, 404, {"error": "not_found"})
        elif h.headers.get("Metadata") != "true":
            self._send(
                h,
                400,
                {
                    "error": "invalid_request",
                    "error_description": "Required metadata header not specified",
                },
            )
        elif not params.get("resource"):
            self._send(h, 400, {"error": "invalid_resource"})
        else:
            now = int(time.time())
            self._send(
                h,
                200,
                {
                    "access_token": self.token,
                    "client_id": str(uuid.uuid4()),
                    "expires_in": "86399",
                    "expires_on": str(now + 86399),
                    "ext_expires_in": "86399",
                    "not_before": str(now),
                    "resource": params["resource"],
                    "token_type": "Bearer",
                },
            )


class KeyVaultFake(_Recording):
    """Key Vault secrets on ``https://127.0.0.1:<port>`` (``endpoint``), for ``imds.token``."""

    def __init__(self, imds: ImdsFake, cert: Path, key: Path, *, vault: str = "fakevault") -> None:
        super().__init__()
        self.imds = imds
        self.vault = vault
        self._cert, self._key = cert, key
        self._secrets: dict[str, list[tuple[str, str, bool]]] = {}  # name -> (version, value, on)

    @property
    def endpoint(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def start(self) -> Self:
        """Serve TLS (the handshake happens in each request's thread, on its first read)."""
        if self._httpd is None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(self._cert, self._key)
            httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
            httpd.daemon_threads = True
            httpd.socket = context.wrap_socket(
                httpd.socket, server_side=True, do_handshake_on_connect=False
            )
            self._thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
            self._thread.start()
            self._httpd = httpd
        return self

    def add(self, name: str, value: str, *, enabled: bool = True) -> str:
        """A new (now current) version of ``name``; its version id."""
        version = uuid.uuid4().hex
        with self._lock:
            self._secrets.setdefault(name, []).append((version, value, enabled))
        return version

    def reset(self) -> None:
        with self._lock:
            self._secrets.clear()
            self._failures.clear()
            self.requests.clear()

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        path, params = self._record(h)
        auth = h.headers.get("Authorization")
        if not auth:  # Key Vault's challenge
            authority = f"https://login.microsoftonline.com/{TENANT}"
            challenge = f'Bearer authorization="{authority}", resource="{RESOURCE}"'
            self._send(
                h,
                401,
                {
                    "error": {
                        "code": "Unauthorized",
                        "message": "AKV10000: Request is missing a Bearer or PoP token.",
                    }
                },
                {"WWW-Authenticate": challenge},
            )
            return
        if auth != f"Bearer {self.imds.token}":
            self._error(h, 401, "Unauthorized", "AKV10032: Invalid issuer.")
            return
        failure = self._failure()
        if failure is not None:
            self._error(h, failure[0], failure[1], "injected")
            return
        if not params.get("api-version"):
            self._error(h, 400, "BadParameter", "The api-version query parameter is missing.")
            return
        parts = path.strip("/").split("/")
        if h.command != "GET" or len(parts) not in (2, 3) or parts[0] != "secrets":
            self._error(h, 400, "BadParameter", f"{h.command} {path} is not served here")
            return
        name, wanted = parts[1], (parts[2] if len(parts) == 3 else "")
        with self._lock:
            versions = list(self._secrets.get(name, ()))
        found = (
            next((v for v in versions if v[0] == wanted), None)
            if wanted
            else (versions[-1] if versions else None)
        )
        if found is None:
            what = f"{name}/{wanted}" if wanted else name
            self._error(
                h,
                404,
                "SecretNotFound",
                f"A secret with (name/id) {what} was not found in this key vault.",
            )
            return
        version, value, enabled = found
        if not enabled:
            self._error(h, 403, "Forbidden", "Operation get is not allowed on a disabled secret.")
            return
        now = int(time.time())
        self._send(
            h,
            200,
            {
                "value": value,
                "id": f"https://{self.vault}.vault.azure.net/secrets/{name}/{version}",
                "attributes": {
                    "enabled": True,
                    "created": now,
                    "updated": now,
                    "recoveryLevel": "Recoverable+Purgeable",
                    "recoverableDays": 90,
                },
                "tags": {},
            },
        )

    def _error(self, h: BaseHTTPRequestHandler, status: int, code: str, message: str) -> None:
        self._send(h, status, {"error": {"code": code, "message": message}})
