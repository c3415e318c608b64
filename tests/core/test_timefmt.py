"""provisioner.core.timefmt: the one reading of times for the adapters, the agent, the probe's
watch, the control loop and the dashboard (before, seven copies that disagreed at the edges)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from provisioner.core.timefmt import parse_time, utc


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2017-12-10T04:04Z", datetime(2017, 12, 10, 4, 4, tzinfo=UTC)),  # Alibaba: minutes
        ("2020-03-10T02:43:51Z", datetime(2020, 3, 10, 2, 43, 51, tzinfo=UTC)),  # Tencent
        ("2018-08-18 12:05:33", datetime(2018, 8, 18, 12, 5, 33, tzinfo=UTC)),  # no zone: UTC
        ("  2018-08-18T12:05:33Z\n", datetime(2018, 8, 18, 12, 5, 33, tzinfo=UTC)),  # a file's line
        ("2024-05-01T14:00:00.1234567+02:00", datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=UTC)),
        ("2024-05-01T05:00:00.123456789-07:00", datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=UTC)),
        (datetime(2024, 5, 1, 12), datetime(2024, 5, 1, 12, tzinfo=UTC)),
        ("", None),
        ("   ", None),
        (None, None),
        (1714564800, None),  # a number is not a time here: the caller reads epochs itself
        ("yesterday", None),
        ("2024-13-01T00:00:00Z", None),
    ],
)
def test_parse_time_reads_every_form_as_aware_utc(text: object, expected: datetime | None) -> None:
    got = parse_time(text)
    assert got == expected
    if got is not None:
        assert got.tzinfo is UTC


def test_utc_takes_naive_as_utc_converts_aware_and_keeps_none() -> None:
    naive = datetime(2026, 1, 2, 3, 4, 5)
    assert utc(naive) == naive.replace(tzinfo=UTC)
    east = datetime(2026, 1, 2, 5, 4, 5, tzinfo=timezone(timedelta(hours=2)))
    got = utc(east)
    assert got.tzinfo is UTC and got.hour == 3 and got == east
    assert utc(None) is None


def test_every_layer_reads_times_through_the_core() -> None:
    """The adapters' and the notice parsers' names are the core's function, not copies."""
    from providers import _common, notice
    from providers.alibaba import client as alibaba
    from providers.tencent import client as tencent
    from provisioner.agent import gang, handover
    from provisioner.control.jobpass import probes

    assert _common.parse_time is parse_time and _common.utc is utc
    assert alibaba.parse_time is parse_time and tencent.parse_time is parse_time
    for module in (notice, gang, handover, probes):
        assert module.parse_time is parse_time  # type: ignore[attr-defined]
