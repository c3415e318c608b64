"""Alibaba ECS error codes onto :class:`ErrorKind`, and SDK exceptions onto ProviderError.

ECS answers an error with HTTP 4xx/5xx and ``{"Code", "Message", "RequestId"}``; the SDK raises
it as ``ClientException``/``ServerException`` with ``.code`` and ``.status_code``. The code
decides; the status only where the code is unknown (429 throttled, 5xx transient, anything
else invalid: ECS answers 403 and 404 for many errors that are neither auth nor not-found).
Every exact code is in the ECS API reference of the call that answers it (RunInstances,
DescribeInstances, DeleteDeploymentSet, ...); docs/cloud-errors.md lists them with sources.
"""

from __future__ import annotations

from providers._errors import ErrorTable
from providers._regional import transport_error
from providers.base import ErrorKind, ErrorScope, ProviderError

NAME = "alibaba"


def _by_status(status: int | None) -> ErrorKind:
    if status == 429:
        return ErrorKind.THROTTLED
    if status is not None and status >= 500:
        return ErrorKind.TRANSIENT
    return ErrorKind.INVALID


ERRORS = ErrorTable(
    NAME,
    codes={
        ErrorKind.CAPACITY: (
            "OperationDenied.NoStock",
            "Zone.NotOnSale",
            "InvalidResourceType.NotSupported",  # type not sold in that zone
            "ResourceNotAvailable",
            "InvalidVSwitchId.IpNotEnough",  # the zone's vSwitch has no free IP
            # the same, as RunInstances also words it (before the QuotaExceed prefix: the
            # vSwitch is full, no limit of the account's)
            "QuotaExceeded.PrivateIpAddress",
            "InvalidInstanceType.ZoneNotSupported",  # the type is not sold in that zone
            "DeploymentSet.NoRoom",  # the gang's deployment set is full there
        ),
        ErrorKind.QUOTA: (
            "InvalidInstanceType.ValueUnauthorized",  # account not allowed this type
            "InvalidAccountStatus.NotEnoughBalance",
            "Account.Arrearage",
            # the account may not buy in that zone (yet): the user asks Alibaba to open it;
            # other zones of the region are open
            "Zone.NotOpen",
        ),
        ErrorKind.PRICE_TOO_LOW: ("InvalidSpotPriceLimit.LowerThanPublicPrice",),
        # SpotPriceLimit malformed (which the adapter never sends): another offer would not help
        ErrorKind.INVALID: ("InvalidSpotPriceLimit",),
        ErrorKind.AUTH: (
            "InvalidAccessKeyId.NotFound",
            "InvalidAccessKeyId.Inactive",
            "InvalidAccessKeyId",
            "SignatureDoesNotMatch",
            "IncompleteSignature",
            "InvalidCredentials",
            "NoPermission",
        ),
        ErrorKind.NOT_FOUND: ("InvalidInstanceId.NotFound", "InvalidDeploymentSetId.NotFound"),
        ErrorKind.TRANSIENT: (
            "ServiceUnavailable",
            "InternalError",
            "UnknownError",
            "ServiceTimeout",
            "OperationConflict",
            "LastTokenProcessing",  # same ClientToken still being processed
        ),
    },
    # OperationDenied.NoStock, Invalid.PrivatePoolOptions.NoStock, ...
    fragments={ErrorKind.CAPACITY: ("NoStock",)},
    prefixes={
        ErrorKind.QUOTA: ("QuotaExceed",),  # QuotaExceed.ElasticQuota, QuotaExceeded.*
        # Forbidden.RAM, Forbidden.AccessKeyDisabled, ...
        ErrorKind.AUTH: ("InvalidAccessKeyId", "InvalidSecurityToken", "Forbidden"),
        ErrorKind.THROTTLED: ("Throttling",),  # Throttling, Throttling.User, Throttling.Api
        ErrorKind.NOT_FOUND: ("InvalidInstanceId.NotFound",),
    },
    by_status=_by_status,
    scopes={
        # each names one zone, or the zone's vSwitch: the job tries the region's other zones
        ErrorScope.ZONE: (
            "Zone.NotOpen",
            "InvalidVSwitchId.IpNotEnough",
            "QuotaExceeded.PrivateIpAddress",
        ),
        # the account's balance: no launch anywhere until it is paid
        ErrorScope.ACCOUNT: ("InvalidAccountStatus.NotEnoughBalance", "Account.Arrearage"),
    },
)


def classify_code(code: str, status: int | None = None) -> ErrorKind:
    """The :class:`ErrorKind` for an Alibaba error code (the HTTP status only as a fallback)."""
    return ERRORS.kind_of(code, status)


def classify_error(exc: BaseException) -> ProviderError | None:
    """An SDK exception as a :class:`ProviderError`; None for programming errors (re-raised)."""
    if isinstance(exc, ProviderError):
        return exc
    if type(exc).__name__ == "CredentialException":  # the default chain found no credentials
        return ProviderError(ErrorKind.AUTH, "NoCredentials", str(exc)[:500], provider=NAME)
    raw_code = getattr(exc, "code", None)
    code = "" if raw_code in (None, "", "None") else str(raw_code)  # the SDK writes f"{None}"
    status = getattr(exc, "status_code", None)
    status = status if isinstance(status, int) else None
    inner = getattr(exc, "inner_exception", None)
    if inner is None and (code or status):
        message = str(getattr(exc, "message", "") or exc)
        if type(exc).__name__ == "ThrottlingException":
            return ProviderError(
                ErrorKind.THROTTLED, code or f"HTTP{status}", message, provider=NAME
            )
        return ERRORS.error(code, message, status)
    if inner is not None:  # the SDK wraps a connection failure
        return ProviderError(ErrorKind.TRANSIENT, type(inner).__name__, str(inner), provider=NAME)
    return transport_error(exc, NAME)
