"""EC2's GPU quotas for moto's server, whose Service Quotas knows only ``vpc`` codes.

:func:`install` makes moto's ``ServiceQuotasBackend.get_service_quota`` answer, in this
process (the contract harness's ``ThreadedMotoServer`` runs here), ``ServiceCode=ec2`` with
the quotas in :data:`EC2_QUOTAS` (a test sets their values), in the shape of the Service Quotas
API reference (``GetServiceQuota``: ``Quota`` with ``ServiceCode``, ``ServiceName``,
``QuotaArn``, ``QuotaCode``, ``QuotaName``, ``Value``, ``Unit``, ``Adjustable``,
``GlobalQuota``); an unknown code is ``NoSuchResourceException``, as the service answers. This
touches moto internals (pinned < 5.3).
"""

from __future__ import annotations

from typing import Any

#: QuotaCode -> (QuotaName, Value): the account's EC2 quotas as the fake serves them
EC2_QUOTAS: dict[str, tuple[str, float]] = {
    "L-417A185B": ("Running On-Demand P instances", 384.0),
    "L-DB2E81BA": ("Running On-Demand G and VT instances", 64.0),
    "L-7212CCBC": ("All P Spot Instance Requests", 0.0),
    "L-3819A6DF": ("All G and VT Spot Instance Requests", 8.0),
}

_installed = False


def install() -> None:
    global _installed
    if _installed:
        return
    from moto.servicequotas.exceptions import NoSuchResource
    from moto.servicequotas.models import ServiceQuotasBackend

    original = ServiceQuotasBackend.get_service_quota

    def get_service_quota(
        self: ServiceQuotasBackend, service_code: str, quota_code: str
    ) -> dict[str, Any]:
        if service_code != "ec2":
            return original(self, service_code, quota_code)
        if quota_code not in EC2_QUOTAS:
            raise NoSuchResource
        name, value = EC2_QUOTAS[quota_code]
        return {
            "Adjustable": True,
            "GlobalQuota": False,
            "QuotaArn": f"arn:aws:servicequotas:{self.region_name}::ec2/{quota_code}",
            "QuotaCode": quota_code,
            "QuotaName": name,
            "ServiceCode": "ec2",
            "ServiceName": "Amazon Elastic Compute Cloud (Amazon EC2)",
            "Unit": "None",
            "Value": value,
        }

    ServiceQuotasBackend.get_service_quota = get_service_quota  # type: ignore[method-assign]
    _installed = True
