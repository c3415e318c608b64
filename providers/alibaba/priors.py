"""Alibaba availability priors: the 30-day interruption rate of spot instances per zone and type.

ECS ``DescribeSpotAdvice`` (API 2014-05-26,
https://www.alibabacloud.com/help/en/ecs/developer-reference/api-ecs-2014-05-26-describespotadvice)
with ``RegionId`` and up to :data:`TYPES_PER_CALL` ``InstanceTypes``, answered per zone as
``AvailableSpotZones.AvailableSpotZone[]`` (``ZoneId``) with
``AvailableSpotResources.AvailableSpotResource[]``: ``InstanceType``, ``InterruptionRate`` (a
fraction over the last 30 days), ``InterruptRateDesc`` (``0-5%``) and ``AverageSpotDiscount``.
The RAM action is ``ecs:DescribeSpotAdvice``.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable
from datetime import UTC, datetime
from functools import partial

from providers.alibaba.client import AlibabaClient, nested
from provisioner.core.zone_priors import SPOT_ADVICE, ZonePrior

#: the most instance types one DescribeSpotAdvice call takes
TYPES_PER_CALL = 10


class AlibabaPriors:
    """The spot interruption rate of each type per zone."""

    def __init__(self, client: AlibabaClient) -> None:
        self.client = client

    def priors(
        self, regions: Iterable[str] | None = None, instance_types: Iterable[str] = ()
    ) -> builtins.list[ZonePrior]:
        out: builtins.list[ZonePrior] = []
        types = list(dict.fromkeys(instance_types))
        batches = [types[i : i + TYPES_PER_CALL] for i in range(0, len(types), TYPES_PER_CALL)]
        for region in list(regions or self.client.regions):
            models, client = self.client.models(), self.client.ecs(region)
            for batch in batches or [[]]:
                req = models.DescribeSpotAdviceRequest(
                    region_id=region, instance_types=batch or None
                )
                body = self.client.body(
                    self.client.call(
                        "DescribeSpotAdvice", partial(client.describe_spot_advice, req)
                    )
                )
                now = datetime.now(UTC)
                for zone in nested(body, "AvailableSpotZones", "AvailableSpotZone"):
                    resources = nested(zone, "AvailableSpotResources", "AvailableSpotResource")
                    for r in resources:
                        rate = r.get("InterruptionRate")
                        if rate is None or not r.get("InstanceType"):
                            continue
                        out.append(
                            ZonePrior(
                                provider="alibaba",
                                region=region,
                                zone=str(zone.get("ZoneId") or ""),
                                instance_type=str(r["InstanceType"]),
                                kind=SPOT_ADVICE,
                                value=float(rate),
                                label=str(r.get("InterruptRateDesc") or ""),
                                at=now,
                            )
                        )
        return out
