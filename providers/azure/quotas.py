"""Azure quotas: vCPU usage and limits per VM family and for Spot, from the usage API.

``Usage - List`` (``GET /subscriptions/S/providers/Microsoft.Compute/locations/L/usages``,
https://learn.microsoft.com/rest/api/compute/usage/list) answers each quota of the
subscription in a location with ``currentValue`` and ``limit``. Kept: each VM family's vCPUs
(``standardNCADSA100v4Family``: on-demand VMs of that family), ``cores`` (Total Regional
vCPUs: every on-demand VM) and ``lowPriorityCores`` (Total Regional Low-priority vCPUs: every
Spot VM; https://learn.microsoft.com/azure/virtual-machines/spot-vms#quota). A family is
matched to a VM size by its name (``Standard_NC24ads_A100_v4`` -> ``NCADSA100v4``); a size
whose family name does not read so is checked against the regional quotas only.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from providers.azure.client import AzureClient
from provisioner.core.quotas import VCPU, Quota

REGIONAL = {"cores": "on-demand", "lowPriorityCores": "spot"}


class AzureQuotas(AzureClient):
    """The subscription's vCPU quotas per location."""

    def quotas(self, regions: Iterable[str] | None = None) -> builtins.list[Quota]:
        out: builtins.list[Quota] = []
        compute = self.compute
        for location in list(regions or self.locations):

            def read(loc: str = location) -> list[Any]:
                return list(compute.usage.list(loc))

            now = datetime.now(UTC)
            for u in self._call(f"usages {location}", read):
                families: tuple[str, ...]
                name = str(u.name.value or "")
                note = str(u.name.localized_value or "")
                if name in REGIONAL:
                    market, families = REGIONAL[name], ()
                elif name.endswith("Family"):
                    market, families = "on-demand", (name,)
                else:
                    continue
                out.append(
                    Quota(
                        provider="azure",
                        region=location,
                        name=name,
                        note=note,
                        unit=VCPU,
                        limit=float(u.limit),
                        used=float(u.current_value),
                        market=market,
                        families=families,
                        at=now,
                    )
                )
        return out
