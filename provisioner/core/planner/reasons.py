"""The planner's rejection reasons, in the order its rules are applied, and the tally of what
each rejected (how many candidates, and a few of them described). Pure."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from provisioner.core.models import Market, Offer

# Reasons, in the order the rules are applied.
REASONS = (
    "provider",  # cloud not in residency.providers
    "gpu_model",  # GPU not in resources.gpus (or excluded)
    "vram",  # GPU memory below the need
    "gpu_count",  # fewer/more GPUs than resources.gpu_count
    "cpu_memory",  # below min_vcpus / min_memory_gib
    "interconnect",  # GPU links, network bandwidth or RDMA fabric below resources.interconnect
    "measured",  # probes measured it below resources.min_measured_fraction of its datasheet
    "residency",  # region outside the allowed jurisdictions/countries, or denied ones
    "denied_region",  # region listed in deny_regions / not in allow_regions
    "market",  # no price on this market (e.g. no spot market)
    "bid_cap",  # spot price above the bid cap
    "budget_hourly",  # price above budget.max_price_per_hour
    "latency",  # estimated RTT above latency.max_rtt_ms (or unknown with a limit)
    "deadline",  # estimated duration ends after the deadline
    "budget_total",  # what the launch costs at least (billing minimum, work left) > budget left
    "cooldown",  # zone recently preempted (restart.zone_cooldown)
    "unavailable",  # reported without capacity by the caller's context
    "gang_capacity",  # fewer nodes known to be there than resources.nodes (a gang)
    "quota",  # more than the account's remaining quota (PlanContext.quotas)
    "window",  # outside the policy's time windows now (the job waits for the next one)
    "reservation",  # held capacity the policy does not name, not usable now, or too small
)
#: reason -> its code in the planner's code columns (0: no rule broken)
CODE = {r: i + 1 for i, r in enumerate(REASONS)}
EXAMPLES_PER_REASON = 3


@dataclass
class Tally:
    """Rejected candidates per reason, and up to :data:`EXAMPLES_PER_REASON` described."""

    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(REASONS, 0))
    examples: dict[str, list[str]] = field(default_factory=lambda: {r: [] for r in REASONS})

    def room(self, reason: str) -> int:
        """How many more examples ``reason`` keeps."""
        return EXAMPLES_PER_REASON - len(self.examples[reason])


def describe(o: Offer, market: Market) -> str:
    price = o.price_for(market)
    where = o.zone or o.region
    p = f"${price:.4g}/h" if price is not None else "no price"
    return f"{o.provider}:{where} {o.instance_type} ({o.gpu_count}x{o.gpu}) {market.value} {p}"


def example(o: Offer, market: Market, reason: str, cap: float, rtt: float, hours: float) -> str:
    text = describe(o, market)
    if reason == "bid_cap" and math.isfinite(cap):
        text += f" > cap ${cap:.4g}/h"
    elif reason == "latency" and not math.isnan(rtt):
        text += f" ~{rtt:.0f} ms"
    elif reason == "deadline" and not math.isnan(hours):
        text += f" ~{hours:.1f} h"
    return text
