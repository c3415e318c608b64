"""The rules of each cloud the sim mimics: its facts, plus the sim-only error codes and state words.

What a cloud *is* (notice length, billing increment and minimum, the spot protection period)
comes from its facts, ``cloud_facts(cloud)`` (``providers/<cloud>/facts.py``); only what the sim
needs to answer like that cloud's API lives here. Notices are served on the metadata endpoint
for every cloud, and reported through the sim's API only where that cloud's API reports them
(:func:`api_reports_notices`). Billing runs over *simulated* time (one
simulated hour = ``seconds_per_hour`` real seconds); notices are in simulated seconds, scaled,
but never under the server's ``notice_floor_s`` real seconds. A spot instance younger than its
cloud's protection period (Alibaba: 1 h) is not reclaimed by the market; a forced preemption
(``preempt``, the demo scenario) ignores it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from providers.facts import CloudFacts, cloud_facts
from providers.sim.config import SimConfig, SimError


@dataclass(frozen=True)
class CloudRules:
    facts: CloudFacts
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
    terminated_reason: str = "terminated by the user"

    @property
    def name(self) -> str:
        return self.facts.name

    @property
    def notice_s(self) -> float:
        """Simulated seconds between the notice and the kill."""
        return self.facts.notice_s

    @property
    def protection_s(self) -> float:
        """The market does not reclaim a spot instance younger than this."""
        return self.facts.spot_protection_s

    @property
    def billing_rule(self) -> str:
        return self.facts.billing.rule

    def billed_seconds(self, seconds: float) -> int:
        """Seconds charged for ``seconds`` of simulated run time."""
        return self.facts.billing.billed_seconds(seconds)


RULES: dict[str, CloudRules] = {
    "aws": CloudRules(
        facts=cloud_facts("aws"),
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
        terminated_reason="Client.UserInitiatedShutdown",
    ),
    "gcp": CloudRules(
        facts=cloud_facts("gcp"),
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
    ),
    "azure": CloudRules(
        facts=cloud_facts("azure"),
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
    ),
    "alibaba": CloudRules(
        facts=cloud_facts("alibaba"),
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
    ),
    "tencent": CloudRules(
        facts=cloud_facts("tencent"),
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
    ),
}


def refuse_price(rules: CloudRules, zone: str, price: float | None, body: dict[str, Any]) -> None:
    """Refuse a spot launch for its price: above the bid it carries (``bid_cap``: the cloud's
    own code; GCP takes no bid), or, with none sent, above the cap its adapter checks before
    sending (``price_ceiling``: ``PriceAboveCap``, as the AWS and GCP adapters refuse it)."""
    if price is None:
        return
    cap, ceiling = body.get("bid_cap"), body.get("price_ceiling")
    if cap is not None and rules.price_code and price > float(cap) + 1e-9:
        why = f"bid cap {cap} is under the spot price {price} in {zone}"
        raise SimError(409, "price-too-low", rules.price_code, why)
    if ceiling is not None and price > float(ceiling) + 1e-9:
        why = f"the spot price {price} in {zone} is above the cap {ceiling} (no bid sent)"
        raise SimError(409, "price-too-low", "PriceAboveCap", why)


def rules_for(cloud: str) -> CloudRules:
    try:
        return RULES[cloud]
    except KeyError:
        raise ValueError(f"the sim does not mimic {cloud!r} (one of {', '.join(RULES)})") from None


def api_reports_notices(cloud: str) -> bool:
    """Whether the sim's API reports a notice on an instance of ``cloud`` as that cloud's API
    does (and its adapter reads it: ``notice_sources.api_read``); where not, the notice is
    served on the instance's metadata endpoint only, as on that cloud."""
    rules = RULES.get(cloud)
    return rules is not None and rules.facts.notice_sources.api_read


def api_reports(event: dict[str, Any], config: SimConfig) -> bool:
    """Whether the sim's API reports ``event`` (a line of ``events.jsonl``): a preemption
    always; a notice where the mimicked cloud's API does (:func:`api_reports_notices`), or as
    the ``api_notices`` option forces."""
    if event.get("kind") == "block-ending":  # EventBridge's warning: no adapter reads it
        return False
    if event.get("kind") != "notice":
        return True
    forced = config.api_notices
    return api_reports_notices(str(event.get("cloud", ""))) if forced is None else forced
