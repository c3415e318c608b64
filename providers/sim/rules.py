"""The rules of each cloud the sim mimics: notice, billing, error codes, state words.

Billing (over *simulated* time; one simulated hour = ``seconds_per_hour`` real seconds):

| cloud   | increment        | minimum | notes |
| ------- | ---------------- | ------- | ----- |
| aws     | per second       | 60 s    | Linux on-demand and spot |
| gcp     | per second       | 60 s    | |
| azure   | per minute (up)  | 60 s    | each started minute is billed |
| alibaba | per second       | none    | pay-as-you-go, settled hourly; spot has a 1 h protection period |
| tencent | per second       | none    | pay-as-you-go (spot: SPOTPAID), settled hourly |

Notices (simulated seconds; scaled, but never under the server's ``notice_floor_s`` real
seconds): AWS 120, GCP 30, Azure 30, Alibaba 120, Tencent 120. Alibaba spot instances are not
reclaimed by the market during their first simulated hour (the protection period); a forced
preemption (``preempt``, the demo scenario) ignores it.

Facts from each cloud's documentation, not checked against a live account.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class CloudRules:
    name: str
    notice_s: float  # simulated seconds between the notice and the kill
    increment_s: int  # billing granularity (1: per second, 60: per started minute)
    minimum_s: int  # shortest billed duration
    protection_s: float  # the market does not reclaim a spot instance younger than this
    capacity_code: str
    price_code: str | None  # None: the cloud takes no bid (GCP)
    quota_code: str
    throttle_code: str
    auth_code: str
    not_found_code: str
    raw_running: str
    raw_terminated: str
    raw_preempted: str
    preempted_reason: str
    billing_rule: str

    def billed_seconds(self, seconds: float) -> int:
        """Seconds charged for ``seconds`` of simulated run time."""
        used = max(0.0, seconds)
        rounded = math.ceil(used / self.increment_s - 1e-9) * self.increment_s
        return int(max(rounded, self.minimum_s))


RULES: dict[str, CloudRules] = {
    "aws": CloudRules(
        name="aws",
        notice_s=120.0,
        increment_s=1,
        minimum_s=60,
        protection_s=0.0,
        capacity_code="InsufficientInstanceCapacity",
        price_code="SpotMaxPriceTooLow",
        quota_code="VcpuLimitExceeded",
        throttle_code="RequestLimitExceeded",
        auth_code="AuthFailure",
        not_found_code="InvalidInstanceID.NotFound",
        raw_running="running",
        raw_terminated="terminated",
        raw_preempted="terminated",
        preempted_reason="Server.SpotInstanceTermination: Spot instance termination",
        billing_rule="per second, 60 s minimum",
    ),
    "gcp": CloudRules(
        name="gcp",
        notice_s=30.0,
        increment_s=1,
        minimum_s=60,
        protection_s=0.0,
        capacity_code="ZONE_RESOURCE_POOL_EXHAUSTED",
        price_code=None,
        quota_code="QUOTA_EXCEEDED",
        throttle_code="rateLimitExceeded",
        auth_code="PERMISSION_DENIED",
        not_found_code="notFound",
        raw_running="RUNNING",
        raw_terminated="TERMINATED",
        raw_preempted="TERMINATED",
        preempted_reason="compute.instances.preempted: Instance was preempted.",
        billing_rule="per second, 60 s minimum",
    ),
    "azure": CloudRules(
        name="azure",
        notice_s=30.0,
        increment_s=60,
        minimum_s=60,
        protection_s=0.0,
        capacity_code="ZonalAllocationFailed",
        price_code="SpotPriceGreaterThanProvidedMaxPrice",
        quota_code="OperationNotAllowed",
        throttle_code="TooManyRequests",
        auth_code="AuthenticationFailed",
        not_found_code="ResourceNotFound",
        raw_running="PowerState/running",
        raw_terminated="PowerState/deallocated",
        raw_preempted="PowerState/deallocated",
        preempted_reason="Preempt: the Spot VM was evicted (capacity)",
        billing_rule="per started minute",
    ),
    "alibaba": CloudRules(
        name="alibaba",
        notice_s=120.0,
        increment_s=1,
        minimum_s=0,
        protection_s=3600.0,
        capacity_code="OperationDenied.NoStock",
        price_code="InvalidSpotPriceLimit.LowerThanPublicPrice",
        quota_code="QuotaExceed.PostPaidInstance",
        throttle_code="Throttling.User",
        auth_code="InvalidAccessKeyId.NotFound",
        not_found_code="InvalidInstanceId.NotFound",
        raw_running="Running",
        raw_terminated="Stopped",
        raw_preempted="Stopped",
        preempted_reason="Recycling: the spot instance was reclaimed",
        billing_rule="per second, no minimum",
    ),
    "tencent": CloudRules(
        name="tencent",
        notice_s=120.0,
        increment_s=1,
        minimum_s=0,
        protection_s=0.0,
        capacity_code="ResourceInsufficient.AvailabilityZoneSoldOut",
        price_code="InvalidParameterValue.InsufficientPrice",
        quota_code="LimitExceeded.SpotQuota",
        throttle_code="RequestLimitExceeded",
        auth_code="AuthFailure.SignatureFailure",
        not_found_code="InvalidInstanceId.NotFound",
        raw_running="RUNNING",
        raw_terminated="TERMINATED",
        raw_preempted="TERMINATED",
        preempted_reason="SPOT_PAID_INSTANCE_RECYCLED: the spot instance was reclaimed",
        billing_rule="per second, no minimum",
    ),
}


def rules_for(cloud: str) -> CloudRules:
    try:
        return RULES[cloud]
    except KeyError:
        raise ValueError(f"the sim does not mimic {cloud!r} (one of {', '.join(RULES)})") from None
