"""The savings ledger (docs/money.md, "The ledger"): each formula on a job built by hand (a
preemption with work lost, a failed launch, an overlap on notice, an on-demand finish), a
window, attempts from before the ledger (the catalog's price), `cost`'s columns and JSON,
the FOCUS 1.0 CSV validated against the specification's columns and types, and a real
preempted job on the sim whose ledger adds up to the cent with `cost`'s totals."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from provisioner.cli import cli
from provisioner.control import ledger, spend
from provisioner.control.records import billed_cost
from provisioner.control.store import AttemptRow, Store
from tests.focus_spec import COLUMNS, problems

T0 = datetime(2026, 12, 6, 10, 0, tzinfo=UTC)


def m(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


@pytest.fixture(autouse=True)
def _cli_logging_undone() -> Iterator[None]:
    """The commands run here in-process set the root logger up (a redacting handler): undone
    after each test, so that no later test's capture sees records scrubbed by it."""
    import logging

    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for h in list(root.handlers):
        if h not in handlers:
            root.removeHandler(h)
    root.setLevel(level)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(f"sqlite:///{tmp_path / 'l.db'}")
    yield s
    s.close()


def _attempt(jid: str, n: int, **kw: object) -> AttemptRow:
    row: dict[str, object] = dict(
        job_id=jid, attempt=n, token=f"t{n}", provider="aws", region="us-east-1",
        zone="us-east-1a", instance_type="g5.xlarge", gpu="A10G", gpu_count=1, market="spot",
        price_per_hour=1.0, bid_cap_per_hour=None, instance_id=f"i-{n}", state="ended",
        reason="", created_at=T0, launched_at=None, ended_at=None, end_reason="", cost_usd=0.0,
        on_demand_price_per_hour=3.0, cheapest_on_demand_per_hour=2.5,
        cheapest_on_demand_offer="aws:us-east-1b:g5.xlarge",
    )  # fmt: skip
    row.update(kw)
    if row["launched_at"] is not None and row["ended_at"] is not None:
        row["cost_usd"] = billed_cost(
            "aws", row["price_per_hour"], row["launched_at"], row["ended_at"]
        )  # type: ignore[arg-type]
    return AttemptRow(**row)


def _seed(store: Store) -> str:
    """A job's life: spot, preempted with 20 min of work lost; a launch refused for capacity;
    spot again from the checkpoint, replaced on notice by on-demand (2 min of overlap); done."""
    jid = store.submit(
        name="ledger", policy_yaml="name: x\ntags: {team: ml}\n", policy_path=None,
        provider="aws", provider_options={}, now=T0, deadline=None, work_total_h=None,
    ).id  # fmt: skip
    rows = [
        _attempt(jid, 1, launched_at=m(0), ended_at=m(50), state="preempted"),
        _attempt(jid, 2, created_at=m(51), state="failed", end_reason="capacity: none"),
        _attempt(jid, 3, launched_at=m(55), ended_at=m(112), state="preempted", price_per_hour=1.2),
        _attempt(jid, 4, launched_at=m(110), ended_at=m(170), market="on-demand",
                 price_per_hour=3.0, on_demand_price_per_hour=3.0),
    ]  # fmt: skip
    for r in rows:
        store.add_attempt(r)
    ev = [  # (minutes, kind, data)
        (6, "first-progress", {"attempt": 1}),
        (30, "checkpoint", {"checkpoint": "ck-a", "attempt": 1}),
        (61, "first-progress", {"attempt": 3, "resumed_from": "ck-a"}),
        (100, "checkpoint", {"checkpoint": "ck-b", "attempt": 3}),
        (111, "checkpoint", {"checkpoint": "ck-c", "attempt": 4}),  # the notice's, seen later
        (113, "first-progress", {"attempt": 4, "resumed_from": "ck-c"}),
    ]
    for at, kind, data in ev:
        store.add_event(jid, kind, kind, at=m(at), **data)
    return jid


def test_each_figure_by_its_formula(store: Store) -> None:
    jid = _seed(store)
    [a1, a2, a3, a4] = ledger.store_ledgers(store, [jid], m(300))[jid]
    h = 1 / 60
    # attempt 1: 50 min of spot at $1/h; on-demand $3/h; cheapest allowed $2.5/h
    assert a1.billed_usd == pytest.approx(50 * h * 1.0)
    assert a1.on_demand_usd == pytest.approx(50 * h * 3.0) and a1.on_demand_source == "launch"
    assert a1.cheapest_usd == pytest.approx(50 * h * 2.5)
    assert a1.saved_usd == pytest.approx(50 * h * 2.0) and a1.saved_pct == pytest.approx(200 / 3)
    assert a1.changeover_h == pytest.approx(6 * h)  # launch -> first progress
    assert a1.lost_work_h == pytest.approx(20 * h)  # checkpoint ck-a (0:30) -> preempted (0:50)
    assert a1.overlap_h == 0.0
    # attempt 2: refused, never ran: nothing
    assert (a2.billed_usd, a2.on_demand_usd, a2.lost_work_h) == (0.0, 0.0, 0.0)
    # attempt 3: 57 min at $1.2/h; 6 min changeover; 2 min beside attempt 4; nothing lost
    assert a3.billed_usd == pytest.approx(57 * h * 1.2)
    assert a3.changeover_usd == pytest.approx(6 * h * 1.2)
    assert a3.overlap_h == pytest.approx(2 * h) and a3.overlap_usd == pytest.approx(2 * h * 1.2)
    assert a3.lost_work_h == 0.0  # attempt 4 resumed from the notice's checkpoint (1:51)
    # attempt 4: on-demand: saves nothing
    assert a4.billed_usd == pytest.approx(3.0) and a4.saved_usd == pytest.approx(0.0)
    assert a4.changeover_h == pytest.approx(3 * h) and a4.overlap_h == 0.0
    t = ledger.totals([a1, a2, a3, a4])
    assert t.billed_usd == pytest.approx(50 * h + 57 * h * 1.2 + 3.0)
    assert t.on_demand_usd == pytest.approx((50 + 57) * h * 3.0 + 3.0)
    assert t.saved_usd == pytest.approx(t.on_demand_usd - t.billed_usd)
    assert t.useful_usd + t.changeover_usd + t.lost_work_usd + t.overlap_usd == pytest.approx(
        t.billed_usd, abs=1e-12
    )
    assert t.lost_work_usd == pytest.approx(20 * h * 1.0)
    # the API gives the same, unrounded
    from provisioner.api import Job

    doc = Job(store, jid).ledger
    assert doc["billed_usd"] == t.billed_usd and doc["saved_usd"] == t.saved_usd
    assert [a["attempt"] for a in doc["attempts"]] == [1, 2, 3, 4]


def test_a_window_clips_every_figure_as_cost_does(store: Store) -> None:
    jid = _seed(store)
    since, until = m(40), m(111)
    rows = ledger.store_ledgers(store, [jid], m(300), since, until)[jid]
    job = store.job(jid)
    assert job is not None
    costs = spend.attempt_costs(store, [job], m(300), since, until)
    assert sum(a.billed_usd for a in rows) == pytest.approx(
        sum(c.cost_usd for c in costs), abs=1e-12
    )
    a1 = rows[0]
    assert a1.billed_usd == pytest.approx(10 / 60)  # 0:40 -> 0:50 of attempt 1
    assert a1.on_demand_usd == pytest.approx(30 / 60)
    assert a1.lost_work_h == pytest.approx(10 / 60) and a1.changeover_h == 0.0
    assert rows[2].overlap_h == pytest.approx(1 / 60)  # 1:50 -> 1:51 of the overlap


def test_attempts_from_before_the_ledger_take_the_catalogs_price(store: Store) -> None:
    jid = store.submit(
        name="old", policy_yaml="name: x\n", policy_path=None, provider="aws",
        provider_options={}, now=T0, deadline=None, work_total_h=None,
    ).id  # fmt: skip
    store.add_attempt(
        _attempt(jid, 1, launched_at=m(0), ended_at=m(60), region="ap-northeast-2",
                 zone="ap-northeast-2a", on_demand_price_per_hour=None,
                 cheapest_on_demand_per_hour=None, cheapest_on_demand_offer=None)
    )  # fmt: skip
    [a] = ledger.store_ledgers(store, [jid], m(90))[jid]
    assert a.on_demand_source == "catalog" and a.on_demand_price == 1.237  # the built-in catalog
    assert a.cheapest_usd is None


def test_cost_shows_the_ledger_and_writes_focus(store: Store, tmp_path: Path) -> None:
    jid = _seed(store)
    url = store.url
    runner = CliRunner()
    res = runner.invoke(cli, ["cost", jid, "--store", url, "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    led = doc["ledger"]
    assert led["billed_usd"] == pytest.approx(doc["total_usd"], abs=1e-6)
    assert led["on_demand_usd"] - led["saved_usd"] == pytest.approx(doc["total_usd"], abs=2e-6)
    assert [a["lost_work_h"] for a in doc["attempts"]] == [
        pytest.approx(1 / 3, abs=1e-6),
        0.0,
        0.0,
        0.0,
    ]
    assert doc["jobs"][0]["saved_usd"] == led["saved_usd"]
    res = runner.invoke(
        cli, ["cost", jid, "--store", url], env={"NO_COLUMNS": "1", "COLUMNS": "250"}
    )
    assert res.exit_code == 0 and "saved " in res.output and "vs on-demand" in res.output
    assert "OD USD" in res.output and "lost h" in res.output
    res = runner.invoke(cli, ["cost", "--all", "--store", url, "--by", "attempt", "--csv", "-"])
    rows = list(csv.DictReader(io.StringIO(res.stdout)))
    assert {"on_demand_usd", "saved_usd", "lost_work_usd", "overlap_usd"} <= set(rows[0])
    out = tmp_path / "focus.csv"
    # the account a launch was billed to, as the launch event keeps it (Azure, GCP say it)
    store.add_event(
        jid, "launch", "launch", at=m(110), instance="i-4",
        billing={"currency": "USD", "usd_per_unit": 1.0, "account": "123456789012"},
    )  # fmt: skip
    res = runner.invoke(cli, ["cost", "--all", "--store", url, "--focus", str(out)])
    assert res.exit_code == 0, res.output
    rows = _check_focus(out.read_text(), doc["total_usd"], doc["ledger"]["on_demand_usd"])
    accounts = {(r["x_Attempt"], r["BillingAccountId"], r["SubAccountId"]) for r in rows}
    assert accounts == {
        ("1", "aws:default", ""), ("3", "aws:default", ""), ("4", "123456789012", "123456789012"),
    }  # fmt: skip
    assert {r["RegionName"] for r in rows} == {"US East (N. Virginia)"}
    res = runner.invoke(cli, ["cost", jid, "--store", url, "--focus", "-", "--json"])
    assert res.exit_code == 2 and "choose one" in res.output


def _check_focus(text: str, total: float, on_demand: float | None) -> list[dict[str, str]]:
    reader = csv.DictReader(io.StringIO(text))
    header = list(reader.fieldnames or [])
    rows = list(reader)
    assert problems(header, rows) == []
    assert header[: len(COLUMNS)] == list(COLUMNS)  # all 43 of FOCUS 1.0, in its order
    assert rows, "no rows"
    assert round(sum(float(r["BilledCost"]) for r in rows), 2) == round(total, 2)
    assert all(r["EffectiveCost"] == r["BilledCost"] for r in rows)
    for r in rows:  # priced at the unit price billed, over the billed hours (minimum included)
        assert float(r["ListUnitPrice"]) * float(r["PricingQuantity"]) == pytest.approx(
            float(r["BilledCost"]), rel=1e-9, abs=1e-12
        )
        assert float(r["PricingQuantity"]) >= float(r["ConsumedQuantity"]) - 1e-12
        assert r["RegionName"] and r["RegionName"] != r["RegionId"], r["RegionId"]
        assert r["SkuPriceId"].endswith(f":{r['x_Market']}:{r['ListUnitPrice']}")
    if on_demand is not None:  # what spot saved: on-demand's price over the same billed hours
        assert round(sum(float(r["x_OnDemandCost"]) for r in rows), 2) == round(on_demand, 2)
    tags = json.loads(rows[0]["Tags"])
    assert "provisioner-job" in tags
    return rows


def test_the_focus_check_sees_what_it_refuses() -> None:
    """The validator is not vacuous: each kind of fault is found."""
    good = {c: "" for c in COLUMNS} | {
        "BilledCost": "1.5", "BillingAccountId": "aws", "BillingCurrency": "USD",
        "BillingPeriodEnd": "2027-01-01T00:00:00Z", "BillingPeriodStart": "2026-12-01T00:00:00Z",
        "ChargeCategory": "Usage", "ChargeFrequency": "Usage-Based",
        "ChargePeriodEnd": "2026-12-06T11:00:00Z", "ChargePeriodStart": "2026-12-06T10:00:00Z",
        "ContractedCost": "1.5", "EffectiveCost": "1.5", "InvoiceIssuerName": "x",
        "ListCost": "1.5", "ProviderName": "x", "PublisherName": "x", "ServiceCategory": "Compute",
        "ServiceName": "x", "ConsumedQuantity": "0.9", "ConsumedUnit": "Hours",
        "ContractedUnitPrice": "1.5", "ListUnitPrice": "1.5", "PricingCategory": "Dynamic",
        "PricingQuantity": "1", "PricingUnit": "Hours", "SkuId": "aws:g5.xlarge",
        "SkuPriceId": "aws:eu-west-1a:g5.xlarge:spot:1.5", "RegionId": "eu-west-1",
        "RegionName": "Europe (Ireland)", "ResourceId": "i-1", "ResourceType": "Virtual Machine",
        "ResourceName": "train attempt 1",
    }  # fmt: skip
    header = list(COLUMNS)
    assert problems(header, [good]) == []
    for col, v in (
        ("BilledCost", "+1.5"), ("BilledCost", "1,5"), ("BilledCost", ""),
        ("ChargePeriodStart", "2026-12-06 10:00"), ("BillingCurrency", "usd"),
        ("ChargeCategory", "Spot"), ("Tags", "[1]"), ("Tags", '{"a": {"b": 1}}'),
        ("PricingQuantity", "0.9"), ("ListCost", "3"), ("ContractedUnitPrice", "1.4"),
        ("ListUnitPrice", ""), ("SkuPriceId", ""), ("PricingQuantity", "-1"),
        ("RegionName", ""), ("ResourceType", ""), ("ResourceId", ""),
        ("ResourceName", "i-1"), ("CommitmentDiscountType", "Instance"),
        ("CommitmentDiscountId", "c-1"), ("ConsumedQuantity", ""),
        ("ChargePeriodEnd", "2026-12-06T10:00:00Z"), ("BillingPeriodStart", "2026-12-07T00:00:00Z"),
    ):  # fmt: skip
        assert problems(header, [good | {col: v}]) != [], (col, v)
    tax = good | {"ChargeCategory": "Tax", "ConsumedQuantity": "", "ConsumedUnit": ""}
    assert any("Tax row" in p for p in problems(header, [tax]))  # unit prices on a Tax row
    # one SkuPriceId, two unit prices (or two SkuIds): not a single price of one SKU
    other = good | {"ListUnitPrice": "3", "ContractedUnitPrice": "3", "PricingQuantity": "0.5"}
    assert problems(header, [good, other]) != [] and problems(header, [other]) == []
    assert problems(header, [good, good | {"SkuId": "aws:g5.2xlarge"}]) != []
    assert problems([*header[1:], header[0]], [good]) != []  # out of order
    assert problems([*header, "custom"], [good]) != []  # no x_ prefix


@pytest.mark.e2e
def test_the_ledger_of_a_preempted_job_on_the_sim_adds_up_to_the_cent(
    tmp_path: Path,
) -> None:
    from providers.sim import SimProvider
    from provisioner.api import Job, submit
    from tests.e2e_util import write_policy

    sim_dir = tmp_path / "sim"
    options = {
        "state_dir": str(sim_dir), "mimic": {"eu-west-1a": "aws", "europe-west4-a": "gcp"},
        "seconds_per_hour": 60, "mtbp_hours": None, "preempt_first_after_s": 6,
        "demo_outage_s": 8, "idle_exit_s": 120,
    }  # fmt: skip
    url = f"sqlite:///{tmp_path / 's.db'}"
    store = Store(url)
    try:
        policy = write_policy(tmp_path / "p.yaml", steps=500, ckpt=tmp_path / "ck")
        _, jid = submit(
            policy, provider="sim", provider_defaults=False, provider_options=options, store=store
        )
        assert Job(store, jid).wait(timeout=150, poll_s=0.5) == "succeeded"
    finally:
        SimProvider(sim_dir).shutdown_server(terminate_all=True)
    attempts = store.attempts(jid)
    assert any(a.state == "preempted" for a in attempts)
    launched = [a for a in attempts if a.launched_at is not None]
    assert all(a.on_demand_price_per_hour and a.cheapest_on_demand_per_hour for a in launched)
    kinds = [e.kind for e in store.events(jid)]
    assert kinds.count("first-progress") == len(launched) and "restarted" in kinds
    billed = sum(a.cost_usd for a in attempts)
    runner = CliRunner()
    doc = json.loads(runner.invoke(cli, ["cost", jid, "--store", url, "--json"]).stdout)
    led = doc["ledger"]
    # to the cent: the ledger's billed is cost's total; the attempts add up to the job
    assert round(led["billed_usd"], 2) == round(doc["total_usd"], 2) == round(billed, 2)
    assert round(sum(a["cost_usd"] for a in doc["attempts"]), 2) == round(led["billed_usd"], 2)
    assert round(sum(a["saved_usd"] for a in doc["attempts"]), 2) == round(led["saved_usd"], 2)
    assert round(led["on_demand_usd"] - led["saved_usd"], 2) == round(doc["total_usd"], 2)
    parts = led["useful_usd"] + led["changeover_usd"] + led["lost_work_usd"] + led["overlap_usd"]
    assert round(parts, 2) == round(led["billed_usd"], 2)
    assert led["saved_usd"] > 0 and 0 < led["saved_pct"] < 100  # spot was cheaper
    api = Job(store, jid).ledger
    assert round(api["billed_usd"], 2) == round(doc["total_usd"], 2)
    text = runner.invoke(cli, ["cost", jid, "--store", url, "--focus", "-"]).stdout
    _check_focus(text, doc["total_usd"], led["on_demand_usd"])
    store.close()
