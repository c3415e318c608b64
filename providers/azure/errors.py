"""Azure errors: ARM error codes by kind, and the classifier of azure-core errors.

Dispatched on ``e.error.code``, never on the exception class (a 409 ``SkuNotAvailable``
arrives as ``ResourceExistsError``). ``SpotPriceGreaterThanProvidedMaxPrice`` is
price-too-low. ``MaxPriceValueInvalid`` is *invalid*: the value is malformed, which the
adapter never sends, so trying another offer would not help. ``OperationNotAllowed`` is quota
when its message speaks of quota, invalid otherwise.
"""

from __future__ import annotations

from providers._errors import ErrorTable
from providers.base import ErrorKind, ProviderError
from provisioner.errors import CloudError

ERRORS = ErrorTable(
    "azure",
    {
        ErrorKind.CAPACITY: (
            "SkuNotAvailable",
            "AllocationFailed",
            "ZonalAllocationFailed",
            "OverconstrainedAllocationRequest",
            "OverconstrainedZonalAllocationRequest",
            "SubnetIsFull",  # the NIC's subnet has no free IP address: another region's may
        ),
        ErrorKind.PRICE_TOO_LOW: ("SpotPriceGreaterThanProvidedMaxPrice", "BidCapBelowMinimum"),
        ErrorKind.INVALID: ("MaxPriceValueInvalid", "InvalidParameter", "NicInUse"),
        ErrorKind.QUOTA: ("QuotaExceeded", "OperationNotAllowedQuota"),
        ErrorKind.AUTH: (
            "AuthorizationFailed",
            "LinkedAuthorizationFailed",
            "InvalidAuthenticationToken",
            "InvalidAuthenticationTokenTenant",
            "ExpiredAuthenticationToken",
            "AuthenticationFailed",
        ),
        ErrorKind.NOT_FOUND: ("ResourceNotFound", "NotFound", "ResourceGroupNotFound"),
        ErrorKind.THROTTLED: ("TooManyRequests", "SubscriptionRequestsThrottled"),
        ErrorKind.TRANSIENT: (
            "InternalServerError",
            "InternalExecutionError",
            "ServiceUnavailable",
            "GatewayTimeout",
            "RetryableError",
        ),
    },
)


def classify(exc: BaseException) -> ProviderError | None:
    """A ProviderError for an azure-core/azure-identity error, by its ARM error code."""
    if isinstance(exc, RetailError):
        return ERRORS.error(exc.code, exc.message, exc.status)
    from azure.core.exceptions import (
        ClientAuthenticationError,
        HttpResponseError,
        ServiceRequestError,
        ServiceResponseError,
    )

    if isinstance(exc, HttpResponseError):
        status = exc.status_code
        code = (exc.error.code if exc.error is not None else None) or ""
        message = (exc.error.message if exc.error is not None else None) or exc.message or str(exc)
        if isinstance(exc, ClientAuthenticationError) and status is None:
            return ProviderError(
                ErrorKind.AUTH, code or type(exc).__name__, message, provider="azure"
            )
        if code == "OperationNotAllowed":
            kind = ErrorKind.QUOTA if "quota" in message.lower() else ErrorKind.INVALID
            return ProviderError(kind, code, message, provider="azure")
        return ERRORS.error(code, message, status)
    if isinstance(exc, ServiceRequestError | ServiceResponseError | ConnectionError | TimeoutError):
        return ProviderError(ErrorKind.TRANSIENT, type(exc).__name__, str(exc), provider="azure")
    return None


class RetailError(CloudError):
    def __init__(self, status: int | None, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
