"""The sim account's held capacity: listed with what is free, launched into (market reserved)
against its free slots, refused as a cloud refuses, and a block ended as AWS ends one (the
warning as an event, the instances taken back at the usable end). The agent serves itself a
block's notice from its spec."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from providers.base import ErrorKind, ProviderError
from providers.sim import SimProvider
from provisioner.agent.notices import NoticeReader
from provisioner.core.models import InstanceState, LaunchRequest, Market, Offer
from provisioner.core.reserved import END_MARGINS, TAG_BLOCK_END, TAG_BLOCK_NOTICE, block_tags

T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
ZONE, TYPE = "us-east-1a", "p3.2xlarge"


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[SimProvider]:
    p = SimProvider(
        tmp_path / "sim", seconds_per_hour=3600.0, mtbp_hours=None, run_agent=False,
        notice_floor_s=0.0,
    )  # fmt: skip
    p.set_clock(T0)
    yield p
    p.shutdown_server(terminate_all=True)


def _offer() -> Offer:
    return Offer("aws", "us-east-1", ZONE, TYPE, "V100", 1, 8, 61, 3.06, 0.9)


def _launch(sim: SimProvider, attempt: int, rid: str) -> object:
    r = next(x for x in sim.reservations() if x.id == rid)
    # the block's end on the instance's tags, as the daemon's launch sends them
    req = LaunchRequest(
        "j", attempt, _offer(), Market.RESERVED, reservation=r, extra_tags=block_tags(r)
    )
    return sim.launch(req)


def test_listed_launched_into_counted_and_refused_when_full(sim: SimProvider) -> None:
    sim.hold(
        [
            {"id": "cr-1", "zone": ZONE, "instance_type": TYPE, "total": 1},
            {"id": "cr-later", "zone": ZONE, "instance_type": TYPE, "total": 1,
             "starts_at": (T0 + timedelta(hours=2)).timestamp()},
        ]
    )  # fmt: skip
    held = {r.id: r for r in sim.reservations()}
    assert held["cr-1"].free == 1 and held["cr-1"].ends_at is None
    inst = _launch(sim, 1, "cr-1")
    assert inst.market is Market.RESERVED and inst.price_per_hour == 0.0  # type: ignore[attr-defined]
    assert {r.id: r.free for r in sim.reservations()}["cr-1"] == 0
    with pytest.raises(ProviderError) as err:
        _launch(sim, 2, "cr-1")
    assert err.value.kind is ErrorKind.CAPACITY
    with pytest.raises(ProviderError) as err:  # not started yet
        _launch(sim, 3, "cr-later")
    assert err.value.kind is ErrorKind.CAPACITY
    sim.terminate([inst.id])  # type: ignore[attr-defined]
    assert {r.id: r.free for r in sim.reservations()}["cr-1"] == 1


def test_a_block_ends_as_aws_ends_one(sim: SimProvider, tmp_path: Path) -> None:
    m = END_MARGINS["aws"]
    ends = T0 + timedelta(hours=3)
    sim.hold(
        [{"id": "cb-1", "zone": ZONE, "instance_type": TYPE, "kind": "capacity-block",
          "total": 1, "ends_at": ends.timestamp(), "held_usd_per_hour": 3.06}]
    )  # fmt: skip
    r = sim.reservations()[0]
    assert (r.warn_s, r.stop_s) == (m.warn_s, m.stop_s)
    inst = _launch(sim, 1, "cb-1")
    tags = inst.tags  # type: ignore[attr-defined]
    assert int(tags[TAG_BLOCK_END]) == int((ends - timedelta(seconds=m.stop_s)).timestamp())
    assert int(tags[TAG_BLOCK_NOTICE]) == int((ends - timedelta(seconds=m.warn_s)).timestamp())
    # the warning: an event, not a notice on the metadata or through the API
    sim.set_clock(ends - timedelta(seconds=m.warn_s - 1))
    events = (tmp_path / "sim" / "events.jsonl").read_text().splitlines()
    assert [json.loads(e)["kind"] for e in events] == ["block-ending"]
    assert sim.interruptions(T0) == []
    assert sim.get(inst.id).state is InstanceState.RUNNING  # type: ignore[attr-defined]
    # taken back at the usable end
    sim.set_clock(ends - timedelta(seconds=m.stop_s))
    gone = sim.get(inst.id)  # type: ignore[attr-defined]
    assert gone.state is InstanceState.PREEMPTED and gone.state_reason == "capacity block expired"
    # an ended block is no longer listed
    sim.set_clock(ends)
    assert sim.reservations() == []


def test_bad_definitions_are_clear_errors(sim: SimProvider) -> None:
    for bad in (
        [{"id": "x", "zone": ZONE, "instance_type": TYPE, "kind": "capacity-block"}],
        [{"id": "x", "zone": ZONE, "instance_type": TYPE, "kind": "nope"}],
        [{"zone": ZONE, "instance_type": TYPE}],
    ):
        with pytest.raises(ProviderError) as err:
            sim.hold(bad)
        assert err.value.kind is ErrorKind.INVALID


def test_the_agent_serves_itself_a_blocks_notice() -> None:
    reader = NoticeReader("aws", "http://127.0.0.1:9")  # no metadata service there
    now = datetime.now(UTC)
    reader.block = (now + timedelta(hours=1), now + timedelta(hours=2))
    assert reader.poll() is None
    reader.block = (now - timedelta(seconds=1), now + timedelta(minutes=10))
    notice = reader.poll()
    assert notice is not None and notice.deadline == now + timedelta(minutes=10)
    assert "capacity block" in notice.raw
