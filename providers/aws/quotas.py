"""AWS quotas: the GPU families' vCPU limits from Service Quotas, and their usage counted from
the instances running when they are read.

``GetServiceQuota`` (``ServiceCode=ec2``) for each code in :data:`GPU_QUOTAS`: the running
on-demand and the spot request limits of the P and the G/VT families, in vCPUs per region
(https://docs.aws.amazon.com/servicequotas/2019-06-24/apireference/API_GetServiceQuota.html;
the codes: https://docs.aws.amazon.com/ec2/latest/instancetypes/ec2-instance-quotas.html).
A code the account does not have is skipped.

Service Quotas gives the limit, not the usage. The usage is counted from ``DescribeInstances``
(every pending or running instance of the account in the region, not only ours): each
instance's type's vCPUs (``DescribeInstanceTypes``' ``DefaultVCpus``, as ``plan`` counts an
offer), summed per quota by market (``InstanceLifecycle`` ``spot`` or not) and family. Chosen
over the quota's CloudWatch usage metric (``AWS/Usage`` ``ResourceCount``) because it is what
runs at the moment of the read, not a per-minute figure published later; it needs no
CloudWatch permission beyond the ``ec2:Describe*`` the adapter already uses; and it counts as
the planner counts. It does not see a spot request still open without an instance (the adapter
launches spot through ``RunInstances``, which leaves none). Where the instances cannot be read
(no permission), the limit is kept alone and the whole of it counts as left, as the quota's
``source`` says.
"""

from __future__ import annotations

import builtins
import logging
from collections.abc import Iterable
from datetime import UTC, datetime
from functools import partial
from typing import Any

from providers.aws.client import AWSClient, EC2Client
from providers.aws.errors import classify
from providers.aws.offers import AWSOffers
from providers.base import ErrorKind, ProviderError, call_with_retries
from provisioner.core.quotas import FROM_COUNT, FROM_LIMIT, VCPU, Quota, aws_family

log = logging.getLogger("provisioner.providers.aws")

#: code -> (name, market, instance families it covers)
GPU_QUOTAS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "L-417A185B": ("Running On-Demand P instances", "on-demand", ("p",)),
    "L-DB2E81BA": ("Running On-Demand G and VT instances", "on-demand", ("g", "vt")),
    "L-7212CCBC": ("All P Spot Instance Requests", "spot", ("p",)),
    "L-3819A6DF": ("All G and VT Spot Instance Requests", "spot", ("g", "vt")),
}
#: the families any of those quotas covers (what the count keeps)
_FAMILIES = tuple(sorted({f for _, _, fams in GPU_QUOTAS.values() for f in fams}))
#: the states whose instances hold quota
_HOLDING = ["pending", "running"]


class AWSQuotas:
    """The account's GPU quotas (Service Quotas, one client per region) and their usage (the
    vCPUs of the types ``offers`` has described are not asked again)."""

    def __init__(self, client: AWSClient, offers: AWSOffers) -> None:
        self.client = client
        self.offers = offers

    def quotas_client(self, region: str) -> Any:
        return self.client.service("service-quotas", region)

    def quotas(self, regions: Iterable[str] | None = None) -> builtins.list[Quota]:
        out: builtins.list[Quota] = []
        for region in list(regions or self.client.regions):
            client = self.quotas_client(region)
            limits: builtins.list[tuple[str, str, str, tuple[str, ...], float]] = []
            for code, (name, market, families) in GPU_QUOTAS.items():
                ask = partial(client.get_service_quota, ServiceCode="ec2", QuotaCode=code)
                try:
                    answer: dict[str, Any] = call_with_retries(
                        ask,
                        classify,
                        policy=self.client.retry,
                        what=f"aws GetServiceQuota {code} ({region})",
                    )
                except ProviderError as exc:
                    if exc.kind is ErrorKind.NOT_FOUND or exc.code == "NoSuchResourceException":
                        continue
                    raise
                value = answer.get("Quota", {}).get("Value")
                if value is None:
                    continue
                note = str(answer["Quota"].get("QuotaName") or name)
                limits.append((code, note, market, families, float(value)))
            if not limits:
                continue
            at = datetime.now(UTC)
            running = self.vcpus_in_use(region)
            for code, note, market, families, limit in limits:
                used = None
                if running is not None:
                    used = sum(
                        n
                        for (m, fam), n in running.items()
                        if m == market and any(fam.startswith(f) for f in families)
                    )
                out.append(
                    Quota(
                        provider="aws",
                        region=region,
                        name=code,
                        note=note,
                        unit=VCPU,
                        limit=limit,
                        used=used,
                        market=market,
                        families=families,
                        at=at,
                        source=FROM_LIMIT if used is None else FROM_COUNT,
                    )
                )
        return out

    def vcpus_in_use(self, region: str) -> dict[tuple[str, str], float] | None:
        """(market, instance family) -> vCPUs of the account's pending and running P, G and VT
        instances in ``region``; None where the instances cannot be read (logged)."""

        def fetch(ec2: EC2Client) -> dict[tuple[str, str], int]:
            found: dict[tuple[str, str], int] = {}
            pages = ec2.get_paginator("describe_instances").paginate(
                **self.client.pages(Filters=[{"Name": "instance-state-name", "Values": _HOLDING}])
            )
            for page in pages:
                for reservation in page.get("Reservations") or ():
                    for inst in reservation.get("Instances") or ():
                        itype = str(inst.get("InstanceType") or "")
                        if not aws_family(itype).startswith(_FAMILIES):
                            continue
                        market = "spot" if inst.get("InstanceLifecycle") == "spot" else "on-demand"
                        key = (market, itype)
                        found[key] = found.get(key, 0) + 1
            return found

        try:
            counts = self.client.call(region, "DescribeInstances (quota usage)", fetch)
            vcpus = self._default_vcpus(region, sorted({t for _, t in counts}))
        except ProviderError as exc:
            log.warning(
                "aws: quota usage in %s not read (%s %s); the whole limits count as left",
                region,
                exc.kind.value,
                exc.code,
            )
            return None
        used: dict[tuple[str, str], float] = {}
        for (market, itype), n in counts.items():
            key = (market, aws_family(itype))
            used[key] = used.get(key, 0.0) + n * vcpus.get(itype, 0.0)
        return used

    def _default_vcpus(self, region: str, types: builtins.list[str]) -> dict[str, float]:
        """Instance type -> its default vCPUs (types known from the offers are not asked)."""
        known = {
            str(t["InstanceType"]): float(t.get("VCpuInfo", {}).get("DefaultVCpus", 0))
            for t in self.offers.gpu_types.get(region, ())
        }
        missing = [t for t in types if t not in known]
        if missing:

            def fetch(ec2: EC2Client) -> dict[str, float]:
                got: dict[str, float] = {}
                for i in range(0, len(missing), 100):  # at most 100 types per call
                    answer = ec2.describe_instance_types(InstanceTypes=missing[i : i + 100])
                    for t in answer.get("InstanceTypes") or ():
                        vcpus = t.get("VCpuInfo", {}).get("DefaultVCpus", 0)
                        got[str(t["InstanceType"])] = float(vcpus)
                return got

            known.update(self.client.call(region, "DescribeInstanceTypes (quota usage)", fetch))
        return known
