"""AWS availability priors: Spot placement scores and the spot price history's volatility.

* ``GetSpotPlacementScores`` (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_GetSpotPlacementScores.html):
  one call per instance type (``InstanceTypes``, ``TargetCapacity`` 1 in units,
  ``SingleAvailabilityZone`` true, up to 10 ``RegionNames``), answered per zone as
  ``SpotPlacementScores[]`` with ``Region``, ``AvailabilityZoneId`` (``use1-az1``) and
  ``Score`` (1-10: how likely a spot request of that size is to succeed there now). Zone ids
  are turned into the account's zone names with ``DescribeAvailabilityZones``. The IAM
  action is ``ec2:GetSpotPlacementScores``.
* ``DescribeSpotPriceHistory`` over :data:`HISTORY_DAYS` days per region: the coefficient of
  variation of each zone's prices for a type (kept where it has two prices or more).
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from providers.aws.client import AWSClient
from provisioner.core.zone_priors import PLACEMENT_SCORE, PRICE_VOLATILITY, ZonePrior, volatility

#: the most regions one GetSpotPlacementScores call takes
REGIONS_PER_CALL = 10
#: how far back the price history is read
HISTORY_DAYS = 7


class AWSPriors:
    """Placement scores and price volatility per zone and instance type."""

    def __init__(self, client: AWSClient) -> None:
        self.client = client

    def priors(
        self, regions: Iterable[str] | None = None, instance_types: Iterable[str] = ()
    ) -> builtins.list[ZonePrior]:
        wanted = list(regions or self.client.regions)
        types = list(dict.fromkeys(instance_types))
        if not types:
            return []
        return [*self.placement_scores(wanted, types), *self.price_volatility(wanted, types)]

    def _zone_names(self, region: str) -> dict[str, str]:
        """Zone id -> zone name in ``region`` (the account's mapping)."""
        answer = self.client.call(
            region, "DescribeAvailabilityZones", lambda ec2: ec2.describe_availability_zones()
        )
        return {
            str(z["ZoneId"]): str(z["ZoneName"])
            for z in answer.get("AvailabilityZones", [])
            if z.get("ZoneId") and z.get("ZoneName")
        }

    def placement_scores(
        self, regions: builtins.list[str], types: builtins.list[str]
    ) -> builtins.list[ZonePrior]:
        out: builtins.list[ZonePrior] = []
        names: dict[str, dict[str, str]] = {}
        for start in range(0, len(regions), REGIONS_PER_CALL):
            batch = regions[start : start + REGIONS_PER_CALL]
            for itype in types:

                def ask(ec2: Any, itype: str = itype, batch: list[str] = batch) -> list[Any]:
                    rows: list[Any] = []
                    kwargs: dict[str, Any] = {
                        "InstanceTypes": [itype],
                        "TargetCapacity": 1,
                        "TargetCapacityUnitType": "units",
                        "SingleAvailabilityZone": True,
                        "RegionNames": batch,
                    }
                    while True:
                        page = ec2.get_spot_placement_scores(**kwargs)
                        rows.extend(page.get("SpotPlacementScores", []))
                        token = page.get("NextToken")
                        if not token:
                            return rows
                        kwargs["NextToken"] = token

                now = datetime.now(UTC)
                for row in self.client.call(
                    self.client.region, f"GetSpotPlacementScores {itype}", ask
                ):
                    region = str(row.get("Region") or "")
                    if region not in batch or row.get("Score") is None:
                        continue
                    if region not in names:
                        names[region] = self._zone_names(region)
                    zone_id = str(row.get("AvailabilityZoneId") or "")
                    out.append(
                        ZonePrior(
                            provider="aws",
                            region=region,
                            zone=names[region].get(zone_id, zone_id),
                            instance_type=itype,
                            kind=PLACEMENT_SCORE,
                            value=float(row["Score"]),
                            label=zone_id,
                            at=now,
                        )
                    )
        return out

    def price_volatility(
        self, regions: builtins.list[str], types: builtins.list[str]
    ) -> builtins.list[ZonePrior]:
        out: builtins.list[ZonePrior] = []
        for region in regions:

            def fetch(ec2: Any, types: list[str] = types) -> dict[tuple[str, str], list[float]]:
                seen: dict[tuple[str, str], list[float]] = {}
                pages = ec2.get_paginator("describe_spot_price_history").paginate(
                    **self.client.pages(
                        InstanceTypes=types,
                        ProductDescriptions=["Linux/UNIX"],
                        StartTime=datetime.now(UTC) - timedelta(days=HISTORY_DAYS),
                    )
                )
                for page in pages:
                    for row in page["SpotPriceHistory"]:
                        key = (str(row["AvailabilityZone"]), str(row["InstanceType"]))
                        seen.setdefault(key, []).append(float(row["SpotPrice"]))
                return seen

            now = datetime.now(UTC)
            for (zone, itype), prices in self.client.call(
                region, "DescribeSpotPriceHistory", fetch
            ).items():
                cv = volatility(prices)
                if cv is None:
                    continue
                out.append(
                    ZonePrior(
                        "aws",
                        region,
                        zone,
                        itype,
                        PRICE_VOLATILITY,
                        cv,
                        f"{len(prices)} prices",
                        now,
                    )
                )
        return out
