"""`provisioner plan` prices each offer at its freshest quote (stored by `catalog refresh`, else
the catalog's row), shows each price's source and age, and warns when the winner's is old."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from click.testing import CliRunner

from providers.base import PriceQuote
from provisioner.cli import cli
from provisioner.control.store import Store
from provisioner.core.catalog import Catalog
from provisioner.core.models import Offer
from provisioner.core.price_age import CATALOG, LIVE, STALE_DAYS, freshest, price_key

REPO = Path(__file__).resolve().parents[1]
FINETUNE = str(REPO / "policies" / "spot-finetune.yaml")


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
    assert "prices: 1 live from `catalog refresh` (12 min old)" in text
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
