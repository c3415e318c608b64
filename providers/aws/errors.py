"""AWS errors: EC2's ``Error.Code`` values by kind, and the classifier of botocore exceptions.

Every code is in EC2's error code reference
(https://docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html) with the class
it has here; docs/cloud-errors.md lists them with their sources.

Classified by code, never by exception class or HTTP status alone: EC2 sends
``InsufficientInstanceCapacity`` with a 500, and it is capacity. A subnet lies in one zone, so
a subnet without a free address refuses that zone only (:class:`ErrorScope` ``ZONE``).
"""

from __future__ import annotations

from providers._errors import ErrorTable
from providers.base import ErrorKind, ErrorScope, ProviderError

ERRORS = ErrorTable(
    "aws",
    {
        ErrorKind.CAPACITY: (
            "InsufficientInstanceCapacity",
            "InsufficientHostCapacity",
            "InsufficientCapacity",
            # not enough spare spot capacity for the request now: another type or zone may have it
            "UnfulfillableCapacity",
            # not enough EBS capacity in the zone for the root volume: another zone may have it
            "InsufficientVolumeCapacity",
            "Unsupported",
            # the subnet of that zone has no free IP address: another zone's subnet may
            "InsufficientFreeAddressesInSubnet",
            # the targeted capacity reservation has no instance free: another offer may
            "ReservationCapacityExceeded",
        ),
        # BidCapBelowMinimum: a cap under EC2's smallest MaxPrice, refused before it is sent
        # PriceAboveCap: the price read before a launch with no MaxPrice is above the cap
        ErrorKind.PRICE_TOO_LOW: ("SpotMaxPriceTooLow", "BidCapBelowMinimum", "PriceAboveCap"),
        ErrorKind.QUOTA: (
            "VcpuLimitExceeded",
            "InstanceLimitExceeded",
            "MaxSpotInstanceCountExceeded",  # the account's spot request limit
            "PlacementGroupLimitExceeded",  # the account's placement group limit
        ),
        ErrorKind.AUTH: (
            "AuthFailure",
            "UnauthorizedOperation",
            "InvalidClientTokenId",
            "SignatureDoesNotMatch",
            "ExpiredToken",
            "OptInRequired",
        ),
        # a placement group that is not there (deleted, or never made): delete treats it as gone
        ErrorKind.NOT_FOUND: ("InvalidInstanceID.NotFound", "InvalidPlacementGroup.Unknown"),
        ErrorKind.THROTTLED: ("RequestLimitExceeded", "Throttling", "ThrottlingException"),
        # a group still holding an instance that is not terminated yet (not retried in the call:
        # the group sweep tries again at its next pass); a name already taken in the region
        ErrorKind.INVALID: ("InvalidPlacementGroup.InUse", "InvalidPlacementGroup.Duplicate"),
        ErrorKind.TRANSIENT: (
            "InternalError",
            "InternalFailure",
            "ServiceUnavailable",
            "Unavailable",
        ),
    },
    # the subnet the launch names (one per zone) is full: every launch in that zone is refused
    scopes={ErrorScope.ZONE: ("InsufficientFreeAddressesInSubnet",)},
)


def classify(exc: BaseException) -> ProviderError | None:
    """A botocore exception as a :class:`ProviderError` (by ``Error.Code``); None: not ours."""
    from botocore.exceptions import (
        ClientError,
        ConnectionError,
        HTTPClientError,
        NoCredentialsError,
        ParamValidationError,
        PartialCredentialsError,
    )

    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return ERRORS.error(error.get("Code", ""), error.get("Message", str(exc)), status)
    if isinstance(exc, (NoCredentialsError, PartialCredentialsError)):
        return ProviderError(ErrorKind.AUTH, "NoCredentials", str(exc), provider="aws")
    if isinstance(exc, (ConnectionError, HTTPClientError)):
        return ProviderError(ErrorKind.TRANSIENT, type(exc).__name__, str(exc), provider="aws")
    if isinstance(exc, ParamValidationError):
        return ProviderError(ErrorKind.INVALID, "ParamValidation", str(exc), provider="aws")
    return None
