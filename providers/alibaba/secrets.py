"""Alibaba Cloud KMS secrets: one secret, read with the SDK's default credential chain.

``GetSecretValue`` (API 2016-01-20, RPC): ``SecretName`` (a name or an
``acs:kms:REGION:ACCOUNT:secret/NAME`` ARN) with ``VersionStage`` (``ACSCurrent`` unless the
reference names a stage) or ``VersionId``; the answer's ``SecretData`` is text, or base64 when
``SecretDataType`` is ``binary`` (decoded, then read as UTF-8).
https://www.alibabacloud.com/help/en/kms/key-management-service/developer-reference/api-kms-2016-01-20-getsecretvalue

Credentials: alibabacloud_credentials' default chain, handed to the client explicitly (given
no key and no credential, tea-openapi 0.4 builds none and refuses the call with
``InvalidCredentials``): ``ALIBABA_CLOUD_ACCESS_KEY_ID``/``_SECRET``, OIDC, the config files,
then the ECS RAM role through the metadata service at 100.100.100.200. (The SDK copies those
variables when first imported.) The region: an ARN's, else ``region=``, else
``ALIBABA_CLOUD_REGION_ID``. ``PROVISIONER_ALIBABA_KMS_ENDPOINT`` (``host:port``; plain http for
``http://...`` or a loopback host) replaces ``kms.REGION.aliyuncs.com``. Errors: HTTP 4xx/5xx
with ``{"Code", "Message"}``, by ``Code`` (``Forbidden.ResourceNotFound``, ``Forbidden.RAM``,
...). The SDK is imported inside :func:`read`.
"""

from __future__ import annotations

import base64
import binascii
import os

from providers._regional import parse_endpoint
from providers.secretref import (
    ACCESS_DENIED,
    BAD_CREDENTIALS,
    DECRYPT,
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

ENDPOINT_ENV = "PROVISIONER_ALIBABA_KMS_ENDPOINT"
REGION_ENV = "ALIBABA_CLOUD_REGION_ID"

#: KMS ``Code`` -> SecretError.reason
REASONS = {
    "Forbidden.ResourceNotFound": NOT_FOUND,
    "Rejected.ResourceNotFound": NOT_FOUND,
    "Forbidden.KeyNotFound": DECRYPT,
    "Forbidden.NoPermission": ACCESS_DENIED,
    "Forbidden.RAM": ACCESS_DENIED,
    "Forbidden.KeyDisabled": DECRYPT,
    "Rejected.Disabled": DISABLED,
    "Forbidden.SecretDeleted": DISABLED,
    "InvalidCredentials": NO_CREDENTIALS,  # the SDK's own, before sending
    "InvalidAccessKeyId.NotFound": BAD_CREDENTIALS,
    "SignatureDoesNotMatch": BAD_CREDENTIALS,
    "IncompleteSignature": BAD_CREDENTIALS,
    "InternalFailure": SERVICE,
    "InternalError": SERVICE,
    "ServiceUnavailable": SERVICE,
    "ServiceUnavailableTemporary": SERVICE,
}
PREFIXES = {
    "Forbidden": ACCESS_DENIED,
    "InvalidAccessKeyId": BAD_CREDENTIALS,
    "InvalidSecurityToken": BAD_CREDENTIALS,
    "Throttling": THROTTLED,
    "Rejected.Throttling": THROTTLED,
}


def read(ref: SecretRef, *, region: str | None = None) -> str:
    try:
        from alibabacloud_credentials.client import Client as Credentials
        from alibabacloud_credentials.exceptions import CredentialException
        from alibabacloud_kms20160120 import models
        from alibabacloud_kms20160120.client import Client
        from alibabacloud_tea_openapi.utils_models import Config
        from darabonba.runtime import RuntimeOptions
    except ImportError:
        raise SecretError(
            ref.text, "the Alibaba Cloud KMS SDK is missing: pip install 'provisioner[alibaba]'"
        ) from None
    where = ref.region or region or os.environ.get(REGION_ENV)
    if not where:
        raise SecretError(ref.text, f"no region: pass region= or set {REGION_ENV}")
    endpoint, protocol = parse_endpoint(os.environ.get(ENDPOINT_ENV))
    config = Config(region_id=where, protocol=protocol, connect_timeout=5000, read_timeout=15000)
    config.credential = Credentials()  # the default chain (tea-openapi builds none by itself)
    if endpoint:
        config.endpoint = endpoint
    request = models.GetSecretValueRequest(
        secret_name=ref.name, version_id=ref.version, version_stage=ref.stage
    )
    try:
        answer = Client(config).get_secret_value_with_options(
            request, RuntimeOptions(autoretry=True, max_attempts=3)
        )
    except CredentialException:
        raise SecretError(ref.text, NO_CREDENTIALS) from None
    except Exception as exc:  # the SDK's exceptions share no base worth naming; code decides
        raise SecretError(ref.text, _reason(exc)) from None
    body = answer.body
    data = body.secret_data if body is not None else None
    if data is None:
        raise SecretError(ref.text, "the secret has no value")
    if (body.secret_data_type or "text").lower() == "binary":
        try:
            return utf8(ref, base64.b64decode(data, validate=True))
        except binascii.Error:
            raise SecretError(ref.text, "binary value is not base64") from None
    return str(data)


def _reason(exc: Exception) -> str:
    code = getattr(exc, "code", None)
    code = "" if code in (None, "", "None") else str(code)
    status = getattr(exc, "status_code", None)
    if code:
        return reason_for(code, REASONS, PREFIXES)
    if isinstance(status, int):
        return SERVICE if status >= 500 else f"error HTTP {status}"
    if "credential" in type(exc).__name__.lower():
        return NO_CREDENTIALS
    return unreachable(getattr(exc, "inner_exception", None) or exc)
