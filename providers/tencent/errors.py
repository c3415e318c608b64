"""Tencent CVM error codes onto :class:`ErrorKind`, and answers and SDK exceptions onto
ProviderError.

CVM answers an error with HTTP 200 and ``{"Response": {"Error": {"Code", "Message"},
"RequestId"}}``; :func:`envelope_error` reads it whatever the Content-Type (the SDK notices it
only when that is exactly ``application/json``). Codes have no HTTP status: an unknown code is
INVALID. ``UnsupportedOperation.NoInstanceTypeSupportSpot`` (no spot market for the type in
that zone) is CAPACITY: the planner takes the next offer, as for a sold-out zone.

Every exact code is one the CVM API documents (its error code list, product 213 document
33281, which the SDK carries as ``tencentcloud.cvm.v20170312.errorcodes``) or one of the common
error codes of every Tencent Cloud API; docs/cloud-errors.md lists them with their sources.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from providers._errors import ErrorTable
from providers._regional import transport_error
from providers.base import ErrorKind, ErrorScope, ProviderError

NAME = "tencent"

ERRORS = ErrorTable(
    NAME,
    codes={
        ErrorKind.CAPACITY: (
            "UnsupportedOperation.NoInstanceTypeSupportSpot",
            "ResourceUnavailable.InstanceType",
            # placement failures: another zone (its subnet, its images, its spot stock) may work
            "FailedOperation.NoAvailableIpAddressCountInSubnet",
            "LimitExceeded.VpcSubnetNum",  # the subnet's IPs, though under LimitExceeded
            "InvalidParameterValue.ZoneNotSupported",
            "UnsupportedOperation.LocationImageNotSupported",
            "InvalidParameterValue.InsufficientOffering",  # spot stock too small
            "UnsupportedOperation.SpotUnsupportedRegion",  # no spot market in this region
        ),
        ErrorKind.PRICE_TOO_LOW: ("InvalidParameterValue.InsufficientPrice",),
        ErrorKind.NOT_FOUND: (
            "InvalidInstanceId.NotFound",
            "ResourceNotFound.InvalidPlacementSet",  # an unknown placement group
            "FailedOperation.DisasterRecoverGroupNotFound",  # a group already gone (the sweep)
        ),
        ErrorKind.QUOTA: (
            "InvalidAccount.InsufficientBalance",
            "InstancesQuotaLimitExceeded",  # more instances than the account's remaining quota
            # limits of the account under the ResourceInsufficient prefix (capacity otherwise):
            "ResourceInsufficient.InsufficientGroupQuota",  # security groups
            "ResourceInsufficient.DisasterRecoverGroupCvmQuota",  # instances per placement group
        ),
        # the disk parameters do not conform (ResourceInsufficient by name only)
        ErrorKind.INVALID: ("ResourceInsufficient.CloudDiskUnavailable",),
        ErrorKind.TRANSIENT: (
            "InternalError",
            "InternalServerError",
            "ServiceUnavailable",
            "ServerNetworkError",  # the SDK: a non-200 answer
            "ClientNetworkError",  # the SDK: no answer (connection, timeout)
            "MutexOperation.TaskRunning",
        ),
        ErrorKind.THROTTLED: ("RequestLimitExceeded",),
    },
    prefixes={
        # .SpecifiedInstanceType, .ZoneSoldOutForSpecifiedInstance, .AvailabilityZoneSoldOut
        ErrorKind.CAPACITY: ("ResourceInsufficient", "ResourcesSoldOut"),
        ErrorKind.QUOTA: ("LimitExceeded",),  # .SpotQuota, .UserSpotQuota, .InstanceQuota
        # .SecretIdNotFound, .SignatureFailure, ...; a CAM policy that forbids the action
        ErrorKind.AUTH: ("AuthFailure", "UnauthorizedOperation"),
        ErrorKind.THROTTLED: ("RequestLimitExceeded",),  # .UinLimitExceeded, ...
        ErrorKind.TRANSIENT: ("InternalError",),
    },
    scopes={
        # a subnet lies in one zone: out of addresses, it refuses that zone only
        ErrorScope.ZONE: (
            "FailedOperation.NoAvailableIpAddressCountInSubnet",
            "LimitExceeded.VpcSubnetNum",
        ),
        ErrorScope.ACCOUNT: ("InvalidAccount.InsufficientBalance",),
    },
)

#: ``terminate`` ignores these: the instance is already going or gone.
ALREADY_GONE = frozenset(
    {
        "UnsupportedOperation.InstanceStateTerminating",
        "UnsupportedOperation.InstanceStateTerminated",
        "InvalidInstanceId.NotFound",
    }
)


def classify_code(code: str) -> ErrorKind:
    """The :class:`ErrorKind` for a Tencent Cloud error code."""
    return ERRORS.kind_of(code)


def envelope_error(data: Mapping[str, Any]) -> ProviderError | None:
    """The error in a ``{"Response": {"Error": ...}}`` answer, classified; None when it succeeded."""
    response = data.get("Response")
    if not isinstance(response, Mapping):
        return ProviderError(
            ErrorKind.TRANSIENT, "BadResponse", "answer without a Response object", provider=NAME
        )
    error = response.get("Error")
    if not isinstance(error, Mapping):
        return None
    code = str(error.get("Code") or "UnknownError")
    return ERRORS.error(
        code, f"{error.get('Message', '')} (request {response.get('RequestId', '?')})"
    )


def classify_error(exc: BaseException) -> ProviderError | None:
    """An SDK exception as a :class:`ProviderError`; None for programming errors (re-raised)."""
    if isinstance(exc, ProviderError):
        return exc
    code = getattr(exc, "code", None)
    if code and type(exc).__name__ == "TencentCloudSDKException":
        message = getattr(exc, "message", None)
        text = message.decode("utf-8", "replace") if isinstance(message, bytes) else str(message)
        request_id = getattr(exc, "requestId", None)
        if request_id:  # as for an envelope read here: the RequestId support asks for
            text = f"{text} (request {request_id})"
        return ERRORS.error(str(code), text)
    return transport_error(exc, NAME)
