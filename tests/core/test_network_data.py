"""provisioner/data/network.csv: one row of network and GPU-link facts per GPU instance type of
the built-in catalog, in the layout parse_network reads, each row naming its source."""

from __future__ import annotations

import csv
from datetime import UTC, datetime
from pathlib import Path

import pytest

from policies import load_policy
from provisioner.catalog_files import builtin_catalog, read_network
from provisioner.core.network import COLUMNS, NetworkFacts, parse_network
from provisioner.core.planner import PlanContext, plan_offers

ROOT = Path(__file__).resolve().parents[1].parent
FILE = ROOT / "provisioner" / "data" / "network.csv"

#: Instance types of the built-in catalog that may have no row, and why. Empty: all have one.
NO_ROW: dict[tuple[str, str], str] = {}

#: Rows for types the built-in catalog does not list (yet), and why they are there.
EXTRA_ROWS = {
    (
        "aws",
        "p5e.48xlarge",
    ): "in the shared AWS snapshots (SkyPilot v8, ec2instances.info), not in offers.csv",
}


@pytest.fixture(scope="module")
def table() -> dict[tuple[str, str], NetworkFacts]:
    return read_network()


def test_parse_network_accepts_the_file() -> None:
    with FILE.open(newline="", encoding="utf-8") as fh:
        header = next(csv.reader(fh))
    assert tuple(header) == COLUMNS
    with FILE.open(newline="", encoding="utf-8") as fh:
        parsed = parse_network(fh, str(FILE))
    with FILE.open(newline="", encoding="utf-8") as fh:
        assert len(parsed) == sum(1 for _ in csv.DictReader(fh))  # no row lost or merged


def test_every_gpu_instance_type_of_the_builtin_catalog_has_a_row(
    table: dict[tuple[str, str], NetworkFacts],
) -> None:
    types = {(o.provider, o.instance_type) for o in builtin_catalog().offers if o.gpu_count > 0}
    missing = sorted(types - table.keys() - NO_ROW.keys())
    assert not missing, f"no network row for {missing}"
    unknown = sorted(table.keys() - types - EXTRA_ROWS.keys())
    assert not unknown, f"rows for types the catalog does not know (a typo?): {unknown}"


def test_every_row_names_its_source_and_says_up_to_where_the_cloud_does(
    table: dict[tuple[str, str], NetworkFacts],
) -> None:
    for key, f in table.items():
        assert f.provider in {"aws", "gcp", "azure", "alibaba", "tencent"}, key
        assert len(f.source) > 20, key
    assert "up to 10 Gbps" in table[("aws", "g5.xlarge")].source
    assert "up to" not in table[("aws", "g5.12xlarge")].source  # "40 Gigabit", no "up to"


def test_known_facts(table: dict[tuple[str, str], NetworkFacts]) -> None:
    def facts(provider: str, itype: str) -> tuple[float | None, str, str]:
        f = table[(provider, itype)]
        return f.network_gbps, f.fabric, f.intra_node

    assert facts("aws", "p5.48xlarge") == (3200, "efa", "nvswitch")
    assert facts("aws", "p4d.24xlarge") == (400, "efa", "nvswitch")
    assert facts("aws", "g5.xlarge") == (10, "", "pcie")
    assert facts("aws", "g5.48xlarge") == (100, "efa", "pcie")
    assert facts("aws", "p3.16xlarge") == (25, "", "nvlink")  # hybrid cube mesh, no EFA
    assert facts("aws", "p3.2xlarge")[2] == ""  # one GPU: no GPU-to-GPU link to speak of
    assert facts("gcp", "a3-highgpu-8g") == (1000, "", "nvswitch")  # GPUDirect-TCPX is not RDMA
    assert facts("gcp", "a2-highgpu-8g") == (100, "", "nvswitch")
    assert facts("gcp", "g2-standard-96") == (100, "", "pcie")
    assert facts("azure", "Standard_ND96isr_H100_v5") == (3200, "infiniband", "nvswitch")
    assert facts("azure", "Standard_ND96asr_v4") == (1600, "infiniband", "nvswitch")
    assert facts("azure", "Standard_NC64as_T4_v3") == (32, "", "pcie")
    assert facts("alibaba", "ecs.gn8is-8x.32xlarge") == (100, "roce", "pcie")  # eRDMA
    assert facts("alibaba", "ecs.gn6v-c10g1.20xlarge") == (35, "", "nvlink")
    assert facts("tencent", "GT4.41XLARGE948") == (50, "", "nvswitch")
    assert facts("tencent", "GN7.2XLARGE32") == (3, "", "pcie")


def test_the_multinode_pretrain_policy_ranks_rdma_gangs() -> None:
    policy = load_policy(str(ROOT / "policies" / "multinode-pretrain.yaml"))
    ctx = PlanContext(now=datetime(2026, 12, 2, 12, 0, tzinfo=UTC))
    plan = plan_offers(policy, builtin_catalog(), ctx, top=None)
    ranked = {(p.offer.provider, p.offer.instance_type) for p in plan.placements}
    assert {("aws", "p5.48xlarge"), ("aws", "p4d.24xlarge")} <= ranked
    assert ("azure", "Standard_ND96isr_H100_v5") in ranked
    assert all(p.nodes == 4 for p in plan.placements)
    # GCP's A3 reaches 1,000-1,800 Gbps over TCP (GPUDirect-TCPX/O), not RDMA: the policy
    # asks for fabric: rdma, so it is rejected on the interconnect, not for want of a fact
    assert not any(provider == "gcp" for provider, _ in ranked)
    assert "interconnect" in plan.rejections


def test_every_aws_efa_type_says_how_many_efas_it_takes() -> None:
    """One EFA per network card, as EC2's DescribeInstanceTypes gives it (the AWS adapter asks
    EC2 the same at launch)."""
    from provisioner.catalog_files import builtin_catalog

    table = builtin_catalog().network or {}
    efa = {k[1]: f.efa_interfaces for k, f in table.items() if k[0] == "aws" and f.fabric == "efa"}
    assert efa and all(n >= 1 for n in efa.values()), efa
    assert (efa["p4d.24xlarge"], efa["p5.48xlarge"], efa["p5en.48xlarge"]) == (4, 32, 16)
    assert all(f.efa_interfaces == 0 for k, f in table.items() if f.fabric != "efa")
