"""`provisioner cost`: billed cost per job, attempt, cloud and UTC day, the estimate made at
launch (migration 0003), CSV/JSON/PNG, on a real store."""

from __future__ import annotations

import csv
import io
import json
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import inspect, text

from provisioner.cli import cli
from provisioner.control.records import attempt_row, billed_cost, launch_estimate
from provisioner.control.store import Store
from provisioner.core.spend import clip, split
from tests.pg import fresh_database
from tests.store_util import insert_legacy_job

T0 = datetime(2026, 12, 1, 22, 0, tzinfo=UTC)


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'c.db'}"
    else:
        with fresh_database() as u:
            yield u


# -- the split ------------------------------------------------------------------------------


def test_an_attempt_across_midnight_splits_by_run_time_and_sums_exactly() -> None:
    start, end = T0 + timedelta(hours=1, minutes=30), T0 + timedelta(hours=3)  # 23:30 -> 01:00
    cost = billed_cost("gcp", 3.1337, start, end)
    pieces = split(cost, start, end)
    assert [p.day.isoformat() for p in pieces] == ["2026-12-01", "2026-12-02"]
    assert pieces[0].cost_usd == pytest.approx(cost / 3)  # 30 of 90 minutes
    assert sum(p.cost_usd for p in pieces) == cost  # exactly: the last piece takes the rest
    many = split(1.0, start, start + timedelta(days=9, seconds=7))
    assert len(many) == 10 and sum(p.cost_usd for p in many) == pytest.approx(1.0, abs=1e-12)


def test_a_window_keeps_only_its_part() -> None:
    start, end = T0, T0 + timedelta(hours=4)  # 22:00 -> 02:00
    since, until = T0 + timedelta(hours=1), T0 + timedelta(hours=3)
    inside = clip(split(4.0, start, end, [since, until]), since, until)
    assert [(p.start, p.end) for p in inside] == [
        (since, T0 + timedelta(hours=2)),
        (T0 + timedelta(hours=2), until),
    ]
    assert sum(p.cost_usd for p in inside) == pytest.approx(2.0)


# -- migration 0003 ------------------------------------------------------------------------


def test_upgrade_from_0002_keeps_rows_and_adds_nullable_estimates(url: str) -> None:
    old = Store(url, migrate=False)
    old.migrate("0002")
    assert "estimate_usd" not in {c["name"] for c in inspect(old.engine).get_columns("attempts")}
    with old.engine.begin() as conn:  # both rows written as 0002 had them
        jid = insert_legacy_job(conn, "old-0002", T0)
        conn.execute(
            text(
                "INSERT INTO attempts (job_id, attempt, token, provider, region, zone, "
                "instance_type, gpu, gpu_count, market, price_per_hour, state, reason, "
                "created_at, launched_at, ended_at, end_reason, cost_usd) VALUES (:j, 1, 'tok', "
                " 'aws', 'eu-west-1', 'eu-west-1a', 'g5.xlarge', 'A10G', 1, 'spot', 1.5, "
                "'ended', '', :t, :t, :e, 'finished', 1.5)"
            ),
            {"j": jid, "t": T0, "e": T0 + timedelta(hours=1)},
        )
    old.close()
    store = Store(url)  # upgrades to head
    (a,) = store.attempts(jid)
    assert a.cost_usd == 1.5 and a.estimate_usd is None and a.estimate_p90_usd is None
    store.update_attempt(jid, 1, estimate_usd=2.0, estimate_p10_usd=1.0, estimate_p90_usd=3.0)
    (a,) = store.attempts(jid)
    assert (a.estimate_usd, a.estimate_p10_usd, a.estimate_p90_usd) == (2.0, 1.0, 3.0)
    res = CliRunner().invoke(cli, ["cost", jid, "--store", url, "--json"])
    doc = json.loads(res.stdout)
    assert doc["jobs"][0]["estimate_usd"] == 2.0 and doc["diff_usd"] == pytest.approx(-0.5)
    store.close()


def test_the_attempt_row_keeps_the_launch_estimate() -> None:
    from provisioner.control.store import JobRow
    from provisioner.core.models import Market, Offer, Placement

    offer = Offer(
        provider="aws", region="eu-west-1", zone="eu-west-1a", instance_type="g5.xlarge",
        gpu="A10G", gpu_count=1, vcpus=4, memory_gib=16, price=1.0, spot_price=0.4,
    )  # fmt: skip
    pl = Placement(offer, Market.SPOT, 0.4, None, score=1.0, est_job_cost=12.5)
    assert launch_estimate(pl) == (12.5, None, None)
    row = attempt_row(JobRow(id="j"), 1, pl, T0, "cheapest")
    assert (row.estimate_usd, row.estimate_p10_usd, row.estimate_p90_usd) == (12.5, None, None)


# -- the report on a store ------------------------------------------------------------------


def _seed(store: Store) -> str:
    """A job with three attempts on two clouds, one preempted across midnight UTC."""
    from provisioner.control.store import AttemptRow

    job = store.submit(
        name="train", policy_yaml="name: x\n", policy_path=None, provider="aws",
        provider_options={}, now=T0, deadline=None, work_total_h=None,
    )  # fmt: skip
    spans = [  # provider, market, price, start offset h, hours, state
        ("aws", "spot", 1.37, 1.5, 1.2, "preempted"),  # 23:30 -> 00:42
        ("gcp", "spot", 0.91, 2.8, 0.333, "preempted"),
        ("gcp", "on-demand", 3.07, 3.2, 2.01, "ended"),
    ]
    for i, (prov, market, price, off, h, state) in enumerate(spans, start=1):
        start = T0 + timedelta(hours=off)
        end = start + timedelta(hours=h)
        store.add_attempt(
            AttemptRow(
                job_id=job.id, attempt=i, token=f"t{i}", provider=prov, region="r",
                zone=f"{prov}-z{i}", instance_type="x", gpu="A10G", gpu_count=1, market=market,
                price_per_hour=price, bid_cap_per_hour=None, instance_id=f"i-{i}", state=state,
                reason="", created_at=start, launched_at=start, ended_at=end, end_reason=state,
                cost_usd=billed_cost(prov, price, start, end), estimate_usd=5.0 if i == 1 else 4.0,
                estimate_p10_usd=4.0 if i == 1 else None, estimate_p90_usd=7.0 if i == 1 else None,
            )
        )  # fmt: skip
    return job.id


def _invoke(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(cli, ["cost", *args], env={"NO_COLOR": "1"})
    return res.exit_code, res.stdout


def test_every_grouping_sums_to_the_attempts_to_the_cent(url: str, tmp_path: Path) -> None:
    store = Store(url)
    job_id = _seed(store)
    billed = sum(a.cost_usd for a in store.attempts(job_id))
    code, out = _invoke(job_id, "--store", url, "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["id"] == job_id and doc["by"] == "attempt" and doc["currency"] == "USD"
    assert set(doc) >= {"total_usd", "by_market_usd", "rows", "jobs", "attempts", "by_cloud"}
    assert round(doc["total_usd"], 2) == round(billed, 2)
    for key in ("jobs", "attempts", "by_cloud", "by_day"):
        assert round(sum(r["cost_usd"] for r in doc[key]), 2) == round(billed, 2), key
    assert [d["day"] for d in doc["by_day"]] == ["2026-12-01", "2026-12-02"]
    first = store.attempts(job_id)[0]
    assert doc["by_day"][0]["cost_usd"] == pytest.approx(first.cost_usd * 0.5 / 1.2, abs=1e-6)
    assert {c["provider"] for c in doc["by_cloud"]} == {"aws", "gcp"}
    job = doc["jobs"][0]
    assert job["estimate_usd"] == 5.0 and job["estimate_p90_usd"] == 7.0  # the first launch's
    assert job["diff_usd"] == pytest.approx(billed - 5.0, abs=1e-6)
    for by in ("job", "attempt", "cloud", "day"):
        code, out = _invoke(job_id, "--store", url, "--by", by, "--csv", "-")
        assert code == 0
        rows = list(csv.DictReader(io.StringIO(out)))
        assert rows and round(sum(float(r["cost_usd"]) for r in rows), 2) == round(billed, 2)
    # a window: only what fell inside it, and the two halves make the whole
    mid = "2026-12-02T00:00:00+00:00"
    a = json.loads(_invoke(job_id, "--store", url, "--until", mid, "--json")[1])["total_usd"]
    b = json.loads(_invoke(job_id, "--store", url, "--since", mid, "--json")[1])["total_usd"]
    assert 0 < a < billed and round(a + b, 2) == round(billed, 2)
    store.close()


def test_text_plot_and_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    store = Store(url)
    job_id = _seed(store)
    code, out = _invoke("--all", "--store", url, "--by", "day")
    assert code == 0 and "2026-12-02" in out and "total" in out and "\x1b[" not in out
    code, out = _invoke(job_id, "--store", url)
    assert (
        code == 0
        and "estimate at launch 5.0000 USD (P10-P90 4.0000-7.0000)" in out
        and "\x1b[" not in out
    )
    png = tmp_path / "spend.png"
    code, _ = _invoke(job_id, "--store", url, "--plot", str(png))
    assert code == 0 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from PIL import Image

    assert Image.open(png).size == (800, 400)
    assert _invoke("nope", "--store", url)[0] == 3
    assert _invoke("--store", url)[0] == 2  # neither a job nor --all
    assert _invoke(job_id, "--store", url, "--since", "yesterday")[0] == 2
    assert _invoke(job_id, "--store", url, "--by", "week")[0] == 2
    assert _invoke(job_id, "--store", url, "--csv", "-", "--json")[0] == 2
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # the plot extra not installed
    res = CliRunner().invoke(cli, ["cost", job_id, "--store", url, "--plot", str(png)])
    assert res.exit_code == 2 and "pip install 'provisioner[plot]'" in res.output
    store.close()
