"""The small pieces of glue the cloud adapters share (providers/_common.py)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from providers._common import offer_for, parse_time, unless_gone
from providers.base import ErrorKind, ProviderError
from provisioner.core.models import LaunchRequest, Market, Offer


def request_for(provider: str) -> LaunchRequest:
    offer = Offer(provider, "eu-west-1", "eu-west-1a", "g5.xlarge", "A10G", 1, 4, 16.0, 1.0, 0.4)
    return LaunchRequest("job-a", 1, offer, Market.SPOT)


def test_an_offer_is_this_clouds_or_nobodys() -> None:
    assert offer_for(request_for("aws"), "aws").instance_type == "g5.xlarge"
    assert offer_for(request_for(""), "aws").provider == ""
    with pytest.raises(ProviderError) as caught:
        offer_for(request_for("gcp"), "aws")
    err = caught.value
    assert (err.kind, err.code, err.provider) == (ErrorKind.INVALID, "WrongProvider", "aws")
    assert "offer is for gcp" in err.message


def test_unless_gone_answers_none_for_not_found_only() -> None:
    def gone() -> int:
        raise ProviderError(ErrorKind.NOT_FOUND, "notFound", "no such instance", provider="gcp")

    def throttled() -> int:
        raise ProviderError(ErrorKind.THROTTLED, "rateLimitExceeded", "slow down", provider="gcp")

    assert unless_gone(lambda: 7) == 7
    assert unless_gone(gone) is None
    with pytest.raises(ProviderError) as caught:
        unless_gone(throttled)
    assert caught.value.kind is ErrorKind.THROTTLED
    with pytest.raises(KeyError):  # not a classified error: not swallowed either
        unless_gone(lambda: {}["missing"])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2024-05-01T12:00:00Z", datetime(2024, 5, 1, 12, tzinfo=UTC)),
        ("2024-05-01T12:00:00.1234567Z", datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=UTC)),
        # GCP answers in the zone's offset: the offset is kept, not read as UTC
        ("2024-05-01T05:00:00.123-07:00", datetime(2024, 5, 1, 12, 0, 0, 123000, tzinfo=UTC)),
        ("2024-05-01T14:00:00.1234567+02:00", datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=UTC)),
        ("2024-05-01T12:00:00", datetime(2024, 5, 1, 12, tzinfo=UTC)),  # naive: UTC
        (datetime(2024, 5, 1, 12), datetime(2024, 5, 1, 12, tzinfo=UTC)),
        ("", None),
        (None, None),
        ("yesterday", None),
    ],
)
def test_cloud_timestamps_read_as_utc(text: object, expected: datetime | None) -> None:
    got = parse_time(text)
    assert got == expected
    if got is not None:
        assert got.tzinfo is UTC
