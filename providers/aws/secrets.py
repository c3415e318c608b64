"""AWS Secrets Manager and SSM Parameter Store: one secret, read with boto3's default chain.

``aws-sm``: ``GetSecretValue(SecretId=NAME_OR_ARN)`` (the ``AWSCURRENT`` version):
``SecretString``, else ``SecretBinary`` decoded as UTF-8.
https://docs.aws.amazon.com/secretsmanager/latest/apireference/API_GetSecretValue.html

``aws-ssm``: ``GetParameter(Name=..., WithDecryption=True)``, ``Parameter.Value``.
https://docs.aws.amazon.com/systems-manager/latest/APIReference/API_GetParameter.html

Credentials: boto3's chain (env, shared files, container role, then the EC2 instance profile
through IMDS). The region: an ARN's, else ``region=``, else boto3's own (``AWS_DEFAULT_REGION``,
the config file; not IMDS).
Endpoints: botocore itself honours ``AWS_ENDPOINT_URL``, ``AWS_ENDPOINT_URL_SECRETS_MANAGER``
and ``AWS_ENDPOINT_URL_SSM``. Errors by ``Error.Code``, never by exception class. boto3 is
imported inside :func:`read`.
"""

from __future__ import annotations

from typing import Any

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

#: error code -> SecretError.reason (Secrets Manager and SSM, and the common codes)
REASONS = {
    "ResourceNotFoundException": NOT_FOUND,
    "ParameterNotFound": NOT_FOUND,
    "ParameterVersionNotFound": NOT_FOUND,
    "AccessDeniedException": ACCESS_DENIED,
    "AccessDenied": ACCESS_DENIED,
    "UnrecognizedClientException": BAD_CREDENTIALS,
    "InvalidClientTokenId": BAD_CREDENTIALS,
    "InvalidSignatureException": BAD_CREDENTIALS,
    "SignatureDoesNotMatch": BAD_CREDENTIALS,
    "ExpiredTokenException": BAD_CREDENTIALS,
    "InvalidRequestException": DISABLED,  # "marked for deletion", a disabled secret
    "DecryptionFailure": DECRYPT,
    "InvalidKeyId": DECRYPT,
    "ThrottlingException": THROTTLED,
    "Throttling": THROTTLED,
    "TooManyRequestsException": THROTTLED,
    "InternalServiceError": SERVICE,
    "InternalServerError": SERVICE,
    "InternalFailure": SERVICE,
    "ServiceUnavailable": SERVICE,
}


def read(ref: SecretRef, *, region: str | None = None) -> str:
    try:
        import boto3  # noqa: F401  (missing: the message below)
        from botocore.config import Config
        from botocore.exceptions import (
            BotoCoreError,
            ClientError,
            NoCredentialsError,
            NoRegionError,
            PartialCredentialsError,
        )

        from providers.aws.session import boto3_session
    except ImportError:
        raise SecretError(
            ref.text, "the AWS SDK is missing: pip install 'provisioner[aws]'"
        ) from None
    service = "secretsmanager" if ref.kind == "secretsmanager" else "ssm"
    config = Config(
        retries={"mode": "standard", "max_attempts": 3}, connect_timeout=5, read_timeout=15
    )
    try:
        client = boto3_session().client(service, region_name=ref.region or region, config=config)
        if service == "secretsmanager":
            return _secret_value(ref, client.get_secret_value(SecretId=ref.name))
        answer = client.get_parameter(Name=ref.name, WithDecryption=True)
        return str(answer["Parameter"]["Value"])
    except ClientError as exc:
        code = str(exc.response.get("Error", {}).get("Code") or "")
        raise SecretError(ref.text, reason_for(code, REASONS)) from None
    except (NoCredentialsError, PartialCredentialsError):
        raise SecretError(ref.text, NO_CREDENTIALS) from None
    except NoRegionError:
        raise SecretError(ref.text, "no region: pass region= or set AWS_DEFAULT_REGION") from None
    except BotoCoreError as exc:  # endpoint connection, timeouts, credential fetch failures
        raise SecretError(ref.text, unreachable(exc)) from None


def _secret_value(ref: SecretRef, answer: dict[str, Any]) -> str:
    if answer.get("SecretString") is not None:
        return str(answer["SecretString"])
    binary = answer.get("SecretBinary")
    if binary is None:
        raise SecretError(ref.text, "the secret has no value")
    return utf8(ref, bytes(binary))
