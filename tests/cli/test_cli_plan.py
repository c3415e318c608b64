from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from provisioner.cli import cli
from provisioner.core.regions import regions

REPO = Path(__file__).resolve().parents[2]
FINETUNE = str(REPO / "policies" / "spot-finetune.yaml")


def invoke(*args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(cli, list(args))
    return res.exit_code, res.stdout, res.stderr


def test_plan_spot_finetune_only_eea_and_under_the_cap() -> None:
    code, out, _ = invoke("plan", "--policy", FINETUNE, "--json", "--top", "200")
    assert code == 0
    doc = json.loads(out)
    assert doc["placements"], "the built-in catalog has EEA offers for a 7B LoRA job"
    for p in doc["placements"]:
        reg = regions()[(p["provider"], p["region"])]
        assert "EEA" in reg.jurisdictions, p
        assert p["price_per_hour"] <= 4.00  # budget.max_price_per_hour
        if p["market"] == "spot":
            assert p["bid_cap_per_hour"] is not None
            assert p["price_per_hour"] <= p["bid_cap_per_hour"] <= 1.20 * p["gpu_count"]
    assert doc["rejected"]["residency"] > 0 and doc["rejected"]["vram"] > 0
    keys = {
        "provider",
        "region",
        "zone",
        "instance_type",
        "gpu",
        "gpu_count",
        "market",
        "price_per_hour",
        "bid_cap_per_hour",
    }
    assert keys <= set(doc["placements"][0])


def test_plan_table_explains_rejections() -> None:
    code, out, _ = invoke("plan", "--policy", FINETUNE, "--top", "3")
    assert code == 0
    assert "Rejected" in out and "residency" in out and "e.g." in out
    assert "\x1b[" not in out  # NO_COLOR (set by conftest) and not a terminal


def test_plan_table_columns_line_up_and_a_pipe_gets_every_column(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "60")  # not a terminal: COLUMNS changes nothing
    code, out, _ = invoke("plan", "--policy", FINETUNE, "--top", "3")
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("#  provider  "))
    rows = lines[header + 1 : header + 4]
    assert code == 0 and [r.split()[0] for r in rows] == ["1", "2", "3"]
    # right-aligned numbers end under their header: the last column lines up
    assert {len(r) for r in rows} == {len(lines[header])}
    assert lines[header].rstrip().endswith("TFLOPS/USD") and "left out" not in out
    assert "…" not in out and "Rejected" in out
    # (a terminal's narrow screen: tests/cli/test_new_user.py, in a pseudo-terminal)


def test_nothing_eligible_exits_3_with_reasons(tmp_path: Path) -> None:
    pol = tmp_path / "p.yaml"
    pol.write_text("name: impossible\nmarket: spot\nbid_cap: {max_spot_price_per_hour: 0.0001}\n")
    code, out, _ = invoke("plan", "--policy", str(pol))
    assert code == 3
    assert "Nothing is eligible" in out and "bid_cap" in out
    code, out, _ = invoke("plan", "--policy", str(pol), "--json")
    assert code == 3 and json.loads(out)["placements"] == []


def test_bad_policy_exits_2_with_location(tmp_path: Path) -> None:
    pol = tmp_path / "p.yaml"
    pol.write_text("name: x\nbid_cap:\n  max_spot_price_per_gpu_hour: 0\n")
    code, _, err = invoke("plan", "--policy", str(pol))
    assert code == 2
    assert f"{pol}:3:32: bid_cap.max_spot_price_per_gpu_hour must be > 0" in err


def test_plan_reads_skypilot_layout_catalog(tmp_path: Path) -> None:
    cat = tmp_path / "vms.csv"
    cat.write_text(
        "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,SpotPrice,Region,AvailabilityZone\n"
        "g5.xlarge,A10G,1,4,16,1.2,0.45,eu-central-1,eu-central-1a\n"
        "g5.xlarge,A10G,1,4,16,1.0,0.30,us-east-1,us-east-1a\n"
    )
    code, out, _ = invoke(
        "plan", "--policy", FINETUNE, "--catalog", str(cat), "--provider", "aws", "--json"
    )
    assert code == 0
    doc = json.loads(out)
    assert [p["zone"] for p in doc["placements"]] == ["eu-central-1a", "eu-central-1a"]
    assert doc["rejected"] == {"residency": 2}


def test_bad_catalog_exits_2(tmp_path: Path) -> None:
    cat = tmp_path / "x.csv"
    cat.write_text("a,b\n1,2\n")
    code, _, err = invoke("plan", "--policy", FINETUNE, "--catalog", str(cat))
    assert code == 2 and "unknown catalog layout" in err


def test_catalog_show_filters() -> None:
    code, out, _ = invoke(
        "catalog", "show", "--gpu", "a100-80gb", "--provider", "gcp", "--json", "--limit", "0"
    )
    assert code == 0
    doc = json.loads(out)
    assert doc["total"] > 0
    assert all(o["gpu"] == "A100-80GB" and o["provider"] == "gcp" for o in doc["offers"])
    code, _, err = invoke("catalog", "show", "--gpu", "Z9000")
    assert code == 2 and "unknown GPU" in err


def test_policy_check_and_schema() -> None:
    code, out, _ = invoke("policy", "check", FINETUNE)
    assert code == 0 and "ok" in out
    code, out, _ = invoke("policy", "schema")
    assert code == 0 and json.loads(out)["title"] == "provisioner policy"


def test_every_command_has_help() -> None:
    from provisioner.cli import COMMANDS

    for name in COMMANDS:
        code, out, _ = invoke(name, "--help")
        assert code == 0 and "Usage:" in out, name


def test_python_api_plan() -> None:
    import provisioner

    result = provisioner.plan(FINETUNE)
    assert result.placements and result.rejected
    assert len(provisioner.Catalog.load()) > 1000


def test_import_is_light() -> None:
    code = (
        "import sys, provisioner, policies;"
        "bad=[m for m in ('numpy','sqlalchemy','boto3','rich') if m in sys.modules];"
        "print(','.join(bad))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == ""


def test_live_prices_override_the_catalog() -> None:
    from datetime import UTC, datetime

    from providers.base import PriceQuote
    from provisioner.core.catalog import Catalog

    cat = Catalog.from_offers(
        [
            __import__("provisioner.core.models", fromlist=["Offer"]).Offer(
                "aws", "eu-west-1", "eu-west-1a", "g5.xlarge", "A10G", 1, 4, 16, 1.0, 0.4
            ),
        ]
    )
    at = datetime(2026, 12, 1, tzinfo=UTC)
    live = cat.with_prices(
        [PriceQuote("aws", "eu-west-1", "eu-west-1a", "g5.xlarge", 0.25, None, at)]
    )
    o = live.offers[0]
    assert (o.spot_price, o.price, o.price_date) == (0.25, 1.0, "2026-12-01")
    regional = cat.with_prices([PriceQuote("aws", "eu-west-1", "", "g5.xlarge", 0.3, 1.1, at)])
    assert (regional.offers[0].spot_price, regional.offers[0].price) == (0.3, 1.1)


def test_plan_into_a_closed_pipe_stops_quietly() -> None:
    """`provisioner plan | true`: the reader goes away before the first line; no error line,
    exit 141 (SIGPIPE). (The reader closes before anything is written: a reader that waits for
    a first line races the writer, which may fit all of its output in the pipe's buffer.)"""
    import os
    import subprocess
    import sys
    from pathlib import Path

    policy = Path(__file__).resolve().parents[2] / "policies" / "spot-finetune.yaml"
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the command writes anything
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "provisioner", "plan", "--policy", str(policy)],
            stdout=write_end,
            stderr=subprocess.PIPE,
        )
    finally:
        os.close(write_end)
    assert proc.stderr is not None
    err = proc.stderr.read().decode()
    assert proc.wait(60) == 141, err
    assert "error" not in err and "Traceback" not in err
