"""AWS commitment prices, live: the Reserved terms of the Price List Query API
(``pricing`` ``GetProducts``, the same Linux shared-tenancy rows as the on-demand price).

Each product's ``terms.Reserved`` holds one term per (lease length, offering class, purchase
option), with ``termAttributes`` ``LeaseContractLength`` ("1yr"/"3yr"), ``OfferingClass``
("standard"/"convertible") and ``PurchaseOption`` ("All Upfront", "Partial Upfront", "No
Upfront"), and price dimensions in ``Quantity`` (the upfront fee) and ``Hrs`` (the hourly
rate). The quotes name option and payment as provisioner/data/commitments.csv does, so that
``catalog refresh --commitments-out`` writes a file ``provisioner tco --commitments`` reads.
Savings Plans are priced by another API (``savingsplans``), not read here.
"""

from __future__ import annotations

import builtins
import functools
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from providers._common import now_utc
from providers.aws.client import AWSClient
from providers.aws.errors import classify
from providers.aws.offers import AWSOffers, price_list_products
from providers.base import call_with_retries
from providers.capabilities import CommitmentQuote

LEASES = {"1yr": 12, "3yr": 36}
#: the price list's PurchaseOption -> commitments.csv's payment
PURCHASE = {"All Upfront": "all", "Partial Upfront": "partial", "No Upfront": "no"}
#: the price list's OfferingClass -> commitments.csv's option (the offline file has standard
#: RIs under "reserved-instance"; a convertible RI is its own option)
OPTION = {"standard": "reserved-instance", "convertible": "reserved-instance-convertible"}


class AWSCommitments:
    """:class:`~providers.capabilities.Commitments` for EC2 Reserved Instances (the GPU types
    from ``offers``)."""

    def __init__(self, client: AWSClient, offers: AWSOffers) -> None:
        self.client = client
        self.offers = offers

    def commitment_prices(
        self, regions: Iterable[str] | None = None
    ) -> builtins.list[CommitmentQuote]:
        """Reserved Instance prices of the GPU types in ``regions``, live; [] where the
        Pricing API cannot be reached (no endpoint)."""
        client = self.client.pricing_client()
        if client is None:
            return []
        out: list[CommitmentQuote] = []
        for region in regions or self.client.regions:
            at = now_utc()
            for t in self.offers.types_with_gpus(region):
                itype = t["InstanceType"]
                docs = call_with_retries(
                    functools.partial(price_list_products, client, region, itype),
                    classify,
                    policy=self.client.retry,
                    what=f"aws GetProducts reserved ({itype}, {region})",
                )
                for doc in docs:
                    out.extend(reserved_of(doc, region, itype, at))
        return out


def reserved_of(
    doc: Mapping[str, Any], region: str, itype: str, at: datetime
) -> list[CommitmentQuote]:
    """The Reserved terms of one price-list product ([] unless the plain Linux row)."""
    attrs = (doc.get("product") or {}).get("attributes") or {}
    if attrs.get("preInstalledSw", "NA") != "NA" or attrs.get("operatingSystem") != "Linux":
        return []
    out = []
    for term in ((doc.get("terms") or {}).get("Reserved") or {}).values():
        ta = term.get("termAttributes") or {}
        months = LEASES.get(ta.get("LeaseContractLength", ""))
        payment = PURCHASE.get(ta.get("PurchaseOption", ""))
        option = OPTION.get(str(ta.get("OfferingClass", "")).lower())
        if months is None or payment is None or option is None:
            continue
        upfront = hourly = 0.0
        for dim in (term.get("priceDimensions") or {}).values():
            usd = (dim.get("pricePerUnit") or {}).get("USD")
            if usd in (None, ""):
                continue
            if dim.get("unit") == "Quantity":
                upfront += float(usd)
            elif dim.get("unit") == "Hrs":
                hourly += float(usd)
        if upfront <= 0 and hourly <= 0:
            continue
        out.append(
            CommitmentQuote(
                provider="aws",
                region=region,
                instance_type=itype,
                kind=option,
                term_months=months,
                upfront=upfront,
                per_hour=hourly,
                at=at,
                source="AWS Price List API (Reserved)",
                payment=payment,
            )
        )
    return out
