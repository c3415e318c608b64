"""Tencent Cloud SSM: one secret, read with the SDK's ``DefaultCredentialProvider``.

``GetSecretValue`` (API 2019-09-23) takes ``SecretName`` and a required ``VersionId``; the answer
has ``SecretString``, or ``SecretBinary`` in base64 (decoded, read as UTF-8).
https://www.tencentcloud.com/document/api/1078/38649

A user-defined secret has no "current" label (``SSM_Current`` is documented for Tencent Cloud
service credentials, such as MySQL's; ``tencent-ssm:NAME@SSM_Current`` sends it as written). So
a reference without ``@VERSION`` first asks ``ListSecretVersionIds`` and reads the version
created last (the largest ``CreateTime``), which is what GCP's ``latest`` means; the identity
then needs ``ssm:ListSecretVersionIds`` as well.
https://www.tencentcloud.com/document/api/1078/38647

Credentials: tencentcloud-common's ``DefaultCredentialProvider`` (``TENCENTCLOUD_SECRET_ID``/
``_KEY``, the profile file, then the CVM role through metadata.tencentyun.com, then TKE OIDC).
The region: ``region=``, else ``TENCENTCLOUD_REGION``. ``PROVISIONER_TENCENT_SSM_ENDPOINT``
(``host:port``; plain http for ``http://...`` or a loopback host) replaces
``ssm.tencentcloudapi.com``. Errors come as HTTP 200 with ``Response.Error``; the SDK raises
them only for a Content-Type of exactly ``application/json``, so the envelope is read here too
(as :mod:`providers.tencent.errors` does). By code. The SDK is imported inside :func:`read`.
"""

from __future__ import annotations

import base64
import binascii
import os
from typing import Any

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

ENDPOINT_ENV = "PROVISIONER_TENCENT_SSM_ENDPOINT"
REGION_ENV = "TENCENTCLOUD_REGION"
HOST = "ssm.tencentcloudapi.com"

#: error code -> SecretError.reason (exact codes, then prefixes)
REASONS = {
    "ClientSideError": NO_CREDENTIALS,  # the SDK's: no credential in the chain
    "AuthFailure.UnauthorizedOperation": ACCESS_DENIED,
    "ResourceUnavailable.NotPurchased": "SSM is not enabled for the account",
    "UnauthorizedOperation.AccessKmsError": DECRYPT,
    "FailedOperation.AccessKmsError": DECRYPT,
    "InternalError": SERVICE,
    "FailedOperation": SERVICE,
}
PREFIXES = {
    "ResourceNotFound": NOT_FOUND,
    "UnauthorizedOperation": ACCESS_DENIED,
    "OperationDenied": ACCESS_DENIED,
    "AuthFailure": BAD_CREDENTIALS,
    "ResourceUnavailable": DISABLED,
    "RequestLimitExceeded": THROTTLED,
    "ClientNetworkError": "unreachable",
}


def read(ref: SecretRef, *, region: str | None = None) -> str:
    try:
        from tencentcloud.common.credential import DefaultCredentialProvider
        from tencentcloud.common.exception.tencent_cloud_sdk_exception import (
            TencentCloudSDKException,
        )
        from tencentcloud.common.profile.client_profile import ClientProfile
        from tencentcloud.common.profile.http_profile import HttpProfile
        from tencentcloud.ssm.v20190923.ssm_client import SsmClient
    except ImportError:
        raise SecretError(
            ref.text, "the Tencent Cloud SSM SDK is missing: pip install 'provisioner[tencent]'"
        ) from None
    where = region or os.environ.get(REGION_ENV)
    if not where:
        raise SecretError(ref.text, f"no region: pass region= or set {REGION_ENV}")
    endpoint, protocol = parse_endpoint(os.environ.get(ENDPOINT_ENV))
    http = HttpProfile(endpoint=endpoint or HOST, protocol=protocol, reqTimeout=15)
    try:
        credential = DefaultCredentialProvider().get_credentials()
        client = SsmClient(credential, where, ClientProfile(httpProfile=http))
        version = ref.version or _newest(ref, client)
        answer = _call(
            ref, client, "GetSecretValue", {"SecretName": ref.name, "VersionId": version}
        )
    except TencentCloudSDKException as exc:
        code = str(exc.get_code() or "")
        if code == "ClientNetworkError":
            raise SecretError(ref.text, unreachable(ConnectionError(exc.get_message()))) from None
        raise SecretError(ref.text, reason_for(code, REASONS, PREFIXES)) from None
    if answer.get("SecretString"):
        return str(answer["SecretString"])
    if answer.get("SecretBinary"):
        try:
            return utf8(ref, base64.b64decode(answer["SecretBinary"], validate=True))
        except binascii.Error:
            raise SecretError(ref.text, "binary value is not base64") from None
    raise SecretError(ref.text, "the secret has no value")


def _call(ref: SecretRef, client: Any, action: str, params: dict[str, Any]) -> dict[str, Any]:
    """The action's ``Response``; an error envelope raises, whatever the Content-Type was."""
    body = client.call_json(action, params)
    response = body.get("Response") if isinstance(body, dict) else None
    if not isinstance(response, dict):
        raise SecretError(ref.text, f"{SERVICE}: {action} answered no Response")
    error = response.get("Error")
    if isinstance(error, dict):
        raise SecretError(ref.text, reason_for(str(error.get("Code") or ""), REASONS, PREFIXES))
    return response


def _newest(ref: SecretRef, client: Any) -> str:
    """The id of the version created last (``ListSecretVersionIds``)."""
    versions = _call(ref, client, "ListSecretVersionIds", {"SecretName": ref.name}).get("Versions")
    rows = [v for v in versions or () if isinstance(v, dict) and v.get("VersionId")]
    if not rows:
        raise SecretError(ref.text, f"{NOT_FOUND} (the secret has no version)")
    return str(max(rows, key=lambda v: int(v.get("CreateTime") or 0))["VersionId"])
