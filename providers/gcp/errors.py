"""GCP errors: Compute Engine's error reasons and operation error codes by kind, and the
classifier of google-api-core, google-auth and transport errors.

A failed operation's cause is ``op.error.errors[0].code``: ``ZONE_RESOURCE_POOL_EXHAUSTED``
(``_WITH_DETAILS``) is capacity, ``QUOTA_EXCEEDED`` quota.
"""

from __future__ import annotations

from collections.abc import Mapping

from providers._errors import ErrorTable
from providers.base import ErrorKind, ProviderError
from provisioner.errors import CloudError

ERRORS = ErrorTable(
    "gcp",
    {
        ErrorKind.CAPACITY: (
            "ZONE_RESOURCE_POOL_EXHAUSTED",
            "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
            # the subnetwork has no free IP address in that region: another region's may
            "IP_SPACE_EXHAUSTED",
            "IP_SPACE_EXHAUSTED_WITH_DETAILS",
        ),
        ErrorKind.QUOTA: ("QUOTA_EXCEEDED", "quotaExceeded"),
        ErrorKind.AUTH: (
            "authError",
            "forbidden",
            "PERMISSIONS_ERROR",
            "insufficientPermissions",
            "PERMISSION_DENIED",  # the google.rpc status of a 403
        ),
        ErrorKind.NOT_FOUND: ("notFound", "RESOURCE_NOT_FOUND"),
        ErrorKind.THROTTLED: (
            "rateLimitExceeded",
            "userRateLimitExceeded",
            "RATE_LIMIT_EXCEEDED",
            "RESOURCE_OPERATION_RATE_EXCEEDED",
        ),
        ErrorKind.TRANSIENT: (
            "backendError",
            "internalError",
            "INTERNAL_ERROR",
            "SERVICE_UNAVAILABLE",
        ),
        ErrorKind.PRICE_TOO_LOW: ("PriceAboveCap",),
        # a placement policy an instance still holds (400 at delete; not retried in the call:
        # the group sweep tries again at its next pass)
        ErrorKind.INVALID: (
            "resourceInUseByAnotherResource",
            "RESOURCE_IN_USE_BY_ANOTHER_RESOURCE",
        ),
    },
)


class _OperationError(CloudError):
    def __init__(self, code: str, message: str, status: int | None) -> None:
        super().__init__(f"{code}: {message}")
        self.code, self.message, self.status = code, message, status


def classify(exc: BaseException) -> ProviderError | None:
    """A ProviderError for a google-api-core, google-auth or transport error; None otherwise."""
    if isinstance(exc, _OperationError):
        return ERRORS.error(exc.code, exc.message, exc.status)
    from google.api_core import exceptions as gexc
    from google.auth import exceptions as aexc

    if isinstance(exc, gexc.GoogleAPICallError):
        status = exc.code if isinstance(exc.code, int) else None
        reasons = [e.get("reason", "") for e in exc.errors if isinstance(e, Mapping)]
        reason = next((r for r in reasons if r), "") or (exc.reason or "")
        err = ERRORS.error(reason, exc.message or str(exc), status)
        if status == 403 and err.kind is ErrorKind.INVALID:
            return ProviderError(ErrorKind.AUTH, err.code, exc.message, provider="gcp")
        return err
    if isinstance(exc, aexc.RefreshError | aexc.DefaultCredentialsError):
        return ProviderError(ErrorKind.AUTH, type(exc).__name__, str(exc), provider="gcp")
    if isinstance(exc, aexc.TransportError | ConnectionError | TimeoutError):
        return ProviderError(ErrorKind.TRANSIENT, type(exc).__name__, str(exc), provider="gcp")
    try:
        import requests

        if isinstance(exc, requests.ConnectionError | requests.Timeout):
            return ProviderError(ErrorKind.TRANSIENT, type(exc).__name__, str(exc), provider="gcp")
    except ImportError:  # pragma: no cover - requests comes with google-auth
        pass
    return None
