"""What every adapter checks before it launches into held capacity (``Market.RESERVED``).

A launch on the ``reserved`` market names the reservation it goes into
(``LaunchRequest.reservation``); the adapter then targets it with the cloud's own fields and
sends no spot field. :func:`reservation_for` refuses, before anything is sent, a reserved
launch with no reservation, a reservation on another market, another cloud's reservation, or
one whose instance type or zone is not the offer's (the cloud would refuse it, or worse, land
the instance outside the reservation and bill it at the on-demand rate).
"""

from __future__ import annotations

from providers.base import ErrorKind, ProviderError
from provisioner.core.models import LaunchRequest, Market, Reservation


def reservation_for(request: LaunchRequest, cloud: str) -> Reservation | None:
    """The reservation ``request`` launches into (None: a spot or on-demand launch);
    ProviderError(INVALID, ``ReservationMismatch``) where the two do not fit together."""
    held = request.reservation
    if request.market is not Market.RESERVED:
        if held is not None:
            raise _mismatch(cloud, f"a reservation ({held.id}) on the {request.market} market")
        return None
    if held is None:
        raise _mismatch(cloud, "a reserved launch names no reservation")
    if held.provider not in ("", cloud):
        raise _mismatch(cloud, f"reservation {held.id} is {held.provider}'s, not {cloud}'s")
    offer = request.offer
    if held.instance_type and offer.instance_type and held.instance_type != offer.instance_type:
        raise _mismatch(
            cloud,
            f"reservation {held.id} holds {held.instance_type}, the offer is {offer.instance_type}",
        )
    if held.zone and offer.zone and held.zone != offer.zone:
        raise _mismatch(
            cloud, f"reservation {held.id} is in {held.zone}, the offer in {offer.zone}"
        )
    return held


def _mismatch(cloud: str, message: str) -> ProviderError:
    return ProviderError(ErrorKind.INVALID, "ReservationMismatch", message, provider=cloud)
