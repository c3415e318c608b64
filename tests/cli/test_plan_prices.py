"""`provisioner plan` prices each offer at its freshest quote (stored by `catalog refresh`, else
the catalog's row), shows each price's source and age, and warns when the winner's is old."""

from __future__ import annotations

import json
import re
import sys
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from providers.base import PriceQuote
from provisioner.cli import cli
from provisioner.control.store import Store
from provisioner.core.catalog import Catalog
from provisioner.core.models import Offer
from provisioner.core.price_age import CATALOG, LIVE, STALE_DAYS, freshest, price_key

REPO = Path(__file__).resolve().parents[2]
FINETUNE = str(REPO / "policies" / "spot-finetune.yaml")
for extra in (REPO / "tests" / "contract", REPO / "tests"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))


def plan(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(cli, ["plan", "--policy", FINETUNE, *args])
    return res.exit_code, res.stdout


def store_with(tmp_path: Path, quotes: list[PriceQuote]) -> str:
    url = f"sqlite:///{tmp_path / 's.db'}"
    store = Store(url)
    try:
        store.save_prices(quotes)
    finally:
        store.close()
    return url


def test_plan_ranks_by_the_stored_live_quotes_and_shows_their_age(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    code, out = plan("--json", "--top", "50", "--store", store_with(tmp_path / "empty", []))
    assert code == 0
    before = json.loads(out)["placements"]
    assert {p["price_source"] for p in before} == {CATALOG}
    # the tenth spot placement gets a live quote far below every catalog price
    target = [p for p in before if p["market"] == "spot"][9]
    at = datetime.now(UTC) - timedelta(minutes=12)
    quote = PriceQuote(
        target["provider"],
        target["region"],
        target["zone"],
        target["instance_type"],
        spot_price=0.0123,
        on_demand_price=None,
        at=at,
    )
    url = store_with(tmp_path, [quote])
    code, out = plan("--json", "--top", "50", "--store", url)
    assert code == 0
    first = json.loads(out)["placements"][0]
    assert (first["provider"], first["zone"], first["instance_type"], first["market"]) == (
        target["provider"],
        target["zone"],
        target["instance_type"],
        "spot",
    )
    assert first["price_per_hour"] == 0.0123
    assert first["price_source"] == LIVE
    assert first["price_at"] == at.isoformat()
    assert abs(first["price_age_days"] - 12 / 1440) < 0.001  # 12 minutes
    assert json.loads(out)["price_warning"] is None  # the winner's price is fresh

    code, text = plan("--store", url)
    assert code == 0
    # 12 minutes old when stored; a loaded machine may take a minute or more between the plans
    age = re.search(r"prices: 1 live from `catalog refresh` \((\d+) min old\)", text)
    assert age is not None and 12 <= int(age.group(1)) < 60, text
    assert "warning:" not in text


def test_bundled_azure_rows_are_flagged_with_their_age(tmp_path: Path) -> None:
    """Without live quotes the built-in Azure rows (dated 2024-06-30) win this plan: their
    age is shown, and the warning says how to refresh."""
    url = store_with(tmp_path, [])
    code, text = plan("--store", url)
    assert code == 0
    days = (datetime.now(UTC) - datetime(2024, 6, 30, tzinfo=UTC)).days
    assert f"catalog of 2024-06-30, {days} days old: #1" in text
    assert "warning: #1's price (azure" in text
    assert "provisioner catalog refresh --provider azure" in text
    code, out = plan("--json", "--store", url)
    doc = json.loads(out)
    assert doc["placements"][0]["price_age_days"] > STALE_DAYS
    assert "older than" in doc["price_warning"]


def _offer(price_date: str) -> Offer:
    return Offer(
        "aws", "eu-west-1", "eu-west-1a", "g5.xlarge", "A10G", 1, 4, 16, 1.0, 0.5, price_date
    )


def test_an_older_quote_does_not_replace_a_newer_catalog_row() -> None:
    row = _offer("2026-11-30")
    catalog = Catalog.from_offers([row])
    old = PriceQuote(
        "aws", "eu-west-1", "", "g5.xlarge", 0.1, 0.9, datetime(2026, 1, 1, tzinfo=UTC)
    )
    same, origins = freshest(catalog, [old])
    assert same.offers[0].spot_price == 0.5
    assert origins[price_key(row, "spot")].source == CATALOG
    new = PriceQuote(
        "aws", "eu-west-1", "", "g5.xlarge", 0.2, None, datetime(2026, 12, 1, tzinfo=UTC)
    )
    priced, origins = freshest(catalog, [old, new])
    assert (priced.offers[0].spot_price, priced.offers[0].price) == (0.2, 1.0)
    assert origins[price_key(row, "spot")].source == LIVE
    assert origins[price_key(row, "on-demand")].source == CATALOG  # the quote had no on-demand


def test_a_quote_read_now_for_a_price_unchanged_for_months_beats_an_older_catalog_row() -> None:
    """The quote is the price in effect when it was read: read now, it is newer than the
    catalog row of a month ago, however long before that the cloud last changed the price."""
    row = _offer("2026-11-30")
    read = datetime(2026, 12, 6, 9, tzinfo=UTC)
    quote = PriceQuote(
        "aws", "eu-west-1", "eu-west-1a", "g5.xlarge", 0.31, None, read,
        changed_at=datetime(2026, 10, 1, tzinfo=UTC),
    )  # fmt: skip
    priced, origins = freshest(Catalog.from_offers([row]), [quote])
    assert priced.offers[0].spot_price == 0.31
    origin = origins[price_key(row, "spot")]
    assert (origin.source, origin.at, origin.changed) == (LIVE, read, quote.changed_at)
    assert not origin.stale(read + timedelta(hours=1))
    assert origin.describe(read + timedelta(hours=1)) == (
        "live, 1.0 h old, unchanged since 2026-10-01"
    )


def test_a_quote_for_a_zone_the_catalog_lacks_is_planned() -> None:
    """eu-west-1b has no g5.xlarge row: its quote becomes an offer there (the type's facts,
    on-demand price and band from the region's row) and the plan ranks it first."""
    from policies import parse_policy
    from provisioner.core.planner import PlanContext, plan_offers

    row = _offer("2026-11-30")  # eu-west-1a only
    read = datetime(2026, 12, 6, 9, tzinfo=UTC)
    quote = PriceQuote("aws", "eu-west-1", "eu-west-1b", "g5.xlarge", 0.21, None, read)
    catalog = Catalog.from_offers([replace(row, interruption_band="5-10%")])
    priced, origins = freshest(catalog, [quote])
    new = next(o for o in priced.offers if o.zone == "eu-west-1b")
    assert (new.gpu, new.vcpus, new.price, new.spot_price) == ("A10G", 4, 1.0, 0.21)
    assert (new.interruption_band, new.price_date) == ("5-10%", "2026-12-06")
    assert origins[price_key(new, "spot")].source == LIVE
    assert origins[price_key(new, "on-demand")].source == CATALOG  # the region's list price
    pol = parse_policy("market: spot\nresources: {gpus: [A10G]}\n")
    plan = plan_offers(pol, priced, PlanContext(now=read), top=None)
    assert [(p.offer.zone, p.price_per_hour) for p in plan.placements] == [
        ("eu-west-1b", 0.21),
        ("eu-west-1a", 0.5),
    ]
    # the daemon's catalog holds it too (the reconciler lays the stored quotes with with_prices)
    assert {o.zone for o in catalog.with_prices([quote]).offers} == {"eu-west-1a", "eu-west-1b"}
    # a type the catalog lacks, or a regional quote where the type's rows name zones: none
    other = PriceQuote("aws", "eu-west-1", "eu-west-1b", "p5.48xlarge", 9.0, None, read)
    regional = PriceQuote("aws", "eu-north-1", "", "g5.xlarge", 0.2, None, read)
    assert len(freshest(catalog, [other, regional])[0].offers) == 1


def test_aws_refresh_then_plan_uses_quotes_read_now_and_new_zones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The AWS adapter on moto, DescribeSpotPriceHistory answered in EC2's shape: the last
    change of us-east-1b's g5.xlarge spot price is two months before the bundled catalog's
    row, and us-east-1a has no g5.xlarge row at all. The quotes are dated by the read; `plan`
    ranks both, each live with its change date, and warns of nothing."""
    pytest.importorskip("moto")
    from botocore.stub import ANY, Stubber
    from harness_aws import REGION, make_harness

    from provisioner.catalog_files import builtin_catalog
    from provisioner.core.price_age import catalog_time

    rows = {
        o.zone: o for o in builtin_catalog().filter(provider="aws", regions=[REGION])
        if o.instance_type == "g5.xlarge"
    }  # fmt: skip
    assert "us-east-1b" in rows and "us-east-1a" not in rows
    dated = catalog_time(rows["us-east-1b"].price_date)
    assert dated is not None
    changed = dated - timedelta(days=60)
    before = datetime.now(UTC)
    with make_harness() as h:
        provider = h.provider()
        provider.pricing.gpu_types[REGION] = [
            {"InstanceType": "g5.xlarge"}
        ]  # no DescribeInstanceTypes
        answer = {
            "SpotPriceHistory": [
                {
                    "AvailabilityZone": zone,
                    "InstanceType": "g5.xlarge",
                    "ProductDescription": "Linux/UNIX",
                    "SpotPrice": price,
                    "Timestamp": changed,
                }
                for zone, price in (("us-east-1b", "0.2222"), ("us-east-1a", "0.1111"))
            ]
        }
        expected = {
            "InstanceTypes": ["g5.xlarge"],
            "ProductDescriptions": ["Linux/UNIX"],
            "StartTime": ANY,
        }
        with Stubber(provider.client.ec2(REGION)) as stub:
            stub.add_response("describe_spot_price_history", answer, expected)
            quotes = provider.prices([REGION])
        provider.close()
    assert {q.zone for q in quotes} == {"us-east-1a", "us-east-1b"}
    assert all(q.at >= before and q.changed_at == changed for q in quotes)

    url = store_with(tmp_path, quotes)
    pol = tmp_path / "p.yaml"
    pol.write_text(
        "name: new-zone\njob: {command: [python, train.py], compute_hours: 1, "
        "reference_gpu: A10G}\nresources: {gpus: [A10G], gpu_count: 1}\nmarket: spot\n"
        f"residency: {{allow_regions: [{REGION}]}}\n"
    )
    res = CliRunner().invoke(
        cli, ["plan", "--policy", str(pol), "--json", "--top", "50", "--store", url]
    )
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    g5 = {p["zone"]: p for p in doc["placements"] if p["instance_type"] == "g5.xlarge"}
    assert (g5["us-east-1a"]["price_per_hour"], g5["us-east-1b"]["price_per_hour"]) == (
        0.1111,
        0.2222,
    )
    for p in (g5["us-east-1a"], g5["us-east-1b"]):
        assert p["price_source"] == LIVE and p["price_age_days"] < 1
        assert p["price_changed_at"] == changed.isoformat()
    assert doc["placements"][0]["zone"] == "us-east-1a"
    assert doc["price_warning"] is None
