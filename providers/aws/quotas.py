"""AWS quotas: the GPU families' vCPU limits from Service Quotas.

``GetServiceQuota`` (``ServiceCode=ec2``) for each code in :data:`GPU_QUOTAS`: the running
on-demand and the spot request limits of the P and the G/VT families, in vCPUs per region
(https://docs.aws.amazon.com/servicequotas/2019-06-24/apireference/API_GetServiceQuota.html;
the codes: https://docs.aws.amazon.com/ec2/latest/instancetypes/ec2-instance-quotas.html).
Service Quotas gives the limit, not the usage (that is a CloudWatch ``AWS/Usage`` metric, not
read here): the whole limit counts as left, which is what stops a launch on an account whose
P or G spot quota is 0, the common case. A code the account does not have is skipped.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable
from datetime import UTC, datetime
from functools import partial
from typing import Any

from providers.aws.client import AWSClient
from providers.aws.errors import classify
from providers.base import ErrorKind, ProviderError, call_with_retries
from provisioner.core.quotas import VCPU, Quota

#: code -> (name, market, instance families it covers)
GPU_QUOTAS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "L-417A185B": ("Running On-Demand P instances", "on-demand", ("p",)),
    "L-DB2E81BA": ("Running On-Demand G and VT instances", "on-demand", ("g", "vt")),
    "L-7212CCBC": ("All P Spot Instance Requests", "spot", ("p",)),
    "L-3819A6DF": ("All G and VT Spot Instance Requests", "spot", ("g", "vt")),
}


class AWSQuotas(AWSClient):
    """The account's GPU quotas (Service Quotas, one client per region)."""

    def quotas_client(self, region: str) -> Any:
        with self._lock:
            key = f"service-quotas:{region}"
            client = self._clients.get(key)
            if client is None:
                client = self._new_client("service-quotas", region, self.endpoint)
                self._clients[key] = client
            return client

    def quotas(self, regions: Iterable[str] | None = None) -> builtins.list[Quota]:
        out: builtins.list[Quota] = []
        for region in list(regions or self.regions):
            client = self.quotas_client(region)
            for code, (name, market, families) in GPU_QUOTAS.items():
                ask = partial(client.get_service_quota, ServiceCode="ec2", QuotaCode=code)
                try:
                    answer: dict[str, Any] = call_with_retries(
                        ask,
                        classify,
                        policy=self.retry,
                        what=f"aws GetServiceQuota {code} ({region})",
                    )
                except ProviderError as exc:
                    if exc.kind is ErrorKind.NOT_FOUND or exc.code == "NoSuchResourceException":
                        continue
                    raise
                value = answer.get("Quota", {}).get("Value")
                if value is None:
                    continue
                out.append(
                    Quota(
                        provider="aws",
                        region=region,
                        name=code,
                        note=str(answer["Quota"].get("QuotaName") or name),
                        unit=VCPU,
                        limit=float(value),
                        used=None,
                        market=market,
                        families=families,
                        at=datetime.now(UTC),
                    )
                )
        return out
