"""Availability priors: each cloud's figures read with its SDK over the wire (AWS placement
scores on tests/fakes/aws_spot_scores.py in front of moto, AWS spot price history on moto,
Azure Resource Graph and Alibaba DescribeSpotAdvice on their HTTP fakes), cached in the store
with their age, `provisioner priors` listing them, and `plan` ranking a zone by its prior; with
no prior known, plans are what they were."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from provisioner.cli import cli
from provisioner.control.store import Store
from provisioner.core.zone_priors import (
    EVICTION_RATE,
    PLACEMENT_SCORE,
    PRICE_VOLATILITY,
    SPOT_ADVICE,
    ZonePrior,
)

REPO = Path(__file__).resolve().parents[2]
for extra in (REPO / "tests" / "contract", REPO / "tests"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))


def run(*args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(cli, list(args))
    return res.exit_code, res.stdout, res.stderr


def test_aws_placement_scores_and_price_history_on_the_wire(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`priors --refresh --provider aws`: GetSpotPlacementScores (the fake, paged) with one
    instance type, capacity 1, a single zone and the region asked; the zone ids turned into
    the account's zone names (DescribeAvailabilityZones, moto); DescribeSpotPriceHistory
    (moto) over the last days; then the cache lists them with their age."""
    pytest.importorskip("moto")
    import boto3
    from fakes.aws_spot_scores import AwsSpotScores
    from harness_aws import ACCESS_KEY, REGION, SECRET, _endpoint

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=_endpoint())
    zones = ec2.describe_availability_zones()["AvailabilityZones"][:3]
    ids = {z["ZoneId"]: z["ZoneName"] for z in zones}
    (id_a, id_b, id_c) = list(ids)
    url = f"sqlite:///{tmp_path / 's.db'}"
    with AwsSpotScores(_endpoint()) as fake:
        fake.scores = {
            (REGION, id_a, "g5.xlarge"): 9,
            (REGION, id_b, "g5.xlarge"): 2,
            (REGION, id_c, "g5.xlarge"): 5,
            (REGION, id_a, "p4d.24xlarge"): 3,
            ("eu-west-1", "euw1-az1", "g5.xlarge"): 10,  # a region not asked
        }
        code, out, err = run(
            "priors", "--refresh", "--provider", "aws",
            "-o", f"region={REGION}", "-o", f"endpoint={fake.endpoint}",
            "--instance-type", "g5.xlarge", "--instance-type", "p4d.24xlarge",
            "--store", url, "--json",
        )  # fmt: skip
        assert code == 0, err
        asked = fake.asked("GetSpotPlacementScores")
        history = fake.asked("DescribeSpotPriceHistory")
    # the requests as EC2 receives them (the query protocol's flattened members)
    first = [f for f in asked if "NextToken" not in f]
    assert {f["InstanceType.1"] for f in first} == {"g5.xlarge", "p4d.24xlarge"}
    for form in asked:
        assert form["TargetCapacity"] == "1" and form["TargetCapacityUnitType"] == "units"
        assert form["SingleAvailabilityZone"] == "true"
        assert form["RegionName.1"] == REGION and "RegionName.2" not in form
        assert "InstanceType.2" not in form
    assert len(asked) > len(first), "three g5 zones at two a page: the pages are walked"
    assert history and history[0]["ProductDescription.1"] == "Linux/UNIX"
    start = datetime.fromisoformat(history[0]["StartTime"].replace("Z", "+00:00"))
    assert timedelta(days=6) < datetime.now(UTC) - start < timedelta(days=8)
    assert {v for k, v in history[0].items() if k.startswith("InstanceType.")} == {
        "g5.xlarge", "p4d.24xlarge",
    }  # fmt: skip

    rows = json.loads(out)["priors"]
    scores = {(r["zone"], r["instance_type"]): r for r in rows if r["kind"] == PLACEMENT_SCORE}
    assert set(scores) == {
        (ids[id_a], "g5.xlarge"), (ids[id_b], "g5.xlarge"), (ids[id_c], "g5.xlarge"),
        (ids[id_a], "p4d.24xlarge"),
    }  # fmt: skip
    assert scores[(ids[id_a], "g5.xlarge")]["value"] == 9
    assert scores[(ids[id_a], "g5.xlarge")]["risk"] == 0.025
    assert scores[(ids[id_b], "g5.xlarge")]["risk"] == 0.25
    assert scores[(ids[id_a], "g5.xlarge")]["label"] == id_a
    # moto quotes one price per zone: no volatility can be measured from one
    assert not [r for r in rows if r["kind"] == PRICE_VOLATILITY]

    code, out, _ = run("priors", "--store", url, "--json", "--instance-type", "g5.xlarge")
    cached = json.loads(out)["priors"]
    assert code == 0 and len(cached) == 3
    assert all(r["age_s"] is not None and 0 <= r["age_s"] < 600 for r in cached)
    code, text, _ = run("priors", "--store", url)
    assert code == 0 and "placement score 9" in text and ids[id_b] in text
    assert "\x1b[" not in text  # NO_COLOR (set by conftest) and not a terminal


def test_azure_eviction_rates_through_resource_graph(tmp_path: Path) -> None:
    """Resource Graph (the SDK's ResourceGraphClient on the Azure fake): the query names the
    SpotResources table, the eviction rate type, the location and the sizes; the pages are
    walked by $skipToken; each band reads as its monthly risk."""
    pytest.importorskip("azure.mgmt.resourcegraph")
    from fakes.azure_graph import spot_row
    from harness_azure import REGION, make_harness

    sizes = ["Standard_NC4as_T4_v3", "Standard_NC24ads_A100_v4", "Standard_NV36ads_A10_v5"]
    with make_harness() as h:
        h.server.spot_resources = [
            spot_row("standard_nc4as_t4_v3", REGION, "0-5"),
            spot_row("standard_nc24ads_a100_v4", REGION, "20+"),
            spot_row("standard_nv36ads_a10_v5", REGION, "10-15"),
            spot_row("standard_nc4as_t4_v3", "westeurope", "5-10"),  # not asked
            spot_row("standard_nd40rs_v2", REGION, "15-20"),  # not asked
        ]
        provider = h.provider()
        read = provider.priors([REGION], sizes)
        provider.close()
        posts = [r for r in h.server.requests if "ResourceGraph" in r.path]
    assert len(posts) == 2  # three rows at two a page
    body = posts[0].body
    assert posts[0].query["api-version"] == "2021-03-01"
    assert body["subscriptions"] == [h.server.subscription_id]
    q = body["query"]
    assert q.lower().startswith("spotresources")
    assert "type =~ 'microsoft.compute/skuspotevictionrate/location'" in q
    assert f"'{REGION}'" in q and "'standard_nc24ads_a100_v4'" in q
    assert posts[1].body["options"]["$skipToken"] == "2"
    by = {p.instance_type: p for p in read}
    assert set(by) == set(sizes)  # the sizes as asked, not as the table spells them
    assert all(p.kind == EVICTION_RATE and p.region == REGION and p.zone == "" for p in read)
    assert (by[sizes[0]].label, by[sizes[0]].value) == ("0-5", 0.025)
    assert by[sizes[1]].value == 0.25 and by[sizes[2]].value == 0.125


def test_alibaba_spot_advice_per_zone(tmp_path: Path) -> None:
    """DescribeSpotAdvice on the fake: the region and at most ten types a call; each zone's
    30-day interruption rate kept as it is; cached and listed."""
    pytest.importorskip("alibabacloud_ecs20140526")
    from harness_alibaba import make_harness

    types = [f"ecs.gn7i-c{n}g1.2xlarge" for n in range(12)]
    with make_harness() as h:
        zone_h, zone_i = h.server.zones[0], h.server.zones[1]
        h.server.spot_advice = {
            (zone_h, types[0]): (0.03, "0-5%"),
            (zone_i, types[0]): (0.22, "20%+"),
            (zone_h, types[11]): (0.08, "5-10%"),
        }
        provider = h.provider()
        read = provider.priors(None, types)
        provider.close()
        sent = [r.params for r in h.server.requests if r.action == "DescribeSpotAdvice"]
    assert len(sent) == 2  # twelve types: ten, then two
    assert all(p["RegionId"] == h.server.region for p in sent)
    firsts = sorted(v for k, v in sent[0].items() if k.startswith("InstanceTypes."))
    assert len(firsts) == 10 and types[0] in firsts
    by = {(p.zone, p.instance_type): p for p in read}
    assert set(by) == {(zone_h, types[0]), (zone_i, types[0]), (zone_h, types[11])}
    assert by[(zone_h, types[0])].value == 0.03 and by[(zone_h, types[0])].label == "0-5%"
    assert all(p.kind == SPOT_ADVICE for p in read)
    url = f"sqlite:///{tmp_path / 's.db'}"
    store = Store(url)
    store.save_priors(read, replace="alibaba")
    store.save_priors(read[:1], replace="alibaba")  # a refresh replaces the provider's rows
    assert len(store.priors("alibaba")) == 1
    store.close()
    code, out, _ = run("priors", "--store", url, "--json", "--provider", "alibaba")
    assert code == 0 and json.loads(out)["priors"][0]["kind"] == SPOT_ADVICE


def test_the_command_without_a_store_and_for_clouds_that_publish_none(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'none.db'}"
    code, out, _ = run("priors", "--store", url, "--json")
    assert code == 0 and json.loads(out) == {"priors": []}
    code, text, _ = run("priors", "--store", url)
    assert code == 0 and "priors --refresh --provider NAME" in text
    for cloud in ("gcp", "tencent"):
        code, _, err = run("priors", "--refresh", "--provider", cloud, "--store", url)
        assert code == 2 and "publishes no" in err and "Traceback" not in err
    code, _, err = run("priors", "--refresh", "--store", url)
    assert code == 2 and "--provider" in err
    code, _, err = run("priors", "-o", "region=x", "--store", url)
    assert code == 2 and "--refresh" in err


# -- what the priors change ---------------------------------------------------------------------

CATALOG = """provider,region,zone,instance_type,gpu,gpu_count,vcpus,memory_gib,price,spot_price,price_date,interruption_band
aws,us-east-1,us-east-1a,g5.xlarge,A10G,1,4,16,1.006,0.40,2026-12-01,
aws,us-east-1,us-east-1b,g5.xlarge,A10G,1,4,16,1.006,0.40,2026-12-01,
aws,us-east-1,us-east-1c,g5.xlarge,A10G,1,4,16,1.006,0.40,2026-12-01,
"""


def _policy(tmp_path: Path) -> Path:
    path = tmp_path / "p.yaml"
    path.write_text(
        """
name: priors
job:
  command: ["python", "train.py"]
  compute_hours: 4
  reference_gpu: A10G
resources:
  gpus: [A10G]
market: spot-then-on-demand
checkpoint:
  uri: s3://bucket/ck
"""
    )
    return path


def _plan(tmp_path: Path, url: str) -> dict[str, Any]:
    cat = tmp_path / "offers.csv"
    cat.write_text(CATALOG)
    code, out, err = run(
        "plan", "--policy", str(_policy(tmp_path)), "--catalog", str(cat),
        "--json", "--store", url,
    )  # fmt: skip
    assert code == 0, err
    doc: dict[str, Any] = json.loads(out)
    return doc


def _spot_zones(doc: dict[str, Any]) -> list[str]:
    return [p["zone"] for p in doc["placements"] if p["market"] == "spot"]


def _without_ages(doc: dict[str, Any]) -> list[dict[str, Any]]:
    drop = {"price_age_days", "price_at"}
    return [{k: v for k, v in p.items() if k not in drop} for p in doc["placements"]]


def test_a_zone_with_score_9_ranks_above_an_equal_price_zone_with_score_2(tmp_path: Path) -> None:
    at = datetime.now(UTC)
    bare = _plan(tmp_path, f"sqlite:///{tmp_path / 'none.db'}")
    empty_url = f"sqlite:///{tmp_path / 'empty.db'}"
    Store(empty_url).close()
    empty = _plan(tmp_path, empty_url)
    assert _without_ages(empty) == _without_ages(bare)  # no prior known: the same plan
    assert _spot_zones(bare)[:2] == ["us-east-1a", "us-east-1b"]  # equal: catalog order

    url = f"sqlite:///{tmp_path / 's.db'}"
    store = Store(url)
    store.save_priors(
        [
            ZonePrior("aws", "us-east-1", "us-east-1a", "g5.xlarge", PLACEMENT_SCORE, 2, "use1-az1", at),
            ZonePrior("aws", "us-east-1", "us-east-1b", "g5.xlarge", PLACEMENT_SCORE, 9, "use1-az2", at),
        ]
    )  # fmt: skip
    store.close()
    doc = _plan(tmp_path, url)
    zones = _spot_zones(doc)
    assert zones.index("us-east-1b") < zones.index("us-east-1c") < zones.index("us-east-1a")
    spot = {p["zone"]: p for p in doc["placements"] if p["market"] == "spot"}
    assert spot["us-east-1b"]["price_per_hour"] == spot["us-east-1a"]["price_per_hour"]
    # the estimate's prior follows: a zone at score 9 expects fewer interruptions than at 2
    est_b, est_a = spot["us-east-1b"]["estimate"], spot["us-east-1a"]["estimate"]
    assert est_b["restarts"] < est_a["restarts"]
    assert "placement score 9" in est_b["prior"] and "placement score 2" in est_a["prior"]
