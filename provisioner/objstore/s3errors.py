"""S3's errors as Python's: boto3's exceptions and S3 error codes mapped to OSError subclasses
whose messages say what to do (create the bucket, grant a permission, set the region...).

Used by :mod:`provisioner.objstore.fs`; imports no SDK (exceptions are recognised by name
and by their ``response``). Messages never carry credentials (:func:`providers.base.redact`).
"""

from __future__ import annotations

import contextlib
import errno
from collections.abc import Iterator

from providers.base import redact
from provisioner.errors import StoreError

_MISSING = ("NoSuchKey", "404", "NotFound")


class ObjectStoreError(StoreError, OSError):
    """An object store request failed; the message says what to do."""

    code = ""  # S3's error code


class NoSuchBucketError(ObjectStoreError, FileNotFoundError):
    """The bucket does not exist (or is not visible with these credentials)."""


class AccessDeniedError(ObjectStoreError, PermissionError):
    """The credentials were refused, or lack a permission."""


class ThrottledError(ObjectStoreError):
    """S3 kept throttling (SlowDown) after boto3's retries."""


def missing(bucket: str, key: str) -> FileNotFoundError:
    return FileNotFoundError(errno.ENOENT, "no such object in S3", f"s3://{bucket}/{key}")


@contextlib.contextmanager
def errors(bucket: str, key: str) -> Iterator[None]:
    """Turns boto3's exceptions into Python's, with what to do in the message."""
    try:
        yield
    except Exception as exc:
        mapped = _translate(exc, bucket, key)
        if mapped is exc:
            raise
        raise mapped from None


def _translate(exc: BaseException, bucket: str, key: str) -> BaseException:
    if type(exc).__name__ == "S3UploadFailedError":  # boto3 wraps the ClientError
        exc = exc.__cause__ or exc.__context__ or exc
    response = getattr(exc, "response", None)
    if isinstance(response, dict) and "Error" in response:
        error = response.get("Error") or {}
        code = str(error.get("Code") or response.get("ResponseMetadata", {}).get("HTTPStatusCode"))
        op = str(getattr(exc, "operation_name", "") or "")
        return translate_code(code, str(error.get("Message") or ""), op, bucket, key)
    name = type(exc).__name__
    if name in ("NoCredentialsError", "PartialCredentialsError", "CredentialRetrievalError"):
        return AccessDeniedError(
            f"no usable AWS credentials for s3://{bucket} ({name}): give the VM an instance role "
            "with access to the bucket, or set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
            "(or AWS_PROFILE)"
        )
    if name in ("EndpointConnectionError", "ConnectTimeoutError", "ConnectionClosedError"):
        return ConnectionError(
            redact(
                f"cannot reach S3 for s3://{bucket}: {exc}; check the network, or "
                "AWS_ENDPOINT_URL_S3 / endpoint_url when an S3-compatible store is meant"
            )
        )
    return exc


#: S3 error code -> the exception and what to do ({b}: bucket, {op}: operation, {code})
_ADVICE: tuple[tuple[str, type[ObjectStoreError], int, str], ...] = (
    (
        "NoSuchBucket",
        NoSuchBucketError,
        errno.ENOENT,
        "bucket {b!r} does not exist or this machine has no access to it: create it (aws s3 mb "
        "s3://{b}) or fix the checkpoint URI, and grant the VM's role s3:PutObject, "
        "s3:GetObject, s3:ListBucket and s3:DeleteObject on it",
    ),
    (
        "AccessDenied 403 Forbidden AllAccessDisabled AccountProblem",
        AccessDeniedError,
        errno.EACCES,
        "access denied ({op}): grant this machine's role or credentials {action} on "
        "arn:aws:s3:::{b}/* and s3:ListBucket on arn:aws:s3:::{b} (without s3:ListBucket S3 "
        "answers 403 for a missing object)",
    ),
    (
        "InvalidAccessKeyId SignatureDoesNotMatch ExpiredToken InvalidToken TokenRefreshRequired",
        AccessDeniedError,
        errno.EACCES,
        "S3 refused the AWS credentials ({code}): check AWS_ACCESS_KEY_ID / AWS_PROFILE or the "
        "VM's role; temporary credentials may have expired",
    ),
    (
        "SlowDown Throttling ThrottlingException RequestLimitExceeded 503 ServiceUnavailable",
        ThrottledError,
        errno.EAGAIN,
        "S3 is throttling requests ({code}) even after retries: retry later, write fewer and "
        "larger objects, or raise AWS_MAX_ATTEMPTS",
    ),
    (
        "PermanentRedirect AuthorizationHeaderMalformed 301 IllegalLocationConstraintException",
        ObjectStoreError,
        errno.EIO,
        "bucket {b!r} is in another region ({code}): set AWS_REGION to the bucket's region",
    ),
)


def _iam_action(op: str) -> str:
    if op in ("GetObject", "HeadObject"):
        return "s3:GetObject"
    if op.startswith("Delete"):
        return "s3:DeleteObject"
    return "s3:ListBucket" if op in ("ListObjectsV2", "HeadBucket") else "s3:PutObject"


def translate_code(code: str, message: str, op: str, bucket: str, key: str) -> Exception:
    if code in _MISSING and op == "HeadBucket":
        code = "NoSuchBucket"
    elif code in _MISSING:
        return missing(bucket, key)
    where = f"s3://{bucket}/{key}" if key else f"s3://{bucket}"
    for codes, kind, number, advice in _ADVICE:
        if code in codes.split():
            text = advice.format(b=bucket, op=op, code=code, action=_iam_action(op))
            error = kind(number, text, where)
            break
    else:
        text = redact(f"S3 {op or 'request'} failed: {code}: {message}")
        error = ObjectStoreError(errno.EIO, text, where)
    error.code = code
    return error
