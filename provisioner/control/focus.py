"""The ledger as a FinOps FOCUS 1.0 cost and usage dataset (CSV), for finance tools.

FOCUS 1.0 is the FinOps Foundation's FinOps Open Cost and Usage Specification, version 1.0
(https://focus.finops.org/focus-specification/v1-0/; source: github.com/FinOps-Open-Cost-and-
Usage-Spec/FOCUS_Spec, tag ``v1.0``, ``specification/columns/``). Every one of its 43 columns
is written, in the specification's (alphabetical) order, then our own ``x_`` columns.

One row per attempt and UTC day (the pieces ``provisioner cost --by day`` adds up), so the
rows' BilledCost adds up to ``cost``'s total. Each row is priced at the one unit price the
attempt was billed at (spot or on-demand), which SkuPriceId names (cloud, zone, type, market
and that price) and which ListUnitPrice and ContractedUnitPrice both give: no discount or
negotiated rate is known, so BilledCost = EffectiveCost = ContractedCost = ListCost.
PricingQuantity is the *billed* instance-hours: the run rounded up to the cloud's increment and
at least its minimum, for every node of a gang (the billing minimum folded into the billed
quantity, not a row of its own), split across days as the cost is; so unit price x
PricingQuantity = cost on every row. ConsumedQuantity is the hours the instances ran. What spot
saved is in ours: ``x_OnDemandUnitPrice`` (the plan's on-demand price of the same type and
zone) and ``x_OnDemandCost`` (that price x PricingQuantity), ``x_OnDemandCost - EffectiveCost``.
The sim's rows follow the cloud it played (its region names, billing rule, service).
Nulls are empty fields.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import IO, Any

from provisioner.control.played import played_cloud
from provisioner.control.records import billing_rule
from provisioner.core.regions import region as region_of

#: FOCUS 1.0's columns, in its order.
COLUMNS = (
    "AvailabilityZone", "BilledCost", "BillingAccountId", "BillingAccountName",
    "BillingCurrency", "BillingPeriodEnd", "BillingPeriodStart", "ChargeCategory", "ChargeClass",
    "ChargeDescription", "ChargeFrequency", "ChargePeriodEnd", "ChargePeriodStart",
    "CommitmentDiscountCategory", "CommitmentDiscountId", "CommitmentDiscountName",
    "CommitmentDiscountStatus", "CommitmentDiscountType", "ConsumedQuantity", "ConsumedUnit",
    "ContractedCost", "ContractedUnitPrice", "EffectiveCost", "InvoiceIssuerName", "ListCost",
    "ListUnitPrice", "PricingCategory", "PricingQuantity", "PricingUnit", "ProviderName",
    "PublisherName", "RegionId", "RegionName", "ResourceId", "ResourceName", "ResourceType",
    "ServiceCategory", "ServiceName", "SkuId", "SkuPriceId", "SubAccountId", "SubAccountName",
    "Tags",
)  # fmt: skip
#: Ours, after FOCUS's (its rule: custom columns carry the x_ prefix and come last).
CUSTOM = (
    "x_JobId", "x_JobName", "x_Attempt", "x_Market", "x_Nodes", "x_OnDemandUnitPrice",
    "x_OnDemandCost",
)  # fmt: skip
VERSION = "1.0"

#: The cloud's name, and its service that bills a VM.
CLOUDS = {
    "aws": ("Amazon Web Services", "Amazon Elastic Compute Cloud"),
    "gcp": ("Google Cloud", "Compute Engine"),
    "azure": ("Microsoft", "Virtual Machines"),
    "alibaba": ("Alibaba Cloud", "Elastic Compute Service"),
    "tencent": ("Tencent Cloud", "Cloud Virtual Machine"),
}


def _time(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _num(v: float) -> str:
    """FOCUS's numeric format: a plain decimal (no exponent sign '+', no thousands marks),
    to 12 places (so that unit price x quantity gives the cost to far below a cent)."""
    text = f"{v + 0.0:.12f}".rstrip("0").rstrip(".")
    return "0" if text in ("", "-0") else text


def _month(t: datetime) -> tuple[datetime, datetime]:
    t = t.astimezone(UTC)
    start = datetime(t.year, t.month, 1, tzinfo=UTC)
    end = datetime(t.year + (t.month == 12), t.month % 12 + 1, 1, tzinfo=UTC)
    return start, end


def rows(
    costs: Sequence[Any],
    ledgers: dict[tuple[str, int], Any],
    tags: dict[str, dict[str, str]],
    now: datetime,
    accounts: dict[tuple[str, str], str] | None = None,
) -> Iterable[dict[str, str]]:
    """FOCUS rows for ``costs`` (:class:`provisioner.control.spend.AttemptCost`, already split
    by day and clipped to the window) with each attempt's ledger (for the on-demand price) and
    ``accounts``: (job id, instance id) -> the account id its launch was billed to."""
    accounts = accounts or {}
    for c in costs:
        b = _billed(c, ledgers, tags, now, accounts)
        for p in c.pieces:
            yield _row(b, p)


@dataclass(frozen=True)
class _Billed:
    """What every row of one attempt says: the attempt and its job, the cloud it played (its
    issuer, service, region name), the account, the unit price, how long it ran and was
    billed for, its tags and the on-demand price of the same type and zone."""

    a: Any  # the attempt's row
    job: Any
    cloud: str
    issuer: str
    service: str
    region_name: str
    account: str | None
    price: float
    run_s: float
    billed_s: float
    tags: dict[str, str]
    od: float | None
    nodes: int


def _billed(
    c: Any,
    ledgers: dict[tuple[str, int], Any],
    tags: dict[str, dict[str, str]],
    now: datetime,
    accounts: dict[tuple[str, str], str],
) -> _Billed:
    a, job = c.row, c.job
    led = ledgers.get((a.job_id, a.attempt))
    cloud = played_cloud(a.provider, a.region, a.zone, job.provider_options or {})
    issuer, service = CLOUDS.get(cloud, (cloud, cloud))
    if a.provider != cloud:  # the sim: its own issuer, the played cloud's service
        issuer = f"Simulated {issuer}"
    known = region_of(cloud, a.region)
    run_s = 0.0
    if a.launched_at is not None:
        run_s = max(((a.ended_at or now) - a.launched_at).total_seconds(), 0.0)
    return _Billed(
        a=a,
        job=job,
        cloud=cloud,
        issuer=issuer,
        service=service,
        region_name=known.name if known is not None else a.region,
        account=accounts.get((job.id, a.instance_id or "")),
        price=a.price_per_hour,
        run_s=run_s,
        billed_s=float(billing_rule(cloud).billed_seconds(run_s)),
        tags={
            **tags.get(job.id, {}),
            "provisioner-job": job.id,
            "provisioner-attempt": str(a.attempt),
        },
        od=None if led is None else led.on_demand_price,
        nodes=a.nodes or 1,
    )


def _row(b: _Billed, p: Any) -> dict[str, str]:
    """One day's piece ``p`` of the attempt as a FOCUS row."""
    a, job, cloud, issuer, service = b.a, b.job, b.cloud, b.issuer, b.service
    price, nodes, od, account = b.price, b.nodes, b.od, b.account
    region_name, row_tags = b.region_name, b.tags
    secs = (p.end - p.start).total_seconds()
    share = secs / b.run_s if b.run_s > 0 else 1.0
    billed = p.cost_usd
    # the billed hours: the cost at the unit price it was billed at (by construction the
    # cloud's rule applied to the run, the minimum included), split as the cost is
    quantity = billed / price if price > 0 else b.billed_s / 3600.0 * nodes * share
    ps, pe = _month(p.start)
    return {
        "AvailabilityZone": a.zone or "",
        "BilledCost": _num(billed),
        "BillingAccountId": account or f"{a.provider}:default",
        "BillingAccountName": "",
        "BillingCurrency": "USD",
        "BillingPeriodEnd": _time(pe),
        "BillingPeriodStart": _time(ps),
        "ChargeCategory": "Usage",
        "ChargeClass": "",
        "ChargeDescription": f"{a.instance_type} ({a.gpu_count}x {a.gpu}) {a.market} "
        f"in {a.zone or a.region}, job {job.name} attempt {a.attempt}",
        "ChargeFrequency": "Usage-Based",
        "ChargePeriodEnd": _time(p.end),
        "ChargePeriodStart": _time(p.start),
        "CommitmentDiscountCategory": "",
        "CommitmentDiscountId": "",
        "CommitmentDiscountName": "",
        "CommitmentDiscountStatus": "",
        "CommitmentDiscountType": "",
        "ConsumedQuantity": _num(secs / 3600.0 * nodes),
        "ConsumedUnit": "Hours",
        "ContractedCost": _num(billed),
        "ContractedUnitPrice": _num(price),
        "EffectiveCost": _num(billed),
        "InvoiceIssuerName": issuer,
        "ListCost": _num(billed),
        "ListUnitPrice": _num(price),
        "PricingCategory": "Dynamic" if a.market == "spot" else "Standard",
        "PricingQuantity": _num(quantity),
        "PricingUnit": "Hours",
        "ProviderName": issuer,
        "PublisherName": issuer,
        "RegionId": a.region,
        "RegionName": region_name,
        "ResourceId": a.instance_id or "",
        "ResourceName": f"{job.name} attempt {a.attempt}",
        "ResourceType": "Virtual Machine" if a.instance_id else "",
        "ServiceCategory": "Compute",
        "ServiceName": service,
        "SkuId": f"{cloud}:{a.instance_type}",
        "SkuPriceId": f"{cloud}:{a.zone or a.region}:{a.instance_type}:{a.market}:{_num(price)}",
        "SubAccountId": account or "",
        "SubAccountName": "",
        "Tags": json.dumps(row_tags, sort_keys=True),
        "x_JobId": job.id,
        "x_JobName": job.name,
        "x_Attempt": str(a.attempt),
        "x_Market": a.market,
        "x_Nodes": str(nodes),
        "x_OnDemandUnitPrice": "" if od is None else _num(od),
        "x_OnDemandCost": "" if od is None else _num(od * quantity),
    }


def write(out: IO[str], data: Iterable[dict[str, str]]) -> int:
    w = csv.DictWriter(out, fieldnames=[*COLUMNS, *CUSTOM], lineterminator="\n")
    w.writeheader()
    n = 0
    for r in data:
        w.writerow(r)
        n += 1
    return n
