"""GCP Secret Manager: one secret version, read with ``google.auth.default()`` over REST.

``AccessSecretVersion`` (``GET /v1/projects/P/secrets/S/versions/V:access``), answered with
``{name, payload: {data: base64, dataCrc32c}}``; the checksum is verified when present (CRC32C
of the bytes, computed here: the payload is small and google-crc32c is not a dependency).
https://cloud.google.com/secret-manager/docs/reference/rest/v1/projects.secrets.versions/access

Credentials: ``google.auth.default()`` (``GOOGLE_APPLICATION_CREDENTIALS``, gcloud's file, then
the GCE metadata server's service account); its project (``GOOGLE_CLOUD_PROJECT``, the
credentials' project, the metadata server's) serves the short form ``gcp-sm:S``.
``PROVISIONER_GCP_SECRETS_ENDPOINT`` replaces the API endpoint (``http://host:port`` allowed).
Errors by the answer's ``error.status`` (``NOT_FOUND``, ``PERMISSION_DENIED``, ...), else the
HTTP status. The SDK is imported inside :func:`read`.
"""

from __future__ import annotations

import os
from typing import Any

from providers.secretref import (
    ACCESS_DENIED,
    BAD_CREDENTIALS,
    DISABLED,
    NO_CREDENTIALS,
    NOT_FOUND,
    SERVICE,
    THROTTLED,
    SecretError,
    SecretRef,
    reason_for,
    unreachable,
    utf8,
)

ENDPOINT_ENV = "PROVISIONER_GCP_SECRETS_ENDPOINT"
SCOPE = "https://www.googleapis.com/auth/cloud-platform"

#: google.rpc status (the REST error's ``error.status``) -> SecretError.reason
REASONS = {
    "NOT_FOUND": NOT_FOUND,
    "PERMISSION_DENIED": ACCESS_DENIED,
    "UNAUTHENTICATED": BAD_CREDENTIALS,
    "FAILED_PRECONDITION": DISABLED,  # a DISABLED or DESTROYED version
    "RESOURCE_EXHAUSTED": THROTTLED,
    "UNAVAILABLE": SERVICE,
    "INTERNAL": SERVICE,
}
#: the HTTP status, where the answer names no status
HTTP_REASONS = {
    404: "NOT_FOUND",
    403: "PERMISSION_DENIED",
    401: "UNAUTHENTICATED",
    429: "RESOURCE_EXHAUSTED",
}


def read(ref: SecretRef, *, region: str | None = None) -> str:
    try:
        import google.auth
        import requests
        from google.api_core import exceptions as api_errors
        from google.api_core import retry as retries
        from google.api_core.client_options import ClientOptions
        from google.auth import exceptions as auth_errors
        from google.cloud import secretmanager_v1
    except ImportError:
        raise SecretError(
            ref.text, "the GCP SDK is missing: pip install 'provisioner[gcp]'"
        ) from None
    try:
        credentials, default_project = google.auth.default(scopes=[SCOPE])
    except auth_errors.DefaultCredentialsError:
        raise SecretError(ref.text, NO_CREDENTIALS) from None
    project = ref.project or default_project
    if not project:
        raise SecretError(
            ref.text, "no project: write projects/P/secrets/S or set GOOGLE_CLOUD_PROJECT"
        )
    endpoint = os.environ.get(ENDPOINT_ENV)
    client = secretmanager_v1.SecretManagerServiceClient(
        credentials=credentials,
        client_options=ClientOptions(api_endpoint=endpoint) if endpoint else None,
        transport="rest",
    )
    retry = retries.Retry(
        initial=0.5,
        maximum=4.0,
        multiplier=2.0,
        timeout=15.0,
        predicate=retries.if_exception_type(
            api_errors.ResourceExhausted, api_errors.ServiceUnavailable
        ),
    )
    name = f"projects/{project}/secrets/{ref.name}/versions/{ref.version or 'latest'}"
    try:
        answer = client.access_secret_version(request={"name": name}, retry=retry, timeout=15.0)
    except api_errors.RetryError as exc:
        raise SecretError(ref.text, unreachable(exc.cause or exc)) from None
    except api_errors.GoogleAPICallError as exc:
        raise SecretError(ref.text, reason_for(_status(exc), REASONS)) from None
    except auth_errors.RefreshError:  # the token could not be had
        raise SecretError(ref.text, BAD_CREDENTIALS) from None
    except (auth_errors.TransportError, requests.RequestException) as exc:
        raise SecretError(ref.text, unreachable(exc)) from None
    finally:
        client.transport.close()
    payload = answer.payload
    data = bytes(payload.data)
    if "data_crc32c" in payload and int(payload.data_crc32c) != crc32c(data):
        raise SecretError(ref.text, "checksum mismatch (dataCrc32c): the payload was corrupted")
    return utf8(ref, data)


def _status(exc: Any) -> str:
    """The REST error's ``error.status``, else the one its HTTP status stands for."""
    try:
        status = exc.response.json()["error"]["status"]
        if isinstance(status, str) and status:
            return status
    except Exception:  # no body, not JSON, another shape: the HTTP status decides
        pass
    code = getattr(exc, "code", None)
    if isinstance(code, int):
        return HTTP_REASONS.get(code, "UNAVAILABLE" if code >= 500 else f"HTTP {code}")
    return str(code or "")


_TABLE: list[int] = []


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), as ``dataCrc32c`` carries it."""
    if not _TABLE:
        for n in range(256):
            c = n
            for _ in range(8):
                c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
            _TABLE.append(c)
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF
