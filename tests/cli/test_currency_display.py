"""`plan` and `cost` say which currency their figures are in, and how a cloud that bills in the
account's currency (Alibaba, Tencent) converts: the rate the user sees is the one they set."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from provisioner.cli import cli

POLICY = """\
name: cny-check
resources: {gpus: [T4, A10, A100, L4], gpu_count: 1}
market: spot
residency: {providers: [tencent, alibaba]}
"""


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("NO_COLOR", "1")
    path = tmp_path / "config" / "provisioner" / "providers.yaml"
    path.parent.mkdir(parents=True)
    path.write_text("tencent: {currency: CNY, cny_to_usd: 0.138}\nalibaba: {cny_to_usd: 0.139}\n")
    return path


def test_plan_says_usd_and_how_each_account_currency_is_converted(
    tmp_path: Path, config: Path
) -> None:
    policy = tmp_path / "p.yaml"
    policy.write_text(POLICY)
    res = CliRunner().invoke(cli, ["plan", "--policy", str(policy), "--json", "--top", "200"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["currency"] == "USD"
    found = {p["provider"] for p in doc["placements"]}
    assert found, "the built-in catalog has Tencent/Alibaba GPU offers"
    assert set(doc["billing"]) == found & {"tencent", "alibaba"}
    if "tencent" in found:
        assert doc["billing"]["tencent"]["currency"] == "CNY"
        assert doc["billing"]["tencent"]["usd_per_unit"] == 0.138
        assert doc["billing"]["tencent"]["source"] == "configured"
    if "alibaba" in found:  # not configured: learned from the account's price answers
        assert doc["billing"]["alibaba"]["currency"] is None
        assert doc["billing"]["alibaba"]["rates"]["CNY"] == 0.139
    text = CliRunner().invoke(cli, ["plan", "--policy", str(policy), "--top", "200"]).stdout
    assert "prices in USD" in text and "USD/h" in text
    if "tencent" in found:
        assert "currency: tencent: bids in CNY (configured) at 0.1380 USD/CNY" in text
    if "alibaba" in found:
        assert "currency: alibaba: bids in the account's currency, taken from its price" in text


def test_cost_is_in_usd_and_in_the_currency_the_account_was_billed_in(
    tmp_path: Path, config: Path
) -> None:
    from provisioner.control.reconciler import attempt_row
    from provisioner.control.store import Store
    from provisioner.core.models import Market, Offer, Placement

    url = f"sqlite:///{tmp_path / 's.db'}"
    store = Store(url)
    now = datetime.now(UTC)
    job = store.submit(
        name="cny",
        policy_yaml=POLICY,
        policy_path=None,
        provider="tencent",
        provider_options={},
        now=now,
        deadline=None,
        work_total_h=None,
    )
    offer = Offer(
        "tencent", "ap-guangzhou", "ap-guangzhou-3", "GN7.2XLARGE32", "T4", 1, 8, 32, 1.3, 0.41
    )
    placement = Placement(offer, Market.SPOT, 0.41, 0.5, 1.0, rank=1)
    row = attempt_row(job, 1, placement, now - timedelta(hours=2), "cheapest")
    store.add_attempt(row)
    store.update_attempt(
        job.id,
        1,
        instance_id="ins-abc",
        state="ended",
        launched_at=now - timedelta(hours=2),
        ended_at=now,
        cost_usd=0.82,
    )
    store.add_event(
        job.id,
        "launch",
        "attempt 1",
        at=now - timedelta(hours=2),
        instance="ins-abc",
        billing={"currency": "CNY", "usd_per_unit": 0.138},
    )
    res = CliRunner().invoke(cli, ["cost", job.id, "--store", url, "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["currency"] == "USD" and doc["total_usd"] == 0.82
    billed = doc["attempts"][0]["billed"]
    assert billed == {"currency": "CNY", "usd_per_unit": 0.138, "cost": round(0.82 / 0.138, 4)}
    text = CliRunner().invoke(cli, ["cost", job.id, "--store", url]).stdout
    assert "total 0.8200 USD" in text
    assert "5.9420 CNY" in text and "0.1380 USD/CNY" in text


def test_a_price_refresh_says_how_live_and_how_old_its_prices_are() -> None:
    from providers.base import PriceQuote
    from provisioner.cli.catalog_cmd import price_summary

    now = datetime.now(UTC)
    quotes = [
        PriceQuote("aws", "us-east-1", "us-east-1a", "g5.xlarge", 0.4, 1.006, now, now),
        PriceQuote("aws", "us-east-1", "us-east-1b", "g5.xlarge", 0.4, 1.006, now, None),
        PriceQuote(
            "alibaba", "cn-hangzhou", "cn-hangzhou-h", "ecs.gn7i", 0.05, 0.17, now,
            now - timedelta(minutes=30), currency="CNY", usd_per_unit=0.14,
        ),
    ]  # fmt: skip
    doc = price_summary(quotes)
    assert doc["on_demand_live"] == 2 and doc["on_demand_from_catalog"] == 1
    assert 29.9 <= doc["on_demand_oldest_age_min"] <= 31
    assert doc["converted_from"] == {"CNY": 0.14}
    assert "on-demand: 1 from the bundled catalog (not live)" in doc["lines"]
    assert "quoted in CNY, stored as USD at 0.1400 USD/CNY" in doc["lines"]


def test_policy_check_warns_of_tags_gcp_cannot_carry_as_written(tmp_path: Path) -> None:
    policy = tmp_path / "tags.yaml"
    policy.write_text("name: tagged\ntags: {CostCenter: CC-42, team: ml}\n")
    res = CliRunner().invoke(cli, ["policy", "check", str(policy), "--json"])
    assert res.exit_code == 0, res.output
    [doc] = json.loads(res.stdout)
    assert any("'CostCenter' becomes GCP label 'costcenter'" in w for w in doc["warnings"])
    assert not any("'team'" in w and "becomes GCP label" in w for w in doc["warnings"])
    text = CliRunner().invoke(cli, ["policy", "check", str(policy)])
    assert text.exit_code == 0 and "warning:" in text.stderr and "costcenter" in text.stderr
    # a policy that keeps off GCP is not warned about GCP
    policy.write_text("name: tagged\ntags: {CostCenter: x}\nresidency: {providers: [aws]}\n")
    [off] = json.loads(CliRunner().invoke(cli, ["policy", "check", str(policy), "--json"]).stdout)
    assert off["warnings"] == []
    policy.write_text("name: tagged\ntags: {provisioner-job: x}\n")
    bad = CliRunner().invoke(cli, ["policy", "check", str(policy)])
    assert bad.exit_code == 2 and "reserved" in bad.stderr


def test_providers_shows_the_currency_and_rate_each_account_bids_in(config: Path) -> None:
    res = CliRunner().invoke(cli, ["providers", "--json"])
    assert res.exit_code == 0, res.output
    detail = {p["name"]: p["detail"] for p in json.loads(res.stdout)}
    assert "bids in CNY (configured) at 0.1380 USD/CNY" in detail["tencent"]
    assert "taken from its price answers" in detail["alibaba"] and "0.1390" in detail["alibaba"]
    assert "bids in" not in detail["aws"]
