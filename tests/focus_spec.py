"""FOCUS 1.0's columns, written out from the specification, to validate our export against.

Source: the FinOps Open Cost and Usage Specification, version 1.0
(https://focus.finops.org/focus-specification/v1-0/), as published in
github.com/FinOps-Open-Cost-and-Usage-Spec/FOCUS_Spec at tag ``v1.0``:
``specification/columns/*.md`` (each column's ID, feature level, whether it allows nulls, its
data type and allowed values) and ``specification/attributes/*.md`` (the Date/Time, Numeric,
Currency Code and Key-Value formats; custom columns prefixed ``x_`` and placed after FOCUS's).

:func:`problems` checks every MUST rule of the 43 columns that a file can show: presence,
order, nulls, types and formats, allowed values, and the rules between columns
(:func:`_row_rules`: unit price x PricingQuantity = cost, the columns that go null together,
periods; :func:`_dataset_rules`: one SkuId and one unit price per SkuPriceId). The rules that
need the provider's own knowledge (BilledCost matching the invoice, SkuPriceId's price in the
published price list, a display name being assignable) cannot be read off a file.

The FinOps Foundation's own validator (PyPI ``focus-validator`` 1.0.0) was tried and not used:
it pins numpy 1.x and pandera 0.17 (this project's environment has numpy 2), and it checks the
columns one at a time (type, nulls, allowed values), none of the rules between them.
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
        out.extend(f"line {i}: {p}" for p in _row_rules(r))
    out.extend(_dataset_rules(rows))
    return out


#: the columns that MUST NOT be null on a Usage or Purchase row that is not a correction,
#: and MUST be null on a Tax row
PRICED = (
    "ContractedUnitPrice", "ListUnitPrice", "PricingCategory", "PricingQuantity", "PricingUnit",
    "SkuId", "SkuPriceId",
)  # fmt: skip
#: the commitment columns that are null exactly when CommitmentDiscountId is
COMMITMENT = ("CommitmentDiscountCategory", "CommitmentDiscountType")


def _dec(v: str) -> float | None:
    return float(v) if v and NUMBER.match(v) else None


def _same(product: float, cost: float) -> bool:
    """Equal to far below a cent (the file's decimals are rounded, not the rule)."""
    return abs(product - cost) <= 1e-9 * max(1.0, abs(cost))


def _row_rules(r: dict[str, str]) -> list[str]:
    """The MUST rules between one row's columns (FOCUS 1.0, specification/columns/*.md)."""
    out: list[str] = []
    category, correction = r.get("ChargeCategory", ""), r.get("ChargeClass", "") == "Correction"
    usage_or_purchase = category in ("Usage", "Purchase") and not correction
    for col in PRICED:
        if usage_or_purchase and r.get(col, "") == "":
            out.append(f"{col} is null on a {category} row")
        if category == "Tax" and r.get(col, "") != "":
            out.append(f"{col} is not null on a Tax row")
    for col in ("ConsumedQuantity", "ConsumedUnit"):
        if category == "Usage" and not correction and r.get(col, "") == "":
            out.append(f"{col} is null on a Usage row")
        if category != "Usage" and r.get(col, "") != "":
            out.append(f"{col} is set on a {category} row")
    if category == "Purchase" and r.get("ChargeFrequency") == "Usage-Based":
        out.append("a Purchase is Usage-Based")
    # unit price x PricingQuantity = the cost it prices (ListCost, ContractedCost)
    quantity = _dec(r.get("PricingQuantity", ""))
    for price_col, cost_col in (("ListUnitPrice", "ListCost"), ("ContractedUnitPrice", "ContractedCost")):  # fmt: skip
        price, cost = _dec(r.get(price_col, "")), _dec(r.get(cost_col, ""))
        if price is not None and price < 0:
            out.append(f"{price_col} is negative")
        wrong = quantity is None or cost is None or not _same((price or 0) * quantity, cost)
        if price is not None and not correction and wrong:
            out.append(
                f"{price_col} x PricingQuantity = {r.get(price_col)} x "
                f"{r.get('PricingQuantity')} is not {cost_col} {r.get(cost_col)}"
            )
    for col in ("PricingQuantity", "ConsumedQuantity"):
        v = _dec(r.get(col, ""))
        if v is not None and v < 0 and not correction:
            out.append(f"{col} is negative outside a correction")
    if category == "Credit":  # a charge unrelated to others: its costs are what was billed
        for col in ("ContractedCost", "EffectiveCost", "ListCost"):
            if r.get(col) != r.get("BilledCost"):
                out.append(f"{col} is not BilledCost on a Credit row")
    # commitment discounts: the columns go null together
    has_commitment = r.get("CommitmentDiscountId", "") != ""
    for col in COMMITMENT:
        if (r.get(col, "") != "") != has_commitment:
            out.append(
                f"{col} is {'null' if has_commitment else 'set'} as CommitmentDiscountId is not"
            )
    if not has_commitment and r.get("CommitmentDiscountName", "") != "":
        out.append("CommitmentDiscountName is set without a CommitmentDiscountId")
    if not has_commitment and r.get("CommitmentDiscountStatus", "") != "":
        out.append("CommitmentDiscountStatus is set without a CommitmentDiscountId")
    if has_commitment and category == "Usage" and r.get("CommitmentDiscountStatus", "") == "":
        out.append("CommitmentDiscountStatus is null on a commitment's Usage row")
    if has_commitment and r.get("PricingCategory") != "Committed":
        out.append("PricingCategory is not Committed with a CommitmentDiscountId")
    # a region: its id and its name together
    if (r.get("RegionId", "") == "") != (r.get("RegionName", "") == ""):
        out.append("RegionId and RegionName are not both set (or both null)")
    # a resource: its type with its id; a system-made id is not its name
    if (r.get("ResourceId", "") == "") != (r.get("ResourceType", "") == ""):
        out.append("ResourceType is not set exactly when ResourceId is")
    if r.get("ResourceId", "") != "" and r.get("ResourceName") == r.get("ResourceId"):
        out.append("ResourceName repeats ResourceId")
    # periods: start inclusive, end exclusive, the charge inside its billing period
    cs, ce = r.get("ChargePeriodStart", ""), r.get("ChargePeriodEnd", "")
    bs, be = r.get("BillingPeriodStart", ""), r.get("BillingPeriodEnd", "")
    if cs and ce and cs >= ce:
        out.append("the charge period does not end after it starts")
    if bs and be and bs >= be:
        out.append("the billing period does not end after it starts")
    if bs and cs and (cs < bs or (be and ce > be)):
        out.append("the charge is outside its billing period")
    return out


def _dataset_rules(rows: list[dict[str, str]]) -> list[str]:
    """The MUST rules across rows: a SkuPriceId defines a single unit price and belongs to one
    and only one SkuId (no commitment flexibility here: a row with a commitment is exempt)."""
    out: list[str] = []
    skus: dict[tuple[str, str], set[str]] = {}
    prices: dict[tuple[str, str], set[str]] = {}
    for r in rows:
        key = (r.get("ProviderName", ""), r.get("SkuPriceId", ""))
        if not key[1] or r.get("CommitmentDiscountId"):
            continue
        skus.setdefault(key, set()).add(r.get("SkuId", ""))
        price = _dec(r.get("ListUnitPrice", ""))
        if price is not None:
            prices.setdefault(key, set()).add(f"{price:.12g}")
    for (provider, sku_price), ids in sorted(skus.items()):
        if len(ids) > 1:
            out.append(f"SkuPriceId {sku_price!r} ({provider}) names {len(ids)} SkuIds")
    for (provider, sku_price), ps in sorted(prices.items()):
        if len(ps) > 1:
            out.append(f"SkuPriceId {sku_price!r} ({provider}) has {len(ps)} unit prices")
    return out


def _key_values(v: str) -> bool:
    """Key-Value Format: a JSON object whose values are numbers, strings, booleans or null."""
    try:
        doc: Any = json.loads(v)
    except ValueError:
        return False
    return isinstance(doc, dict) and all(not isinstance(x, dict | list) for x in doc.values())
