"""``bid_cap.enforce: cloud | daemon``: who holds a spot instance to its bid cap.

- the defaults per cloud, from each cloud's own documentation (providers/<cloud>/facts.py);
- decide(): a running spot instance whose price read now is above its cap moves, made before
  break, or is stopped (cause ``over-cap``); never kept running above the cap;
- the wire: no maximum price under ``daemon`` (AWS no MaxPrice, Azure maxPrice -1, Alibaba
  SpotAsPriceGo, Tencent the on-demand price), the cap under ``cloud``; AWS refuses a cap of
  exactly $0.001 (EC2: "must be more than USD $0.001");
- the sim: a price surge reclaims an instance whose bid it passes, and with no bid the
  daemon moves the job (tests/e2e/test_bid_enforce_e2e.py runs it through the daemon).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

from policies import PolicyError, parse_policy
from policies.model import CapEnforce
from providers.base import ErrorKind, ProviderError
from providers.facts import cap_enforcement, cloud_facts
from provisioner.core.decide import (
    CoolDown,
    JobView,
    Launch,
    Observations,
    Terminate,
    Wait,
    decide,
)
from provisioner.core.models import Instance, InstanceState, LaunchRequest, Market
from provisioner.core.states import Cause
from tests.core.test_decide import NOW, cands, job, offer, place, policy, running

KEY = ("us-east-1", "us-east-1a", "p3.2xlarge")  # the running instance of tests.core.test_decide


# -- who enforces, per cloud ---------------------------------------------------------------------


def test_each_cloud_states_its_default_and_where_it_comes_from() -> None:
    want = {
        "aws": CapEnforce.DAEMON,
        "azure": CapEnforce.DAEMON,
        "gcp": CapEnforce.DAEMON,
        "alibaba": CapEnforce.DAEMON,
        "tencent": CapEnforce.CLOUD,
    }
    for cloud, default in want.items():
        bid = cloud_facts(cloud).bid
        assert bid.default is default, cloud
        assert "https://" in bid.why and bid.uncapped, cloud
        assert cap_enforcement(cloud, None) is default
    # GCP takes no maximum price: the daemon holds the cap whatever the policy asks
    assert not cloud_facts("gcp").bid.takes_cap
    assert cap_enforcement("gcp", CapEnforce.CLOUD) is CapEnforce.DAEMON
    assert cap_enforcement("aws", CapEnforce.CLOUD) is CapEnforce.CLOUD
    assert cap_enforcement("tencent", CapEnforce.DAEMON) is CapEnforce.DAEMON


def test_the_docs_table_holds_each_clouds_default() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "clouds.md").read_text()
    assert "bid_cap.enforce" in doc
    lines = doc.splitlines()
    start = lines.index("| Cloud | default | with no maximum price sent | the cloud's words |")
    table = lines[start + 2 : start + 7]
    for cloud in ("aws", "azure", "gcp", "alibaba", "tencent"):
        facts = cloud_facts(cloud)
        row = next((line for line in table if line.startswith(f"| {facts.display} | ")), None)
        assert row is not None and f"`{facts.bid.default.value}`" in row, (cloud, row)


def test_the_policy_takes_cloud_or_daemon_and_names_the_line_of_anything_else() -> None:
    p = parse_policy("name: t\nbid_cap:\n  max_spot_price_per_hour: 1.0\n  enforce: daemon\n")
    assert p.bid_cap.enforce is CapEnforce.DAEMON
    assert parse_policy("name: t\n").bid_cap.enforce is None
    with pytest.raises(PolicyError) as info:
        parse_policy("name: t\nbid_cap:\n  enforce: sometimes\n")
    assert "enforce" in str(info.value) and ":3" in str(info.value)


# -- decide() --------------------------------------------------------------------------------


def capped_job(cap: float = 1.5, extra: str = "") -> tuple[JobView, Instance]:
    """Attempt 1 running on spot in us-east-1a for two hours, launched held to ``cap``."""
    p = policy(f"bid_cap: {{max_spot_price_per_hour: {cap}}}\n{extra}")
    cur, inst = running(1, at=NOW - timedelta(hours=2))
    cur = replace(cur, placement=place(cur.placement.offer, cap=cap))
    return job(p, current=cur, attempt=1), inst


def test_a_price_over_the_cap_moves_the_job_made_before_break() -> None:
    view, inst = capped_job()
    obs = Observations(
        instances=(inst,),
        candidates=cands("us-east-1a", "us-east-1b"),
        spot_prices={KEY: 2.4},
    )
    out = decide(view, obs, NOW)
    cool = [a for a in out if isinstance(a, CoolDown)]
    assert cool and cool[0].location == "us-east-1a" and "bid cap" in cool[0].reason
    launch = out[-1]
    assert isinstance(launch, Launch) and launch.replaces == "i-1", out
    assert (
        launch.placement.offer.zone == "us-east-1b" or launch.placement.market is Market.ON_DEMAND
    )
    assert "passed the bid cap" in launch.reason
    assert not any(isinstance(a, Terminate) for a in out)  # it works on until the new one is up


def test_a_price_at_or_under_the_cap_keeps_the_instance() -> None:
    view, inst = capped_job()
    for price in (0.97, 1.5):
        obs = Observations(
            instances=(inst,),
            candidates=cands("us-east-1a", "us-east-1b"),
            spot_prices={KEY: price},
        )
        out = decide(view, obs, NOW)
        assert [type(a) for a in out] == [Wait] and "staying" in out[0].reason, (price, out)


def test_over_the_cap_with_nowhere_to_go_the_instance_is_stopped() -> None:
    # restarts exhausted: no move may be made, and it may not stay above the cap either
    view, inst = capped_job(extra="restart: {max_restarts: 0}\n")
    obs = Observations(
        instances=(inst,),
        candidates=cands("us-east-1a", "us-east-1b"),
        spot_prices={KEY: 9.0},
    )
    out = decide(view, obs, NOW)
    ends = [a for a in out if isinstance(a, Terminate)]
    assert [(e.instance_id, e.cause) for e in ends] == [("i-1", Cause.OVER_CAP)], out
    assert not any(isinstance(a, Launch) for a in out)
    # a spot-only job whose every other zone is over the cap too: stopped, not kept
    only = policy("market: spot\nbid_cap: {max_spot_price_per_hour: 1.5}\n")
    cur, inst2 = running(1, at=NOW - timedelta(hours=2))
    view2 = job(only, current=cur, attempt=1)
    obs2 = Observations(instances=(inst2,), candidates=cands("us-east-1a"), spot_prices={KEY: 3.0})
    out2 = decide(view2, obs2, NOW)
    assert any(isinstance(a, Terminate) and a.cause is Cause.OVER_CAP for a in out2), out2
    assert not any(isinstance(a, Launch) for a in out2)


def test_a_share_of_on_demand_is_judged_by_the_cap_the_launch_was_held_to() -> None:
    """An attempt's row keeps the price it runs at, not the on-demand price: its cap is the
    one its launch was held to. (Found by the suite: a running instance under a share-of-on-
    demand cap read as over a cap of 0, and was switched away every pass.)"""
    from provisioner.core.decide.pricecap import running_cap

    p = policy("bid_cap: {max_spot_price_per_gpu_hour: 1.2, max_fraction_of_on_demand: 0.7}\n")
    cur, inst = running(1, at=NOW - timedelta(hours=2))
    held = replace(cur, placement=place(cur.placement.offer, cap=1.14))
    # rebuilt from a row, the on-demand price is unknown
    row_like = replace(held.placement, offer=replace(held.placement.offer, price=None))
    assert running_cap(p, row_like) == pytest.approx(1.14)
    no_cap = replace(row_like, bid_cap_per_hour=None)
    assert running_cap(p, no_cap) == pytest.approx(1.2)  # the per-GPU cap; the share unknown
    view = job(p, current=replace(held, placement=row_like), attempt=1)
    for price, moved in ((0.97, False), (1.3, True)):
        obs = Observations(
            instances=(inst,),
            candidates=cands("us-east-1a", "us-east-1b"),
            spot_prices={KEY: price},
        )
        out = decide(view, obs, NOW)
        assert any(isinstance(a, Launch) for a in out) is moved, (price, out)


def test_an_instance_not_current_or_not_spot_is_not_judged_by_price() -> None:
    p = policy("bid_cap: {max_spot_price_per_hour: 1.5}\n")
    cur, inst = running(1, market=Market.ON_DEMAND, at=NOW - timedelta(hours=2))
    obs = Observations(instances=(inst,), candidates=cands("us-east-1a"), spot_prices={KEY: 9.0})
    out = decide(job(p, current=cur, attempt=1), obs, NOW)
    assert not any(isinstance(a, Terminate) for a in out)
    assert inst.state is InstanceState.RUNNING


# -- the wire --------------------------------------------------------------------------------


def test_aws_refuses_a_cap_of_exactly_a_tenth_of_a_cent() -> None:
    from providers.aws.instances import max_price

    for cap in (0.001, 0.0005, 0.00104):  # 0.00104 goes out as 0.0010: not more than 0.001
        with pytest.raises(ProviderError) as info:
            max_price(cap)
        assert info.value.kind is ErrorKind.PRICE_TOO_LOW
    assert max_price(0.0011) == "0.0011"


def test_aws_under_the_daemon_sends_no_max_price_and_reads_the_price_first() -> None:
    """On moto: no MaxPrice on the wire; the price in effect is read before the launch
    (moto answers 0.00001 for every type), and a cap under it is refused with nothing sent."""
    pytest.importorskip("moto")
    import sys

    contract = Path(__file__).resolve().parents[1] / "contract"
    if str(contract) not in sys.path:
        sys.path.insert(0, str(contract))
    from harness_aws import make_harness

    with make_harness() as harness:
        provider = harness.provider()
        offer = harness.offer(Market.SPOT)

        def req(cap: float, name: str, wire: bool) -> LaunchRequest:
            return LaunchRequest(
                name,
                1,
                offer,
                Market.SPOT,
                bid_cap_per_hour=cap,
                cap_on_wire=wire,
                user_data="#!/bin/sh\ntrue\n",
            )

        provider.launch(req(0.5, "held-by-daemon", False))
        sent = harness.launch_requests()[-1]
        assert sent["InstanceMarketOptions.MarketType"] == "spot"
        assert "InstanceMarketOptions.SpotOptions.MaxPrice" not in sent
        key = (offer.region, offer.zone, offer.instance_type)
        assert provider.spot_prices_now([key]) == {key: pytest.approx(0.00001)}
        before = len(harness.launch_requests())
        with pytest.raises(ProviderError) as info:
            provider.launch(req(0.000001, "under-the-price", False))
        assert (info.value.kind, info.value.code) == (ErrorKind.PRICE_TOO_LOW, "PriceAboveCap")
        assert harness.launch_requests()[before:] == []
        provider.launch(req(0.5, "held-by-cloud", True))
        assert (
            harness.launch_requests()[-1]["InstanceMarketOptions.SpotOptions.MaxPrice"] == "0.5000"
        )


def test_a_launch_sent_again_from_its_row_is_held_to_the_cap_it_was_chosen_with() -> None:
    """A resend rebuilds its placement from the attempt's row, which keeps no on-demand price:
    a share-of-on-demand cap read as 0 there, the guard refused the resend and the gang node
    an earlier process had started ran on unowned (found by seed 338 once it drew such caps)."""
    from provisioner.core.rules import launch_violation, spot_cap

    p = policy("bid_cap: {max_spot_price_per_hour: 0.3, max_fraction_of_on_demand: 0.7}\n")
    chosen = place(offer(spot=0.2), cap=0.3)
    row_like = replace(chosen, offer=replace(chosen.offer, price=None))
    assert spot_cap(p, row_like) == pytest.approx(0.3)
    assert launch_violation(p, row_like, 0.0) is None
    over = replace(row_like, offer=replace(row_like.offer, spot_price=0.5), price_per_hour=0.5)
    assert launch_violation(p, over, 0.0) is not None  # still refused above the cap
    # with neither the on-demand price nor a recorded cap, a share cannot be held: refused
    bare = replace(row_like, bid_cap_per_hour=None)
    assert launch_violation(p, bare, 0.0) is not None
