"""``provisioner reserve``: Capacity Block offerings listed with their price, nothing bought
without ``--yes``, ``--max-price`` refusing what costs more, and the purchase on the wire.

The real CLI, AWSProvider and boto3 against moto's server, with EC2's capacity actions added by
tests/fakes/aws_capacity.py; what reached the wire is read off a ``before-send`` hook on every
boto3 EC2 client the command makes. Dates come from the caller's clock.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import pytest
from click.testing import CliRunner

from provisioner.cli import cli

CONTRACT = Path(__file__).resolve().parents[1] / "contract"
if str(CONTRACT) not in sys.path:
    sys.path.insert(0, str(CONTRACT))

START = (datetime.now(UTC) + timedelta(days=2)).replace(minute=0, second=0, microsecond=0)


def run(*args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(cli, list(args))
    return res.exit_code, res.stdout, res.stderr


@pytest.fixture
def ec2(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """moto with two H100 blocks on offer (one p5.48xlarge for 72 h at two prices) and a
    record of every EC2 action the command sent."""
    pytest.importorskip("moto")
    import boto3
    from fakes import aws_capacity
    from harness_aws import ACCESS_KEY, REGION, SECRET, ZONE, make_harness

    aws_capacity.install()
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    sent: list[dict[str, str]] = []

    def record(request: Any, event_name: str, **_: Any) -> None:
        body = request.body.decode() if isinstance(request.body, bytes) else request.body
        sent.append(dict(parse_qsl(body or "", keep_blank_values=True)))

    real_session = boto3.Session

    def session(*args: Any, **kwargs: Any) -> Any:
        s = real_session(*args, **kwargs)
        s.events.register("before-send.ec2", record)
        return s

    monkeypatch.setattr(boto3, "Session", session)
    with make_harness() as h:
        cheap = aws_capacity.seed_offering(REGION, ZONE, "p5.48xlarge", 1, START, 72, "2364.48")
        dear = aws_capacity.seed_offering(
            REGION, f"{REGION}b", "p5.48xlarge", 1, START + timedelta(days=1), 72, "3100.00"
        )
        yield {
            "endpoint": h.endpoint,
            "region": REGION,
            "sent": sent,
            "cheap": cheap,
            "dear": dear,
        }


def _args(ec2: dict[str, Any], *more: str) -> list[str]:
    return [
        "reserve", "--gpu", "H100", "--count", "8", "--hours", "72",
        "--start", START.isoformat(), "-o", f"region={ec2['region']}",
        "-o", f"endpoint={ec2['endpoint']}", *more,
    ]  # fmt: skip


def _actions(ec2: dict[str, Any]) -> list[str]:
    return [f.get("Action", "") for f in ec2["sent"]]


def test_offerings_are_listed_with_their_prices_and_nothing_is_bought(ec2: dict[str, Any]) -> None:
    code, out, err = run(*_args(ec2), "--json")
    assert code == 0, err
    doc = json.loads(out)
    rows = {r["id"]: r for r in doc["offerings"]}
    assert set(rows) == {ec2["cheap"], ec2["dear"]}
    cheap = rows[ec2["cheap"]]
    assert (cheap["instance_type"], cheap["instances"], cheap["hours"]) == ("p5.48xlarge", 1, 72)
    assert (cheap["upfront_usd"], cheap["currency"]) == (2364.48, "USD")
    assert cheap["usd_per_instance_hour"] == pytest.approx(2364.48 / 72, abs=1e-4)
    assert doc["bought"] is None and doc["chosen"] is None
    assert "PurchaseCapacityBlock" not in _actions(ec2)
    asked = [f for f in ec2["sent"] if f.get("Action") == "DescribeCapacityBlockOfferings"]
    assert {f["InstanceType"] for f in asked} >= {"p5.48xlarge"}
    # 8 H100: one 8-GPU p5.48xlarge, or eight 1-GPU p5.4xlarge (the catalog has both)
    by_type = {f["InstanceType"]: f["InstanceCount"] for f in asked}
    assert by_type["p5.48xlarge"] == "1" and by_type.get("p5.4xlarge", "8") == "8"
    assert all(f["CapacityDurationHours"] == "72" for f in asked)

    code, text, _ = run(*_args(ec2))
    assert code == 0 and ec2["cheap"] in text and "2,364.48" in text
    assert "nothing bought" in text and "\x1b[" not in text


def test_max_price_without_yes_only_marks_and_yes_needs_a_max_price(ec2: dict[str, Any]) -> None:
    code, out, _ = run(*_args(ec2, "--max-price", "2500", "--json"))
    assert code == 0
    within = {r["id"]: r["within_max_price"] for r in json.loads(out)["offerings"]}
    assert within == {ec2["cheap"]: True, ec2["dear"]: False}
    code, _, err = run(*_args(ec2, "--yes"))
    assert code == 2 and "--max-price" in err
    assert "PurchaseCapacityBlock" not in _actions(ec2)


def test_max_price_under_every_offering_refuses_to_buy(ec2: dict[str, Any]) -> None:
    code, _, err = run(*_args(ec2, "--yes", "--max-price", "2000"))
    assert code == 3 and "nothing bought" in err
    assert "PurchaseCapacityBlock" not in _actions(ec2)


def test_dry_run_never_buys(ec2: dict[str, Any]) -> None:
    code, out, _ = run(*_args(ec2, "--yes", "--max-price", "5000", "--dry-run", "--json"))
    doc = json.loads(out)
    assert code == 0 and doc["chosen"] == ec2["cheap"] and doc["bought"] is None
    assert "PurchaseCapacityBlock" not in _actions(ec2)


def test_yes_within_max_price_buys_the_cheapest_on_the_wire(ec2: dict[str, Any]) -> None:
    code, out, err = run(*_args(ec2, "--yes", "--max-price", "5000"))
    assert code == 0, err
    bought = [f for f in ec2["sent"] if f.get("Action") == "PurchaseCapacityBlock"]
    assert len(bought) == 1
    assert bought[0]["CapacityBlockOfferingId"] == ec2["cheap"]
    assert bought[0]["InstancePlatform"] == "Linux/UNIX"
    assert "bought" in out and ec2["cheap"] in out and "cr-" in out and "2,364.48" in out


def test_offering_names_which_one_is_bought(ec2: dict[str, Any]) -> None:
    code, out, err = run(
        *_args(ec2, "--yes", "--max-price", "5000", "--offering", ec2["dear"], "--json")
    )
    assert code == 0, err
    doc = json.loads(out)
    assert doc["chosen"] == ec2["dear"] and doc["bought"]["kind"] == "capacity-block"
    assert doc["bought"]["total"] == 1 and doc["bought"]["instance_type"] == "p5.48xlarge"
    bought = [f for f in ec2["sent"] if f.get("Action") == "PurchaseCapacityBlock"]
    assert [f["CapacityBlockOfferingId"] for f in bought] == [ec2["dear"]]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--gpu", "Z999", "--count", "8", "--hours", "72"], "--gpu"),
        (["--gpu", "H100", "--count", "0", "--hours", "72"], "--count"),
        (["--gpu", "H100", "--count", "8", "--hours", "0"], "--hours"),
        (["--gpu", "H100", "--count", "8", "--hours", "72", "--start", "soon"], "--start"),
        (["--gpu", "H100", "--count", "8", "--hours", "72", "--yes"], "--max-price"),
        (
            ["--gpu", "H100", "--count", "8", "--hours", "72", "--yes", "--max-price", "-1"],
            "--max-price",
        ),
        (["--gpu", "H100", "--count", "8", "--hours", "72", "--offering", "cb-1"], "--offering"),
    ],
)
def test_bad_input_exits_2_with_a_clear_message(args: list[str], says: str) -> None:
    code, _, err = run("reserve", *args)
    assert code == 2 and says in err and "Traceback" not in err


def test_hours_aws_does_not_sell_exit_2_before_asking(ec2: dict[str, Any]) -> None:
    code, _, err = run(
        "reserve", "--gpu", "H100", "--count", "8", "--hours", "30",
        "-o", f"region={ec2['region']}", "-o", f"endpoint={ec2['endpoint']}",
    )  # fmt: skip
    assert code == 2 and "whole days" in err
    assert "DescribeCapacityBlockOfferings" not in _actions(ec2)


def test_a_gpu_count_no_type_makes_is_nothing_eligible() -> None:
    code, _, err = run("reserve", "--gpu", "A100", "--count", "3", "--hours", "24")
    assert code == 3 and "makes 3 GPUs" in err


def test_gcp_has_no_booking_here() -> None:
    code, _, err = run(
        "reserve", "--gpu", "H100", "--count", "8", "--hours", "72", "--provider", "gcp"
    )
    assert code == 4 and "calendar" in err
