"""Azure commitment prices, live: reserved VM instances from the Retail Prices API
(``priceType eq 'Reservation'``), the same public, unauthenticated endpoint as the prices.

A reservation item carries ``reservationTerm`` ("1 Year", "3 Years", "5 Years") and its
``retailPrice`` (= ``unitPrice``) is the price of the whole term for one VM, though its
``unitOfMeasure`` still says "1 Hour": a published sample reservation item
(E64 v4, 1 year, southcentralus) is 25,007 USD, which read as an hourly rate would be absurd
and as the year's total is 2.85 USD an hour (see provisioner/data/SOURCES.md). Azure sells each reservation paid upfront or monthly for the same
total, so each item gives two quotes in commitments.csv's terms: option ``reservation``,
payment ``all`` (the total upfront) and ``no`` (the total spread over the term's hours).
Savings plans are priced only by the API's preview version; they are not read here.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from providers._common import now_utc
from providers.azure.client import AzureClient
from providers.azure.offers import AzureOffers
from providers.capabilities import CommitmentQuote

TERMS = {"1 Year": 12, "3 Years": 36}
HOURS_PER_MONTH = 730.0


class AzureCommitments:
    """:class:`~providers.capabilities.Commitments` for Azure reserved VM instances (the
    Retail Prices queries of ``offers``)."""

    def __init__(self, client: AzureClient, offers: AzureOffers) -> None:
        self.client = client
        self.offers = offers

    def commitment_prices(
        self, regions: Iterable[str] | None = None
    ) -> builtins.list[CommitmentQuote]:
        """Reservation prices of the GPU sizes in ``regions`` (1 and 3 years)."""
        out: list[CommitmentQuote] = []
        for region in regions or self.client.locations:
            at = now_utc()
            exprs = [
                e.replace("priceType eq 'Consumption'", "priceType eq 'Reservation'")
                for e in self.offers.price_filters(region)
            ]
            latest: dict[tuple[str, int], tuple[str, float]] = {}
            for item in (i for e in exprs for i in self.offers.retail(e)):
                key = reservation_of(item)
                if key is None:
                    continue
                size, months, total, start = key
                seen = latest.get((size, months))
                if seen is None or start > seen[0]:
                    latest[(size, months)] = (start, total)
            for (size, months), (_, total) in sorted(latest.items()):
                out.extend(quotes_for(region, size, months, total, at))
        return out


def reservation_of(item: Mapping[str, Any]) -> tuple[str, int, float, str] | None:
    """(size, term months, term price, effective date) of a Linux GPU reservation item."""
    size = str(item.get("armSkuName") or "")
    months = TERMS.get(str(item.get("reservationTerm", "")))
    if (
        item.get("type") != "Reservation"
        or months is None
        or not size.startswith("Standard_N")
        or "Windows" in str(item.get("productName", ""))
    ):
        return None
    total = float(item.get("retailPrice", item.get("unitPrice", 0.0)) or 0.0)
    if total <= 0:
        return None
    return size, months, total, str(item.get("effectiveStartDate", ""))


def quotes_for(
    region: str, size: str, months: int, total: float, at: datetime
) -> list[CommitmentQuote]:
    source = "Azure Retail Prices API (Reservation)"
    hours = months * HOURS_PER_MONTH
    return [
        CommitmentQuote(
            "azure", region, size, "reservation", months, total, 0.0, at, source, "all"
        ),
        CommitmentQuote(
            "azure", region, size, "reservation", months, 0.0, total / hours, at, source, "no"
        ),
    ]
