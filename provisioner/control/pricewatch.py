"""Holding running spot instances to their bid cap where the cloud does not.

Under ``bid_cap.enforce: daemon`` (the default on AWS, Azure, Alibaba and GCP: see
docs/clouds.md) a spot launch carries no maximum price, so the cloud never reclaims it for its
price: a cap sent as the bid makes interruptions more frequent, and the cloud's own
price-reclaim gives no notice of why. Instead the daemon reads, each pass, the price in effect
for every running spot instance of such a job (one call per provider at most every 30 s: AWS
DescribeSpotPriceHistory, the sim's market; a cloud without such a read gives the latest quote
the daemon's price refresh stored) and hands it to decide() (``Observations.spot_prices``),
which moves the job made before break, or stops it, once the price passes the cap
(:func:`provisioner.core.decide.pricecap.over_cap`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from policies.model import CapEnforce, Policy
from providers.base import Provider, ProviderError
from providers.capabilities import PriceKey, SpotPricesNow
from providers.facts import cap_enforcement
from provisioner.core.models import Instance, Market, Offer
from provisioner.core.rules import policy_spot_cap

log = logging.getLogger("provisioner.control")

#: how often the daemon reads the running prices of one provider at most: a spot price moves
#: in minutes, not seconds (AWS publishes a change at most every few minutes), and a read of
#: 10,000 instances costs a pass tens of milliseconds
READ_EVERY = timedelta(seconds=30)


def cloud_of(provider: Provider, offer: Offer) -> str:
    """The cloud whose bid rules apply to ``offer``: its provider's, or for the sim the cloud
    the zone mimics."""
    if offer.provider == "sim":
        zone_cloud = getattr(provider, "zone_cloud", None)
        if callable(zone_cloud):
            return str(zone_cloud(offer.zone or offer.region))
        return "aws"
    return offer.provider


def enforcement(provider: Provider, policy: Policy, offer: Offer) -> CapEnforce:
    """Who holds a spot launch of ``offer`` to the policy's cap."""
    return cap_enforcement(cloud_of(provider, offer), policy.bid_cap.enforce)


def has_cap(policy: Policy) -> bool:
    """Whether the policy caps spot prices at all (a share of an unknown on-demand price
    counts: the rules read it as 0)."""
    return math.isfinite(policy_spot_cap(policy, 1, None))


def price_key(instance: Instance) -> PriceKey:
    return (instance.region, instance.zone, instance.instance_type)


def watched(
    provider: Provider, policy: Policy, offer: Offer | None, live: Iterable[Instance]
) -> list[PriceKey]:
    """The running spot instances of one job the daemon reads the price of: under
    ``daemon`` enforcement, with a cap to hold them to."""
    if offer is None or not has_cap(policy):
        return []
    if enforcement(provider, policy, offer) is not CapEnforce.DAEMON:
        return []
    return [price_key(i) for i in live if i.market is Market.SPOT and i.state.alive]


def read(
    provider: Provider, keys: Iterable[PriceKey], stored: Mapping[PriceKey, float]
) -> dict[PriceKey, float]:
    """The price in effect now for each key: read live where the adapter can, else (or where
    the read failed) the latest stored quote. A key with neither is left out (decide() then
    keeps to the price it launched at)."""
    wanted = sorted(set(keys))
    if not wanted:
        return {}
    out: dict[PriceKey, float] = {}
    if isinstance(provider, SpotPricesNow):
        try:
            out = dict(provider.spot_prices_now(wanted))
        except ProviderError as exc:
            log.warning("reading spot prices failed: %s; the stored quotes stand", exc)
    for key in wanted:
        if key not in out and key in stored:
            out[key] = stored[key]
    return {k: v for k, v in out.items() if math.isfinite(v)}


def stored_quotes(rows: Iterable[Any]) -> dict[str, dict[PriceKey, float]]:
    """The newest stored spot quote per provider and (region, zone, type), from the store's
    price rows (``provider``, ``region``, ``zone``, ``instance_type``, ``spot_price``, ``at``)."""
    best: dict[str, dict[PriceKey, tuple[datetime, float]]] = {}
    for r in rows:
        if r.spot_price is None or r.at is None:
            continue
        mine = best.setdefault(str(r.provider), {})
        key = (str(r.region), str(r.zone), str(r.instance_type))
        if key not in mine or mine[key][0] < r.at:
            mine[key] = (r.at, float(r.spot_price))
    return {p: {k: v for k, (_, v) in keys.items()} for p, keys in best.items()}
