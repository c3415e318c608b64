"""The policy's hard rules, one scalar function per check (pure).

Each rule answers for one placement (or one region, one spend) and is the single statement of
that check: :func:`provisioner.core.decide.decide` filters its candidates with
:func:`launchable`, the reconciler's launch guard (:func:`provisioner.control.guard.guard_launch`)
refuses a launch that :func:`launch_violation` objects to, and the planner's vectorised masks
(:mod:`provisioner.core.planner`) are property-tested against these functions
(``tests/core/test_rules.py``).

Checks:

* :func:`region_allowed` — residency: providers, jurisdictions (allow/deny), region lists;
* :func:`spot_cap` — the tightest spot bid cap (the placement's and the policy's);
* :func:`bid_caps` — the policy's bid-cap formula, written once: over one offer's floats
  (:func:`policy_spot_cap`, :func:`fixed_spot_cap`: decide(), the guard) and over the
  planner's columns (:func:`spot_caps`);
* :func:`over_bid_cap` — a spot price above that cap;
* :func:`over_hourly_budget` — a price above ``budget.max_price_per_hour``;
* :func:`budget_spent` — ``budget.max_total`` already spent;
* :func:`fits_budget` — the remaining work at this price still fits ``budget.max_total``.

What a launch costs at least (the cloud's billing minimum, the run to the next pass) and the
predicate plan and the daemon share over all of these are in :mod:`provisioner.core.admission`.

Bid caps are per instance (each node of a gang sends the cap with its launch); budgets are per
job (a gang's hour is :func:`hourly_cost`, every node).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from policies.model import BidCap, Policy
from provisioner.core.models import Market, Placement
from provisioner.core.regions import regions

if TYPE_CHECKING:
    import numpy as np

#: a number or a numpy column of them (the bid-cap formula is written once over both)
N = TypeVar("N", float, "np.ndarray")

#: Slack for float noise on money comparisons (never a policy margin).
EPS_USD = 1e-12


def region_matches(spec: str, provider: str, region: str) -> bool:
    """``spec`` is ``region`` or ``provider:region``."""
    if ":" in spec:
        p, _, r = spec.partition(":")
        return p == provider and r == region
    return spec == region


def residency_violation(policy: Policy, provider: str, region: str) -> str | None:
    """Which residency rule (the planner's reason name) ``provider:region`` breaks, or None:
    ``provider`` (cloud not allowed), ``residency`` (jurisdiction; an unknown region cannot
    be shown compliant), ``denied_region`` (region lists)."""
    res = policy.residency
    if res.providers and provider not in res.providers:
        return "provider"
    if res.allow or res.deny:
        reg = regions().get((provider, region))
        if reg is None:
            return "residency"
        if res.allow and not reg.in_any(set(res.allow)):
            return "residency"
        if res.deny and reg.in_any(set(res.deny)):
            return "residency"
    if res.allow_regions and not any(
        region_matches(s, provider, region) for s in res.allow_regions
    ):
        return "denied_region"
    if any(region_matches(s, provider, region) for s in res.deny_regions):
        return "denied_region"
    return None


def region_allowed(policy: Policy, provider: str, region: str) -> bool:
    """The residency rules for one region: providers, jurisdictions, region lists."""
    return residency_violation(policy, provider, region) is None


def bid_caps(bid: BidCap, gpu_count: N, on_demand: N, ops: CapOps[N], *, share: bool = True) -> N:
    """The policy's spot bid cap per instance (inf: none), the one statement of the formula:
    the tightest of ``max_spot_price_per_hour``, ``max_spot_price_per_gpu_hour`` times the
    instance's GPUs and ``max_fraction_of_on_demand`` of its on-demand price. A share of an
    unknown on-demand price (NaN) cannot be honoured: 0 (nothing passes). ``share=False``:
    only the caps that need no on-demand price. ``ops`` is the arithmetic: :data:`SCALAR`
    (one offer, floats: the daemon's hot path) or :func:`array_ops` (the planner's columns)."""
    cap = ops.start(gpu_count)
    if bid.max_spot_price_per_hour is not None:
        cap = ops.minimum(cap, bid.max_spot_price_per_hour)
    if bid.max_spot_price_per_gpu_hour is not None:
        cap = ops.minimum(cap, bid.max_spot_price_per_gpu_hour * gpu_count)
    frac = bid.max_fraction_of_on_demand
    if share and frac is not None:
        cap = ops.minimum(cap, ops.where(ops.isnan(on_demand), 0.0, on_demand * frac))
    return cap


@dataclass(frozen=True, slots=True)
class CapOps(Generic[N]):
    """The arithmetic :func:`bid_caps` is written in: over floats or over numpy arrays."""

    #: no cap yet (inf), shaped like the GPU counts
    start: Callable[[N], N]
    minimum: Callable[[N, Any], N]
    isnan: Callable[[N], Any]
    where: Callable[[Any, float, N], N]


def _pick(cond: bool, yes: float, no: float) -> float:
    return yes if cond else no


#: :func:`bid_caps` over one offer's floats (no numpy: the daemon asks per placement)
SCALAR: CapOps[float] = CapOps(lambda _n: math.inf, min, math.isnan, _pick)


def array_ops() -> CapOps[np.ndarray]:
    """:func:`bid_caps` over numpy columns (numpy imported on first use)."""
    import numpy as np

    return CapOps(lambda n: np.full(len(n), np.inf), np.minimum, np.isnan, np.where)


def spot_caps(policy: Policy, gpu_count: np.ndarray, on_demand: np.ndarray) -> np.ndarray:
    """The policy's spot bid cap of each offer (inf: none); ``on_demand`` NaN: unknown."""
    return bid_caps(policy.bid_cap, gpu_count, on_demand, array_ops())


def policy_spot_cap(policy: Policy, gpu_count: int, on_demand_price: float | None) -> float:
    """The policy's spot bid cap for an offer (inf: none). A cap given as a fraction of
    on-demand with the on-demand price unknown cannot be honoured: 0 (nothing passes)."""
    od = math.nan if on_demand_price is None else on_demand_price
    return bid_caps(policy.bid_cap, gpu_count, od, SCALAR)


def fixed_spot_cap(policy: Policy, gpu_count: int) -> float:
    """The policy's spot caps that need no on-demand price (per hour, per GPU-hour)."""
    return bid_caps(policy.bid_cap, gpu_count, math.nan, SCALAR, share=False)


def spot_cap(policy: Policy, placement: Placement) -> float:
    """The tightest spot bid cap: the placement's and the policy's (inf: none). A placement
    rebuilt from an attempt's row keeps no on-demand price: its cap (set when it was chosen,
    with the on-demand price then known) stands for the share of on-demand."""
    o = placement.offer
    cap = math.inf if placement.bid_cap_per_hour is None else placement.bid_cap_per_hour
    if o.price is None and placement.bid_cap_per_hour is not None:
        return min(cap, fixed_spot_cap(policy, o.gpu_count))
    return min(cap, policy_spot_cap(policy, o.gpu_count, o.price))


def over_bid_cap(policy: Policy, price: float, gpu_count: int, on_demand: float | None) -> bool:
    """A spot price above the policy's bid cap."""
    return price > policy_spot_cap(policy, gpu_count, on_demand) + EPS_USD


def over_hourly_budget(policy: Policy, price: float) -> bool:
    cap = policy.budget.max_price_per_hour
    return cap is not None and price > cap + EPS_USD


def budget_spent(policy: Policy, spent_usd: float) -> bool:
    """``budget.max_total`` is reached."""
    cap = policy.budget.max_total
    return cap is not None and spent_usd >= cap - 1e-9


def fits_budget(
    policy: Policy,
    spent_usd: float,
    price_per_hour: float,
    hours_left: float | None,
    least_usd: float = 0.0,
) -> bool:
    """Whether ``hours_left`` more at ``price_per_hour`` still fits ``budget.max_total``,
    and in any case what the launch is billed at least (``least_usd``: its billing minimum;
    no estimate of the work: only that). No total budget: it fits."""
    cap = policy.budget.max_total
    if cap is None:
        return True
    work = 0.0 if hours_left is None else price_per_hour * max(0.0, hours_left)
    return spent_usd + max(least_usd, work) <= cap + 1e-9


def launch_price(placement: Placement) -> float:
    """The price to check: the placement's, or the offer's current one if that is higher."""
    now_price = placement.offer.price_for(placement.market)
    return max(placement.price_per_hour, now_price if now_price is not None else 0.0)


def hourly_cost(placement: Placement) -> float:
    """What one hour of the placement costs at :func:`launch_price`: every node of a gang."""
    return launch_price(placement) * placement.nodes


def launchable(policy: Policy, placement: Placement) -> str | None:
    """Why ``placement`` may not be launched for ``policy`` (None: it may)."""
    o = placement.offer
    price = launch_price(placement)
    if placement.market is Market.SPOT and not policy.allows_spot:
        return "the policy excludes spot"
    if placement.market is Market.ON_DEMAND and not policy.allows_on_demand:
        return "the policy excludes on-demand"
    if placement.market is Market.RESERVED:
        r = placement.reservation
        if not policy.allows_reserved:
            return "the policy excludes reserved capacity"
        if r is None:
            return "a reserved placement names no reservation"
        if not policy.reservation_allowed(r.id):
            return f"reservation {r.id} is not among the policy's reservations"
    if not region_allowed(policy, o.provider, o.region):
        return f"{o.provider}:{o.region} is outside the policy's residency"
    if placement.market is Market.SPOT and price > spot_cap(policy, placement) + EPS_USD:
        return f"spot ${price:.4g}/h is above the bid cap"
    if over_hourly_budget(policy, price * placement.nodes):
        gang = f" for {placement.nodes} nodes" if placement.nodes > 1 else ""
        return f"${price * placement.nodes:.4g}/h{gang} is above budget.max_price_per_hour"
    return None


def launch_violation(
    policy: Policy, placement: Placement, spent_usd: float, least_usd: float = 0.0
) -> str | None:
    """Why the exact launch about to be sent breaks a rule (None: it may be sent): the
    :func:`launchable` rules on the placement's own price, the bid it carries, the total
    budget already spent, and what the launch is billed at least (``least_usd``: its cloud's
    billing minimum) more than what is left of it."""
    o = placement.offer
    price = o.price_for(placement.market)
    if price is None or abs(price - placement.price_per_hour) > 1e-9:
        return f"placement price {placement.price_per_hour} is not the offer's {price}"
    why = launchable(policy, placement)
    if why is not None:
        return why
    if budget_spent(policy, spent_usd):
        return f"budget.max_total {policy.budget.max_total} already spent ({spent_usd:.4g})"
    if not fits_budget(policy, spent_usd, 0.0, None, least_usd):
        left = (policy.budget.max_total or 0.0) - spent_usd
        return (
            f"its least charge ${least_usd:.4g} (the billing minimum) is more than the "
            f"${left:.4g} left of budget.max_total"
        )
    if placement.market is Market.SPOT:
        fraction = policy.bid_cap.max_fraction_of_on_demand is not None
        if fraction and o.price is None and placement.bid_cap_per_hour is None:
            return "bid cap as a fraction of on-demand, but the on-demand price is unknown"
        if o.price is None:  # rebuilt from its row: the share was held when it was chosen
            cap = fixed_spot_cap(policy, o.gpu_count)
        else:
            cap = policy_spot_cap(policy, o.gpu_count, o.price)
        if placement.bid_cap_per_hour is not None and placement.bid_cap_per_hour > cap + EPS_USD:
            return "the bid sent would exceed the policy's cap"
    return None


def placement_key(p: Placement) -> tuple[str, str, str, Market]:
    """What makes two placements the same launch: provider, location, type and market (and,
    on held capacity, which reservation: two of one type in a zone are two launches)."""
    if p.reservation is not None:
        o = p.offer
        return (o.provider, f"{o.location}/{p.reservation.id}", o.instance_type, p.market)
    return (p.offer.provider, p.offer.location, p.offer.instance_type, p.market)


def capped(policy: Policy, p: Placement) -> Placement:
    """The spot placement with the effective bid cap it is sent with (None: no cap at all,
    the cloud's market price)."""
    cap = spot_cap(policy, p)
    return replace(p, bid_cap_per_hour=cap if math.isfinite(cap) else None)


#: (policy, candidates) -> the launchable candidates, spot ones capped: a pure function of
#: the two (both immutable), kept by their identity because the caller hands the same objects
#: again (policies parsed once, plans shared): no I/O, no clock, only a bounded memo that holds
#: the objects it is keyed by (so an id is never reused while its entry lives).
_Checked = list[tuple[tuple[str, str, str, Market], Placement]]
_CHECKED: dict[tuple[int, int], tuple[Policy, Sequence[Placement], _Checked]] = {}


def launchable_candidates(policy: Policy, candidates: Sequence[Placement]) -> _Checked:
    """The candidates that may be launched for ``policy`` (the first of each key), spot ones
    with their effective bid cap."""
    got = _CHECKED.get((id(policy), id(candidates)))
    if got is not None and got[0] is policy and got[1] is candidates:
        return got[2]
    out: _Checked = []
    seen: set[tuple[str, str, str, Market]] = set()
    for p in candidates:
        key = placement_key(p)
        if key in seen or launchable(policy, p) is not None:
            continue
        seen.add(key)
        out.append((key, capped(policy, p) if p.market is Market.SPOT else p))
    if len(_CHECKED) > 1_000:
        _CHECKED.clear()
    _CHECKED[(id(policy), id(candidates))] = (policy, candidates, out)
    return out


@dataclass(frozen=True, slots=True)
class SpotSplit:
    """The launchable candidates parted by market, in the planner's order, with what decide()
    reads of each spot one: its (provider, location), launch price and (job-independent)
    identity key. Built once per launchable list (see :func:`spot_split`)."""

    spot: tuple[Placement, ...]
    spot_keys: tuple[tuple[str, str, str, Market], ...]
    locs: tuple[tuple[str, str], ...]
    prices: tuple[float, ...]
    od: tuple[tuple[tuple[str, str, str, Market], Placement], ...]
    #: the reserved ones (held capacity: the policy names it; usable now is decide()'s check)
    reserved: tuple[Placement, ...] = ()


_SPLIT: dict[int, tuple[_Checked, SpotSplit]] = {}


def spot_split(policy: Policy, candidates: Sequence[Placement]) -> SpotSplit:
    """:func:`launchable_candidates` parted by market (memoised like it, by identity)."""
    checked = launchable_candidates(policy, candidates)
    got = _SPLIT.get(id(checked))
    if got is not None and got[0] is checked:
        return got[1]
    spot = [(k, p) for k, p in checked if p.market is Market.SPOT]
    split = SpotSplit(
        spot=tuple(p for _, p in spot),
        spot_keys=tuple(k for k, _ in spot),
        locs=tuple((p.offer.provider, p.offer.location) for _, p in spot),
        prices=tuple(launch_price(p) for _, p in spot),
        od=tuple((k, p) for k, p in checked if p.market is Market.ON_DEMAND),
        reserved=tuple(p for _, p in checked if p.market is Market.RESERVED),
    )
    if len(_SPLIT) > 1_000:
        _SPLIT.clear()
    _SPLIT[id(checked)] = (checked, split)
    return split
