"""Quota-aware planning: each cloud's GPU quotas read with its SDK (AWS Service Quotas on moto,
GCP ``regions.get`` and Azure's usage API on the HTTP fakes), cached in the store with their
age, `provisioner quotas` listing them, and `plan` rejecting offers beyond what is left with
reason ``quota`` and the quota's name."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from provisioner.cli import cli
from provisioner.control.store import Store
from provisioner.core.models import Market, Offer
from provisioner.core.quotas import ANY, GPU, VCPU, Quota, blocking, covers

REPO = Path(__file__).resolve().parents[2]
for extra in (REPO / "tests" / "contract", REPO / "tests"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))


def policy(tmp_path: Path, allow: str, gpus: str) -> Path:
    path = tmp_path / "p.yaml"
    path.write_text(
        f"""
name: quota-check
job:
  command: ["python", "train.py"]  # no compute_hours: quotas filter, no estimate to replay
resources:
  gpu_count: 1
  gpus: [{gpus}]
market: spot-then-on-demand
residency:
  allow: [{allow}]
checkpoint:
  uri: s3://bucket/ck
"""
    )
    return path


def run(*args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(cli, list(args))
    return res.exit_code, res.stdout, res.stderr


def plan_json(pol: Path, url: str) -> dict[str, Any]:
    code, out, err = run("plan", "--policy", str(pol), "--json", "--top", "500", "--store", url)
    assert code in (0, 3), err
    doc: dict[str, Any] = json.loads(out)
    return doc


def test_aws_quotas_through_service_quotas_then_plan_rejects_beyond_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Service Quotas (moto, EC2's codes added by tests/fakes/aws_quotas.py): P spot 0 vCPUs, G
    spot 8; `quotas --refresh` caches them, `quotas` lists them with their age, and `plan`
    keeps only G spot offers of at most 8 vCPUs in that region."""
    pytest.importorskip("moto")
    from fakes.aws_quotas import EC2_QUOTAS, install
    from harness_aws import ACCESS_KEY, REGION, SECRET, _endpoint, make_harness

    with make_harness():  # a reset moto: no instance of another test counts
        pass
    install()
    monkeypatch.setitem(EC2_QUOTAS, "L-3819A6DF", ("All G and VT Spot Instance Requests", 8.0))
    monkeypatch.setitem(EC2_QUOTAS, "L-DB2E81BA", ("Running On-Demand G and VT instances", 4.0))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    url = f"sqlite:///{tmp_path / 's.db'}"
    code, out, err = run(
        "quotas",
        "--refresh",
        "--provider",
        "aws",
        "-o",
        f"region={REGION}",
        "-o",
        f"endpoint={_endpoint()}",
        "--store",
        url,
        "--json",
    )
    assert code == 0, err
    rows = {q["name"]: q for q in json.loads(out)["quotas"]}
    assert rows["L-7212CCBC"]["limit"] == 0 and rows["L-7212CCBC"]["market"] == "spot"
    assert rows["L-3819A6DF"]["remaining"] == 8 and rows["L-3819A6DF"]["families"] == ["g", "vt"]
    assert rows["L-417A185B"]["note"] == "Running On-Demand P instances"
    assert all(q["age_s"] is not None and q["age_s"] < 600 for q in rows.values())

    code, text, _ = run("quotas", "--store", url)
    assert code == 0 and "L-7212CCBC" in text and "All P Spot Instance Requests" in text

    doc = plan_json(policy(tmp_path, "US", "A10G, A100, H100, L4, T4"), url)
    assert doc["rejected"].get("quota", 0) > 0
    assert any("L-7212CCBC" in e or "L-3819A6DF" in e for e in doc["rejected_examples"]["quota"])
    here = [p for p in doc["placements"] if p["provider"] == "aws" and p["region"] == REGION]
    spot = [p for p in here if p["market"] == "spot"]
    assert spot, "some G spot offer fits in 8 vCPUs"
    assert all(p["instance_type"].startswith("g") and p["vcpus"] <= 8 for p in spot)
    on_demand_g = [p for p in here if p["market"] == "on-demand" and p["instance_type"][0] == "g"]
    assert all(p["vcpus"] <= 4 for p in on_demand_g)

    # G types only, under spot-then-on-demand: a spot candidate is refused by the spot quota,
    # never by the on-demand one its row's other candidate meets
    doc = plan_json(policy(tmp_path, "US", "A10G, L4, T4"), url)
    examples = doc["rejected_examples"]["quota"]
    spot_ex = [e for e in examples if " spot " in e]
    assert spot_ex and all("L-3819A6DF" in e and "L-DB2E81BA" not in e for e in spot_ex)


def test_aws_usage_is_counted_from_the_running_instances(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On moto, the account runs G spot (g5.2xlarge + g5.xlarge: 12 vCPUs), G on-demand
    (2 x g4dn.xlarge: 8; a stopped g5.xlarge holds none) and P on-demand (p4d.24xlarge: 96).
    `quotas --refresh` counts them per quota, says the usage is counted and live, and `plan`
    keeps only G spot offers that fit in the 4 vCPUs left of 16. Without permission to
    describe instances the limits stay alone, the whole of each left, and it says so."""
    pytest.importorskip("moto")
    import boto3
    from fakes.aws_quotas import EC2_QUOTAS, install
    from harness_aws import ACCESS_KEY, REGION, SECRET, make_harness

    install()
    monkeypatch.setitem(EC2_QUOTAS, "L-3819A6DF", ("All G and VT Spot Instance Requests", 16.0))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    url = f"sqlite:///{tmp_path / 's.db'}"
    with make_harness() as h:
        ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=h.endpoint)
        image = h._moto_image()
        spot = {"MarketType": "spot", "SpotOptions": {"SpotInstanceType": "one-time"}}

        def run_(itype: str, n: int = 1, **kw: Any) -> list[str]:
            got = ec2.run_instances(ImageId=image, MinCount=n, MaxCount=n, InstanceType=itype, **kw)
            return [i["InstanceId"] for i in got["Instances"]]

        run_("g5.2xlarge", InstanceMarketOptions=spot)
        run_("g5.xlarge", InstanceMarketOptions=spot)
        run_("g4dn.xlarge", 2)
        run_("p4d.24xlarge")
        ec2.stop_instances(InstanceIds=run_("g5.xlarge"))
        ec2.close()
        code, out, err = run(
            "quotas", "--refresh", "--provider", "aws", "-o", f"region={REGION}",
            "-o", f"endpoint={h.endpoint}", "--store", url, "--json",
        )  # fmt: skip
        assert code == 0, err
        rows = {q["name"]: q for q in json.loads(out)["quotas"]}
        used = {name: (q["used"], q["remaining"]) for name, q in rows.items()}
        assert used == {
            "L-3819A6DF": (12, 4),
            "L-DB2E81BA": (8, 56),
            "L-7212CCBC": (0, 0),
            "L-417A185B": (96, 288),
        }
        assert all(
            q["source"] == "counted" and q["live"] == ["limit", "used"] for q in rows.values()
        )
        code, text, _ = run("quotas", "--store", url)
        assert code == 0 and "limit, used (counted)" in text
        assert "counted from the account's running instances" in text

        doc = plan_json(policy(tmp_path, "US", "A10G, L4, T4"), url)
        mine = [p for p in doc["placements"] if p["provider"] == "aws" and p["region"] == REGION]
        spot_here = [p for p in mine if p["market"] == "spot"]
        assert spot_here and all(p["vcpus"] <= 4 for p in spot_here)
        assert any("4 of 16 left" in e for e in doc["rejected_examples"]["quota"])

        h.inject_error("UnauthorizedOperation", operation="list")
        provider = h.provider()
        blind = provider.quotas([REGION])
        provider.close()
    assert blind and all(q.used is None and q.origin == "limit" for q in blind)
    assert {q.name: q.remaining for q in blind}["L-3819A6DF"] == 16


def test_gcp_regional_gpu_quotas_reject_spot_beyond_the_preemptible_quota(tmp_path: Path) -> None:
    pytest.importorskip("google.cloud.compute_v1")
    from harness_gcp import ZONE, make_harness

    region = ZONE.rsplit("-", 1)[0]
    with make_harness() as h:
        h.server.region_quotas[region] = [
            {"metric": "CPUS", "limit": 24, "usage": 0},
            {"metric": "NVIDIA_L4_GPUS", "limit": 8, "usage": 0},
            {"metric": "PREEMPTIBLE_NVIDIA_L4_GPUS", "limit": 1, "usage": 1},
            {"metric": "NVIDIA_T4_GPUS", "limit": 0, "usage": 0},
        ]
        provider = h.provider()
        read = provider.quotas([region])
        provider.close()
        assert any(r.path.endswith(f"/regions/{region}") for r in h.server.requests)
    by = {q.name: q for q in read}
    assert set(by) == {"NVIDIA_L4_GPUS", "PREEMPTIBLE_NVIDIA_L4_GPUS", "NVIDIA_T4_GPUS"}
    assert by["PREEMPTIBLE_NVIDIA_L4_GPUS"].remaining == 0
    assert by["NVIDIA_T4_GPUS"].market == ANY  # no preemptible quota: Spot uses the standard one
    url = f"sqlite:///{tmp_path / 's.db'}"
    store = Store(url)
    store.save_quotas(read, replace="gcp")
    store.close()
    doc = plan_json(policy(tmp_path, "US", "L4, T4"), url)
    mine = [p for p in doc["placements"] if p["provider"] == "gcp" and p["region"] == region]
    assert mine and all(p["gpu"] == "L4" and p["market"] == "on-demand" for p in mine)
    examples = " ".join(doc["rejected_examples"]["quota"])
    assert "PREEMPTIBLE_NVIDIA_L4_GPUS" in examples or "NVIDIA_T4_GPUS" in examples


def test_azure_usages_reject_spot_beyond_low_priority_cores(tmp_path: Path) -> None:
    pytest.importorskip("azure.mgmt.compute")
    from harness_azure import REGION, make_harness

    with make_harness() as h:
        h.server.usages[REGION] = [
            {
                "unit": "Count",
                "currentValue": 0,
                "limit": 0,
                "name": {
                    "value": "lowPriorityCores",
                    "localizedValue": "Total Regional Low-priority vCPUs",
                },
            },
            {
                "unit": "Count",
                "currentValue": 0,
                "limit": 1000,
                "name": {"value": "cores", "localizedValue": "Total Regional vCPUs"},
            },
            {
                "unit": "Count",
                "currentValue": 2,
                "limit": 2500,
                "name": {"value": "availabilitySets", "localizedValue": "Availability Sets"},
            },
        ]
        provider = h.provider()
        read = provider.quotas([REGION])
        provider.close()
    assert {q.name for q in read} == {"lowPriorityCores", "cores"}
    url = f"sqlite:///{tmp_path / 's.db'}"
    store = Store(url)
    store.save_quotas(read, replace="azure")
    store.close()
    doc = plan_json(policy(tmp_path, "US", "A10G, A100, H100, L4, T4, V100, A10"), url)
    mine = [p for p in doc["placements"] if p["provider"] == "azure" and p["region"] == REGION]
    assert all(p["market"] == "on-demand" for p in mine)
    assert any("lowPriorityCores" in e for e in doc["rejected_examples"]["quota"])


def _offer(provider: str, itype: str, gpu: str, vcpus: float, region: str = "r1") -> Offer:
    return Offer(provider, region, f"{region}a", itype, gpu, 1, vcpus, 64, 1.0, 0.4)


def test_which_offers_a_quota_covers() -> None:
    at = datetime(2026, 12, 5, tzinfo=UTC)
    p_spot = Quota("aws", "r1", "L-7212CCBC", VCPU, 96, None, "spot", ("p",), at)
    g = _offer("aws", "g5.xlarge", "A10G", 4)
    p4 = _offer("aws", "p4d.24xlarge", "A100", 96)
    assert covers(p_spot, p4, Market.SPOT) and not covers(p_spot, p4, Market.ON_DEMAND)
    assert not covers(p_spot, g, Market.SPOT)
    assert blocking([p_spot], p4, Market.SPOT) is None  # 96 of 96
    assert blocking([p_spot], p4, Market.SPOT, nodes=2) is p_spot
    fam = Quota(
        "azure", "r1", "standardNCADSA100v4Family", VCPU, 24, 0, "on-demand",
        ("standardNCADSA100v4Family",), at,
    )  # fmt: skip
    nc = _offer("azure", "Standard_NC24ads_A100_v4", "A100-80GB", 24)
    assert covers(fam, nc, Market.ON_DEMAND) and blocking([fam], nc, Market.ON_DEMAND) is None
    gpus = Quota("gcp", "r1", "NVIDIA_A100_80GB_GPUS", GPU, 0, 0, "on-demand", ("NVIDIA_A100_80GB_GPUS",), at)  # fmt: skip
    a2 = _offer("gcp", "a2-ultragpu-1g", "A100-80GB", 12)
    assert blocking([gpus], a2, Market.ON_DEMAND) is gpus
    assert blocking([gpus], a2, Market.SPOT) is None  # a standard-only quota: on-demand


def test_alibaba_vcpu_quotas_reject_spot_beyond_what_is_left(tmp_path: Path) -> None:
    """DescribeAccountAttributes on the fake: 4 spot vCPUs left; only spot offers of at most 4
    vCPUs stay in the region."""
    pytest.importorskip("alibabacloud_ecs20140526")
    from harness_alibaba import make_harness

    with make_harness() as h:
        h.server.account_attributes["max-spot-instance-vcpu-count"] = "16"
        h.server.account_attributes["used-spot-instance-vcpu-count"] = "12"
        provider = h.provider()
        read = provider.quotas()
        provider.close()
        region = h.server.region
        sent = [r.params for r in h.server.requests if r.action == "DescribeAccountAttributes"]
    assert sent and "max-spot-instance-vcpu-count" in sent[0].values()
    spot = next(q for q in read if q.market == "spot")
    assert (spot.name, spot.remaining) == ("max-spot-instance-vcpu-count", 4)
    url = f"sqlite:///{tmp_path / 's.db'}"
    store = Store(url)
    store.save_quotas(read, replace="alibaba")
    store.close()
    doc = plan_json(policy(tmp_path, "CN", "P100, T4, A10, V100"), url)
    mine = [p for p in doc["placements"] if p["provider"] == "alibaba" and p["region"] == region]
    assert all(p["vcpus"] <= 4 for p in mine if p["market"] == "spot")
    assert any("max-spot-instance-vcpu-count" in e for e in doc["rejected_examples"]["quota"])


def test_tencent_zone_quotas_reject_a_zone_without_spot_left(tmp_path: Path) -> None:
    """DescribeAccountQuota on the fake: no spot instance left in one zone; that zone's spot
    offers are rejected, the others stay."""
    pytest.importorskip("tencentcloud.cvm")
    from harness_tencent import make_harness

    with make_harness() as h:
        full = h.server.zones[0]
        for row in h.server.account_quota["SpotPaidQuotaSet"]:
            if row["Zone"] == full:
                row.update(UsedQuota=30, RemainingQuota=0)
        provider = h.provider()
        read = provider.quotas()
        provider.close()
    url = f"sqlite:///{tmp_path / 's.db'}"
    store = Store(url)
    store.save_quotas(read, replace="tencent")
    store.close()
    doc = plan_json(policy(tmp_path, "CN", "V100, V100-32GB, T4, A10, A100"), url)
    tencent = [p for p in doc["placements"] if p["provider"] == "tencent"]
    assert not [p for p in tencent if p["zone"] == full and p["market"] == "spot"]
    assert any(f"SpotPaidQuota:{full}" in e for e in doc["rejected_examples"]["quota"])


def test_each_markets_candidates_are_judged_against_their_own_quota() -> None:
    """Under spot-then-on-demand a row is two candidates: its spot one meets the spot quota
    (L-3819A6DF), its on-demand one the on-demand quota (L-DB2E81BA); each rejection names
    its own (the reason of one used to be kept by row position, shared by both markets)."""
    from policies import parse_policy
    from provisioner.core.catalog import Catalog
    from provisioner.core.planner import PlanContext, plan_offers

    at = datetime(2026, 12, 5, tzinfo=UTC)
    quotas = (
        Quota("aws", "us-east-1", "L-DB2E81BA", VCPU, 0, None, "on-demand", ("g", "vt"), at),
        Quota("aws", "us-east-1", "L-3819A6DF", VCPU, 0, None, "spot", ("g", "vt"), at),
    )
    offers = [
        Offer("aws", "us-east-1", f"us-east-1{z}", "g5.xlarge", "A10G", 1, 4, 16, 1.0, 0.4)
        for z in "ab"
    ]
    pol = parse_policy("market: spot-then-on-demand\nresources: {gpus: [A10G]}\n")
    plan = plan_offers(
        pol, Catalog.from_offers(offers), PlanContext(now=at, quotas=quotas), top=None
    )
    assert plan.placements == [] and plan.rejected == {"quota": 4}
    examples = plan.rejections["quota"].examples
    spot = [e for e in examples if " spot " in e]
    on_demand = [e for e in examples if " on-demand " in e]
    assert spot and all("L-3819A6DF" in e and "L-DB2E81BA" not in e for e in spot)
    assert len(spot) + len(on_demand) == len(examples)
    assert all("L-DB2E81BA" in e and "L-3819A6DF" not in e for e in on_demand)


def _azure_gpu_sizes() -> set[str]:
    """Every Azure GPU size of the bundled catalog, and of SkyPilot's Azure catalog where the
    shared data is here (its GPU rows: those naming an accelerator)."""
    import csv

    from provisioner.catalog_files import builtin_catalog

    sizes = {o.instance_type for o in builtin_catalog().offers if o.provider == "azure"}
    shared = REPO.parent / "shared" / "data" / "catalog" / "azure_skypilot_v6_gpu.csv"
    if shared.exists():
        with shared.open() as fh:
            sizes |= {r["InstanceType"] for r in csv.DictReader(fh) if r["AcceleratorName"]}
    return sizes


def test_every_azure_gpu_size_in_the_catalog_maps_to_its_usage_family() -> None:
    """Microsoft.Compute/skus' ``family`` of each size, the name its vCPUs are counted under;
    the issue's four sizes by name, then every GPU size the catalogs hold."""
    from providers.azure.quotas import USAGE_FAMILIES, usage_family
    from provisioner.core.quotas import azure_family_key

    assert usage_family("Standard_NC4as_T4_v3") == "standardNCASv3_T4Family"
    assert usage_family("Standard_ND96asr_v4") == "standardNDASv4_A100Family"
    assert usage_family("Standard_ND96isr_H100_v5") == "standardNDSH100v5Family"
    assert usage_family("Standard_NC24rs_v3") == "standardNCSv3Family"
    assert usage_family("Standard_NCC40ads_H100_v5") == "standardNCCads2023Family"
    sizes = _azure_gpu_sizes()
    assert len(sizes) >= 16
    missing = sorted(s for s in sizes if usage_family(s) is None)
    assert missing == [], f"no usage family for {missing}"
    # one series, one family: no size of the table is claimed by two families
    seen: dict[str, str] = {}
    for name, members in USAGE_FAMILIES.items():
        for size in members:
            assert seen.setdefault(azure_family_key(size), name) == name, size


def test_azure_family_quotas_hold_each_size_to_its_own_family(tmp_path: Path) -> None:
    """The usage API on the fake answers the T4, ND A100 and ND H100 families by their usage
    names (T4: none left; the others: plenty); on-demand T4 sizes are rejected naming
    standardNCASv3_T4Family, Spot ones (lowPriorityCores) stay, and the others stay."""
    pytest.importorskip("azure.mgmt.compute")
    from harness_azure import REGION, make_harness

    def usage(name: str, local: str, used: float, limit: float) -> dict[str, Any]:
        value = {"value": name, "localizedValue": local}
        return {"unit": "Count", "currentValue": used, "limit": limit, "name": value}

    with make_harness() as h:
        h.server.usages[REGION] = [
            usage("standardNCASv3_T4Family", "Standard NCASv3_T4 Family vCPUs", 60, 64),
            usage("standardNDASv4_A100Family", "Standard NDASv4_A100 Family vCPUs", 0, 960),
            usage("standardNDSH100v5Family", "Standard NDSH100v5 Family vCPUs", 0, 960),
            usage("lowPriorityCores", "Total Regional Low-priority vCPUs", 0, 1000),
            usage("cores", "Total Regional vCPUs", 0, 2000),
        ]
        provider = h.provider()
        read = provider.quotas([REGION])
        provider.close()
    t4 = next(q for q in read if q.name == "standardNCASv3_T4Family")
    assert (t4.market, t4.remaining) == ("on-demand", 4)
    url = f"sqlite:///{tmp_path / 's.db'}"
    store = Store(url)
    store.save_quotas(read, replace="azure")
    store.close()
    doc = plan_json(policy(tmp_path, "US", "T4, A100, H100"), url)
    mine = [p for p in doc["placements"] if p["provider"] == "azure" and p["region"] == REGION]
    t4_on_demand = [
        p for p in mine if p["gpu"] == "T4" and p["market"] == "on-demand" and p["vcpus"] > 4
    ]
    assert t4_on_demand == []
    assert any(p["gpu"] == "T4" and p["market"] == "spot" and p["vcpus"] > 4 for p in mine)
    examples = " ".join(doc["rejected_examples"].get("quota", []))
    assert "standardNCASv3_T4Family" in examples
    assert "standardNDSH100v5Family" not in examples and "NDASv4" not in examples


def test_where_each_quotas_figures_come_from_survives_the_store(tmp_path: Path) -> None:
    """A refused launch's row has no live figure; a counted AWS row, a cloud's own usage and a
    bare limit keep what they are through the store, and `quotas --json` says so."""
    from provisioner.core.quotas import FROM_COUNT, refused_at_launch

    at = datetime(2026, 12, 5, tzinfo=UTC)
    offer = _offer("aws", "p4d.24xlarge", "A100", 96)
    refused = refused_at_launch(offer, Market.SPOT, "VcpuLimitExceeded", at)
    rows = [
        refused,
        Quota("aws", "r1", "L-3819A6DF", VCPU, 16, 12, "spot", ("g", "vt"), at, source=FROM_COUNT),
        Quota("gcp", "r1", "NVIDIA_L4_GPUS", GPU, 8, 1, "on-demand", ("NVIDIA_L4_GPUS",), at),
        Quota("aws", "r2", "L-7212CCBC", VCPU, 0, None, "spot", ("p",), at),
    ]
    url = f"sqlite:///{tmp_path / 's.db'}"
    store = Store(url)
    store.save_quotas(rows)
    back = {(q.region, q.name): q for q in store.quotas()}
    store.close()
    assert {k: (q.origin, q.live) for k, q in back.items()} == {
        ("r1", refused.name): ("launch", ()),
        ("r1", "L-3819A6DF"): ("counted", ("limit", "used")),
        ("r1", "NVIDIA_L4_GPUS"): ("cloud", ("limit", "used")),
        ("r2", "L-7212CCBC"): ("limit", ("limit",)),
    }
    code, out, err = run("quotas", "--store", url, "--json")
    assert code == 0, err
    live = {q["name"]: q["live"] for q in json.loads(out)["quotas"]}
    assert live[refused.name] == [] and live["L-3819A6DF"] == ["limit", "used"]
