"""Tencent quotas: instances per zone and billing mode, from ``DescribeAccountQuota``.

CVM's ``DescribeAccountQuota`` (API 2017-03-12) answers ``AccountQuotaOverview.AccountQuota``
with, per zone, ``PostPaidQuotaSet`` (pay-as-you-go instances: on-demand here) and
``SpotPaidQuotaSet`` (spot instances), each ``{Zone, UsedQuota, RemainingQuota,
TotalQuota}``; the quota counts instances, whatever their size.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable
from datetime import UTC, datetime

from providers.tencent.client import TencentClient
from provisioner.core.quotas import INSTANCE, Quota

SETS = {"PostPaidQuotaSet": "on-demand", "SpotPaidQuotaSet": "spot"}


class TencentQuotas:
    """The account's instance quotas per zone."""

    def __init__(self, client: TencentClient) -> None:
        self.client = client

    def quotas(self, regions: Iterable[str] | None = None) -> builtins.list[Quota]:
        out: builtins.list[Quota] = []
        for region in list(regions or self.client.regions):
            body = self.client.request(region, "DescribeAccountQuota", {})
            sets = (body.get("AccountQuotaOverview") or {}).get("AccountQuota") or {}
            now = datetime.now(UTC)
            for key, market in SETS.items():
                for row in sets.get(key) or ():
                    total = float(row.get("TotalQuota") or 0)
                    used = row.get("UsedQuota")
                    out.append(
                        Quota(
                            provider="tencent",
                            region=region,
                            zone=str(row.get("Zone") or ""),
                            name=f"{key.removesuffix('Set')}:{row.get('Zone') or region}",
                            note=f"{market} instances in the zone",
                            unit=INSTANCE,
                            limit=total,
                            used=None if used is None else float(used),
                            market=market,
                            at=now,
                        )
                    )
        return out
