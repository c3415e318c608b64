"""Alibaba quotas: the vCPU quotas of pay-as-you-go and spot instances per region.

ECS ``DescribeAccountAttributes`` (API 2014-05-26) with ``AttributeName``
``max-postpaid-instance-vcpu-count``, ``used-postpaid-instance-vcpu-count``,
``max-spot-instance-vcpu-count`` and ``used-spot-instance-vcpu-count``: each answered as
``AccountAttributeItems.AccountAttributeItem[].AttributeValues.ValueItem[].Value``.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable
from datetime import UTC, datetime
from functools import partial
from typing import Any

from providers.alibaba.client import AlibabaClient, nested
from provisioner.core.quotas import VCPU, Quota

#: market -> (the quota's attribute, its usage's attribute)
ATTRIBUTES = {
    "on-demand": ("max-postpaid-instance-vcpu-count", "used-postpaid-instance-vcpu-count"),
    "spot": ("max-spot-instance-vcpu-count", "used-spot-instance-vcpu-count"),
}


def _value(items: dict[str, Any], name: str) -> float | None:
    for v in nested(items.get(name), "AttributeValues", "ValueItem"):
        try:
            return float(v.get("Value"))
        except (TypeError, ValueError):
            return None
    return None


class AlibabaQuotas:
    """The account's vCPU quotas per region."""

    def __init__(self, client: AlibabaClient) -> None:
        self.client = client

    def quotas(self, regions: Iterable[str] | None = None) -> builtins.list[Quota]:
        out: builtins.list[Quota] = []
        names = [n for pair in ATTRIBUTES.values() for n in pair]
        for region in list(regions or self.client.regions):
            models, client = self.client.models(), self.client.ecs(region)
            req = models.DescribeAccountAttributesRequest(region_id=region, attribute_name=names)
            body = self.client.body(
                self.client.call(
                    "DescribeAccountAttributes",
                    partial(client.describe_account_attributes, req),
                )
            )
            items = {
                str(i.get("AttributeName")): i
                for i in nested(body, "AccountAttributeItems", "AccountAttributeItem")
            }
            now = datetime.now(UTC)
            for market, (limit_name, used_name) in ATTRIBUTES.items():
                limit = _value(items, limit_name)
                if limit is None:
                    continue
                out.append(
                    Quota(
                        provider="alibaba",
                        region=region,
                        name=limit_name,
                        note=f"{market} instance vCPUs",
                        unit=VCPU,
                        limit=limit,
                        used=_value(items, used_name),
                        market=market,
                        at=now,
                    )
                )
        return out
