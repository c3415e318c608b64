"""Azure quotas: vCPU usage and limits per VM family and for Spot, from the usage API.

``Usage - List`` (``GET /subscriptions/S/providers/Microsoft.Compute/locations/L/usages``,
https://learn.microsoft.com/rest/api/compute/usage/list) answers each quota of the
subscription in a location with ``currentValue`` and ``limit``. Kept: each VM family's vCPUs
(``standardNCASv3_T4Family``: on-demand VMs of that family), ``cores`` (Total Regional vCPUs:
every on-demand VM) and ``lowPriorityCores`` (Total Regional Low-priority vCPUs: every Spot
VM; https://learn.microsoft.com/azure/virtual-machines/spot-vms#quota).

Which family a size draws on cannot be read off its name (``Standard_NC4as_T4_v3`` is in
``standardNCASv3_T4Family``, ``Standard_ND96isr_H100_v5`` in ``standardNDSH100v5Family``):
:data:`USAGE_FAMILIES` lists the GPU families with their sizes, as the Compute SKUs API
(``Microsoft.Compute/skus``) gives each size's ``family``, the name its vCPUs are counted
under in the usage API (spelled there without spaces, in varying case: names are compared
by :func:`provisioner.core.quotas.azure_family_key`). A family quota read from the cloud
carries its sizes, so the planner holds each size to its own family; a family not in the
table keeps its own name only (and a size it does not match is held to the regional quotas).
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from providers.azure.client import AzureClient
from provisioner.core.quotas import VCPU, Quota, azure_family_key

REGIONAL = {"cores": "on-demand", "lowPriorityCores": "spot"}

#: usage name of a GPU VM family -> its sizes (Microsoft.Compute/skus ``family``; one size of
#: each series is enough, the others of the series match it through azure_family_key)
USAGE_FAMILIES: dict[str, tuple[str, ...]] = {
    # K80, P100, V100 (NC, NCv2, NCv3; the promo sizes are a family of their own)
    "standardNCFamily": ("Standard_NC6", "Standard_NC24r"),
    "standardNCPromoFamily": ("Standard_NC6_Promo", "Standard_NC24r_Promo"),
    "standardNCSv2Family": ("Standard_NC6s_v2", "Standard_NC24rs_v2"),
    "standardNCSv3Family": ("Standard_NC6s_v3", "Standard_NC24rs_v3"),
    # T4, A10, A100, H100 NVL
    "standardNCASv3_T4Family": ("Standard_NC4as_T4_v3",),
    "standardNCADSA10v4Family": ("Standard_NC8ads_A10_v4",),
    "standardNCADSA100v4Family": ("Standard_NC24ads_A100_v4",),
    "standardNCadsH100v5Family": ("Standard_NC40ads_H100_v5", "Standard_NC80adis_H100_v5"),
    "standardNCCads2023Family": ("Standard_NCC40ads_H100_v5",),
    # P40, V100 32 GB, A100 40/80 GB, H100, H200, MI300X (ND)
    "standardNDSFamily": ("Standard_ND6s", "Standard_ND24rs"),
    "standardNDSv2Family": ("Standard_ND40rs_v2",),
    "standardNDASv4_A100Family": ("Standard_ND96asr_v4",),
    "standardNDAMSv4_A100Family": ("Standard_ND96amsr_A100_v4",),
    "standardNDSH100v5Family": ("Standard_ND96isr_H100_v5",),
    "standardNDISRH200V5Family": ("Standard_ND96isr_H200_v5",),
    "standardNDISv5MI300XFamily": ("Standard_ND96is_MI300X_v5", "Standard_ND96isr_MI300X_v5"),
    # M60, MI25, A10, V620, V710 (NV, NG)
    "standardNVFamily": ("Standard_NV6",),
    "standardNVPromoFamily": ("Standard_NV6_Promo",),
    "standardNVSv2Family": ("Standard_NV6s_v2",),
    "standardNVSv3Family": ("Standard_NV12s_v3",),
    "standardNVSv4Family": ("Standard_NV4as_v4",),
    "standardNVADSA10v5Family": ("Standard_NV6ads_A10_v5", "Standard_NV36adms_A10_v5"),
    "standardNGADSV620v1Family": ("Standard_NG8ads_V620_v1", "Standard_NG32adms_V620_v1"),
    "standardNVadsV710v5Family": ("Standard_NV4ads_V710_v5", "Standard_NV28adms_V710_v5"),
}

_BY_NAME = {azure_family_key(name): name for name in USAGE_FAMILIES}
_BY_SERIES = {
    azure_family_key(size): name for name, sizes in USAGE_FAMILIES.items() for size in sizes
}


def usage_family(size: str) -> str | None:
    """The usage name of the family a VM size draws on (``Standard_NC4as_T4_v3`` ->
    ``standardNCASv3_T4Family``); None: not a family this table knows."""
    key = azure_family_key(size)
    return _BY_SERIES.get(key) or _BY_NAME.get(key)


def family_sizes(usage_name: str) -> tuple[str, ...]:
    """The sizes of a family by its usage name in any spelling (() where not known)."""
    name = _BY_NAME.get(azure_family_key(usage_name))
    return USAGE_FAMILIES[name] if name else ()


class AzureQuotas:
    """The subscription's vCPU quotas per location."""

    def __init__(self, client: AzureClient) -> None:
        self.client = client

    def quotas(self, regions: Iterable[str] | None = None) -> builtins.list[Quota]:
        out: builtins.list[Quota] = []
        compute = self.client.compute
        for location in list(regions or self.client.locations):

            def read(loc: str = location) -> list[Any]:
                return list(compute.usage.list(loc))

            now = datetime.now(UTC)
            for u in self.client.call(f"usages {location}", read):
                families: tuple[str, ...]
                name = str(u.name.value or "")
                note = str(u.name.localized_value or "")
                if name in REGIONAL:
                    market, families = REGIONAL[name], ()
                elif name.replace(" ", "").lower().endswith("family"):
                    market, families = "on-demand", (name, *family_sizes(name))
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
