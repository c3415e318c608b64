"""FOCUS 1.0's columns, written out from the specification, to validate our export against.

Source: the FinOps Open Cost and Usage Specification, version 1.0
(https://focus.finops.org/focus-specification/v1-0/), as published in
github.com/FinOps-Open-Cost-and-Usage-Spec/FOCUS_Spec at tag ``v1.0``:
``specification/columns/*.md`` (each column's ID, feature level, whether it allows nulls, its
data type and allowed values) and ``specification/attributes/*.md`` (the Date/Time, Numeric,
Currency Code and Key-Value formats; custom columns prefixed ``x_`` and placed after FOCUS's).
"""

from __future__ import annotations

import json
import re
from typing import Any

# column -> (feature level, allows nulls, data type)
COLUMNS: dict[str, tuple[str, bool, str]] = {
    "AvailabilityZone": ("Recommended", True, "String"),
    "BilledCost": ("Mandatory", False, "Decimal"),
    "BillingAccountId": ("Mandatory", False, "String"),
    "BillingAccountName": ("Mandatory", True, "String"),
    "BillingCurrency": ("Mandatory", False, "Currency"),
    "BillingPeriodEnd": ("Mandatory", False, "DateTime"),
    "BillingPeriodStart": ("Mandatory", False, "DateTime"),
    "ChargeCategory": ("Mandatory", False, "String"),
    "ChargeClass": ("Mandatory", True, "String"),
    "ChargeDescription": ("Mandatory", True, "String"),
    "ChargeFrequency": ("Recommended", False, "String"),
    "ChargePeriodEnd": ("Mandatory", False, "DateTime"),
    "ChargePeriodStart": ("Mandatory", False, "DateTime"),
    "CommitmentDiscountCategory": ("Conditional", True, "String"),
    "CommitmentDiscountId": ("Conditional", True, "String"),
    "CommitmentDiscountName": ("Conditional", True, "String"),
    "CommitmentDiscountStatus": ("Conditional", True, "String"),
    "CommitmentDiscountType": ("Conditional", True, "String"),
    "ConsumedQuantity": ("Conditional", True, "Decimal"),
    "ConsumedUnit": ("Conditional", True, "String"),
    "ContractedCost": ("Mandatory", False, "Decimal"),
    "ContractedUnitPrice": ("Conditional", True, "Decimal"),
    "EffectiveCost": ("Mandatory", False, "Decimal"),
    "InvoiceIssuerName": ("Mandatory", False, "String"),
    "ListCost": ("Mandatory", False, "Decimal"),
    "ListUnitPrice": ("Conditional", True, "Decimal"),
    "PricingCategory": ("Conditional", True, "String"),
    "PricingQuantity": ("Mandatory", True, "Decimal"),
    "PricingUnit": ("Mandatory", True, "String"),
    "ProviderName": ("Mandatory", False, "String"),
    "PublisherName": ("Mandatory", False, "String"),
    "RegionId": ("Conditional", True, "String"),
    "RegionName": ("Conditional", True, "String"),
    "ResourceId": ("Conditional", True, "String"),
    "ResourceName": ("Conditional", True, "String"),
    "ResourceType": ("Conditional", True, "String"),
    "ServiceCategory": ("Mandatory", False, "String"),
    "ServiceName": ("Mandatory", False, "String"),
    "SkuId": ("Conditional", True, "String"),
    "SkuPriceId": ("Conditional", True, "String"),
    "SubAccountId": ("Conditional", True, "String"),
    "SubAccountName": ("Conditional", True, "String"),
    "Tags": ("Conditional", True, "JSON"),
}
ALLOWED: dict[str, set[str]] = {
    "ChargeCategory": {"Usage", "Purchase", "Tax", "Credit", "Adjustment"},
    "ChargeClass": {"Correction"},
    "ChargeFrequency": {"One-Time", "Recurring", "Usage-Based"},
    "CommitmentDiscountCategory": {"Spend", "Usage"},
    "CommitmentDiscountStatus": {"Used", "Unused"},
    "PricingCategory": {"Standard", "Dynamic", "Committed", "Other"},
    "ServiceCategory": {
        "AI and Machine Learning", "Analytics", "Business Applications", "Compute",
        "Databases", "Developer Tools", "Multicloud", "Identity", "Integration",
        "Internet of Things", "Management and Governance", "Media", "Migration", "Mobile",
        "Networking", "Security", "Storage", "Web", "Other",
    },
}  # fmt: skip
#: 'YYYY-MM-DDTHH:mm:ssZ' (Date/Time Format)
DATETIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")
#: an integer, a decimal or E notation; no '+', no thousands separators (Numeric Format)
NUMBER = re.compile(r"^-?\d+(\.\d+)?([eE]-?\d+)?$")
CURRENCY = re.compile(r"^[A-Z]{3}$")
CUSTOM = re.compile(r"^x_[A-Za-z0-9]+$")


def problems(header: list[str], rows: list[dict[str, str]]) -> list[str]:
    """What in a CSV breaks FOCUS 1.0 (an empty field is a null)."""
    out: list[str] = []
    names = list(COLUMNS)
    missing = [c for c in names if c not in header]
    if missing:
        out.append(f"missing columns: {missing}")
    focus_part = [c for c in header if not c.startswith("x_")]
    if focus_part != [c for c in names if c in header]:
        out.append("FOCUS columns out of the specification's order")
    extra = [c for c in header if c not in COLUMNS]
    if any(not CUSTOM.match(c) for c in extra):
        out.append(f"custom columns without the x_ prefix: {extra}")
    if extra and header.index(extra[0]) < len(focus_part):
        out.append("custom columns before FOCUS's")
    for i, r in enumerate(rows, start=2):
        for col, (_level, nulls, kind) in COLUMNS.items():
            v = r.get(col, "")
            if v == "":
                if not nulls:
                    out.append(f"line {i}: {col} is null")
                continue
            bad = (
                (kind == "Decimal" and not NUMBER.match(v))
                or (kind == "DateTime" and not DATETIME.match(v))
                or (kind == "Currency" and not CURRENCY.match(v))
                or (kind == "JSON" and not _key_values(v))
                or (col in ALLOWED and v not in ALLOWED[col])
            )
            if bad:
                out.append(f"line {i}: {col} = {v!r} is not a valid {kind}")
        if r.get("ChargePeriodStart", "") > r.get("ChargePeriodEnd", ""):
            out.append(f"line {i}: the charge period ends before it starts")
        if r.get("BillingPeriodStart", "") > r.get("ChargePeriodStart", "~"):
            out.append(f"line {i}: the charge is before its billing period")
    return out


def _key_values(v: str) -> bool:
    """Key-Value Format: a JSON object whose values are numbers, strings, booleans or null."""
    try:
        doc: Any = json.loads(v)
    except ValueError:
        return False
    return isinstance(doc, dict) and all(not isinstance(x, dict | list) for x in doc.values())
