"""One contract suite, run against every cloud's adapter through its harness (see harness.py).

Each test drives the real adapter and the cloud's real SDK against a local server, and checks
what the adapter returns *and* what reached the wire.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from harness import CONTRACT_RETRY, Harness
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from providers.base import ErrorKind, Provider, ProviderError
from provisioner.core.models import (
    TAG_ATTEMPT,
    TAG_JOB,
    TAG_MANAGED,
    InstanceState,
    LaunchRequest,
    Market,
)

pytestmark = pytest.mark.contract

USER_DATA = "#!/bin/sh\necho provisioner contract test\n"
#: clouds whose launch carries no bid: the adapter enforces the cap before launch instead
TAKES_NO_BID = frozenset({"gcp"})


def request_for(
    harness: Harness,
    market: Market,
    *,
    job: str = "job-a",
    attempt: int = 1,
    cap: float | None = None,
) -> LaunchRequest:
    return LaunchRequest(
        job_id=job,
        attempt=attempt,
        offer=harness.offer(market),
        market=market,
        bid_cap_per_hour=cap,
        user_data=USER_DATA,
    )


def test_offers_are_this_clouds_gpu_offers(harness: Harness, provider: Provider) -> None:
    wanted = harness.offer(Market.SPOT)
    offers = provider.offers([wanted.region])
    assert offers, "no GPU offers"
    assert {o.provider for o in offers} == {harness.name}
    assert all(o.gpu and o.gpu_count >= 1 and o.instance_type for o in offers)
    assert wanted.instance_type in {o.instance_type for o in offers}


def test_launch_spot_with_bid_cap(harness: Harness, provider: Provider) -> None:
    cap = 0.5
    inst = provider.launch(request_for(harness, Market.SPOT, cap=cap))

    assert inst.provider == harness.name
    assert inst.market is Market.SPOT
    assert inst.state in (InstanceState.PENDING, InstanceState.RUNNING)
    assert inst.instance_type == harness.offer(Market.SPOT).instance_type
    assert inst.tags[TAG_JOB] == "job-a"
    assert inst.tags[TAG_ATTEMPT] == "1"
    assert inst.tags[TAG_MANAGED] == "true"
    assert (inst.job_id, inst.attempt) == ("job-a", 1)

    sent = harness.launch_requests()
    assert len(sent) == 1
    market, wire_cap = harness.wire_market(sent[-1])
    assert market is Market.SPOT
    if harness.name in TAKES_NO_BID:  # the cap is enforced before launch; nothing to send
        assert wire_cap is None
    else:
        assert wire_cap == pytest.approx(cap)

    again = provider.get(inst.id)
    assert again.market is Market.SPOT
    assert again.tags[TAG_JOB] == "job-a"


def test_launch_on_demand(harness: Harness, provider: Provider) -> None:
    inst = provider.launch(request_for(harness, Market.ON_DEMAND))

    assert inst.market is Market.ON_DEMAND
    assert inst.state in (InstanceState.PENDING, InstanceState.RUNNING)
    assert harness.wire_market(harness.launch_requests()[-1]) == (Market.ON_DEMAND, None)
    assert provider.get(inst.id).market is Market.ON_DEMAND


def test_same_request_twice_gives_one_instance(harness: Harness, provider: Provider) -> None:
    request = request_for(harness, Market.SPOT, cap=0.5)
    first = provider.launch(request)
    second = provider.launch(request)

    assert second.id == first.id
    assert [i.id for i in provider.list({TAG_JOB: "job-a"})] == [first.id]


def test_list_by_tag_returns_only_that_jobs_instances(harness: Harness, provider: Provider) -> None:
    a = provider.launch(request_for(harness, Market.SPOT, job="job-a", cap=0.5))
    b = provider.launch(request_for(harness, Market.SPOT, job="job-b", cap=0.5))

    only_a = provider.list({TAG_JOB: "job-a"})
    assert [i.id for i in only_a] == [a.id]
    assert only_a[0].tags[TAG_JOB] == "job-a"
    assert {i.id for i in provider.list({TAG_JOB: "job-b", TAG_ATTEMPT: "1"})} == {b.id}
    assert {i.id for i in provider.list({TAG_JOB: "job-b", TAG_ATTEMPT: "2"})} == set()
    assert {a.id, b.id} <= {i.id for i in provider.list()}  # default: every managed instance


def test_get(harness: Harness, provider: Provider) -> None:
    offer = harness.offer(Market.SPOT)
    inst = provider.launch(request_for(harness, Market.SPOT, cap=0.5))

    got = provider.get(inst.id)
    assert got.id == inst.id
    assert got.provider == harness.name
    assert got.instance_type == offer.instance_type
    assert got.region == offer.region
    if offer.zone:
        assert got.zone == offer.zone
    assert got.state.alive
    assert (got.job_id, got.attempt) == ("job-a", 1)

    with pytest.raises(ProviderError) as missing:
        provider.get(harness.missing_id)
    assert missing.value.kind is ErrorKind.NOT_FOUND


def test_terminate(harness: Harness, provider: Provider) -> None:
    inst = provider.launch(request_for(harness, Market.SPOT, cap=0.5))
    provider.terminate([inst.id])

    try:
        assert provider.get(inst.id).state is InstanceState.TERMINATED
    except ProviderError as err:  # or gone altogether
        assert err.kind is ErrorKind.NOT_FOUND
    assert not [i for i in provider.list({TAG_JOB: "job-a"}) if i.state.alive]
    provider.terminate([inst.id, harness.missing_id])  # gone or unknown ids: not an error


def test_preemption_is_seen_by_get_and_interruptions(harness: Harness, provider: Provider) -> None:
    inst = provider.launch(request_for(harness, Market.SPOT, cap=0.5))
    since = datetime.now(UTC) - timedelta(seconds=5)
    harness.preempt(inst.id)
    if getattr(harness, "reclaim_notice", False):
        # the API shows the reclaim as a notice while the instance runs, then releases it
        running = provider.get(inst.id)
        assert running.state is InstanceState.RUNNING
        [notice] = [i for i in provider.interruptions(since) if i.instance_id == inst.id]
        assert notice.kind == "notice" and notice.provider == harness.name
        harness.release(inst.id)
        with pytest.raises(ProviderError) as gone:
            provider.get(inst.id)
        assert gone.value.kind is ErrorKind.NOT_FOUND
        assert not [i for i in provider.interruptions(since) if i.instance_id == inst.id]
        return

    got = provider.get(inst.id)
    assert got.state is InstanceState.PREEMPTED
    assert not got.state.alive

    found = [i for i in provider.interruptions(since) if i.instance_id == inst.id]
    assert len(found) == 1
    assert found[0].kind == "preempted"
    assert found[0].provider == harness.name
    assert found[0].at >= since


@pytest.mark.parametrize(
    "kind",
    [ErrorKind.CAPACITY, ErrorKind.QUOTA, ErrorKind.PRICE_TOO_LOW, ErrorKind.AUTH],
    ids=lambda k: k.value,
)
def test_launch_error_is_classified_and_not_retried(
    harness: Harness, provider: Provider, kind: ErrorKind
) -> None:
    code = harness.error_codes.get(kind)
    if code is None:
        pytest.skip(f"{harness.name} has no {kind.value} error on launch")
    harness.inject_error(code)

    with pytest.raises(ProviderError) as caught:
        provider.launch(request_for(harness, Market.SPOT, cap=0.5))

    assert caught.value.kind is kind
    assert caught.value.code == code
    assert caught.value.provider == harness.name
    assert len(harness.launch_requests()) == 1  # never retried in place
    assert provider.list({TAG_JOB: "job-a"}) == []


def test_throttling_is_retried_then_succeeds(harness: Harness, provider: Provider) -> None:
    harness.inject_error(harness.error_codes[ErrorKind.THROTTLED], times=2)

    inst = provider.launch(request_for(harness, Market.SPOT, cap=0.5))

    assert inst.tags[TAG_JOB] == "job-a"
    assert len(harness.launch_requests()) == 3  # two throttled, then the one that worked
    assert [i.id for i in provider.list({TAG_JOB: "job-a"})] == [inst.id]


def test_throttling_retries_are_bounded(harness: Harness, provider: Provider) -> None:
    code = harness.error_codes[ErrorKind.THROTTLED]
    harness.inject_error(code, times=CONTRACT_RETRY.attempts + 3)

    with pytest.raises(ProviderError) as caught:
        provider.launch(request_for(harness, Market.SPOT, cap=0.5))

    assert caught.value.kind is ErrorKind.THROTTLED
    assert caught.value.code == code
    assert len(harness.launch_requests()) == CONTRACT_RETRY.attempts


def test_credentials_never_reach_logs_or_errors(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    provider = harness.provider()
    try:
        harness.inject_error(harness.error_codes[ErrorKind.THROTTLED])  # one logged retry
        inst = provider.launch(request_for(harness, Market.SPOT, cap=0.5))
        provider.get(inst.id)
        provider.list()
        harness.inject_error(harness.error_codes[ErrorKind.AUTH])
        with pytest.raises(ProviderError) as caught:
            provider.launch(request_for(harness, Market.SPOT, job="job-b", cap=0.5))
        provider.terminate([inst.id])
    finally:
        provider.close()

    assert any(r.name.startswith("provisioner") for r in caplog.records), "nothing was logged"
    assert harness.secret not in caplog.text
    for record in caplog.records:
        assert harness.secret not in record.getMessage()
        assert harness.secret not in str(record.exc_text or "")
    for text in (str(caught.value), repr(caught.value), caught.value.message):
        assert harness.secret not in text


#: how many decimals each cloud's bid carries on the wire (None: the cloud takes no bid)
BID_DECIMALS = {"aws": 4, "azure": 5, "alibaba": 3, "tencent": 4, "gcp": None, "sim": None}


@st.composite
def bid_caps(draw: st.DrawFn) -> float:
    """Caps as users write them (0.51237, 1.5, 3) and as arithmetic makes them (0.1 * 3)."""
    places = draw(st.integers(0, 9))
    written = draw(st.decimals(min_value="0.001", max_value="40", places=places))
    computed = draw(st.floats(0.001, 40, allow_nan=False, allow_infinity=False))
    return float(written) if draw(st.booleans()) and written > 0 else computed


def test_the_bid_sent_never_exceeds_the_cap(harness: Harness, provider: Provider) -> None:
    """Property over random caps, read back from the wire: the bid is the cap rounded *toward
    the cap* at the cloud's precision (never above it, and less than one step below); a cloud
    that takes no bid launches only when the price it knows is within the cap."""
    decimals = BID_DECIMALS.get(harness.name)
    known = harness.offer(Market.SPOT).spot_price
    seen = {"n": 0}

    @settings(
        max_examples=25,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        database=None,
    )
    @given(cap=bid_caps())
    def check(cap: float) -> None:
        seen["n"] += 1
        before = len(harness.launch_requests())
        request = request_for(harness, Market.SPOT, job=f"cap-{seen['n']}", cap=cap)
        floor = False  # a cap at or under the cloud's smallest bid (EC2: "more than $0.001")
        try:
            provider.launch(request)
        except ProviderError as err:
            assert err.kind is ErrorKind.PRICE_TOO_LOW, err
            floor = err.code == "BidCapBelowMinimum"
        sent = harness.launch_requests()[before:]
        if floor:
            assert sent == [], f"a cap of {cap} under the cloud's floor went out"
            return
        if harness.name in TAKES_NO_BID:  # the cap is enforced before launch, nothing is sent
            assert all(harness.wire_market(r)[1] is None for r in sent)
            if known is not None and known > cap:
                assert sent == [], f"launched at {known} above the cap {cap}"
            return
        assert len(sent) == 1
        market, wire = harness.wire_market(sent[0])
        assert market is Market.SPOT and wire is not None
        assert Decimal(repr(wire)) <= Decimal(repr(cap)), f"bid {wire} above the cap {cap}"
        if decimals is not None:
            assert Decimal(repr(cap)) - Decimal(repr(wire)) < Decimal(1).scaleb(-decimals)

    check()


def test_subnet_and_image_placement_failures_move_on(harness: Harness, provider: Provider) -> None:
    """No free IP in the zone's subnet, or the image not offered there: the job moves on to
    the next offer (CAPACITY), it is not stopped as an invalid request, nor retried in place."""
    codes = getattr(harness, "placement_codes", [])
    if not codes:
        pytest.skip(f"{harness.name} has no such codes")
    for n, code in enumerate(codes):
        before = len(harness.launch_requests())
        harness.inject_error(code)
        with pytest.raises(ProviderError) as caught:
            provider.launch(request_for(harness, Market.SPOT, job=f"job-{n}", cap=0.5))
        assert (caught.value.kind, caught.value.code) == (ErrorKind.CAPACITY, code)
        assert caught.value.kind.try_next_offer
        assert len(harness.launch_requests()) == before + 1
