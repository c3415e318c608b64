"""The ledger as a FinOps FOCUS 1.0 cost and usage dataset (CSV), for finance tools.

FOCUS 1.0 is the FinOps Foundation's FinOps Open Cost and Usage Specification, version 1.0
(https://focus.finops.org/focus-specification/v1-0/; source: github.com/FinOps-Open-Cost-and-
Usage-Spec/FOCUS_Spec, tag ``v1.0``, ``specification/columns/``). Every one of its 43 columns
is written, in the specification's (alphabetical) order, then our own ``x_`` columns.

One row per attempt and UTC day (the pieces ``provisioner cost --by day`` adds up), so the
rows' BilledCost adds up to ``cost``'s total. BilledCost = EffectiveCost = ContractedCost:
what was billed (no commitment is amortised, no negotiated rate known). ListCost is the same
run at the plan's on-demand price of the same type and zone (the ledger's reference), so
``ListCost - EffectiveCost`` is what spot saved, FOCUS's own savings formula; where no
on-demand price is known, ListCost is the billed cost and ListUnitPrice is null. PricingQuantity
and ConsumedQuantity are instance-hours (``Hours``). Nulls are empty fields.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import IO, Any

from provisioner.control.records import billed_cost

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
CUSTOM = ("x_JobId", "x_JobName", "x_Attempt", "x_Market", "x_Nodes")
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
    """FOCUS's numeric format: a plain decimal (no exponent sign '+', no thousands marks)."""
    text = f"{v + 0.0:.10f}".rstrip("0").rstrip(".")
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
) -> Iterable[dict[str, str]]:
    """FOCUS rows for ``costs`` (:class:`provisioner.control.spend.AttemptCost`, already split
    by day and clipped to the window) with each attempt's ledger (for the on-demand price)."""
    for c in costs:
        a, job = c.row, c.job
        led = ledgers.get((a.job_id, a.attempt))
        od = None if led is None else led.on_demand_price
        nodes = a.nodes or 1
        issuer, service = CLOUDS.get(a.provider, (a.provider, a.provider))
        pricing = "Dynamic" if a.market == "spot" else "Standard"
        row_tags = {
            **tags.get(job.id, {}),
            "provisioner-job": job.id,
            "provisioner-attempt": str(a.attempt),
        }
        od_run = None  # the reference: the whole run billed by the same rule at od
        if od is not None and a.launched_at is not None:
            end = a.ended_at or now
            od_run = billed_cost(a.provider, od, a.launched_at, end) * nodes
            run_s = max((end - a.launched_at).total_seconds(), 1e-9)
        for p in c.pieces:
            secs = (p.end - p.start).total_seconds()
            hours = secs / 3600.0 * nodes
            billed = p.cost_usd
            # split as the bill is split: in proportion to run time
            list_cost = billed if od_run is None else od_run * secs / run_s
            ps, pe = _month(p.start)
            yield {
                "AvailabilityZone": a.zone or "",
                "BilledCost": _num(billed),
                "BillingAccountId": a.provider,
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
                "ConsumedQuantity": _num(hours),
                "ConsumedUnit": "Hours",
                "ContractedCost": _num(billed),
                "ContractedUnitPrice": _num(a.price_per_hour),
                "EffectiveCost": _num(billed),
                "InvoiceIssuerName": issuer,
                "ListCost": _num(list_cost),
                "ListUnitPrice": "" if od is None else _num(od),
                "PricingCategory": pricing,
                "PricingQuantity": _num(hours),
                "PricingUnit": "Hours",
                "ProviderName": issuer,
                "PublisherName": issuer,
                "RegionId": a.region,
                "RegionName": "",
                "ResourceId": a.instance_id or "",
                "ResourceName": f"{job.name} attempt {a.attempt}",
                "ResourceType": "Virtual Machine",
                "ServiceCategory": "Compute",
                "ServiceName": service,
                "SkuId": a.instance_type,
                "SkuPriceId": f"{a.provider}:{a.zone or a.region}:{a.instance_type}:{a.market}",
                "SubAccountId": "",
                "SubAccountName": "",
                "Tags": json.dumps(row_tags, sort_keys=True),
                "x_JobId": job.id,
                "x_JobName": job.name,
                "x_Attempt": str(a.attempt),
                "x_Market": a.market,
                "x_Nodes": str(nodes),
            }


def write(out: IO[str], data: Iterable[dict[str, str]]) -> int:
    w = csv.DictWriter(out, fieldnames=[*COLUMNS, *CUSTOM], lineterminator="\n")
    w.writeheader()
    n = 0
    for r in data:
        w.writerow(r)
        n += 1
    return n
