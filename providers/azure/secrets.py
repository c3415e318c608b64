"""Azure Key Vault: one secret, read with ``DefaultAzureCredential`` (on a VM: managed identity).

Get Secret: ``GET {vault}/secrets/{name}/{version}?api-version=...`` (no version: the current
one), answered with ``{value, id, attributes}``; errors are ``{"error": {"code", "message"}}``
(``SecretNotFound`` 404, ``Forbidden`` 403, ...). The SDK does Key Vault's challenge: a first
request without a token draws a 401 whose ``WWW-Authenticate`` names the tenant and resource,
and the token is asked for that resource. Bearer tokens go over https only.
https://learn.microsoft.com/en-us/rest/api/keyvault/secrets/get-secret/get-secret

Credentials: azure-identity's ``DefaultAzureCredential`` (env service principal, workload
identity, then the managed identity through IMDS, then developer tools). Errors by
``error.code``, else the HTTP status, never the exception class.

``PROVISIONER_AZURE_KEYVAULT_ENDPOINT`` replaces the vault URL's scheme and host (a proxy, a
test server). That host is by construction not a subdomain of the challenge's resource
(``vault.azure.net``), so with the override the SDK's resource check
(``verify_challenge_resource``) is off: whoever sets it names the host tokens go to. TLS stays
required and verified (a private CA through ``REQUESTS_CA_BUNDLE``). The SDK is imported inside
:func:`read`.
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
)

ENDPOINT_ENV = "PROVISIONER_AZURE_KEYVAULT_ENDPOINT"

#: Key Vault ``error.code`` -> SecretError.reason
REASONS = {
    "SecretNotFound": NOT_FOUND,
    "NotFound": NOT_FOUND,
    "VaultNotFound": NOT_FOUND,
    "Forbidden": ACCESS_DENIED,
    "ForbiddenByPolicy": ACCESS_DENIED,
    "ForbiddenByRbac": ACCESS_DENIED,
    "AccessDenied": ACCESS_DENIED,
    "SecretDisabled": DISABLED,
    "Unauthorized": BAD_CREDENTIALS,
    "Throttled": THROTTLED,
    "TooManyRequests": THROTTLED,
    "ServiceUnavailable": SERVICE,
    "InternalServerError": SERVICE,
}
STATUS_CODES = {404: "NotFound", 403: "Forbidden", 401: "Unauthorized", 429: "Throttled"}


def read(ref: SecretRef, *, region: str | None = None) -> str:
    try:
        from azure.core.exceptions import (
            ClientAuthenticationError,
            HttpResponseError,
            ServiceRequestError,
            ServiceResponseError,
        )
        from azure.identity import CredentialUnavailableError, DefaultAzureCredential
        from azure.keyvault.secrets import SecretClient
    except ImportError:
        raise SecretError(
            ref.text, "the Azure SDK is missing: pip install 'provisioner[azure]'"
        ) from None
    override = os.environ.get(ENDPOINT_ENV)
    # seconds to connect and per read, like the other clouds' secret reads (azure-core's
    # defaults are 300 s per read)
    options: dict[str, Any] = {"retry_total": 2, "connection_timeout": 5, "read_timeout": 15}
    vault_url = ref.vault_url or ""
    if override:
        vault_url = override.rstrip("/")
        options["verify_challenge_resource"] = False
    credential = DefaultAzureCredential()
    try:
        with SecretClient(vault_url, credential, **options) as client:
            secret = client.get_secret(ref.name, ref.version)
    except CredentialUnavailableError:
        raise SecretError(ref.text, NO_CREDENTIALS) from None
    except HttpResponseError as exc:  # ResourceNotFoundError, ClientAuthenticationError, ...
        if exc.response is None and isinstance(exc, ClientAuthenticationError):
            raise SecretError(ref.text, NO_CREDENTIALS) from None  # the credential chain's
        raise SecretError(ref.text, reason_for(_code(exc), REASONS)) from None
    except (ServiceRequestError, ServiceResponseError) as exc:
        raise SecretError(ref.text, unreachable(exc)) from None
    finally:
        credential.close()
    if secret.value is None:
        raise SecretError(ref.text, "the secret has no value")
    return str(secret.value)


def _code(exc: Any) -> str:
    error = getattr(exc, "error", None)
    code = getattr(error, "code", None)
    if isinstance(code, str) and code:
        return code
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):
        return STATUS_CODES.get(status, "ServiceUnavailable" if status >= 500 else f"HTTP {status}")
    return ""
