"""``provisioner drill --gpu none``: the drill on one small CPU instance type with spot, per cloud.

The catalog and the planner deal in GPU offers (a policy asks for at least one GPU; the
planner ranks by GPU throughput and caps by GPU-hour), so the CPU drill does not go through
them: its offers are made here, from :data:`CPU_TYPES`, with ``gpu=""`` and ``gpu_count=0``,
and only the drill's own controller (:class:`CpuDrillReconciler`) places its job on them,
cheapest spot first, under the drill's price cap (from ``--max-cost``). Nothing else ever
sees these offers; the normal planner's rules are unchanged.

Prices are USD per instance-hour for the region named; each figure says where it comes from.
Where a figure is not known it is None: an unknown spot price is bounded by the on-demand
price (spot never bills more on these clouds' default settings); with neither known, the
drill's own price cap (sent with the launch where the cloud takes one) is the bound, and the
launch line says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from providers.facts import cloud_facts
from provisioner.control.reconciler import Reconciler
from provisioner.core.catalog import Catalog
from provisioner.core.models import Market, Offer, Placement
from provisioner.core.planner import Plan, Rejection

#: what ``--gpu`` takes for a CPU-only drill
NO_GPU = "none"


@dataclass(frozen=True)
class CpuType:
    """One small CPU instance type with spot on a cloud, and what it costs in ``region``."""

    cloud: str
    region: str  # the region the figures are for (the drill's default there)
    zones: tuple[str, ...]  # zones of ``region`` the type is offered in
    instance_type: str
    vcpus: float
    memory_gib: float
    on_demand: float | None  # USD/h; None: not known here
    spot: float | None  # USD/h, a recent figure or estimate; None: not known here
    source: str  # where the figures come from

    def describe(self) -> str:
        od = "unknown" if self.on_demand is None else f"${self.on_demand:g}/h"
        spot = "unknown" if self.spot is None else f"about ${self.spot:g}/h"
        return (
            f"{self.instance_type} ({self.vcpus:g} vCPU, {self.memory_gib:g} GiB, no GPU), "
            f"spot; in {self.region}: on-demand {od}, spot {spot} ({self.source})"
        )


CPU_TYPES: dict[str, CpuType] = {
    # on-demand: AWS's public EC2 price list, us-east-1 Linux (the shared price data holds GPU
    # types only); spot: that price less the 66 % saving Spot Instance Advisor gives for
    # us-east-1 Linux m5.large (shared data aws_spot_advisor_2025-06-28_flat.csv), rounded
    "aws": CpuType(
        "aws",
        "us-east-1",
        ("us-east-1a", "us-east-1b", "us-east-1c"),
        "m5.large",
        2,
        8.0,
        0.096,
        0.0326,
        "AWS price list; spot from Spot Instance Advisor's saving, 2025-06-28",
    ),
    # both figures: shared data gcp_compute_pricing_cyclenerd_2026-07-30.csv, e2-standard-2
    # us-central1 (hour, hour_spot); a Spot VM
    "gcp": CpuType(
        "gcp",
        "us-central1",
        ("us-central1-a", "us-central1-b", "us-central1-c"),
        "e2-standard-2",
        2,
        8.0,
        0.06701142,
        0.040212,
        "Compute Engine pricing via cyclenerd, 2026-07-30",
    ),
    # on-demand: Azure's retail price list, eastus Linux pay-as-you-go (not in the shared
    # data); spot: not known here, at most pay-as-you-go (a Spot VM with maxPrice -1)
    "azure": CpuType(
        "azure",
        "eastus",
        ("eastus-1", "eastus-2", "eastus-3"),
        "Standard_D2s_v3",
        2,
        8.0,
        0.096,
        None,
        "Azure retail price list; spot at most pay-as-you-go",
    ),
    # no figure in the shared data or the built-in catalog: the drill's cap bounds it (the
    # adapter sends it as the spot price limit)
    "alibaba": CpuType(
        "alibaba",
        "cn-hangzhou",
        ("cn-hangzhou-h", "cn-hangzhou-i", "cn-hangzhou-j"),
        "ecs.g6.large",
        2,
        8.0,
        None,
        None,
        "no price known here: the drill's cap bounds it",
    ),
    # no figure in the shared data or the built-in catalog: the drill's cap bounds it (the
    # adapter sends it as the spot MaxPrice)
    "tencent": CpuType(
        "tencent",
        "ap-guangzhou",
        ("ap-guangzhou-3", "ap-guangzhou-4", "ap-guangzhou-6"),
        "S5.MEDIUM4",
        2,
        4.0,
        None,
        None,
        "no price known here: the drill's cap bounds it",
    ),
}


def is_cpu(gpu: str | None) -> bool:
    """Whether ``--gpu`` asks for the CPU drill."""
    return (gpu or "").strip().lower() == NO_GPU


def cpu_type(cloud: str) -> CpuType:
    """The CPU type the drill uses on ``cloud`` (the sim: the one of the cloud it plays)."""
    return CPU_TYPES[cloud]


def cpu_offers(cloud: str, region: str | None) -> list[Offer]:
    """The CPU drill's offers: :data:`CPU_TYPES`'s type for ``cloud`` in each zone of
    ``region`` (default: the table's), labelled with the cloud (the sim's too, as the sim's
    offers are planned under the cloud each zone plays). In a region other than the table's
    the prices are the table region's, for want of better, and the zones are named by the
    cloud's usual suffixes."""
    t = cpu_type(cloud)
    where = region or t.region
    zones = (
        t.zones if where == t.region else tuple(where + s for s in cloud_facts(cloud).zone_suffixes)
    )
    spot = t.spot if t.spot is not None else t.on_demand
    return [
        Offer(cloud, where, z, t.instance_type, "", 0, t.vcpus, t.memory_gib, t.on_demand, spot)
        for z in zones
    ]


def cpu_plan(
    policy: Any, offers: list[Offer], cap: float, cooled: frozenset[tuple[str, str]]
) -> Plan:
    """The CPU drill's placements: spot only, cheapest first, under ``cap`` USD/h (a price not
    known counts as the cap: the launch carries it), zones cooling down left out."""
    placements: list[Placement] = []
    over: list[str] = []
    cool: list[str] = []
    for o in sorted(offers, key=lambda o: math.inf if o.spot_price is None else o.spot_price):
        price = cap if o.spot_price is None else o.spot_price
        label = f"{o.provider}:{o.zone} {o.instance_type} (CPU) spot ${price:.4f}/h"
        if (o.provider, o.zone) in cooled or (o.provider, o.region) in cooled:
            cool.append(label)
            continue
        if price > cap + 1e-9:
            over.append(label + f" > the drill's cap ${cap:g}/h")
            continue
        known = "" if o.spot_price is not None else " (price not known: at most the cap)"
        placements.append(
            Placement(
                offer=o,
                market=Market.SPOT,
                price_per_hour=price,
                bid_cap_per_hour=cap,
                score=price,
                rank=len(placements) + 1,
                reasons=(f"the CPU drill's {o.instance_type}, cheapest spot first{known}",),
            )
        )
    rejections = {
        reason: Rejection(reason, len(rows), tuple(rows[:3]))
        for reason, rows in (("price_cap", over), ("cooldown", cool))
        if rows
    }
    return Plan(
        policy=policy,
        placements=placements,
        rejections=rejections,
        eligible=len(placements),
        candidates=len(offers),
        required_vram_gb=None,
        vram_estimate=None,
        deadline=None,
        notes=("--gpu none: the drill's own CPU offers (provisioner/drill/cpu.py)",),
    )


class CpuDrillReconciler(Reconciler):
    """The project's controller, placing the drill's job on the drill's CPU offers only."""

    def __init__(self, *args: Any, cpu_offers: list[Offer], cap: float, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.cpu_offers, self.cap = list(cpu_offers), cap
        self._cpu_catalog = Catalog.from_offers(self.cpu_offers, "drill:cpu")

    def catalog_for(self, job: Any) -> Catalog:
        return self._cpu_catalog

    def plan_for(
        self,
        job: Any,
        policy: Any,
        cooled: frozenset[tuple[str, str]],
        now: datetime,
        short: frozenset[tuple[tuple[str, str, str, str], int]] = frozenset(),
    ) -> Plan:
        return cpu_plan(policy, self.cpu_offers, self.cap, cooled)
